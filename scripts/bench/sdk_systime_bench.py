#!/usr/bin/env python3
"""User and system CPU time per training step: the worker SDK's example
trainer against the same model in torch (docs/performance.md, "Worker SDK:
CPU per step against torch's Gloo").

    /work/main/.venv/bin/python scripts/bench/sdk_systime_bench.py [--runs N] [--epochs A,B] [--nproc P]

Each variant trains under `ddprun --standalone --nproc_per_node=P`, every
worker under /usr/bin/time (its own user and system seconds), twice: for A
and for B epochs of 64 steps (8192 samples, 32 per rank per step, with P=4).
The figure is the difference of the two runs' CPU, summed over the workers,
divided by the extra steps and by P: the cost of one more step of one
worker, without start-up (torch's import, the group's connect). Variants,
run interleaved, medians of N rounds:

  sdk    $BUILD_DIR/bin/ddp-example-train (Gloo, the Reducer, 4,417 floats)
  sdk-reform  $BUILD_DIR/bin/ddp-example-train-reform under --on_failure=reform
         (the same model on an ElasticGroup, one store read per step)
  old    $OLD_BUILD_DIR/bin/ddp-example-train, when OLD_BUILD_DIR is set
         (and old-reform, when that build has the re-form trainer)
  torch  scripts/bench/sdk_systime_train.py with this interpreter
         (torch DDP over torch's own Gloo, same sizes)

The interpreter running this script must import torch (torch 2.15 lives in
/work/main/.venv). Exit 2 for a usage or setup mistake, 1 for a failed run.
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BIN = os.path.join(os.environ.get("BUILD_DIR", os.path.join(ROOT, "build")), "bin")
NAME = "sdk_systime_bench.py"
# Each worker under /usr/bin/time, which writes "user sys" to PREFIX.LOCAL_RANK.
WRAP = ["/bin/sh", "-c", 'exec /usr/bin/time -f "%U %S" -o "$0.$LOCAL_RANK" "$@"']


def usage_error(msg):
    print("%s: %s" % (NAME, msg), file=sys.stderr)
    sys.exit(2)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=3, help="interleaved rounds (default 3)")
    p.add_argument("--epochs", default="2,8", help="the short and the long run's epochs (default 2,8)")
    p.add_argument("--nproc", type=int, default=4, help="workers (default 4)")
    a = p.parse_args()
    if a.runs < 1:
        usage_error("--runs must be a positive integer, not %d" % a.runs)
    if a.nproc < 2:
        usage_error("--nproc must be at least 2, not %d" % a.nproc)
    try:
        short, long_ = (int(e) for e in a.epochs.split(","))
    except ValueError:
        usage_error("--epochs must be two integers A,B with 1 <= A < B, not '%s'" % a.epochs)
    if not 1 <= short < long_:
        usage_error("--epochs must be two integers A,B with 1 <= A < B, not '%s'" % a.epochs)
    a.short, a.long = short, long_
    return a


def variants(tmp):
    """name -> (ddprun and its flags, epochs -> the worker's command)."""
    out = {}
    for name, bindir in (("sdk", BIN), ("old", os.environ.get("OLD_BUILD_DIR"))):
        if bindir is None:
            continue
        if name == "old":
            bindir = os.path.join(bindir, "bin")
        for b in ("ddprun", "ddp-example-train"):
            if not os.access(os.path.join(bindir, b), os.X_OK):
                usage_error("%s not found; run scripts/build.sh (or set %s)" %
                            (os.path.join(bindir, b), "OLD_BUILD_DIR" if name == "old" else "BUILD_DIR"))
        ddprun = os.path.join(bindir, "ddprun")
        for suffix, trainer, flags in (("", "ddp-example-train", []),
                                       ("-reform", "ddp-example-train-reform", ["--on_failure=reform"])):
            path = os.path.join(bindir, trainer)
            if os.access(path, os.X_OK):
                out[name + suffix] = ([ddprun] + flags, lambda e, p=path: [
                    p, "--epochs", str(e), "--checkpoint", os.path.join(tmp, "ckpt")])
    if subprocess.run([sys.executable, "-c", "import torch"], capture_output=True).returncode != 0:
        usage_error("%s cannot import torch (run this with an interpreter that has torch)" % sys.executable)
    trainer = os.path.join(HERE, "sdk_systime_train.py")
    out["torch"] = ([os.path.join(BIN, "ddprun")], lambda e: [sys.executable, trainer, "--epochs", str(e)])
    return out


def run_once(tmp, ddprun, cmd, nproc):
    """One training run: (user s, sys s) summed over the workers, and wall s."""
    prefix = os.path.join(tmp, "rusage")
    for r in range(nproc):
        if os.path.exists("%s.%d" % (prefix, r)):
            os.unlink("%s.%d" % (prefix, r))
    argv = ddprun + ["--standalone", "--nproc_per_node=%d" % nproc, "--no_python"] + WRAP + [prefix] + cmd
    start = time.monotonic()
    res = subprocess.run(argv, capture_output=True, text=True)
    wall = time.monotonic() - start
    if res.returncode != 0:
        print("%s: a run failed (exit %d): %s" % (NAME, res.returncode, " ".join(cmd)), file=sys.stderr)
        print(res.stdout + res.stderr, file=sys.stderr)
        sys.exit(1)
    user = sys_ = 0.0
    for r in range(nproc):
        with open("%s.%d" % (prefix, r)) as f:
            u, s = f.read().split()[-2:]
        user, sys_ = user + float(u), sys_ + float(s)
    return user, sys_, wall


def main():
    a = parse_args()
    steps_per_epoch = -(-(8192 // a.nproc) // 32)  # each rank's shard in batches of 32, the last one partial
    extra_steps = (a.long - a.short) * steps_per_epoch
    with tempfile.TemporaryDirectory(prefix="sdk-systime-") as tmp:
        vs = variants(tmp)
        print("machine: %d cores, load %.2f; %d workers, %d steps per epoch, epochs %d and %d, %d rounds" %
              (os.cpu_count(), os.getloadavg()[0], a.nproc, steps_per_epoch, a.short, a.long, a.runs))
        per_step = {name: [] for name in vs}  # (user us, sys us) per step per worker
        whole = {name: [] for name in vs}  # the long run: (user s, sys s, wall s)
        for _ in range(a.runs):
            for name, (ddprun, cmd) in vs.items():
                u0, s0, _w = run_once(tmp, ddprun, cmd(a.short), a.nproc)
                u1, s1, w1 = run_once(tmp, ddprun, cmd(a.long), a.nproc)
                scale = 1e6 / extra_steps / a.nproc
                per_step[name].append(((u1 - u0) * scale, (s1 - s0) * scale))
                whole[name].append((u1, s1, w1))
    med = {n: (statistics.median(v[0] for v in per_step[n]), statistics.median(v[1] for v in per_step[n]))
           for n in vs}
    torch_total = sum(med["torch"])
    print("\nper step per worker (medians; the long run minus the short one):")
    print("| variant | user µs/step | sys µs/step | sys/user | CPU vs torch"
          " | long run: user s, sys s, wall s |")
    print("|---|---:|---:|---:|---:|---|")
    for n in vs:
        u, s = med[n]
        w = [statistics.median(x[i] for x in whole[n]) for i in range(3)]
        print("| %s | %.0f | %.0f | %.2f | %.2f× | %.2f, %.2f, %.2f |" %
              (n, u, s, s / u if u > 0 else float("nan"), (u + s) / torch_total, w[0], w[1], w[2]))
    print("\nrounds (user µs, sys µs per step):")
    for n in vs:
        print("  %-6s %s" % (n, "  ".join("%.0f/%.0f" % v for v in per_step[n])))
    print("load at the end: %.2f" % os.getloadavg()[0])


if __name__ == "__main__":
    main()
