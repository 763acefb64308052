"""Rank 1 raises after init_process_group: torch 2.x's excepthook then writes
"[rank1]: " before each line of the traceback."""
import os
import time

import torch.distributed as dist


def load_batch(i):
    raise ValueError(f"corrupt batch {i} in shard 3")


dist.init_process_group("gloo")
if os.environ["RANK"] == "1":
    load_batch(42)
time.sleep(60)  # rank 0 waits until the agent stops it
