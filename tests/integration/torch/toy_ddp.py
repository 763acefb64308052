"""The one toy DDP training job that the torch trainers here share.

A small regression (96 samples of 8 features, a 8-16-1 MLP, SGD) under
DistributedDataParallel with a DistributedSampler, on whatever process group
the caller has initialised. Seeds are fixed, so every run on the same world
size trains to the same parameters: tests compare checksums across launchers,
benches time the same work. Used by ddp_train.py (here) and by
scripts/bench/torch_startup_train.py and peers_train.py, which put this folder
on sys.path.
"""
import torch
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

SAMPLES = 96


def dataset():
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(SAMPLES, 8, generator=g)
    y = (x @ torch.linspace(-1, 1, 8)).unsqueeze(1) + 0.1 * torch.randn(SAMPLES, 1, generator=g)
    return TensorDataset(x, y)


def model_and_optimizer():
    """The DDP-wrapped model and its optimizer, from the same seed on every rank."""
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1)))
    return model, torch.optim.SGD(model.parameters(), lr=0.05)


def sharded_loader(data, rank, world):
    """(sampler, loader): this rank's shard, 4 batches per epoch; call sampler.set_epoch each epoch."""
    sampler = DistributedSampler(data, num_replicas=world, rank=rank, shuffle=True, seed=7)
    return sampler, DataLoader(data, batch_size=SAMPLES // (4 * world), sampler=sampler)


def train_step(model, opt, xb, yb):
    """Forward, backward (the gradient all-reduce), optimizer step; returns the detached loss."""
    opt.zero_grad()
    loss = nn.functional.mse_loss(model(xb), yb)
    loss.backward()
    opt.step()
    return loss.detach()
