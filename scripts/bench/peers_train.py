"""Worker for scripts/bench/peers.sh: the same torch script under ddprun,
torchrun (torch 2.x) and NVIDIA's ft_launcher (nvidia-resiliency-ext).

    peers_train.py MODE EVENTS [ARG]

Every rank appends one line per event to the file EVENTS (O_APPEND, one
write each): `<event> <wall ns> rank=R world=W restart=K pid=P [k=v...]`;
files, not stdout, because the three launchers treat the workers' output
differently. Wall clock (time.time_ns) so the benchmark, in another
process, can subtract its own timestamps. gloo, CPU.

  first_step  the toy DDP job of tests/integration/torch/toy_ddp.py;
              `first_step` once the first training step (forward, backward with
              the gradient all-reduce, optimizer step) has finished; then two
              more steps and a clean exit.
  fail        attempt 0: join, all-reduce, then rank 1 writes `fail` and exits 1
              (os._exit: no interpreter shutdown in the measure); the others
              wait to be stopped. Attempt >= 1: `first_collective` once the
              first all-reduce has returned, exit 0.
  nodekill    ARG = the full world size. Join, all-reduce, `collective`; in the
              full world, all-reduce every 50 ms until something fails (a
              training loop); in a smaller world, `reformed` and exit 0.
  hang        ARG = filetimer | ddprun | ft, the watchdog the worker reports to.
              A step is 20 ms of sleep, reported as a
              FileTimer scope of HANG_TIMEOUT s (torch's FileTimerClient on
              TORCHELASTIC_TIMER_FILE), as a heartbeat to ddprun
              (worker_sdk/examples/ddp_liveness.py), or as a heartbeat to
              ft_launcher's rank monitor (RankMonitorClient.send_heartbeat).
              In step 5 rank 1 writes `hang` just after its last report and
              sleeps; rank 0 goes on (steps are local: no collective, so only
              rank 1 stops reporting). Rank 0 also times
              2000 report calls first (100 for FileTimer), `report_cost
              ns_per_call=`.
"""
import gc
import os
import sys
import time

MODE, EVENTS = sys.argv[1], sys.argv[2]
ARG = sys.argv[3] if len(sys.argv) > 3 else ""
RANK = int(os.environ.get("RANK", "0"))
RESTART = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))


def event(name, **fields):
    extra = "".join(" %s=%s" % kv for kv in fields.items())
    line = "%s %d rank=%d world=%s restart=%d pid=%d%s\n" % (
        name, time.time_ns(), RANK, os.environ.get("WORLD_SIZE", "?"), RESTART, os.getpid(), extra)
    fd = os.open(EVENTS, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


event("start")

import torch  # noqa: E402  (after `start` on purpose: the import is part of the measure)
import torch.distributed as dist  # noqa: E402

event("imported")


def source_dir(*parts):
    """A folder of this source tree, put first on sys.path (no __pycache__ left in it)."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", *parts))
    sys.dont_write_bytecode = True


def first_step():
    source_dir("tests", "integration", "torch")
    import toy_ddp

    dist.init_process_group("gloo", init_method="env://")
    event("joined")
    data = toy_ddp.dataset()
    model, opt = toy_ddp.model_and_optimizer()
    sampler, loader = toy_ddp.sharded_loader(data, RANK, dist.get_world_size())
    sampler.set_epoch(0)
    for step, (xb, yb) in enumerate(loader):
        toy_ddp.train_step(model, opt, xb, yb)
        if step == 0:
            event("first_step")
        if step == 2:
            break
    # torch 2.x can abort at exit ("terminate called without an active exception") when a DDP model
    # outlives its process group (DDP's reducer holds a reference cycle): free the model before
    # destroying the group.
    del model, opt
    gc.collect()
    dist.destroy_process_group()


def fail():
    dist.init_process_group("gloo", init_method="env://")
    dist.all_reduce(torch.ones(1))
    if RESTART == 0:
        if RANK == 1:
            event("fail")
            os._exit(1)
        time.sleep(300)  # stopped by the launcher meanwhile
        os._exit(2)
    event("first_collective")
    dist.destroy_process_group()


def nodekill():
    full = int(ARG)
    dist.init_process_group("gloo", init_method="env://")
    world = dist.get_world_size()
    dist.all_reduce(torch.ones(1))
    event("collective")
    if world < full:
        event("reformed")
        dist.destroy_process_group()
        return
    while True:  # training steps; a dead peer makes this raise
        time.sleep(0.05)
        dist.all_reduce(torch.ones(1))


def hang():
    import contextlib

    timeout = float(os.environ.get("HANG_TIMEOUT", "2"))
    scope = None  # a context manager per step (FileTimer), else `report` once per step
    if ARG == "filetimer":
        from torch.distributed.elastic import timer
        timer.configure(timer.FileTimerClient(os.environ["TORCHELASTIC_TIMER_FILE"]))

        def scope():
            return timer.expires(after=timeout, scope="step")

        def report():  # what one step costs: arm and release a scope (two pipe writes)
            with scope():
                pass
    elif ARG == "ddprun":
        source_dir("worker_sdk", "examples")
        import ddp_liveness
        report = ddp_liveness.heartbeat
    elif ARG == "ft":
        from nvidia_resiliency_ext.fault_tolerance import RankMonitorClient
        client = RankMonitorClient()
        client.init_workload_monitoring()
        report = client.send_heartbeat
    else:
        raise SystemExit("peers_train.py hang: unknown watchdog %r" % ARG)

    dist.init_process_group("gloo", init_method="env://")
    if RANK == 0:
        # FileTimer: 100 pairs, 200 writes (~24 KiB): the client writes O_NONBLOCK and
        # raises BlockingIOError once the 64 KiB pipe is full, which a burst of a few
        # hundred scopes does under torchrun (its server reads every 0.1 s).
        n = 100 if scope else 2000
        t0 = time.perf_counter_ns()
        for _ in range(n):
            report()
        event("report_cost", ns_per_call=(time.perf_counter_ns() - t0) // n)
    dist.barrier()
    # No collective in the steps: a rank blocked in one on the hung rank stops
    # reporting too, and a watchdog may then kill it first (seen: with an
    # all-reduce per step, ddprun's and ft_launcher's heartbeat watchdogs killed
    # rank 0 in most runs, the stopped group then taking rank 1 along). Here only
    # rank 1 stops, so the figure is the watchdog's own latency.
    for step in range(3000):
        with scope() if scope else contextlib.nullcontext():
            if not scope:
                report()
            if step == 5 and RANK == 1:
                event("hang", step=step)
                time.sleep(3600)  # killed by the launcher's watchdog, or never
            time.sleep(0.02)
    event("not_killed")


{"first_step": first_step, "fail": fail, "nodekill": nodekill, "hang": hang}[MODE]()
