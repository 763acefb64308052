"""DDP on CUDA with the nccl backend, the tutorials' way, for one GPU per rank.

Run under ddprun and under torchrun on the same machine: the `final` line
(loss and a parameter checksum, both rounded) must be the same. With
`ddprun --preload torch` the worker is forked from a zygote that imported
torch: it must find CUDA uninitialised and still be able to use the GPU.
"""
import gc
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

cuda_was_initialised = torch.cuda.is_initialized()
local_rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local_rank)
dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
rank, world = dist.get_rank(), dist.get_world_size()

g = torch.Generator().manual_seed(1234)
x = torch.randn(4096, 64, generator=g)
y = (x @ torch.linspace(-1, 1, 64)).unsqueeze(1) + 0.1 * torch.randn(4096, 1, generator=g)
x, y = x.cuda(), y.cuda()

torch.manual_seed(0)
model = DDP(nn.Sequential(nn.Linear(64, 256), nn.Tanh(), nn.Linear(256, 1)).cuda(), device_ids=[local_rank])
opt = torch.optim.SGD(model.parameters(), lr=0.05)
shard = slice(rank * len(x) // world, (rank + 1) * len(x) // world)
for step in range(200):
    opt.zero_grad()
    loss = nn.functional.mse_loss(model(x[shard]), y[shard])
    loss.backward()
    opt.step()
total = loss.detach().clone()
dist.all_reduce(total)
checksum = sum(p.double().sum().item() for p in model.parameters())
if rank == 0:
    print(f"cuda initialised before the script used it: {cuda_was_initialised}", flush=True)
    print(f"device {torch.cuda.get_device_name(local_rank)}, torch {torch.__version__}, "
          f"nccl {'.'.join(map(str, torch.cuda.nccl.version()))}", flush=True)
    print(f"final loss={total.item() / world:.6f} params={checksum:.6f}", flush=True)
# torch 2.x can abort at exit ("terminate called without an active exception") when a DDP model
# outlives its process group (DDP's reducer holds a reference cycle): free the model before
# destroying the group.
del model
gc.collect()
dist.destroy_process_group()
