"""Process-group calls a torch script makes beyond DDP, run as a worker of a
launcher. Prints "pg ops ok rank=R" at the end.

  pg_ops.py groups   init_process_group("gloo", "env://"), new_group and a
                     collective on it, monitored_barrier, destroy_process_group
  pg_ops.py reinit   three inits of the default group in one process, each
                     with a subgroup, each destroyed before the next (torch
                     writes the same store keys at every init:
                     docs/rendezvous.md, "Re-initialising a process group";
                     torchrun 2.15 fails this, its second init reading the
                     first one's Gloo addresses)
"""
import datetime
import sys

import torch
import torch.distributed as dist

mode = sys.argv[1]
dist.init_process_group("gloo", init_method="env://")
rank, world = dist.get_rank(), dist.get_world_size()
if mode == "groups":
    # A group of the even ranks, created by every rank as torch requires.
    evens = list(range(0, world, 2))
    group = dist.new_group(evens)
    if rank in evens:
        g = torch.tensor([1.0])
        dist.all_reduce(g, group=group)
        assert g.item() == len(evens), f"subgroup all_reduce {g.item()}"
    dist.monitored_barrier(timeout=datetime.timedelta(seconds=30))
    dist.destroy_process_group()
    assert not dist.is_initialized(), "destroy_process_group"
else:
    for attempt in range(3):
        if attempt > 0:
            dist.init_process_group("gloo", init_method="env://")
        assert (dist.get_rank(), dist.get_world_size()) == (rank, world), "rank and world size"
        t = torch.tensor([float(rank + 10 * attempt)])
        dist.all_reduce(t)
        assert t.item() == world * (world - 1) / 2 + 10 * attempt * world, f"all_reduce {t.item()}"
        group = dist.new_group(list(range(world)))
        s = torch.tensor([1.0])
        dist.all_reduce(s, group=group)
        assert s.item() == world, f"subgroup all_reduce {s.item()}"
        # The subgroup holds the store's connection: let it go before the
        # re-init (docs/rendezvous.md says why).
        del group
        dist.destroy_process_group()
print(f"pg ops ok rank={rank}", flush=True)
