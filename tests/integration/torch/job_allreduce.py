"""One rank of a job in the shared-store tests: a job-specific all_reduce.

Each rank contributes JOB_VALUE * (rank + 1), so the sum is
JOB_VALUE * W * (W + 1) / 2 only when every rank of the group belongs to this
job and this round. Prints one line the tests look for:
  allreduce job=<run id> world=<W> rank=<R> sum=<S> restart=<N> ok
and exits 1 on a wrong sum. With HOLD_FILE set, it then stays in the group
until that file exists (the test changes the membership meanwhile).
"""
import datetime
import os
import sys
import time

import torch
import torch.distributed as dist

value = int(os.environ["JOB_VALUE"])
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
rank, world = dist.get_rank(), dist.get_world_size()
t = torch.tensor([float(value * (rank + 1))])
dist.all_reduce(t)
got, expected = int(t.item()), value * world * (world + 1) // 2
print(
    f"allreduce job={os.environ['TORCHELASTIC_RUN_ID']} world={world} rank={rank} sum={got} "
    f"restart={os.environ['TORCHELASTIC_RESTART_COUNT']} {'ok' if got == expected else 'WRONG'}",
    flush=True,
)
if got != expected:
    sys.exit(1)
hold = os.environ.get("HOLD_FILE")
while hold and not os.path.exists(hold):
    time.sleep(0.05)
# Torch 2.x asks every process to destroy its groups before it exits.
dist.destroy_process_group()
