"""One worker of scripts/bench/slurm_startup.sh: records when it started
running (before importing torch) and when its process group was up (after
init_process_group and a barrier), as unix nanoseconds, in $BENCH_DIR."""
import os
import time

start = time.time_ns()
import torch.distributed as dist  # noqa: E402  (after the first timestamp on purpose)

dist.init_process_group("gloo")
dist.barrier()
joined = time.time_ns()
with open(os.path.join(os.environ["BENCH_DIR"], f"rank_{os.environ['RANK']}"), "w") as f:
    f.write(f"{start} {joined}\n")
