"""python/examples/reform_ddp.py's trainer (the same MLP, data, per-rank batch
of 16, SGD with momentum, 120 steps, 4 ranks, Gloo on CPU) written for the
peers of ddprun.elastic, for scripts/bench/torch_reform_bench.py:

  torchft  torchft 0.2: every rank a replica group of its own under a
           lighthouse (TORCHFT_LIGHTHOUSE), Manager + its DDP and Optimizer
           wrappers; a killed replica is started again by the bench and
           recovers its state from a peer (torchft's HTTP transport).
  nvrx     nvidia-resiliency-ext's inprocess.Wrapper: the training function
           is restarted inside the surviving processes, over a new group.

`--kill-rank R --kill-step S`: rank R SIGKILLs itself at step S in its first
process (PEER_RESTARTED unset). Prints the same cost line as reform_ddp.py
(`(survivor|replacement): kill to next completed step X ms, steps lost N`),
`median step X ms` and, on the lowest live rank, `final loss X`. The lines
marked `# torchft` / `# nvrx` are the user code each peer needs.
"""
import argparse
import os
import signal
import statistics
import sys
import tempfile
import time
from typing import Optional

import torch
import torch.distributed as dist

STEPS_DONE = []  # the step times of this process


def parse():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("peer", choices=["torchft", "nvrx"])
    p.add_argument("--steps", type=int, default=120)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--samples", type=int, default=2048)
    p.add_argument("--kill-rank", type=int, default=-1)
    p.add_argument("--kill-step", type=int, default=-1)
    p.add_argument("--tuned", action="store_true", help="shorter timeouts and ticks than the peer's defaults")
    return p.parse_args()


def setup(samples):
    """As reform_ddp.py: the data, the model and the optimizer."""
    torch.manual_seed(0)
    torch.set_num_threads(1)
    x = torch.randn(samples, 32)
    y = (x @ torch.randn(32, 1)).tanh() + 0.1 * torch.randn(samples, 1)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    return x, y, model, opt


def batch(x, y, step, rank, world, size):
    """Rank `rank`'s share of step `step`'s global batch, DistributedSampler's
    order (shuffled per epoch, seed 0) dealt among `world` ranks."""
    per_epoch = len(x) // (size * world)
    epoch, within = divmod(step, per_epoch)
    g = torch.Generator()
    g.manual_seed(epoch)
    order = torch.randperm(len(x), generator=g)
    idx = order[within * size * world:(within + 1) * size * world][rank::world]
    return x[idx], y[idx]


def kill_file():
    return os.path.join(tempfile.gettempdir(), f"reform_ddp_kill.{os.environ.get('PEER_RUN_ID', 'x')}")


def maybe_kill(args, rank, step):
    if not os.environ.get("PEER_RESTARTED") and rank == args.kill_rank and step == args.kill_step:
        with open(kill_file(), "w") as f:
            f.write(f"{time.time()!r} {step}")
        print(f"rank {rank} pid {os.getpid()}: SIGKILL at step {step}", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)


class Cost:
    """The cost line after the first step completed since the kill."""

    def __init__(self, rank):
        self.rank, self.done = rank, False
        self.who = "replacement" if os.environ.get("PEER_RESTARTED") else "survivor"
        self.attempts_after_kill = 0  # steps tried since the kill that were not kept

    def step_done(self, step, began, kept=True):
        """`began`: the step's start (time.time()); a step under way at the kill does not count."""
        if self.done:
            return
        try:
            with open(kill_file()) as f:
                killed, kill_step = f.read().split()
        except (OSError, ValueError):
            return
        if began < float(killed):
            return
        if not kept:
            self.attempts_after_kill += 1
            return
        lost = max(0, int(kill_step) - step) + self.attempts_after_kill
        print(f"rank {self.rank} pid {os.getpid()} ({self.who}): kill to next completed step "
              f"{(time.time() - float(killed)) * 1000:.1f} ms, steps lost {lost}", flush=True)
        self.done = True


def finish(loss, rank, world, group=None):
    total = loss.detach().clone()
    dist.all_reduce(total, group=group)
    if rank == 0:
        print(f"median step {statistics.median(STEPS_DONE or [0.0]) * 1000:.1f} ms", flush=True)
        print(f"final loss {total.item() / world:.9f}", flush=True)


def start_together(rank, world):
    """Bench scaffolding, not user code: the first processes wait for each
    other here, so that torchft's first quorum has every replica (it starts
    with whoever is there after its join timeout, and the rest join later)."""
    if os.environ.get("PEER_RESTARTED"):
        return
    mark = kill_file() + ".ready"
    with open(f"{mark}.{rank}", "w"):
        pass
    while not all(os.path.exists(f"{mark}.{r}") for r in range(world)):
        time.sleep(0.01)


def run_torchft(args):
    from datetime import timedelta

    import torchft  # torchft

    rank, world = int(os.environ["REPLICA_GROUP_ID"]), int(os.environ["NUM_REPLICA_GROUPS"])
    start_together(rank, world)
    x, y, model, opt = setup(args.samples)
    timeout = timedelta(seconds=5 if args.tuned else 60)
    manager = torchft.Manager(  # torchft
        pg=torchft.ProcessGroupGloo(timeout=timeout),  # torchft
        min_replica_size=1,  # torchft
        load_state_dict=lambda s: (model.load_state_dict(s["model"]),  # torchft
                                   opt.load_state_dict(s["opt"])),  # torchft
        state_dict=lambda: {"model": model.state_dict(), "opt": opt.state_dict()},  # torchft
        replica_id=f"replica_{rank}",  # torchft
        timeout=timeout, quorum_timeout=timeout, use_async_quorum=False,  # torchft
        rank=0, world_size=1,  # torchft: one process per replica group
    )  # torchft
    ddp = torchft.DistributedDataParallel(manager, model)  # torchft
    fopt = torchft.Optimizer(manager, opt)  # torchft
    cost, loss = Cost(rank), torch.zeros(())
    print(f"rank {rank} pid {os.getpid()}: started", flush=True)
    while manager.current_step() < args.steps:  # torchft
        step = manager.current_step()  # torchft
        maybe_kill(args, rank, step)
        began, wall = time.perf_counter(), time.time()
        fopt.zero_grad()  # torchft: starts the quorum
        xb, yb = batch(x, y, step, rank, world, args.batch)
        loss = torch.nn.functional.mse_loss(ddp(xb), yb)
        loss.backward()
        kept = fopt.step()  # torchft: commits when every participant's all-reduce held
        STEPS_DONE.append(time.perf_counter() - began)
        cost.step_done(step, wall, kept is not False)
    # The loss over the replicas that finished (torchft's group is per quorum: a store of its own here).
    print(f"rank {rank} pid {os.getpid()}: done, step {manager.current_step()}, loss {loss.item():.9f}",
          flush=True)
    manager.shutdown(wait=False)


def run_nvrx(args):
    from datetime import timedelta

    from nvidia_resiliency_ext import inprocess  # nvrx

    x, y, model, opt = setup(args.samples)
    state = {"step": 0}
    tick = timedelta(milliseconds=100)
    tuned = dict(monitor_thread_interval=tick, monitor_process_interval=tick, heartbeat_interval=tick,
                 progress_watchdog_interval=tick, last_call_wait=tick, heartbeat_timeout=timedelta(seconds=1),
                 soft_timeout=timedelta(seconds=20), hard_timeout=timedelta(seconds=30)) if args.tuned else {}
    # Its abort does not release a Gloo operation blocked on a live peer
    # (torch's abort is a no-op for Gloo): the group's own timeout does.
    pg_timeout = timedelta(seconds=1) if args.tuned else timedelta(minutes=30)

    @inprocess.Wrapper(store_kwargs={"port": int(os.environ["MASTER_PORT"]) + 2},  # nvrx
                       health_check=None, **tuned)  # nvrx
    def train(call_wrapper: Optional[inprocess.CallWrapper] = None):  # nvrx
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])  # nvrx: the new world's
        store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world,  # nvrx
                              is_master=rank == 0, multi_tenant=True, wait_for_workers=True)  # nvrx
        store = dist.PrefixStore(str(call_wrapper.iteration), store)  # nvrx
        dist.init_process_group("gloo", store=store, rank=rank, world_size=world, timeout=pg_timeout)  # nvrx
        slot = int(os.environ.get("PEER_SLOT", rank))
        cost, loss = Cost(slot), torch.zeros(())
        if call_wrapper.iteration > 0:  # nvrx: the state of the lowest survivor
            for t in list(model.parameters()) + [opt.state[p]["momentum_buffer"] for p in model.parameters()
                                                 if p in opt.state]:  # nvrx
                dist.broadcast(t.data, src=0)  # nvrx
            box = [state["step"]]  # nvrx
            dist.broadcast_object_list(box, src=0)  # nvrx
            state["step"] = box[0]  # nvrx
        ddp = torch.nn.parallel.DistributedDataParallel(model)  # nvrx
        print(f"rank {slot} pid {os.getpid()}: started, rank {rank} of {world}", flush=True)
        while state["step"] < args.steps:
            maybe_kill(args, slot, state["step"])
            began, wall = time.perf_counter(), time.time()
            opt.zero_grad()
            xb, yb = batch(x, y, state["step"], rank, world, args.batch)
            loss = torch.nn.functional.mse_loss(ddp(xb), yb)
            loss.backward()
            opt.step()
            STEPS_DONE.append(time.perf_counter() - began)
            state["step"] += 1
            cost.step_done(state["step"] - 1, wall)
        finish(loss, rank, world)
        dist.destroy_process_group()

    train()  # nvrx


def main():
    args = parse()
    os.environ.setdefault("PEER_SLOT", os.environ.get("RANK", "0"))
    (run_torchft if args.peer == "torchft" else run_nvrx)(args)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
