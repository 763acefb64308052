"""A torch FSDP2 trainer that keeps its processes through a lost rank.

    ddprun --standalone --nproc_per_node=4 --on_failure=reform --max_restarts=3 \
        python/examples/reform_fsdp.py --kill-rank 2 --kill-step 50

An MLP sharded with fully_shard (FSDP2), AdamW and the ElasticSampler on
Gloo/CPU, deterministic. A lost rank takes its shards with it, so on
MembershipChanged the survivors re-form, build the model and optimizer again,
fully_shard them on the new group's mesh and load the last DCP checkpoint in
process (written every --ckpt-every steps into --ckpt-dir); a replacement
loads it at start. The steps since that checkpoint are done again, on the
same data: with the world size unchanged the run ends at the loss of a run
without a kill. With fewer ranks (a lost node, no spare) DCP re-shards the
checkpoint on load and the rest of the epoch is dealt among them. The lines
marked "# ddprun" are what it takes (13, with the import).

`--kill-rank R --kill-step S`: rank R SIGKILLs itself at the start of step S
(with --kill-in-save: as the others save the checkpoint of step S, which
then is not loaded), in its first incarnation only (as python/examples/reform_ddp.py, whose
conventions it keeps: the kill file, the cost line of each rank's first step
completed after the kill, with the steps done again, and rank 0's last line,
`final loss X`, the last step's; the line before it is the loss over the
whole data set, steadier when runs of different world sizes are compared).
Under --on_failure=restart or torchrun the restarted workers load the same
checkpoint. Without --ckpt-dir the checkpoints go to a folder
named after the run in the temporary directory, removed at the end.
"""
import time

STARTED = time.time()  # the cost line of a replacement: the kill to its process start

import argparse  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.distributed.fsdp import fully_shard  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

from ddprun import elastic  # noqa: E402  # ddprun


def parse():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=120)
    p.add_argument("--batch", type=int, default=16, help="per rank")
    p.add_argument("--samples", type=int, default=2048)
    p.add_argument("--ckpt-every", type=int, default=20, help="a checkpoint every this many steps")
    p.add_argument("--ckpt-dir", default="",
                   help="a run starts from its latest checkpoint if it has one (default: a folder of "
                        "this run's in the temporary directory, removed at the end)")
    p.add_argument("--kill-rank", type=int, default=-1)
    p.add_argument("--kill-step", type=int, default=-1)
    p.add_argument("--kill-in-save", action="store_true",
                   help="kill when saving the checkpoint of --kill-step instead, while the others save it")
    p.add_argument("--step-sleep-ms", type=float, default=0.0,
                   help="sleep this long in every step (a longer run, e.g. to kill a node in it)")
    args = p.parse_args()
    if args.ckpt_every < 1:
        p.error(f"--ckpt-every {args.ckpt_every}: must be at least 1")
    return args


def run_file(name):
    """This run's kill file or checkpoint folder, in the temporary directory."""
    run_id = os.environ.get("TORCHELASTIC_RUN_ID", "x")
    return os.path.join(tempfile.gettempdir(), f"reform_fsdp_{name}.{run_id}")


def replacement():
    """Whether this process replaces one (re-form) or restarted (restart)."""
    restarted = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") != "0"
    return os.environ.get("DDP_REFORM_JOINING") == "1" or restarted


def maybe_kill(args, step):
    if not replacement() and step == args.kill_step and int(os.environ["RANK"]) == args.kill_rank:
        with open(run_file("kill"), "w") as f:
            f.write(f"{time.time()!r} {step}")
        print(f"rank {args.kill_rank} pid {os.getpid()}: SIGKILL at step {step}", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)


def report(state, eg):
    """After the first step completed since a failure: its cost, and the steps
    done before the kill that were done again (those since the checkpoint)."""
    try:
        with open(run_file("kill")) as f:
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


def build(eg):
    """The model (the same on every rank, then sharded) and its optimizer, on the current group."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64),
                                torch.nn.Tanh(), torch.nn.Linear(64, 1))
    mesh = eg.device_mesh()  # ddprun: a DeviceMesh over eg.group (new after every re-form)
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model, torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)


def main():
    args = parse()
    ckpt_dir = args.ckpt_dir or run_file("ckpt")
    torch.set_num_threads(1)
    torch.manual_seed(0)
    x = torch.randn(args.samples, 32)
    y = (x @ torch.randn(32, 1)).tanh() + 0.1 * torch.randn(args.samples, 1)
    data = TensorDataset(x, y)
    eg = elastic.ElasticGroup()  # ddprun
    sampler = elastic.ElasticSampler(data, eg)  # ddprun: a DistributedSampler that can start mid-epoch
    print(f"rank {os.environ['RANK']} pid {os.getpid()}: started, rank {eg.rank} of {eg.size}", flush=True)
    fresh = {"step": 0, "epoch": 0, "consumed": 0}
    model, opt = build(eg)
    state = eg.load_checkpoint(ckpt_dir, model, opt) or dict(fresh)  # ddprun: a replacement's state
    pending = replacement()
    loss = torch.zeros(())
    step_s = []
    while state["step"] < args.steps:
        try:
            if model is None:  # ddprun: after a re-form, the last checkpoint's state, sharded anew
                model, opt = build(eg)  # ddprun
                state = eg.load_checkpoint(ckpt_dir, model, opt) or dict(fresh)  # ddprun
                print(f"rank {os.environ['RANK']} pid {os.getpid()}: loaded the checkpoint of step "
                      f"{state['step']}, rank {eg.rank} of {eg.size}", flush=True)
            sampler.set_epoch(state["epoch"], state["consumed"])
            for xb, yb in DataLoader(data, batch_size=args.batch, sampler=sampler):
                if not args.kill_in_save:
                    maybe_kill(args, state["step"])
                began = time.perf_counter()
                with eg.step():  # ddprun
                    opt.zero_grad()
                    loss = torch.nn.functional.mse_loss(model(xb), yb)
                    loss.backward()
                    opt.step()
                    time.sleep(args.step_sleep_ms / 1000)
                step_s.append(time.perf_counter() - began)
                state["step"] += 1
                state["consumed"] += args.batch * eg.size
                if pending:
                    report(state, eg)
                    pending = False
                if state["step"] % args.ckpt_every == 0 and state["step"] < args.steps:
                    if args.kill_in_save:
                        maybe_kill(args, state["step"])
                    eg.save_checkpoint(ckpt_dir, state["step"], model, opt, state)  # ddprun
                    if eg.rank == 0:
                        print(f"saved the checkpoint of step {state['step']}", flush=True)
                if state["step"] == args.steps:
                    break
            else:
                state["epoch"] += 1
                state["consumed"] = 0
        except elastic.MembershipChanged:  # ddprun
            pending = True
            model = opt = None  # ddprun: their shards on the lost rank are gone
            eg.reform()  # ddprun
    # The mean loss over the last step's batches of every rank, as a check; and
    # over the whole data set, steadier (to compare runs of different worlds).
    total = loss.detach().clone()
    dist.all_reduce(total, group=eg.group)
    with torch.no_grad():
        whole = torch.nn.functional.mse_loss(model(x), y).item()
    if eg.rank == 0:
        if not args.ckpt_dir:
            shutil.rmtree(ckpt_dir, ignore_errors=True)
        print(f"median step {statistics.median(step_s or [0.0]) * 1000:.1f} ms", flush=True)
        print(f"loss over the data set {whole:.9f}", flush=True)
        print(f"final loss {total.item() / eg.size:.9f}", flush=True)


if __name__ == "__main__":
    main()
