# ddprun puts this directory first on a Python worker's PYTHONPATH so that
# the worker can dump every thread's stack when ddprun asks (SIGURG), without
# any change to the training script. It then runs the sitecustomize that
# would have run without ddprun, if any. Never raises: a worker must start
# even when this cannot do its part.
import os
import sys


def _ddprun_register_stack_dump():
    path = os.environ.get("DDPRUN_STACK_FILE")
    if not path:
        return
    try:
        import faulthandler
        import signal

        # Kept open for the life of the process: faulthandler writes to its fd.
        out = open(path, "a")
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
