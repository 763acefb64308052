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

import ctypes
import fcntl
import json
import os
import selectors
import signal
import socket
import sys
import termios
import threading
import time

PR_SET_PDEATHSIG = 1
PR_SET_NAME = 15
PR_SET_MM = 35
PR_SET_MM_MAP = 14
SESSION_SHARED = -2  # worker_session.hpp: kSessionShared; -1 a session of its own; 0-2 its terminal's fd
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

    def next_timeout(self):
        pending = list(self.receiving.values()) + list(self.starting.values())
        if not pending:
            return None
        return max(0.0, min(r.deadline for r in pending) - time.monotonic())

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
        req.data = bytearray()
        return self.start(req, body)

    def start(self, req, body):
        info_r, info_w = os.pipe()
        go_r, go_w = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        me = os.getpid()
        guard_pid = os.fork()
        if guard_pid == 0:
            os.close(info_r)
            return self.in_guard_child(req, body, me, info_w, go_r, go_w)
        for fd in req.fds + [info_w, go_r]:
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

    def requests(self):
        return list(self.receiving.values()) + list(self.starting.values()) + list(self.running.values())

    def in_guard_child(self, req, body, zygote_pid, info_w, go_r, go_w):
        """The forked child that becomes the worker's ddp-guard; forks the worker first."""
        try:
            # The worker's own group, led by its guard as after a normal spawn,
            # and its own session unless told otherwise (worker_session.hpp).
            session = int(body.get("session", SESSION_SHARED))
            if session == SESSION_SHARED:
                os.setpgid(0, 0)
            else:
                os.setsid()
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})  # kept across exec for the guard
            req.conn.close()
            for target, fd in enumerate(req.fds):
                os.dup2(fd, target)
                os.close(fd)
            req.fds = []
            if 0 <= session <= 2:
                try:
                    fcntl.ioctl(session, termios.TIOCSCTTY, 0)
                except OSError:
                    pass  # no controlling terminal then, as before: its I/O works all the same
            worker_pid = os.fork()
            if worker_pid == 0:
                os.close(info_w)
                os.close(go_w)
                return self.in_worker(body, go_r)
            os.set_inheritable(info_w, True)
            guard = body["guard"]
            argv = [guard, "--stop-timeout-ms=%d" % int(body.get("stop_timeout_ms", 30000)),
                    "--info-fd=%d" % info_w, "--agent-pid=%d" % zygote_pid, "--adopt-pid=%d" % worker_pid]
            # The fence backstop's deadline file (guard_protocol.hpp), from ddprun.
            if os.environ.get("DDP_FENCE_FILE"):
                argv.append("--fence-file=" + os.environ["DDP_FENCE_FILE"])
            os.execv(guard, argv)
        except BaseException as e:  # noqa: B902 - nothing may return into the zygote's loop
            try:
                os.write(2, ("ddprun: cannot start worker from the preload zygote: %s\n" % e).encode())
            finally:
                os._exit(127)

    def in_worker(self, body, go_r):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        guard_pid = os.getppid()
        # Nothing of the zygote's stays open in the worker: its socket, other
        # requests' connections, stdio and pipes (one of another worker's
        # stdout held open here would keep the agent from its EOF).
        signal.set_wakeup_fd(-1)
        self.selector.close()
        self.listener.close()
        for other in self.requests():
            other.close_all()
        os.close(self.wake_r)
        os.close(self.wake_w)
        # Wait until the guard has it in its cgroup (the zygote closes its end then).
        while os.read(go_r, 1):
            pass
        os.close(go_r)
        if os.getppid() != guard_pid:
            os._exit(128 + signal.SIGKILL)
        return body


def reset_signals():
    """The dispositions and mask a fresh `python3` starts with."""
    for sig in signal.valid_signals():
        if sig in (signal.SIGKILL, signal.SIGSTOP):
            continue
        try:
            signal.signal(sig, signal.SIG_DFL)
        except (OSError, ValueError):
            pass  # reserved by the C library (SIGRTMIN+0/1)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for sig in ("SIGPIPE", "SIGXFSZ"):
        if hasattr(signal, sig):
            signal.signal(getattr(signal, sig), signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_SETMASK, set())


class PrctlMmMap(ctypes.Structure):
    """struct prctl_mm_map (linux/prctl.h): what PR_SET_MM_MAP sets of the process's layout."""
    _fields_ = [(name, ctypes.c_uint64) for name in (
        "start_code", "end_code", "start_data", "end_data", "start_brk", "brk", "start_stack",
        "arg_start", "arg_end", "env_start", "env_end", "auxv")] + [
        ("auxv_size", ctypes.c_uint32), ("exe_fd", ctypes.c_uint32)]


def own_command_prefix():
    """The zygote's command line before its script (`python3 -u`): how an exec'd worker's starts."""
    own = open("/proc/self/cmdline", "rb").read().split(b"\0")[:-1]
    script = os.fsencode(sys.argv[0])
    return [os.fsdecode(a) for a in own[:own.index(script)]] if script in own else [sys.executable, "-u"]


def write_in_place(start, end, strings):
    """Overwrites [start, end) with the NUL-terminated `strings` that fit whole, then NULs."""
    room = end - start
    if room <= 0:
        return
    if len(strings) > room:
        cut = strings.rfind(b"\0", 0, room)
        strings = strings[:cut + 1]
    ctypes.memmove(start, strings + b"\0" * (room - len(strings)), room)


def show_as(argv, env):
    """Makes this forked process look like the exec'd `argv` with `env` to ps, pgrep -f, py-spy and
    whatever reads /proc/self/{cmdline,environ,comm}; sys.argv and os.environ are set elsewhere.

    The kernel shows cmdline and environ from the memory between the process's
    arg_start..arg_end and env_start..env_end: the zygote's own strings. They
    are left as they are (a preloaded library may hold a getenv() pointer into
    them) and the bounds are moved to a copy of the worker's, laid out as exec
    lays them out: PR_SET_MM_MAP needs no capability for that (only for its
    exe_fd, not given). Where the kernel refuses it (no CONFIG_CHECKPOINT_RESTORE,
    a seccomp filter), the zygote's areas are overwritten with what fits of the
    worker's strings, padded with NULs (docs/agent-preload.md, "What `ps`, `pgrep -f`
    and `/proc` show of a forked worker")."""
    args = b"".join(os.fsencode(a) + b"\0" for a in argv)
    envs = b"".join(os.fsencode(e) + b"\0" for e in env)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_NAME, os.fsencode(os.path.basename(argv[0]))[:15], 0, 0, 0)  # comm, as exec sets it
    stat = open("/proc/self/stat", "rb").read()
    fields = stat[stat.rindex(b")") + 2:].split()  # after the comm, which may hold spaces and ')'

    def field(n):  # proc(5)'s numbering
        return int(fields[n - 3])

    libc.malloc.restype = ctypes.c_void_p
    libc.sbrk.restype = ctypes.c_void_p
    area = libc.malloc(len(args) + len(envs))  # never freed: the kernel reads it while the process lives
    if area:
        ctypes.memmove(area, args + envs, len(args) + len(envs))
        layout = PrctlMmMap(
            start_code=field(26),
            end_code=field(27),
            start_data=field(45),
            end_data=field(46),
            start_brk=field(47),
            start_stack=field(28),
            arg_start=area,
            arg_end=area + len(args),
            env_start=area + len(args),
            env_end=area + len(args) + len(envs),
            auxv=0,
            auxv_size=0,
            exe_fd=0xFFFFFFFF,
        )
        # It sets brk as well: to the current one, again if malloc moved it in between.
        for _ in range(3):
            layout.brk = libc.sbrk(0)
            done = libc.prctl(PR_SET_MM, PR_SET_MM_MAP, ctypes.byref(layout), ctypes.sizeof(layout), 0) == 0
            if not done or libc.sbrk(0) == layout.brk:
                break
        if done:
            return
        libc.free(ctypes.c_void_p(area))
    write_in_place(field(48), field(49), args)
    write_in_place(field(50), field(51), envs)


def become_worker(req, zygote_path_entries, command_prefix):
    """Turns this forked process into `python3 -u SCRIPT ARGS...` with the request's env and cwd."""
    import importlib.machinery
    import tokenize
    import types

    reset_signals()
    os.chdir(req["cwd"])
    env = dict(kv.split("=", 1) for kv in req["env"] if "=" in kv)
    os.environ.clear()
    os.environ.update(env)
    script = req["argv"][0]
    sys.argv = list(req["argv"])
    try:
        show_as(command_prefix + sys.argv, req["env"])
    except Exception:  # noqa: B902 - how the worker looks to ps must never keep it from running
        pass
    # sys.path as the interpreter would build it for this env: the script's
    # directory, the worker's PYTHONPATH, then the zygote's path without its
    # own [0] and PYTHONPATH entries (the standard library, site-packages).
    worker_entries = [os.path.abspath(p) for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    rest = [p for p in sys.path[1:] if os.path.abspath(p) not in zygote_path_entries]
    sys.path[:] = [os.path.dirname(os.path.realpath(script))] + worker_entries + rest
    if set(worker_entries) != zygote_path_entries:
        # site ran at the zygote's start, with the zygote's PYTHONPATH: where the
        # worker's finds another sitecustomize (or usercustomize) first, that
        # one runs now, as at a fresh interpreter's start.
        for name in ("sitecustomize", "usercustomize"):
            first = next((os.path.join(p, name + ".py") for p in sys.path[1:]
                          if os.path.isfile(os.path.join(p, name + ".py"))), None)
            loaded = getattr(sys.modules.get(name), "__file__", None)
            if first is not None and (loaded is None or os.path.realpath(loaded) != os.path.realpath(first)):
                sys.modules.pop(name, None)
                try:
                    __import__(name)
                except ImportError:
                    pass
    main = types.ModuleType("__main__")
    main.__file__ = script
    main.__cached__ = None
    main.__loader__ = importlib.machinery.SourceFileLoader("__main__", script)
    main.__builtins__ = __builtins__
    sys.modules["__main__"] = main
    with tokenize.open(script) as f:
        code = compile(f.read(), script, "exec")
    return code, main


def run_script(code, main):
    try:
        exec(code, main.__dict__)
    except (SystemExit, KeyboardInterrupt):
        raise  # the interpreter's own exit status for these
    except BaseException as e:  # noqa: B902 - reported as the interpreter would
        tb = e.__traceback__.tb_next if e.__traceback__ is not None else None  # this frame is not the user's
        sys.excepthook(type(e), e.with_traceback(tb), tb)
        sys.exit(1)


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
