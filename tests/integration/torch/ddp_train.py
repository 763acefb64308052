"""An unmodified-style PyTorch DDP training script, the tutorials' way.

DistributedDataParallel + DistributedSampler(set_epoch) on gloo (the toy job of
toy_ddp.py, shared with the benches), an all_reduce'd metric, rank-0-only
checkpoints and resume after a restart. Prints one `final params=<checksum>`
line on rank 0. FAIL_EPOCH/FAIL_RANK make that rank
raise once (on the first attempt) at the start of that epoch.
"""
import gc
import os
import sys

import torch
import torch.distributed as dist

sys.dont_write_bytecode = True  # toy_ddp.py sits beside this script: no __pycache__ in the source tree
import toy_ddp  # noqa: E402

EPOCHS = 4
ckpt = sys.argv[1]

dist.init_process_group("gloo", init_method="env://")
rank, world = dist.get_rank(), dist.get_world_size()
restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))

data = toy_ddp.dataset()
model, opt = toy_ddp.model_and_optimizer()
start = 0
if os.path.exists(ckpt):
    state = torch.load(ckpt)
    model.module.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
    start = state["epoch"] + 1
    print(f"rank {rank} resumed from epoch {state['epoch']} restart={restart}", flush=True)

sampler, loader = toy_ddp.sharded_loader(data, rank, world)
for epoch in range(start, EPOCHS):
    if (
        restart == 0
        and epoch == int(os.environ.get("FAIL_EPOCH", "-1"))
        and rank == int(os.environ.get("FAIL_RANK", "-1"))
    ):
        raise RuntimeError(f"injected failure at epoch {epoch}")
    sampler.set_epoch(epoch)
    total = torch.zeros(1)
    for xb, yb in loader:
        total += toy_ddp.train_step(model, opt, xb, yb)
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
# torch 2.x can abort at exit ("terminate called without an active exception") when a DDP model
# outlives its process group (DDP's reducer holds a reference cycle): free the model before
# destroying the group.
del model, opt
gc.collect()
dist.destroy_process_group()
