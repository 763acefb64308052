#!/usr/bin/env python3
"""What re-form costs a C++ trainer when nothing fails: ddp-example-train-reform
under ddprun --on_failure=reform (an ElasticGroup: its blocking collectives go
through the group's op thread, and check() reads the generation once a step)
against --on_failure=restart (the same binary, a plain group: collectives on
the caller's thread, check() a no-op), interleaved, on one machine.

Prints per mode the median of rank 0's step_ms over the epochs after the first
(each run's first epoch includes the group's start), then the difference per
step and the ratio.

  scripts/bench/reform_step_cost.py [--reps 15] [--epochs 8] [--nproc 2] [--batch-size 32] [--hidden 64]
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("BUILD_DIR", os.path.join(ROOT, "build"))
BIN = os.path.join(BUILD, "bin")
STEP = re.compile(r"epoch (\d+)/\d+ loss \S+ step \d+ step_ms ([0-9.]+)")
FINAL = re.compile(r"final loss ([0-9.]+)")


def run(mode, args):
    argv = [os.path.join(BIN, "ddprun"), "--standalone", f"--nproc_per_node={args.nproc}",
            f"--on_failure={mode}", os.path.join(BIN, "ddp-example-train-reform"),
            "--epochs", str(args.epochs), "--batch-size", str(args.batch), "--hidden", str(args.hidden)]
    with tempfile.TemporaryDirectory() as tmp:
        argv += ["--checkpoint", os.path.join(tmp, "ckpt")]
        out = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
    if out.returncode != 0:
        sys.exit(f"reform_step_cost: {mode} run exited {out.returncode}:\n"
                 f"{out.stdout[-2000:]}{out.stderr[-2000:]}")
    steps = [float(ms) for epoch, ms in STEP.findall(out.stdout) if int(epoch) > 1]
    final = FINAL.search(out.stdout)
    if not steps or not final:
        sys.exit(f"reform_step_cost: no step_ms or final loss in the {mode} run's output:\n"
                 f"{out.stdout[-2000:]}")
    return statistics.median(steps), final.group(1)


def positive(text):
    """argparse type: a whole number of at least 1."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"'{text}' is not a whole number of at least 1")
    return int(text)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reps", type=positive, default=15)
    p.add_argument("--epochs", type=positive, default=8, help="at least 2: the first is not counted")
    p.add_argument("--nproc", type=positive, default=2)
    p.add_argument("--batch-size", dest="batch", type=positive, default=32)
    p.add_argument("--hidden", type=positive, default=64)
    args = p.parse_args()
    if args.epochs < 2:
        p.error("--epochs: give at least 2 (the first epoch, with the group's start, is not counted)")
    for name in ("ddprun", "ddp-example-train-reform"):
        if not os.access(os.path.join(BIN, name), os.X_OK):
            sys.exit(f"reform_step_cost: {os.path.join(BIN, name)} not found: build first (scripts/build.sh) "
                     "or set BUILD_DIR")
    load = os.getloadavg()[0]
    print(f"# reform_step_cost: {args.nproc} Gloo workers, --epochs {args.epochs} --batch-size {args.batch} "
          f"--hidden {args.hidden}, {args.reps} reps interleaved, load {load:.1f} at start")
    per_mode = {"reform": [], "restart": []}
    losses = set()
    for rep in range(args.reps):
        for mode in ("reform", "restart") if rep % 2 == 0 else ("restart", "reform"):
            ms, loss = run(mode, args)
            per_mode[mode].append(ms)
            losses.add(loss)
            print(f"rep {rep + 1} {mode} step_ms {ms:.3f} final loss {loss}", flush=True)
    reform, restart = (statistics.median(per_mode[m]) for m in ("reform", "restart"))
    print(f"median step_ms: reform {reform:.3f} (min {min(per_mode['reform']):.3f}), "
          f"restart {restart:.3f} (min {min(per_mode['restart']):.3f})")
    print(f"re-form's cost per step: {(reform - restart) * 1000:+.0f} us ({reform / restart:.3f}x); "
          f"final losses {'equal' if len(losses) == 1 else 'differ: ' + ', '.join(sorted(losses))}; "
          f"load {os.getloadavg()[0]:.1f} at end")


if __name__ == "__main__":
    main()
