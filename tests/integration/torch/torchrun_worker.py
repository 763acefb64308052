"""One worker of the torchrun rendezvous tests (torchrun_rdzv_test.cpp).

Joins the world with gloo and all_reduces rank + 1, so the sum is
W * (W + 1) / 2 only when every rank of the world took part. Prints
  trdzv node=<NODE_NAME> pid=<pid> world=<W> rank=<R> group_rank=<G> sum=<S> restart=<N> ok t=<time>
(every line ends with the wall-clock time, for reading the logs; WRONG instead of ok, and exit 1, on a
wrong sum). Then, by WORKER_MODE:
  once  exits 0;
  hold  stays until HOLD_FILE exists (the test changes the membership meanwhile), exits 0;
  loop  all_reduces again every 20 ms until any rank sees HOLD_FILE (decided by the
        all_reduce itself, so all ranks leave together), printing
        "trdzv-iter node=<NODE> restart=<N> iter=<I>" every 10 iterations; a broken
        collective (a peer died) prints "trdzv-peer-lost ..." and exits 1.
With FAIL_AT_RESTART=N, a worker whose TORCHELASTIC_RESTART_COUNT is N exits 3
right after its result line ("trdzv-fail ..."): an injected worker failure.
"""
import datetime
import os
import sys
import time

import torch
import torch.distributed as dist

node = os.environ.get("NODE_NAME", "?")
restart = os.environ["TORCHELASTIC_RESTART_COUNT"]
mode = os.environ.get("WORKER_MODE", "once")
hold = os.environ.get("HOLD_FILE", "")


def out(line):
    print(f"{line} t={time.time():.3f}", flush=True)


dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=30))
rank, world = dist.get_rank(), dist.get_world_size()
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
got, expected = int(t.item()), world * (world + 1) // 2
out(f"trdzv node={node} pid={os.getpid()} world={world} rank={rank} "
    f"group_rank={os.environ['GROUP_RANK']} sum={got} restart={restart} "
    f"{'ok' if got == expected else 'WRONG'}")
if got != expected:
    sys.exit(1)

if os.environ.get("FAIL_AT_RESTART") == restart:
    out(f"trdzv-fail node={node} rank={rank} restart={restart}")
    sys.stdout.flush()
    os._exit(3)

if mode == "hold":
    while not os.path.exists(hold):
        time.sleep(0.02)
elif mode == "loop":
    i = 0
    while True:
        flag = torch.tensor([1.0 if os.path.exists(hold) else 0.0])
        try:
            dist.all_reduce(flag)
        except Exception as e:  # a peer's process died: gloo's connection broke
            out(f"trdzv-peer-lost node={node} rank={rank} restart={restart}: {type(e).__name__}")
            os._exit(1)
        if flag.item() > 0:
            break
        i += 1
        if i % 10 == 0:
            out(f"trdzv-iter node={node} restart={restart} iter={i}")
        time.sleep(0.02)

dist.destroy_process_group()
# Leave without the interpreter's teardown: torch 2.15 now and then aborts a
# worker there ("terminate called without an active exception"), after its
# work is done, which torchrun would count as a failure.
os._exit(0)
