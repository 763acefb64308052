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
then the zygote closes the connection. docs/agent.md ("Preloading") has the
process layout and what a forked worker shares with the zygote.
"""

import ctypes
import json
import os
import selectors
import signal
import socket
import sys
import threading

PR_SET_PDEATHSIG = 1
MAX_REQUEST_BYTES = 16 << 20  # argv + env; ARG_MAX-sized envs fit


def fork_soundness_problem():
    """Why forking this process would give broken workers, or None."""
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None) if torch is not None else None
    if cuda is not None and cuda.is_initialized():
        return "a preloaded module initialised CUDA (torch.cuda.is_initialized()), which a forked worker cannot use"
    if threading.active_count() > 1:
        names = ", ".join(t.name for t in threading.enumerate() if t is not threading.main_thread())
        return "a preloaded module started %d Python thread(s) (%s), which a fork does not copy" % (
            threading.active_count() - 1, names)
    tasks = len(os.listdir("/proc/self/task"))
    if tasks > 1:
        return "a preloaded module started %d native thread(s), which a fork does not copy" % (tasks - 1)
    return None


def recv_request(conn):
    """The request's JSON and its three fds."""
    data = b""
    fds = []
    while not data.endswith(b"\n"):
        msg, anc, _flags, _addr = conn.recvmsg(65536, socket.CMSG_SPACE(3 * 4))
        for level, kind, payload in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                usable = len(payload) - len(payload) % 4
                fds += list(memoryview(payload)[:usable].cast("i"))
        if not msg:
            break
        data += msg
        if len(data) > MAX_REQUEST_BYTES:
            break
    for fd in fds:
        os.set_inheritable(fd, False)
    if not data.endswith(b"\n") or len(fds) != 3:
        for fd in fds:
            os.close(fd)
        raise ValueError("malformed request (%d bytes, %d fds)" % (len(data), len(fds)))
    return json.loads(data), fds


def send_line(conn, obj):
    try:
        conn.sendall((json.dumps(obj) + "\n").encode())
    except OSError:
        pass  # the agent is gone; the guard's parent-death chain cleans up


class Zygote:
    def __init__(self, path):
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(path)
        os.chmod(path, 0o600)  # only the agent's user may ask for a worker
        self.listener.listen(64)
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_w, False)
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.listener, selectors.EVENT_READ)
        self.selector.register(self.wake_r, selectors.EVENT_READ)
        self.guards = {}  # guard pid -> the connection its exit is reported on
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.set_wakeup_fd(self.wake_w)

    def serve(self):
        """Returns only in a forked worker, with its request."""
        while True:
            for key, _ in self.selector.select():
                if key.fileobj is self.listener:
                    conn, _ = self.listener.accept()
                    job = self.handle(conn)
                    if job is not None:
                        return job
                else:
                    os.read(self.wake_r, 4096)
                    self.reap()

    def reap(self):
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            conn = self.guards.pop(pid, None)
            if conn is not None:
                send_line(conn, {"exit": status})
                conn.close()

    def handle(self, conn):
        try:
            req, fds = recv_request(conn)
        except (OSError, ValueError) as e:
            send_line(conn, {"error": "ddp-zygote: " + str(e)})
            conn.close()
            return None
        info_r, info_w = os.pipe()
        go_r, go_w = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        me = os.getpid()
        guard_pid = os.fork()
        if guard_pid == 0:
            conn.close()
            os.close(info_r)
            return self.in_guard_child(req, fds, me, info_w, go_r, go_w)
        for fd in fds + [info_w, go_r]:
            os.close(fd)
        report = b""
        while True:
            chunk = os.read(info_r, 4096)
            if not chunk:
                break
            report += chunk
        os.close(info_r)
        os.close(go_w)  # the worker goes on once it reads EOF
        reply = {"guard_pid": guard_pid, "cgroup": ""}
        for line in report.decode(errors="replace").splitlines():
            key, _, value = line.partition(" ")
            if key == "pid":
                reply["pid"] = int(value)
            elif key == "cgroup":
                reply["cgroup"] = value
        if "pid" not in reply:
            reply = {"error": "ddp-guard (pid %d) did not start: %r" % (guard_pid, report)}
        send_line(conn, reply)
        self.guards[guard_pid] = conn
        self.reap()  # a guard that ended already
        return None

    def in_guard_child(self, req, fds, zygote_pid, info_w, go_r, go_w):
        """The forked child that becomes the worker's ddp-guard; forks the worker first."""
        try:
            os.setpgid(0, 0)  # the worker's own group, led by its guard as after a normal spawn
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})  # kept across exec for the guard
            for target, fd in enumerate(fds):
                os.dup2(fd, target)
                os.close(fd)
            worker_pid = os.fork()
            if worker_pid == 0:
                os.close(info_w)
                os.close(go_w)
                return self.in_worker(req, go_r)
            os.set_inheritable(info_w, True)
            guard = req["guard"]
            argv = [guard, "--stop-timeout-ms=%d" % int(req.get("stop_timeout_ms", 30000)),
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

    def in_worker(self, req, go_r):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        guard_pid = os.getppid()
        # Nothing of the zygote's stays open in the worker.
        signal.set_wakeup_fd(-1)
        self.selector.close()
        self.listener.close()
        for conn in self.guards.values():
            conn.close()
        os.close(self.wake_r)
        os.close(self.wake_w)
        # Wait until the guard has it in its cgroup (the zygote closes its end then).
        while os.read(go_r, 1):
            pass
        os.close(go_r)
        if os.getppid() != guard_pid:
            os._exit(128 + signal.SIGKILL)
        return req


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


def become_worker(req, zygote_path_entries):
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


def main():
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
    problem = fork_soundness_problem()
    if problem:
        print("refused " + problem, flush=True)
        return None
    zygote_path_entries = set(os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p)
    import gc

    gc.freeze()  # what the imports allocated stays out of the collector's passes: fewer pages copied per worker
    server = Zygote(path)
    print("ready", flush=True)
    req = server.serve()
    return become_worker(req, zygote_path_entries)


if __name__ == "__main__":
    _job = main()
    if _job is None:
        sys.exit(3)
    del main, Zygote
    run_script(*_job)
