"""Who hung, over NCCL (docs/agent-diagnosis.md, "Who hung: the culprit rule"): two
ranks, one GPU each; every step is a section around the compute and an
all-reduce whose result the host waits for. Rank 1 comes late into step 5 (a
slow batch) and then hangs in its compute, so rank 0's deadline passes first
while it waits for the all-reduce on its GPU. Its main thread then sits in
torch.cuda.synchronize(), not in a torch.distributed call: only the Flight
Recorder (the NCCL process group's collective counts) tells that it waits.
Run by nccl_hang_test.sh under ddprun.
"""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
sys.dont_write_bytecode = True

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from ddprun import liveness  # noqa: E402

local_rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local_rank)
dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
rank = dist.get_rank()
t = torch.ones(1 << 20, device="cuda")

for step in range(1, 100000):
    if rank == 1 and step == 5:
        time.sleep(0.5)  # a slow batch
    with liveness.section("step"):
        if rank == 1 and step == 5:
            print("rank 1: hanging in its compute at step 5", flush=True)
            while True:
                time.sleep(3600)
        t.mul_(1.0)
        dist.all_reduce(t)
        torch.cuda.synchronize()
