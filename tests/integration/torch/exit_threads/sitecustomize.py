"""On PYTHONPATH for a test: at exit, after every atexit handler registered
later (ddprun.elastic's close among them), each rank prints how many Gloo
transport loops ("gloo_tcp_loop" threads, one per live Gloo group) its
process still has: "exit threads: rank R gloo groups N"."""
import atexit
import os


def _count() -> None:
    tasks = os.listdir("/proc/self/task")
    names = []
    for t in tasks:
        try:
            with open(f"/proc/self/task/{t}/comm") as f:
                names.append(f.read().strip())
        except OSError:  # the thread ended meanwhile
            pass
    rank = os.environ.get("RANK")
    print(f"exit threads: rank {rank} gloo groups {names.count('gloo_tcp_loop')}", flush=True)


atexit.register(_count)
