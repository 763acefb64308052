#!/usr/bin/env python3
"""A lost rank of a torch DDP trainer: ddprun's in-process re-form against restarts.

Runs python/examples/reform_ddp.py (MLP, SGD with momentum, 4 Gloo ranks on
CPU) with rank 2 SIGKILLing itself at step 40 of 120, REPS times per mode:

  reform          ddprun --on_failure=reform (ddprun.elastic)
  reform+preload  the same with --preload torch (the replacement starts warm)
  restart         ddprun --on_failure=restart
  restart+preload ddprun --on_failure=restart --preload torch
  torchrun        the torch 2.x venv's torchrun --max_restarts=3

and prints, per mode, the medians (and ranges) of: the kill to the
survivors' next completed step (the latest survivor; a restart has none, so
its restarted ranks' first step), the replacement's first step after the
kill, the steps done again, and how many runs ended right (exit 0 and the
final loss of a run without a kill, within 1e-6).

  scripts/bench/torch_reform_bench.py [--reps 5] [--python .venv/bin/python] [--modes reform,restart]
"""
import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.abspath(os.path.join(os.environ.get("BUILD_DIR", os.path.join(ROOT, "build")), "bin"))
EXAMPLE = os.path.join(ROOT, "python", "examples", "reform_ddp.py")
MODES = {
    "reform": ["--on_failure=reform"],
    "reform+preload": ["--on_failure=reform", "--preload", "torch"],
    "restart": ["--on_failure=restart"],
    "restart+preload": ["--on_failure=restart", "--preload", "torch"],
    "torchrun": None,
}
COST = re.compile(r"pid \d+ \((survivor|replacement|restarted)\): kill to next completed step ([0-9.]+) ms, "
                  r"steps lost (\d+)")
TIMEOUT_S = 300  # a run that takes longer counts as wrong
LOSS = re.compile(r"final loss ([0-9.]+)")


def launch(mode, python, args):
    common = ["--standalone", "--nproc_per_node=4", "--max_restarts=3"]
    if MODES[mode] is None:
        torchrun = os.path.join(os.path.dirname(python), "torchrun")
        return [torchrun, *common, "--monitor_interval=0.1", EXAMPLE, *args]
    return [os.path.join(BIN, "ddprun"), "--python", python, *common, *MODES[mode], EXAMPLE, *args]


def one(mode, python, args):
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"), PYTHONUNBUFFERED="1")
    with tempfile.TemporaryDirectory() as tmp:
        p = subprocess.Popen(launch(mode, python, args), cwd=tmp, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, start_new_session=True)
        try:
            out, _ = p.communicate(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)  # the launcher and its workers
            out = p.communicate()[0] + f"\n(killed after {TIMEOUT_S} s)"
    loss = LOSS.search(out)
    return p.returncode, (float(loss.group(1)) if loss else None), COST.findall(out), out


def fmt(values, unit=" ms"):
    if not values:
        return "-"
    return f"{statistics.median(values):.0f}{unit} ({min(values):.0f}-{max(values):.0f})"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--python", default=os.path.join(ROOT, ".venv", "bin", "python"))
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--log", help="append every run's output to this file")
    a = ap.parse_args()
    rc, base, _, out = one("reform", a.python, [])
    if rc != 0 or base is None:
        sys.exit(f"torch_reform_bench: the run without a kill failed (exit {rc}):\n{out}")
    print(f"no-kill final loss {base:.9f}; kill: rank 2 at step 40 of 120; {a.reps} runs per mode")
    print(f"{'mode':<16} {'survivors: kill -> next step':<30} {'replacement first step':<24} "
          f"{'steps lost':<11} right")
    for mode in a.modes.split(","):
        survivors, replacement, lost, right = [], [], [], 0
        for _ in range(a.reps):
            rc, loss, costs, out = one(mode, a.python, ["--kill-rank", "2", "--kill-step", "40"])
            if a.log:
                with open(a.log, "a") as f:
                    f.write(f"=== {mode} rc={rc}\n{out}\n")
            right += rc == 0 and loss is not None and abs(loss - base) <= 1e-6
            stayed = [float(ms) for who, ms, _ in costs if who in ("survivor", "restarted")]
            if stayed:
                survivors.append(max(stayed))
            replacement += [float(ms) for who, ms, _ in costs if who == "replacement"]
            lost += [int(n) for who, _, n in costs if who != "replacement"][:1]
        print(f"{mode:<16} {fmt(survivors):<30} {fmt(replacement):<24} {fmt(lost, ''):<11} "
              f"{right}/{a.reps}", flush=True)


if __name__ == "__main__":
    main()
