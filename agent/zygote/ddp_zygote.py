"""ddp-zygote: ddprun's per-node preload process (ddprun --preload MODULE,...).

Started by the agent with the workers' interpreter as
    python3 -u ddp_zygote.py --socket PATH --modules torch[,MOD...]
it imports the modules once, checks that a fork of it is still sound (no CUDA
context, no threads), says "ready" (or "refused REASON") on stdout, and then
forks one worker per request on the Unix socket PATH. Never run by hand.

Request (one per connection): a JSON line
    {"argv": [SCRIPT, ARGS...], "env": ["K=V", ...], "cwd": DIR,
     "guard": "/path/to/ddp-guard", "stop_timeout_ms": N}
sent with exactly three fds (SCM_RIGHTS): the worker's stdin, stdout, stderr.
Replies on the same connection, one JSON line each:
    {"pid": WORKER, "guard_pid": GUARD, "cgroup": PATH-or-""}   the worker runs
    {"error": TEXT}                                              it could not start
    {"exit": WAIT_STATUS}                                        the guard ended
then the zygote closes the connection. Connections are served side by side;
one that has not sent its whole request within READ_TIMEOUT_S is dropped.
docs/agent-preload.md ("Preloading") has the process layout and what a forked worker
shares with the zygote.
"""

import json
import os
import selectors
import signal
import socket
import sys
import threading
import time

# The modules installed beside this one (also where a safe path, PYTHONSAFEPATH or -P,
# leaves this directory off sys.path).
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
import ddp_zygote_fork as fork  # noqa: E402
from ddp_zygote_worker import become_worker, own_command_prefix, run_script  # noqa: E402

sys.path.remove(_HERE)
MAX_REQUEST_BYTES = 16 << 20  # argv + env; ARG_MAX-sized envs fit
# One connection that is slow, silent or hostile must cost only itself: the
# zygote never blocks on one (every socket and pipe is non-blocking, served
# from one selector), and drops it when it is past its time or its share.
# One thread only: the zygote forks, and a fork copies only the calling
# thread (a lock another thread held stays locked in the child forever).
READ_TIMEOUT_S = 10.0  # to send the whole request; the agent sends it at once
REPORT_TIMEOUT_S = 20.0  # for a forked ddp-guard to report its worker; the agent waits 30 s
MAX_RECEIVING = 64  # connections still sending their request; past it the oldest is dropped
MAX_RECEIVING_BYTES = 64 << 20  # what they sent so far, together
# The standby (ddp_zygote_fork.py) is forked this long after the zygote last
# started a worker, when no request is in flight: never beside a start.
STANDBY_DELAY_S = 0.1
MAX_STANDBY_DEATHS = 3  # a standby that keeps dying is not forked again and again
# What a preloaded module imports lazily on a trainer's first steps, imported
# here too so that a forked worker does not pay it: torch 2.x imports
# torch._dynamo the first time an optimizer is built (torch.optim's
# _disable_dynamo; 0.66 s of a replacement's 0.68 s to its first step on a
# 2-core VM, docs/agent-preload.md). One that fails to import is skipped.
# Imported after gc.freeze(): the collector treats what they allocate as in a
# worker that imported them itself (frozen, the nanobind objects of triton,
# which torch._dynamo imports, were reported leaked at every worker's exit).
WARM = {"torch": ("torch._dynamo",)}


def fork_soundness_problem():
    """Why forking this process would give broken workers, or None."""
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None) if torch is not None else None
    if cuda is not None and cuda.is_initialized():
        return (
            "a preloaded module initialised CUDA (torch.cuda.is_initialized()), "
            "which a forked worker cannot use"
        )
    if threading.active_count() > 1:
        names = ", ".join(t.name for t in threading.enumerate() if t is not threading.main_thread())
        return "a preloaded module started %d Python thread(s) (%s), which a fork does not copy" % (
            threading.active_count() - 1, names)
    tasks = len(os.listdir("/proc/self/task"))
    if tasks > 1:
        why = "a preloaded module started %d native thread(s), which a fork does not copy" % (tasks - 1)
        if os.environ.get("OMP_NUM_THREADS", "") != "1":
            # torch 2.x (CUDA builds) starts an OpenMP pool of one thread per core at import.
            why += ("; an OpenMP pool is the usual one (torch starts one at import): set OMP_NUM_THREADS=1 "
                    "(ddprun sets it itself only with --nproc_per_node > 1)")
        return why
    return None


def send_line(conn, obj):
    # Non-blocking: a reply is a line and a connection gets two, far less than
    # a socket buffer; a peer that lets it fill up loses its replies.
    try:
        conn.send((json.dumps(obj) + "\n").encode())
    except OSError:
        pass  # the agent is gone; the guard's parent-death chain cleans up


def close_fd(fd):
    try:
        os.close(fd)
    except OSError:
        pass


class Request:
    """One connection, from its accept to its last reply."""

    def __init__(self, conn, deadline):
        self.conn = conn
        self.deadline = deadline
        self.data = bytearray()
        self.fds = []  # the worker's stdin, stdout, stderr, once received
        self.guard_pid = None  # once forked
        self.info_r = None  # the guard's report, read until EOF
        self.go_w = None  # closed once the report is in: the worker goes on
        self.report = b""
        self.exit_status = None  # the guard ended before its report was read

    def close_all(self):
        """Closes every fd of this request (os.close only: safe in a forked child)."""
        for fd in self.fds + [fd for fd in (self.info_r, self.go_w) if fd is not None]:
            close_fd(fd)
        self.fds, self.info_r, self.go_w = [], None, None
        self.conn.close()


class Zygote:
    def __init__(self, path):
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(path)
        os.chmod(path, 0o600)  # only the agent's user may ask for a worker
        self.listener.listen(64)
        self.listener.setblocking(False)
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_w, False)
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.listener, selectors.EVENT_READ, "accept")
        self.selector.register(self.wake_r, selectors.EVENT_READ, "reap")
        self.receiving = {}  # conn fd -> Request still sending its request
        self.receiving_bytes = 0
        self.starting = {}  # guard pid -> Request whose guard has not reported yet
        self.running = {}  # guard pid -> Request: its exit is reported on its connection
        self.standby = None  # a fork.Standby, parked for the next request
        self.standby_session = None  # the session of the last request: the next one's, likely
        self.standby_due = 0.0
        self.standby_deaths = 0  # parked pairs that died unused in a row: at MAX_STANDBY_DEATHS, no more
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.set_wakeup_fd(self.wake_w)

    def serve(self):
        """Returns only in a forked worker, with its request."""
        while True:
            for key, _ in self.selector.select(self.next_timeout()):
                if key.data == "accept":
                    self.accept()
                elif key.data == "reap":
                    os.read(self.wake_r, 4096)
                    self.reap()
                elif key.data[0] == "request":
                    job = self.receive(key.data[1])
                    if job is not None:
                        return job
                else:
                    self.read_report(key.data[1])
            self.expire()
            job = self.keep_standby()
            if job is not None:
                return job

    def next_timeout(self):
        times = [r.deadline for r in list(self.receiving.values()) + list(self.starting.values())]
        if self.standby is None and self.standby_session is not None:
            times.append(self.standby_due)
        if not times:
            return None
        return max(0.0, min(times) - time.monotonic())

    def keep_standby(self):
        """Forks the standby when it is due and nothing is in flight; returns
        only in its worker, with the request it got."""
        if (self.standby is not None or self.standby_session is None or self.receiving or self.starting
                or self.standby_deaths >= MAX_STANDBY_DEATHS or time.monotonic() < self.standby_due):
            return None
        got = fork.fork_standby(self.standby_session, self.forget_in_child)
        if isinstance(got, dict):
            return got
        self.standby = got
        if got is None:
            self.standby_due = time.monotonic() + 10 * STANDBY_DELAY_S  # fork failed: try again later
        return None

    def accept(self):
        while True:
            try:
                conn, _ = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return  # out of fds: the next wakeup tries again
            conn.setblocking(False)
            if len(self.receiving) >= MAX_RECEIVING:
                oldest = min(self.receiving.values(), key=lambda r: r.deadline)
                self.drop(oldest, "%d connections were sending requests at once; the oldest was dropped"
                          % MAX_RECEIVING)
            req = Request(conn, time.monotonic() + READ_TIMEOUT_S)
            self.receiving[conn.fileno()] = req
            self.selector.register(conn, selectors.EVENT_READ, ("request", req))

    def drop(self, req, why):
        """Ends a request that has not forked anything: an error reply, then closed."""
        self.receiving.pop(req.conn.fileno())
        self.receiving_bytes -= len(req.data)
        self.selector.unregister(req.conn)
        send_line(req.conn, {"error": "ddp-zygote: " + why})
        req.close_all()

    def receive(self, req):
        if self.receiving.get(req.conn.fileno()) is not req:
            return None  # dropped earlier in this round of events
        try:
            # CLOEXEC at once: a worker forked for another request must not inherit these.
            msg, anc, _flags, _addr = req.conn.recvmsg(
                65536, socket.CMSG_SPACE(3 * 4), socket.MSG_CMSG_CLOEXEC
            )
        except (BlockingIOError, InterruptedError):
            return None
        except OSError as e:
            return self.drop(req, "cannot read the request: %s" % e)
        for level, kind, payload in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                usable = len(payload) - len(payload) % 4
                req.fds += list(memoryview(payload)[:usable].cast("i"))
        req.data += msg
        self.receiving_bytes += len(msg)
        if len(req.fds) > 3 or (not msg and not req.data.endswith(b"\n")):
            return self.drop(req, "malformed request (%d bytes, %d fds)" % (len(req.data), len(req.fds)))
        if len(req.data) > MAX_REQUEST_BYTES or self.receiving_bytes > MAX_RECEIVING_BYTES:
            return self.drop(req, "request too large (%d bytes so far)" % len(req.data))
        if not req.data.endswith(b"\n"):
            return None
        self.receiving.pop(req.conn.fileno())
        self.receiving_bytes -= len(req.data)
        self.selector.unregister(req.conn)
        try:
            body = json.loads(bytes(req.data)) if len(req.fds) == 3 else None
        except ValueError:
            body = None
        if not isinstance(body, dict):
            send_line(req.conn, {"error": "ddp-zygote: malformed request (%d bytes, %d fds)"
                                 % (len(req.data), len(req.fds))})
            req.close_all()
            return None
        raw, req.data = bytes(req.data), bytearray()
        return self.start(req, body, raw)

    def start(self, req, body, raw):
        session = int(body.get("session", fork.SESSION_SHARED))
        grouping = fork.session_class(session)
        self.standby_session = session if grouping is not None else None
        self.standby_due = time.monotonic() + STANDBY_DELAY_S
        sb, self.standby = self.standby, None
        if sb is not None and sb.grouping != grouping:
            sb.discard()
            sb = None
        if sb is not None and sb.hand(raw, req.fds):
            guard_pid, info_r, go_w = sb.guard_pid, sb.info_r, sb.go_w
            self.standby_deaths = 0
        else:
            info_r, info_w = os.pipe()
            go_r, go_w = os.pipe()
            sys.stdout.flush()
            sys.stderr.flush()
            me = os.getpid()
            guard_pid = os.fork()
            if guard_pid == 0:
                os.close(info_r)
                return self.in_guard_child(req, body, me, info_w, go_r, go_w)
            os.close(info_w)
            os.close(go_r)
        for fd in req.fds:
            os.close(fd)
        req.fds = []
        req.guard_pid, req.info_r, req.go_w = guard_pid, info_r, go_w
        req.deadline = time.monotonic() + REPORT_TIMEOUT_S
        os.set_blocking(info_r, False)
        self.starting[guard_pid] = req
        self.selector.register(info_r, selectors.EVENT_READ, ("report", req))
        return None

    def read_report(self, req):
        if self.starting.get(req.guard_pid) is not req:
            return  # done earlier in this round of events
        try:
            chunk = os.read(req.info_r, 4096)
        except (BlockingIOError, InterruptedError):
            return
        if chunk and len(req.report) < 65536:
            req.report += chunk
            return
        # EOF: the guard reported and closed its end, or it died.
        self.starting.pop(req.guard_pid)
        self.selector.unregister(req.info_r)
        os.close(req.info_r)
        os.close(req.go_w)  # the worker goes on once it reads EOF
        req.info_r = req.go_w = None
        reply = {"guard_pid": req.guard_pid, "cgroup": ""}
        for line in req.report.decode(errors="replace").splitlines():
            key, _, value = line.partition(" ")
            if key == "pid" and value.isdigit():
                reply["pid"] = int(value)
            elif key == "cgroup":
                reply["cgroup"] = value
        if "pid" not in reply:
            reply = {"error": "ddp-guard (pid %d) did not start: %r" % (req.guard_pid, req.report)}
        send_line(req.conn, reply)
        self.finish_or_run(req)

    def finish_or_run(self, req):
        if req.exit_status is not None:
            send_line(req.conn, {"exit": req.exit_status})
            req.conn.close()
        else:
            self.running[req.guard_pid] = req

    def expire(self):
        now = time.monotonic()
        for req in [r for r in self.receiving.values() if r.deadline <= now]:
            self.drop(req, "no whole request within %g s" % READ_TIMEOUT_S)
        for req in [r for r in self.starting.values() if r.deadline <= now]:
            # Its group holds the worker, still waiting for its go: nothing ran.
            try:
                os.killpg(req.guard_pid, signal.SIGKILL)
            except OSError:
                pass
            self.starting.pop(req.guard_pid)
            self.selector.unregister(req.info_r)
            os.close(req.info_r)
            os.close(req.go_w)
            req.info_r = req.go_w = None
            send_line(
                req.conn,
                {
                    "error": "ddp-guard (pid %d) did not report its worker within %g s; killed it"
                    % (req.guard_pid, REPORT_TIMEOUT_S)
                },
            )
            self.finish_or_run(req)

    def reap(self):
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            req = self.running.pop(pid, None)
            if req is not None:
                send_line(req.conn, {"exit": status})
                req.conn.close()
            elif pid in self.starting:
                self.starting[pid].exit_status = status  # sent after its report
            elif self.standby is not None and pid == self.standby.guard_pid:
                self.standby.discard()  # killed while parked: another is forked when due
                self.standby = None
                self.standby_deaths += 1

    def requests(self):
        return list(self.receiving.values()) + list(self.starting.values()) + list(self.running.values())

    def in_guard_child(self, req, body, zygote_pid, info_w, go_r, go_w):
        """The forked child that becomes the worker's ddp-guard; forks the worker first."""
        try:
            session = int(body.get("session", fork.SESSION_SHARED))
            fork.enter_session(session)
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})  # kept across exec for the guard
            req.conn.close()
            fork.install_stdio(req.fds, session)
            req.fds = []
            worker_pid = os.fork()
            if worker_pid == 0:
                os.close(info_w)
                os.close(go_w)
                return self.in_worker(body, go_r)
            fork.exec_guard(body, zygote_pid, info_w, worker_pid)
        except BaseException as e:  # noqa: B902 - nothing may return into the zygote's loop
            fork.die_in_child(e)

    def forget_in_child(self):
        """Nothing of the zygote's stays open in a forked child: its socket,
        other requests' connections, stdio and pipes (one of another worker's
        stdout held open here would keep the agent from its EOF, its go pipe
        that worker from running)."""
        signal.set_wakeup_fd(-1)
        self.selector.close()
        self.listener.close()
        for other in self.requests():
            other.close_all()
        if self.standby is not None:
            self.standby.close()
            self.standby = None
        os.close(self.wake_r)
        os.close(self.wake_w)

    def in_worker(self, body, go_r):
        fork.set_parent_death_signal(signal.SIGKILL)
        guard_pid = os.getppid()
        self.forget_in_child()
        fork.wait_for_go(go_r, guard_pid)
        return body


def warm_lazy_imports(modules):
    """Imports WARM's modules for the preloaded ones; a failure is no refusal
    (torch 1.x has no torch._dynamo): the worker imports it itself, if at all."""
    import importlib

    for name in modules:
        for lazy in WARM.get(name, ()):
            try:
                importlib.import_module(lazy)
            except Exception:  # noqa: B902 - only a head start; the soundness check still runs after
                pass


def main():
    command_prefix = own_command_prefix()
    args = sys.argv[1:]
    opts = dict(zip(args[0::2], args[1::2]))
    path, modules = opts["--socket"], [m for m in opts["--modules"].split(",") if m]
    import importlib

    for name in modules:
        try:
            importlib.import_module(name)
        except BaseException as e:  # noqa: B902 - any failure means: start workers normally
            print("refused cannot import %s: %s: %s" % (name, type(e).__name__, e), flush=True)
            return None
    import gc

    # What the imports allocated stays out of the collector's passes: fewer
    # pages copied per worker.
    gc.freeze()
    warm_lazy_imports(modules)
    problem = fork_soundness_problem()
    if problem:
        print("refused " + problem, flush=True)
        return None
    zygote_path_entries = set(
        os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p
    )
    server = Zygote(path)
    print("ready", flush=True)
    req = server.serve()
    return become_worker(req, zygote_path_entries, command_prefix)


if __name__ == "__main__":
    _job = main()
    if _job is None:
        sys.exit(3)
    del main, Zygote
    run_script(*_job)
