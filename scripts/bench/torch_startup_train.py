"""DDP training script for scripts/bench/torch_startup.sh.

The same work as tests/integration/torch/ddp_train.py (the toy job of
tests/integration/torch/toy_ddp.py: DistributedDataParallel, DistributedSampler
with set_epoch, gloo, an all_reduce'd metric per epoch), no checkpoint. Rank 0
prints `first_step_ns=<wall clock ns>` when its first training step has
finished (forward, backward with the first gradient all-reduce across ranks,
optimizer step), so the time from launch to that line is what a user waits for
before training actually runs.
"""
import gc
import os
import sys
import time

import torch
import torch.distributed as dist

sys.path.insert(
    0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "integration", "torch")
)
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import toy_ddp  # noqa: E402

EPOCHS = 2

dist.init_process_group("gloo", init_method="env://")
rank, world = dist.get_rank(), dist.get_world_size()

data = toy_ddp.dataset()
model, opt = toy_ddp.model_and_optimizer()
sampler, loader = toy_ddp.sharded_loader(data, rank, world)
first = True
for epoch in range(EPOCHS):
    sampler.set_epoch(epoch)
    total = torch.zeros(1)
    for xb, yb in loader:
        total += toy_ddp.train_step(model, opt, xb, yb)
        if first and rank == 0:
            print(f"first_step_ns={time.time_ns()}", flush=True)
        first = False
    dist.all_reduce(total)
    if rank == 0:
        print(f"epoch {epoch} loss={total.item() / world / len(loader):.6f}", flush=True)
# torch 2.x can abort at exit ("terminate called without an active exception") when a DDP model
# outlives its process group (DDP's reducer holds a reference cycle): free the model before
# destroying the group.
del model, opt
gc.collect()
dist.destroy_process_group()
