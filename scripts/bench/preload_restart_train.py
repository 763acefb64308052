"""Worker for scripts/bench/preload_restart.sh: a torch worker fails, how soon
does its replacement finish its first collective?

Attempt 0 (TORCHELASTIC_RESTART_COUNT=0): both ranks join the gloo group and
all-reduce once; then rank 1 prints `fail_ns=<wall clock ns>` and exits 1,
rank 0 waits to be stopped by the launcher. Attempt 1: every rank prints
`first_collective_ns=<ns>` once its first all-reduce has returned, then ends.
"""
import os
import sys
import time

import torch
import torch.distributed as dist

restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
dist.init_process_group("gloo", init_method="env://")
rank = dist.get_rank()
t = torch.ones(1)
dist.all_reduce(t)
if restart == 0:
    if rank == 1:
        print(f"fail_ns={time.time_ns()}", flush=True)
        sys.stdout.flush()
        os._exit(1)
    time.sleep(120)  # stopped by the launcher meanwhile
    sys.exit(2)
print(f"first_collective_ns={time.time_ns()} rank={rank}", flush=True)
dist.destroy_process_group()
