"""A torch DDP trainer that keeps its processes through a lost rank.

    ddprun --standalone --nproc_per_node=4 --on_failure=reform --max_restarts=3 \
        python/examples/reform_ddp.py --kill-rank 2 --kill-step 40

An MLP, SGD with momentum and a DistributedSampler-like ElasticSampler on
Gloo/CPU, deterministic: the same final loss with and without a kill when the
lost rank is replaced (the world size stays). The lines marked "# ddprun" are
all it takes (10, with the import). `--kill-rank R --kill-step S`: rank R SIGKILLs itself at the
start of step S, in its first incarnation only (a replacement has
DDP_REFORM_JOINING=1, a restarted worker TORCHELASTIC_RESTART_COUNT > 0);
`--stop-rank R` stops rank R where it would re-form after that kill;
`--wedge-rank R` blocks rank R at that step, in torch, where nothing the
release does ends it (as a Gloo send that its transport never fails).
Prints each re-form's cost: the kill to this rank's next completed step, the
time its (re)form took and, of that, its wait for the others; a replacement
also when its process started after the kill. Rank 0 prints the median
step time before the loss. Under
torchrun or --on_failure=restart it trains from the start again after a kill
(no checkpoint), and prints the same cost line for the restarted run. The last
line of rank 0 is `final loss X`.
"""
import time

STARTED = time.time()  # the cost line of a replacement: the kill to its process start

import argparse  # noqa: E402
import contextlib  # noqa: E402
import os  # noqa: E402
import signal  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

from ddprun import elastic  # noqa: E402  # ddprun


def parse():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=120)
    p.add_argument("--batch", type=int, default=16, help="per rank")
    p.add_argument("--samples", type=int, default=2048)
    p.add_argument("--kill-rank", type=int, default=-1)
    p.add_argument("--kill-step", type=int, default=-1)
    p.add_argument("--stop-rank", type=int, default=-1,
                   help="this rank SIGSTOPs itself instead of re-forming after the kill (a survivor stuck "
                        "in the kernel; for the tests): its agent replaces it once the others name it")
    p.add_argument("--wedge-rank", type=int, default=-1,
                   help="at the kill step, this rank blocks in a torch store barrier no one else enters "
                        "(for the tests): it ends the process once its generation's connections are closed")
    p.add_argument("--step-sleep-ms", type=float, default=0.0,
                   help="sleep this long in every step (a longer run, e.g. to kill a node in it)")
    p.add_argument("--catch-only", action="store_true",
                   help="catch MembershipChanged but never re-form (what not to do; for the tests)")
    return p.parse_args()


def kill_file():
    """Where the killed rank leaves the time of its kill, for the others."""
    run_id = os.environ.get("TORCHELASTIC_RUN_ID", "x")
    return os.path.join(tempfile.gettempdir(), f"reform_ddp_kill.{run_id}")


def replacement():
    """Whether this process replaces one (re-form) or restarted (restart)."""
    restarted = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") != "0"
    return os.environ.get("DDP_REFORM_JOINING") == "1" or restarted


def maybe_kill(args, step):
    if not replacement() and step == args.kill_step and int(os.environ["RANK"]) == args.kill_rank:
        with open(kill_file(), "w") as f:
            f.write(f"{time.time()!r} {step}")
        print(f"rank {args.kill_rank} pid {os.getpid()}: SIGKILL at step {step}", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)


def maybe_wedge(args, step):
    """Rank --wedge-rank blocks in its step, idle, in torch code, until its process ends."""
    if replacement() or step != args.kill_step or int(os.environ["RANK"]) != args.wedge_rank:
        return
    from torch.distributed.elastic.utils.store import barrier

    host, _, port = os.environ["DDP_STORE_ENDPOINT"].rpartition(":")
    store = dist.TCPStore(host.strip("[]"), int(port), is_master=False, wait_for_workers=False)
    print(f"rank {args.wedge_rank} pid {os.getpid()}: blocked in its step at step {step}", flush=True)
    barrier(store, 2, f"reform_ddp_wedge_{os.getpid()}", barrier_timeout=3600)


def report(state, eg):
    """After the first step completed since a failure: its cost, and the steps
    done before the kill that were done again."""
    try:
        with open(kill_file()) as f:
            killed, kill_step = f.read().split()
        killed, kill_step = float(killed), int(kill_step)
    except (OSError, ValueError):
        return
    lost = max(0, kill_step - (state["step"] - 1))
    who = "replacement" if os.environ.get("DDP_REFORM_JOINING") == "1" else "survivor"
    if os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") != "0" and who == "survivor":
        who = "restarted"
    since = "" if who == "survivor" else \
        f"; its process started {(STARTED - killed) * 1000:.1f} ms after the kill"
    print(f"rank {os.environ['RANK']} pid {os.getpid()} ({who}): kill to next completed step "
          f"{(time.time() - killed) * 1000:.1f} ms, steps lost {lost}; its (re)form took "
          f"{eg.info.took_s * 1000:.1f} ms ({eg.info.wait_s * 1000:.1f} waiting for the others){since}",
          flush=True)


def main():
    args = parse()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    x = torch.randn(args.samples, 32)
    y = (x @ torch.randn(32, 1)).tanh() + 0.1 * torch.randn(args.samples, 1)
    data = TensorDataset(x, y)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    state = {"step": 0, "epoch": 0, "consumed": 0}
    eg = elastic.ElasticGroup()  # ddprun
    state = eg.sync_state(model, opt, state)  # ddprun: a replacement gets the state here
    ddp = eg.ddp(model)  # ddprun
    sampler = elastic.ElasticSampler(data, eg)  # ddprun: a DistributedSampler that can start mid-epoch
    print(f"rank {os.environ['RANK']} pid {os.getpid()}: started, rank {eg.rank} of {eg.size}", flush=True)
    pending = replacement()
    loss = torch.zeros(())
    step_s = []
    while state["step"] < args.steps:
        sampler.set_epoch(state["epoch"], state["consumed"])
        try:
            for xb, yb in DataLoader(data, batch_size=args.batch, sampler=sampler):
                maybe_kill(args, state["step"])
                began = time.perf_counter()
                with eg.step():  # ddprun
                    opt.zero_grad()
                    loss = torch.nn.functional.mse_loss(ddp(xb), yb)
                    maybe_wedge(args, state["step"])
                    loss.backward()
                    opt.step()
                    time.sleep(args.step_sleep_ms / 1000)
                step_s.append(time.perf_counter() - began)
                state["step"] += 1
                state["consumed"] += args.batch * eg.size
                if pending:
                    report(state, eg)
                    pending = False
                if state["step"] == args.steps:
                    break
            else:
                state["epoch"] += 1
                state["consumed"] = 0
        except elastic.MembershipChanged:  # ddprun
            if args.catch_only:
                time.sleep(0.01)
                continue
            pending = True
            if args.stop_rank == int(os.environ["RANK"]) and not replacement():
                print(f"rank {args.stop_rank} pid {os.getpid()}: SIGSTOP instead of re-forming", flush=True)
                os.kill(os.getpid(), signal.SIGSTOP)
            eg.reform()  # ddprun
            state = eg.sync_state(model, opt, state)  # ddprun
            ddp = eg.ddp(model)  # ddprun
    # The mean loss over the last step's batches of every rank, as a check.
    total = loss.detach().clone()
    dist.all_reduce(total, group=eg.group)
    if eg.rank == 0:
        print(f"median step {statistics.median(step_s or [0.0]) * 1000:.1f} ms", flush=True)
        print(f"final loss {total.item() / eg.size:.9f}", flush=True)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(kill_file())  # every rank read it before this last all-reduce


if __name__ == "__main__":
    main()
