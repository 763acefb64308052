"""Asserts that torch's own reading of the launcher's env is satisfied exactly."""
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import get_error_handler

run_id, nproc, nnodes, max_restarts = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
env = os.environ
dist.init_process_group("gloo", init_method="env://")
rank, world = dist.get_rank(), dist.get_world_size()
assert rank == int(env["RANK"]), "RANK"
assert world == int(env["WORLD_SIZE"]) == nproc * nnodes, "WORLD_SIZE"
local = int(env["LOCAL_RANK"])
assert 0 <= local < nproc and int(env["LOCAL_WORLD_SIZE"]) == nproc, "LOCAL_RANK/LOCAL_WORLD_SIZE"
assert rank == int(env["GROUP_RANK"]) * nproc + local, "GROUP_RANK"
assert env["ROLE_RANK"] == env["RANK"] and env["ROLE_WORLD_SIZE"] == env["WORLD_SIZE"], "ROLE_*"
assert env["ROLE_NAME"] == "default" and int(env["GROUP_WORLD_SIZE"]) == nnodes, "ROLE_NAME/GROUP_WORLD_SIZE"
# "-": --standalone assigns a fresh run id, as torchrun's does
assert env["TORCHELASTIC_RUN_ID"] == run_id if run_id != "-" else len(env["TORCHELASTIC_RUN_ID"]) > 0, (
    "TORCHELASTIC_RUN_ID"
)
assert env["TORCHELASTIC_RESTART_COUNT"] == "0", "TORCHELASTIC_RESTART_COUNT"
assert env["TORCHELASTIC_MAX_RESTARTS"] == max_restarts, "TORCHELASTIC_MAX_RESTARTS"
assert env["TORCHELASTIC_USE_AGENT_STORE"] == "True", "TORCHELASTIC_USE_AGENT_STORE"
assert get_error_handler()._get_error_file_path() == env["TORCHELASTIC_ERROR_FILE"], "error file"
# torch's own env:// rendezvous: with the agent's store, keys live in the store
# at MASTER_ADDR:MASTER_PORT, under the per-attempt prefix in torch 1.x; torch
# 2.x (checked with 2.15, under torchrun too) hands out that store unprefixed.
import datetime  # noqa: E402

from torch.distributed.rendezvous import rendezvous  # noqa: E402

store, r_rank, r_world = next(rendezvous("env://"))
assert (r_rank, r_world) == (rank, world), "env:// rendezvous rank/world"
store.set(f"env_check_{rank}", "ok")
t = dist.TCPStore(
    env["MASTER_ADDR"], int(env["MASTER_PORT"]), world, False, timeout=datetime.timedelta(seconds=10)
)
prefix = "/worker/attempt_0/" if torch.__version__.startswith("1.") else ""
assert t.get(f"{prefix}env_check_{rank}") == b"ok", "the rendezvous store's key layout"
dist.barrier()
print(f"env ok rank={rank}", flush=True)
