"""torch's side of scripts/bench/sdk_systime_bench.py: the model, data and
loop of build/bin/ddp-example-train (worker_sdk/examples/train.cpp) in torch,
for CPU time per step against the worker SDK's.

    sdk_systime_train.py --epochs E [--hidden H] [--batch-size B] [--dataset-size N]

A 2 -> H -> H -> 1 tanh perceptron on y = sin(pi x0) cos(pi x1) + noise,
half the mean squared error, SGD at lr 0.3, a DistributedSampler (shuffle, drop_last) and
DistributedDataParallel over Gloo with its default buckets (one for this
model, as the SDK's Reducer makes), one all-reduce of the summed loss per
epoch, and a barrier at the end. Batches are indexed straight from the
tensors (no DataLoader), as the C++ trainer does.
"""
import argparse
import gc
import math
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data.distributed import DistributedSampler


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, required=True)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--dataset-size", type=int, default=8192)
    p.add_argument("--seed", type=int, default=1234)
    a = p.parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    dist.init_process_group("gloo", init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    g = torch.Generator().manual_seed(a.seed)
    x = torch.rand(a.dataset_size, 2, generator=g) * 2 - 1
    y = (torch.sin(math.pi * x[:, 0]) * torch.cos(math.pi * x[:, 1]) +
         0.05 * torch.randn(a.dataset_size, generator=g)).unsqueeze(1)
    torch.manual_seed(a.seed + 1)
    h = a.hidden
    model = torch.nn.Sequential(torch.nn.Linear(2, h), torch.nn.Tanh(), torch.nn.Linear(h, h),
                                torch.nn.Tanh(), torch.nn.Linear(h, 1))
    for m in model:
        if isinstance(m, torch.nn.Linear):  # as the C++ model: Xavier-uniform weights, zero biases
            torch.nn.init.xavier_uniform_(m.weight)
            torch.nn.init.zeros_(m.bias)
    ddp = DDP(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.3)
    sampler = DistributedSampler(range(a.dataset_size), num_replicas=world, rank=rank, shuffle=True,
                                 seed=a.seed, drop_last=True)
    loss_fn = torch.nn.MSELoss()
    for epoch in range(a.epochs):
        sampler.set_epoch(epoch)
        idx = torch.tensor(list(sampler))
        sums = torch.zeros(2)
        for pos in range(0, len(idx), a.batch_size):
            b = idx[pos:pos + a.batch_size]
            opt.zero_grad(set_to_none=False)
            loss = 0.5 * loss_fn(ddp(x[b]), y[b])  # the C++ model's loss: half the squared error
            loss.backward()
            opt.step()
            sums[0] += loss.detach() * len(b)
            sums[1] += len(b)
        dist.all_reduce(sums)
        if rank == 0:
            print("epoch %d/%d loss %.6f" % (epoch + 1, a.epochs, (sums[0] / sums[1]).item()), flush=True)
    dist.barrier()
    # torch 2.x can abort at exit when a DDP model outlives its process group
    # (DDP's reducer holds a reference cycle): free it first.
    del ddp, model, opt
    gc.collect()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
