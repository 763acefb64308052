#!/usr/bin/env python3
"""A lost node under ddprun --on_failure=reform: kill -9 of one of two agents
(2 workers each, c10d on a ddp-rendezvousd), with a hot spare waiting or none,
for the C++ trainer (ddp-example-train-reform) and the torch one
(python/examples/reform_ddp.py). Prints, per case, the median time from the
kill to the survivors' next completed step, against the goal of the fence
margin (keep_alive_interval / 2) + 200 ms + one step (docs/reform.md,
"A lost node").

  scripts/bench/node_loss_bench.py [--reps 5] [--keep-alive-interval 5] [--cases cpp-spare,...]
"""
import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("BUILD_DIR", os.path.join(ROOT, "build"))
BIN = os.path.join(BUILD, "bin")
VENV_PY = os.path.join(ROOT, ".venv", "bin", "python")


def wait_for(pred, timeout, what):
    end = time.time() + timeout
    while time.time() < end:
        if pred():
            return
        time.sleep(0.05)
    raise TimeoutError(what)


def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


class Job:
    def __init__(self, case, keep_alive, step_ms, tmp):
        self.case, self.tmp = case, tmp
        self.torch = case.startswith("torch")
        port_file = os.path.join(tmp, "port")
        daemon = [os.path.join(BIN, "ddp-rendezvousd"), "--host", "127.0.0.1", "--port", "0",
                  "--port-file", port_file, "--log-level", "warn"]
        self.daemon = subprocess.Popen(daemon, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(lambda: read(port_file).strip(), 10, "daemon port")
        self.endpoint = "127.0.0.1:" + read(port_file).strip()
        self.keep_alive, self.step_ms = keep_alive, step_ms
        self.procs = {}

    def start(self, name):
        argv = [os.path.join(BIN, "ddprun"), "--nnodes=1:2", "--nproc_per_node=2", "--rdzv_backend=c10d",
                "--rdzv_endpoint=" + self.endpoint, "--rdzv_id=job",
                f"--rdzv_conf=join_timeout=120,last_call_timeout=60,keep_alive_interval={self.keep_alive}",
                "--local_addr=" + name, "--on_failure=reform", "--max_restarts=0"]
        if self.torch:
            argv += ["--python", VENV_PY, "--preload", "torch",
                     os.path.join(ROOT, "python/examples/reform_ddp.py"),
                     "--steps", "100000", "--step-sleep-ms", str(self.step_ms)]
        else:
            argv += ["--no_python", os.path.join(BIN, "ddp-example-train-reform"), "--epochs", "1000",
                     "--dataset-size", "2048", "--step-sleep-ms", str(self.step_ms),
                     "--checkpoint", os.path.join(self.tmp, "ckpt")]
        out = open(os.path.join(self.tmp, name + ".out"), "w")
        env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"), PYTHONUNBUFFERED="1",
                   DDP_LOG_LEVEL="info")
        env.pop("OMP_NUM_THREADS", None)
        self.procs[name] = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env,
                                            start_new_session=True)

    def out(self, name):
        # ddprun wraps its log lines at a terminal's width: one space for any run of them.
        return re.sub(r"\s+", " ", read(os.path.join(self.tmp, name + ".out")))

    def started(self, names):
        marker = ": started, rank" if self.torch else " start: rank"
        return sum(self.out(n).count(marker) for n in names)

    def stop(self):
        for p in self.procs.values():
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()
        self.daemon.kill()
        self.daemon.wait()


def mark_kill(job):
    """Leaves the kill's time where the trainers' survivors look for it."""
    now = time.time_ns()
    if job.torch:
        with open(os.path.join(tempfile.gettempdir(), "reform_ddp_kill.job"), "w") as f:
            f.write(f"{now / 1e9!r} 0")
    else:
        subprocess.run([os.path.join(BIN, "ddp-store"), "--endpoint", job.endpoint, "set",
                        "ddp-example-train-reform/job/killed", f"{now} 0 0 0"], check=True,
                       stdout=subprocess.DEVNULL)


def one(case, keep_alive, step_ms):
    with tempfile.TemporaryDirectory() as tmp:
        job = Job(case, keep_alive, step_ms, tmp)
        try:
            job.start("nodea")
            job.start("nodeb")
            wait_for(lambda: job.started(["nodea", "nodeb"]) == 4, 180, "4 ranks started")
            if case.endswith("spare"):
                job.start("nodes")
                wait_for(lambda: "hot spare: round 0 runs" in job.out("nodes"), 60, "spare waiting")
                if job.torch:  # a spare that waits has its torch imported: only forks are left
                    wait_for(lambda: "preload zygote ready" in job.out("nodes"), 120, "spare's zygote")
            time.sleep(1.0)
            mark_kill(job)
            job.procs["nodeb"].send_signal(signal.SIGKILL)
            pattern = (r"\(survivor\): kill to next completed step ([0-9.]+) ms" if job.torch
                       else r"rank killed -> next step ([0-9.]+) ms")
            text = lambda: job.out("nodea") + job.out("nodes")  # noqa: E731
            wait_for(lambda: re.search(pattern, text()), 60, "the survivors' next step")
            return float(re.search(pattern, text()).group(1))
        except TimeoutError:
            if os.environ.get("NODE_LOSS_BENCH_DEBUG"):
                for n in job.procs:
                    print(f"--- {n}:\n{job.out(n)[-3000:]}", file=sys.stderr)
            raise
        finally:
            job.stop()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--keep-alive-interval", type=float, default=5.0, help="seconds (the rdzv_conf key)")
    p.add_argument("--step-ms", type=float, default=20.0, help="each step sleeps this long")
    p.add_argument("--cases", default="cpp-spare,cpp-shrink,torch-spare,torch-shrink")
    args = p.parse_args()
    margin_ms = args.keep_alive_interval * 1000 / 2
    goal = margin_ms + 200 + args.step_ms
    print(f"kill -9 of 1 of 2 agents (2 workers each); keep_alive_interval={args.keep_alive_interval}s "
          f"(fence margin {margin_ms:.0f} ms), steps of >= {args.step_ms:.0f} ms; "
          f"load {os.getloadavg()[0]:.1f}; goal: margin + 200 ms + a step = {goal:.0f} ms")
    print(f"{'case':<14} {'median ms':>10} {'min':>8} {'max':>8}  runs right  vs goal")
    for case in args.cases.split(","):
        times = []
        for _ in range(args.reps):
            try:
                times.append(one(case, args.keep_alive_interval, args.step_ms))
            except (TimeoutError, subprocess.CalledProcessError) as e:
                print(f"  {case}: {e}", file=sys.stderr)
        if not times:
            print(f"{case:<14} {'-':>10} {'-':>8} {'-':>8}  0/{args.reps}")
            continue
        med = statistics.median(times)
        print(f"{case:<14} {med:>10.0f} {min(times):>8.0f} {max(times):>8.0f}  {len(times)}/{args.reps}"
              f"        {med / goal:.2f}x", flush=True)


if __name__ == "__main__":
    main()
