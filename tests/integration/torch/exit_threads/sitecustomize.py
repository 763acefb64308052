"""On PYTHONPATH for a test: at exit, after every atexit handler registered
later (ddprun.elastic's close among them), each rank prints how many Gloo
transport loops ("gloo_tcp_loop" threads, one per live Gloo group) its
process still has: "exit threads: rank R gloo groups N"."""
import atexit
import os
import time


def _loops() -> int:
    names = []
    for t in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{t}/comm") as f:
                names.append(f.read().strip())
        except OSError:  # the thread ended meanwhile
            pass
    return names.count("gloo_tcp_loop")


def _count() -> None:
    # The fewest of a few reads 20 ms apart: a loop thread just joined may
    # still be listed for a moment; a live group's stays.
    fewest = _loops()
    for _ in range(4):
        time.sleep(0.02)
        fewest = min(fewest, _loops())
    print(f"exit threads: rank {os.environ.get('RANK')} gloo groups {fewest}", flush=True)


atexit.register(_count)
