"""A torch DDP job (gloo, CPU) that reports liveness through ddprun.liveness,
as a pip user would write it. Prints one line per rank at the end. With
HANG_RANK=N, rank N hangs in its "data" section at step 3 (the others wait in
the all-reduce of their untimed "step" section)."""
import gc
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from ddprun import liveness


@liveness.section("setup")
def setup() -> DDP:
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    return DDP(torch.nn.Linear(8, 1))


def main() -> None:
    model = setup()
    rank = dist.get_rank()
    hang_rank = int(os.environ.get("HANG_RANK", "-1"))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(10):
        liveness.heartbeat()
        with liveness.section("data"):
            x = torch.full((4, 8), float(rank + step))
            if step == 3 and rank == hang_rank:
                time.sleep(3600)
        with liveness.section("step"):
            opt.zero_grad()
            model(x).sum().backward()
            opt.step()
    # Every rank holds the same weights after DDP's gradient all-reduce.
    w = model.module.weight.detach().clone()
    dist.all_reduce(w)
    same = torch.allclose(w, model.module.weight.detach() * dist.get_world_size())
    print(f"trained rank={rank} world_size={dist.get_world_size()} same_weights={same} "
          f"liveness={'on' if liveness.enabled() else 'off'} python={sys.executable}", flush=True)
    # torch 2.x can abort at exit ("terminate called without an active exception") when a DDP model
    # outlives its process group (DDP's reducer holds a reference cycle): free the model before
    # destroying the group.
    del model, opt
    gc.collect()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
