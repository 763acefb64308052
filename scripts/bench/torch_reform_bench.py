#!/usr/bin/env python3
"""A lost rank of a torch DDP trainer: ddprun's in-process re-form against restarts.

Runs python/examples/reform_ddp.py (MLP, SGD with momentum, 4 Gloo ranks on
CPU) with rank 2 SIGKILLing itself at step 40 of 120, REPS times per mode:

  reform          ddprun --on_failure=reform (ddprun.elastic)
  reform+preload  the same with --preload torch (the replacement starts warm)
  restart         ddprun --on_failure=restart
  restart+preload ddprun --on_failure=restart --preload torch
  reform+preload-dcp, restart+preload-dcp
                  the same with --preload torch,torch.distributed.checkpoint,
                  torch.distributed.fsdp (for --example fsdp)
  torchrun        the torch 2.x venv's torchrun --max_restarts=3
  torchft         torchft 0.2 (torch_peers_train.py: every rank a replica
                  group; lighthouse on 127.0.0.1 with its defaults)
  torchft-tuned   the same, quorum tick 10 ms, heartbeat timeout 500 ms
  nvrx            nvidia-resiliency-ext 0.4.1 inprocess.Wrapper, its defaults
  nvrx-tuned      the same, 100 ms ticks, 1 s heartbeat and Gloo timeout
  (the peers run with torch_peers_launch.py, which starts a killed rank
  again as their launchers would; they are installed on first use into
  .peers with scripts/bench/requirements-torch-peers.txt, --no-deps, beside
  the venv's torch)

and prints, per mode, the medians (and ranges) of: the kill to the
survivors' next completed step (the latest survivor; a restart has none, so
its restarted ranks' first step), the replacement's first step after the
kill, the steps done again, and how many runs ended right (exit 0 and the
final loss of a run without a kill, within 1e-6).

  scripts/bench/torch_reform_bench.py [--reps 5] [--python .venv/bin/python] [--modes reform,restart]

--example fsdp runs python/examples/reform_fsdp.py instead (FSDP2, AdamW,
a checkpoint every 20 steps), rank 2 killed at step 50 (10 steps done
again); right is then the no-kill loss exactly (ddprun's modes only).
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
EXAMPLES = {  # the script, its kill step, the tolerance on the final loss
    "ddp": (os.path.join(ROOT, "python", "examples", "reform_ddp.py"), 40, 1e-6),
    "fsdp": (os.path.join(ROOT, "python", "examples", "reform_fsdp.py"), 50, 0.0),
}
EXAMPLE = EXAMPLES["ddp"][0]
MODES = {
    "reform": ["--on_failure=reform"],
    "reform+preload": ["--on_failure=reform", "--preload", "torch"],
    "restart": ["--on_failure=restart"],
    "restart+preload": ["--on_failure=restart", "--preload", "torch"],
    # --example fsdp: the zygote imports what the first checkpoint load would
    "reform+preload-dcp": ["--on_failure=reform", "--preload",
                           "torch,torch.distributed.checkpoint,torch.distributed.fsdp"],
    "restart+preload-dcp": ["--on_failure=restart", "--preload",
                            "torch,torch.distributed.checkpoint,torch.distributed.fsdp"],
    "torchrun": None,
    "torchft": ["torchft"],
    "torchft-tuned": ["torchft", "--tuned"],
    "nvrx": ["nvrx"],
    "nvrx-tuned": ["nvrx", "--tuned"],
}
PEERS = os.path.join(ROOT, ".peers")
PEERS_REQUIREMENTS = os.path.join(ROOT, "scripts", "bench", "requirements-torch-peers.txt")
PEERS_LAUNCH = os.path.join(ROOT, "scripts", "bench", "torch_peers_launch.py")
PEERS_TRAIN = os.path.join(ROOT, "scripts", "bench", "torch_peers_train.py")
PEER_DONE = re.compile(r"\[rank (\d+)\]:rank \d+ pid \d+: done, step \d+, loss ([0-9.]+)")
COST = re.compile(r"pid \d+ \((survivor|replacement|restarted)\): kill to next completed step ([0-9.]+) ms, "
                  r"steps lost (\d+)")
TIMEOUT_S = 300  # a run that takes longer counts as wrong
LOSS = re.compile(r"final loss ([0-9.]+)")


def ensure_peers(python):
    """The peers' packages in .peers, pinned, installed once (not into the venv)."""
    pins = dict(line.strip().split("==") for line in open(PEERS_REQUIREMENTS)
                if "==" in line and not line.startswith("#"))
    want = [f"{name.replace('-', '_')}-{pins[name]}.dist-info"
            for name in ("torchft", "nvidia-resiliency-ext")]
    if all(os.path.isdir(os.path.join(PEERS, w)) for w in want):
        return
    print(f"torch_reform_bench: installing the peers into {PEERS} ({PEERS_REQUIREMENTS})", flush=True)
    subprocess.run([python, "-m", "pip", "install", "--disable-pip-version-check", "-q", "--no-deps",
                    "--target", PEERS, "-r", PEERS_REQUIREMENTS], check=True)


def user_lines(path, marker):
    """Lines of code whose comment carries `marker` (`# ddprun`, `# torchft`, `# nvrx`)."""
    return sum(1 for line in open(path)
               if marker in line and line.split("#")[0].strip() and f'"{marker}' not in line)


def launch(mode, python, args):
    common = ["--standalone", "--nproc_per_node=4", "--max_restarts=3"]
    if mode.startswith(("torchft", "nvrx")):
        return [python, PEERS_LAUNCH, *MODES[mode], "--", *args]
    if MODES[mode] is None:
        torchrun = os.path.join(os.path.dirname(python), "torchrun")
        return [torchrun, *common, "--monitor_interval=0.1", EXAMPLE, *args]
    return [os.path.join(BIN, "ddprun"), "--python", python, *common, *MODES[mode], EXAMPLE, *args]


def one(mode, python, args):
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"), PYTHONUNBUFFERED="1")
    if mode.startswith(("torchft", "nvrx")):
        env["PYTHONPATH"] = PEERS
    with tempfile.TemporaryDirectory() as tmp:
        p = subprocess.Popen(launch(mode, python, args), cwd=tmp, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, start_new_session=True)
        try:
            out, _ = p.communicate(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGTERM)  # torch_peers_launch.py kills what it started on it
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
            os.killpg(p.pid, signal.SIGKILL)  # the launcher and its workers
            out = p.communicate()[0] + f"\n(killed after {TIMEOUT_S} s)"
    loss = LOSS.search(out)
    loss = float(loss.group(1)) if loss else None
    done = dict(PEER_DONE.findall(out))  # torchft: the replicas' last losses, by rank (the last process's)
    if mode.startswith("torchft") and len(done) == 4:
        loss = sum(float(v) for v in done.values()) / 4
    return p.returncode, loss, COST.findall(out), out


def fmt(values, unit=" ms"):
    if not values:
        return "-"
    return f"{statistics.median(values):.0f}{unit} ({min(values):.0f}-{max(values):.0f})"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--python", default=os.path.join(ROOT, ".venv", "bin", "python"))
    ap.add_argument("--modes", help="default: every mode but the -dcp ones (--example fsdp: ddprun's only)")
    ap.add_argument("--log", help="append every run's output to this file")
    ap.add_argument("--example", choices=sorted(EXAMPLES), default="ddp")
    a = ap.parse_args()
    global EXAMPLE
    EXAMPLE, kill_step, tolerance = EXAMPLES[a.example]
    if not a.modes:
        ours = [m for m in MODES if m.startswith(("reform", "restart"))]
        a.modes = ",".join(ours if a.example == "fsdp" else [m for m in MODES if "-dcp" not in m])
    rc, base, _, out = one("reform", a.python, [])
    if rc != 0 or base is None:
        sys.exit(f"torch_reform_bench: the run without a kill failed (exit {rc}):\n{out}")
    print(f"{os.path.basename(EXAMPLE)}: no-kill final loss {base:.9f}; kill: rank 2 at step {kill_step} "
          f"of 120; {a.reps} runs per mode")
    print(f"lines of user code: ddprun.elastic {user_lines(EXAMPLE, '# ddprun')}, "
          f"torchft {user_lines(PEERS_TRAIN, '# torchft')}, nvrx {user_lines(PEERS_TRAIN, '# nvrx')}")
    if any(m.startswith(("torchft", "nvrx")) for m in a.modes.split(",")):
        ensure_peers(a.python)
    print(f"{'mode':<19} {'survivors: kill -> next step':<30} {'replacement first step':<24} "
          f"{'steps lost':<11} right  final loss - no-kill")
    for mode in a.modes.split(","):
        survivors, replacement, lost, right, off = [], [], [], 0, []
        for _ in range(a.reps):
            rc, loss, costs, out = one(mode, a.python, ["--kill-rank", "2", "--kill-step", str(kill_step)])
            if a.log:
                with open(a.log, "a") as f:
                    f.write(f"=== {mode} rc={rc}\n{out}\n")
            right += rc == 0 and loss is not None and abs(loss - base) <= tolerance
            if loss is not None:
                off.append(loss - base)
            stayed = [float(ms) for who, ms, _ in costs if who in ("survivor", "restarted")]
            if stayed:
                survivors.append(max(stayed))
            replacement += [float(ms) for who, ms, _ in costs if who == "replacement"]
            lost += [int(n) for who, _, n in costs if who != "replacement"][:1]
        dev = f"{statistics.median(off):+.2e}" if off else "-"
        print(f"{mode:<19} {fmt(survivors):<30} {fmt(replacement):<24} {fmt(lost, ''):<11} "
              f"{right}/{a.reps}  loss {dev}", flush=True)


if __name__ == "__main__":
    main()
