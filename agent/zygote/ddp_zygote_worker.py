"""What a process forked by ddp-zygote (ddp_zygote.py) does to become the
worker: the signals, env, cwd, sys.path and `__main__` of a fresh
`python3 -u SCRIPT ARGS...`, and how it shows to ps and /proc
(docs/agent-preload.md). Installed beside ddp_zygote.py, which imports it
before it forks anything."""

import builtins
import ctypes
import os
import signal
import sys

PR_SET_NAME = 15
PR_SET_MM = 35
PR_SET_MM_MAP = 14


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
    main.__builtins__ = builtins
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
