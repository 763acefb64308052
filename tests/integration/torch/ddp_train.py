"""An unmodified-style PyTorch DDP training script, the tutorials' way.

DistributedDataParallel + DistributedSampler(set_epoch) on gloo, an all_reduce'd
metric, rank-0-only checkpoints and resume after a restart. Prints one
`final params=<checksum>` line on rank 0. FAIL_EPOCH/FAIL_RANK make that rank
raise once (on the first attempt) at the start of that epoch.
"""
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

EPOCHS = 4
ckpt = sys.argv[1]

dist.init_process_group("gloo", init_method="env://")
rank, world = dist.get_rank(), dist.get_world_size()
restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))

g = torch.Generator().manual_seed(1234)
x = torch.randn(96, 8, generator=g)
y = (x @ torch.linspace(-1, 1, 8)).unsqueeze(1) + 0.1 * torch.randn(96, 1, generator=g)
data = TensorDataset(x, y)

torch.manual_seed(0)
model = DDP(nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1)))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
start = 0
if os.path.exists(ckpt):
    state = torch.load(ckpt)
    model.module.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
    start = state["epoch"] + 1
    print(f"rank {rank} resumed from epoch {state['epoch']} restart={restart}", flush=True)

sampler = DistributedSampler(data, num_replicas=world, rank=rank, shuffle=True, seed=7)
loader = DataLoader(data, batch_size=96 // (4 * world), sampler=sampler)
for epoch in range(start, EPOCHS):
    if restart == 0 and epoch == int(os.environ.get("FAIL_EPOCH", "-1")) and rank == int(os.environ.get("FAIL_RANK", "-1")):
        raise RuntimeError(f"injected failure at epoch {epoch}")
    sampler.set_epoch(epoch)
    total = torch.zeros(1)
    for xb, yb in loader:
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(xb), yb)
        loss.backward()
        opt.step()
        total += loss.detach()
    dist.all_reduce(total)
    if rank == 0:
        print(f"epoch {epoch} loss={total.item() / world / len(loader):.6f}", flush=True)
        tmp = ckpt + ".tmp"
        torch.save({"epoch": epoch, "model": model.module.state_dict(), "opt": opt.state_dict()}, tmp)
        os.replace(tmp, ckpt)
    dist.barrier()

if rank == 0:
    checksum = sum(p.double().sum().item() for p in model.module.parameters())
    print(f"final params={checksum:.10f}", flush=True)
dist.destroy_process_group()
