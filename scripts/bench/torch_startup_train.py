"""DDP training script for scripts/bench/torch_startup.sh.

The same work as tests/integration/torch/ddp_train.py (DistributedDataParallel,
DistributedSampler with set_epoch, gloo, an all_reduce'd metric per epoch), no
checkpoint. Rank 0 prints `first_step_ns=<wall clock ns>` when its first
training step has finished (forward, backward with the first gradient
all-reduce across ranks, optimizer step), so the time from launch to that line
is what a user waits for before training actually runs.
"""
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

EPOCHS = 2

dist.init_process_group("gloo", init_method="env://")
rank, world = dist.get_rank(), dist.get_world_size()

g = torch.Generator().manual_seed(1234)
x = torch.randn(96, 8, generator=g)
y = (x @ torch.linspace(-1, 1, 8)).unsqueeze(1) + 0.1 * torch.randn(96, 1, generator=g)
data = TensorDataset(x, y)

torch.manual_seed(0)
model = DDP(nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1)))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
sampler = DistributedSampler(data, num_replicas=world, rank=rank, shuffle=True, seed=7)
loader = DataLoader(data, batch_size=96 // (4 * world), sampler=sampler)
first = True
for epoch in range(EPOCHS):
    sampler.set_epoch(epoch)
    total = torch.zeros(1)
    for xb, yb in loader:
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(xb), yb)
        loss.backward()
        opt.step()
        total += loss.detach()
        if first and rank == 0:
            print(f"first_step_ns={time.time_ns()}", flush=True)
        first = False
    dist.all_reduce(total)
    if rank == 0:
        print(f"epoch {epoch} loss={total.item() / world / len(loader):.6f}", flush=True)
dist.destroy_process_group()
