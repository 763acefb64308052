# ddprun puts this directory first on a Python worker's PYTHONPATH so that
# the worker can dump every thread's stack when ddprun asks (SIGURG), without
# any change to the training script. It then runs the sitecustomize that
# would have run without ddprun, if any. Never raises: a worker must start
# even when this cannot do its part.
#
# The dump ends with a line ddprun waits for (END), so that it knows the dump
# is complete at once instead of watching the file until it stops growing.
# faulthandler writes the stacks from the signal handler, whatever the main
# thread is doing; with chain=True it then re-raises the signal to the handler
# installed before it, Python's own, whose C part writes the signal number to
# the wakeup fd at once. A thread of ours waits on that fd and appends, after
# the stacks, where the worker stands in its collectives (torch's Flight
# Recorder, where this torch has one) and END. The thread needs the GIL: if
# the main thread holds it while stuck, END does not come and ddprun falls
# back to the file no longer growing.
import os
import sys

_END = b"ddprun-end-of-dump\n"
_COLLECTIVES = "ddprun-collectives:"


def _ddprun_collectives():
    """`issued=N completed=M backend=B` of the default process group from
    torch's Flight Recorder; "" when torch.distributed is not in use here or
    this torch has no Flight Recorder."""
    dist = sys.modules.get("torch.distributed")
    if dist is None:
        return ""
    try:
        if not dist.is_available() or not dist.is_initialized():
            return ""
        import json

        from torch._C._distributed_c10d import _dump_fr_trace_json

        backend = str(dist.get_backend())
        name = dist.group.WORLD.group_name
        for b in [x.split(":")[-1] for x in backend.split(",")] or ["gloo"]:
            status = json.loads(_dump_fr_trace_json(includeCollectives=False, backend=b)).get("pg_status", {})
            pg = (
                status.get(name)
                or status.get("0")
                or (next(iter(status.values())) if len(status) == 1 else None)
            )
            if pg:
                return "issued=%d completed=%d backend=%s" % (
                    int(pg["last_enqueued_collective"]), int(pg["last_completed_collective"]), b)
    except Exception:  # noqa: B902 - an older torch, a backend without a recorder: stacks only
        return ""
    return ""


def _ddprun_answer(wake_r, out_fd):
    import signal

    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGURG})  # the main thread takes it
    while True:
        try:
            data = os.read(wake_r, 512)
        except InterruptedError:
            continue
        except OSError:
            return
        if not data:
            return
        if signal.SIGURG not in data:
            continue  # another signal with a Python handler
        line = _ddprun_collectives()
        try:
            os.write(out_fd, ((_COLLECTIVES + " " + line + "\n").encode() if line else b"") + _END)
        except OSError:
            return


def _ddprun_end_marker(out):
    """Sets up END after each dump; False (nothing changed) where it cannot."""
    import signal
    import threading

    r, w = os.pipe()
    try:
        os.set_blocking(w, False)
        if signal.set_wakeup_fd(w, warn_on_full_buffer=False) != -1:
            signal.set_wakeup_fd(-1)  # the program's own, as it came: leave it
            raise OSError("the wakeup fd is in use")
    except (OSError, ValueError):
        os.close(r)
        os.close(w)
        return False
    # The handler faulthandler chains to: Python's, whose C part writes the byte.
    signal.signal(signal.SIGURG, lambda *_: None)
    threading.Thread(target=_ddprun_answer, args=(r, out.fileno()), name="ddprun-stacks", daemon=True).start()
    return True


def _ddprun_register_stack_dump():
    path = os.environ.get("DDPRUN_STACK_FILE")
    if not path:
        return
    try:
        import faulthandler
        import signal

        # Kept open for the life of the process: faulthandler writes to its fd.
        out = open(path, "a")
        try:
            _ddprun_end_marker(out)
        except Exception:  # noqa: B902 - the dump still works without its end line
            pass
        faulthandler.register(signal.SIGURG, file=out, all_threads=True, chain=True)
        sys._ddprun_stack_file = out
    except Exception as e:  # pragma: no cover - a worker must still start
        sys.stderr.write("ddprun: stack dumps disabled in this worker: %s\n" % e)


def _ddprun_chain_sitecustomize():
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    try:
        import importlib.machinery
        import importlib.util

        spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
        if spec is None or spec.loader is None:
            return
        module = importlib.util.module_from_spec(spec)
        sys.modules["sitecustomize"] = module
        spec.loader.exec_module(module)
    except Exception:
        # What Python does for a failing sitecustomize: report, keep going.
        import traceback

        sys.stderr.write("Error in sitecustomize; set PYTHONVERBOSE for traceback:\n")
        traceback.print_exc()


_ddprun_register_stack_dump()
_ddprun_chain_sitecustomize()
