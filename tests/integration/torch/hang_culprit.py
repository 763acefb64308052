"""A torch job whose step is the docs' example, a section around the compute
and an all-reduce, with one rank hanging in compute() at step 5: the other
ranks then wait for it in the all-reduce, and their deadlines pass as soon as
its own (docs/agent-diagnosis.md, "Who hung: the culprit rule"). The hanging rank also
comes 0.3 s late into step 5 (a slow batch), so that the waiting ranks'
deadlines pass first, as they often do.

  hang_culprit.py MODE RANKS
    MODE  section: `with liveness.section("step"): compute(); dist.all_reduce(t)`
          heartbeat: the same with a heartbeat at the start of each step
          thread: heartbeats from a thread every 0.1 s, sections as `section`
          once: one heartbeat at the start, sections as `section`
    RANKS the rank that hangs in attempt k is RANKS[k % len(RANKS)] (comma-separated)
"""
import os
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "python"))
sys.dont_write_bytecode = True

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from ddprun import liveness  # noqa: E402

mode = sys.argv[1]
ranks = [int(r) for r in sys.argv[2].split(",")]
hang_rank = ranks[int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")) % len(ranks)]

dist.init_process_group("gloo")
rank = dist.get_rank()
t = torch.ones(1000)


def compute(step):
    if rank == hang_rank and step == 5:
        print("rank %d: hanging in compute() at step %d" % (rank, step), flush=True)
        while True:
            time.sleep(3600)
    time.sleep(0.02)


def beat_forever():
    while True:
        liveness.heartbeat()
        time.sleep(0.1)


if mode == "thread":
    threading.Thread(target=beat_forever, daemon=True).start()
elif mode == "once":
    liveness.heartbeat()
for step in range(1, 100000):
    if rank == hang_rank and step == 5:
        time.sleep(0.3)  # a slow batch
    if mode == "heartbeat":
        liveness.heartbeat()
    if mode == "heartbeat":
        compute(step)
        dist.all_reduce(t)
        continue
    with liveness.section("step"):
        compute(step)
        dist.all_reduce(t)
