"""A rank of the torch re-form test whose peer dies while generation 0
connects (torch_reform_test.cpp, [connect]): forms ddprun.elastic's group with
a short timeout (TEST_PG_TIMEOUT_S), then all-reduces until one succeeds in a
generation past 0, re-forming on MembershipChanged, and prints that one."""

import datetime
import os

import torch
import torch.distributed as dist

from ddprun import elastic


def main() -> None:
    timeout = datetime.timedelta(seconds=float(os.environ.get("TEST_PG_TIMEOUT_S", "3")))
    eg = elastic.ElasticGroup(timeout=timeout)
    print(f"formed gen={eg.generation} rank={eg.rank} size={eg.size}", flush=True)
    while True:
        t = torch.ones(1)
        try:
            with eg.step():
                dist.all_reduce(t, group=eg.group)
        except elastic.MembershipChanged as e:
            print(f"membership changed: {e}", flush=True)
            eg.reform()
            print(f"reformed gen={eg.generation} rank={eg.rank} size={eg.size}", flush=True)
            continue
        if eg.generation > 0:
            break
    print(f"final gen={eg.generation} rank={eg.rank} size={eg.size} sum={int(t.item())}", flush=True)
    eg.close()


if __name__ == "__main__":
    main()
