#!/usr/bin/env python3
"""Starts torch_peers_train.py's 4 ranks for a peer of ddprun.elastic, as its
docs have it run, for scripts/bench/torch_reform_bench.py:

  torchft_peers_launch.py torchft|nvrx [--tuned] [--restarts 3] -- TRAIN ARGS...

torchft: its lighthouse (the wheel's torchft_lighthouse, 127.0.0.1, a free
port; tuned: quorum tick 10 ms, heartbeat timeout 500 ms, else its defaults:
100 ms, 5 s; join timeout 60 s), and each rank a replica group of one
process with a store of its own (hosted here, as torchrun's agent would). nvrx: one
MASTER_PORT for all, RANK/WORLD_SIZE as torchrun sets them. Both: a rank that
dies is started again (PEER_RESTARTED=1) up to --restarts times, as torchft
expects of its launcher (torchx, or torchrun per replica group), without
touching the others. Output lines get `[rank N]:`. Exit 0 when every rank's
last process exited 0; everything it started is killed at the end.
"""
import argparse
import ctypes
import glob
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
TRAIN = os.path.join(HERE, "torch_peers_train.py")
WORLD = 4
PR_SET_PDEATHSIG = 1
# A rank still running this long after another ended 0 (a replacement that
# never got back in: nvrx) is killed, and counts as failed.
GRACE_S = 10.0


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pump(stream, prefix, lock):
    for line in stream:
        with lock:
            sys.stdout.write(prefix + line)
            sys.stdout.flush()


def die_with_parent():
    """In the child: SIGKILL when this launcher dies, even by SIGKILL."""
    ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def start(cmd, env, prefix, lock, threads):
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         start_new_session=True, preexec_fn=die_with_parent)
    t = threading.Thread(target=pump, args=(p.stdout, prefix, lock), daemon=True)
    t.start()
    threads.append(t)
    return p


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("peer", choices=["torchft", "nvrx"])
    ap.add_argument("--tuned", action="store_true")
    ap.add_argument("--restarts", type=int, default=3)
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    a = ap.parse_args(argv[:cut])
    train_args = argv[cut + 1:] + (["--tuned"] if a.tuned else [])
    lock, threads, others = threading.Lock(), [], []
    env = dict(os.environ, PEER_RUN_ID=uuid.uuid4().hex[:12], PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    if a.peer == "torchft":
        port = free_port()
        tick, beat = ("10", "500") if a.tuned else ("100", "5000")
        lighthouse = [sys.executable, os.path.join(os.path.dirname(sys.executable), "torchft_lighthouse")]
        found = [os.path.join(p, "bin", "torchft_lighthouse")
                 for p in env.get("PYTHONPATH", "").split(":") if p]
        lighthouse = [sys.executable, next((f for f in found if os.path.exists(f)), lighthouse[1])]
        others.append(start(lighthouse + ["--min_replicas", "1", "--bind", f"127.0.0.1:{port}",
                                          "--quorum_tick_ms", tick, "--heartbeat_timeout_ms", beat],
                         env, "[lighthouse]:", lock, threads))
        env.update(TORCHFT_LIGHTHOUSE=f"http://127.0.0.1:{port}", NUM_REPLICA_GROUPS=str(WORLD))
    else:
        env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), WORLD_SIZE=str(WORLD))

    stores = []
    if a.peer == "torchft":
        # Each replica group's store, as torchrun's agent would host it (kept across restarts).
        import datetime

        import torch.distributed as dist

        stores = [dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                                timeout=datetime.timedelta(seconds=60)) for _ in range(WORLD)]

    def rank_env(r, restarted):
        e = dict(env, RANK=str(r), LOCAL_RANK=str(r), PEER_SLOT=str(r))
        if a.peer == "torchft":
            e.update(REPLICA_GROUP_ID=str(r), RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                     MASTER_PORT=str(stores[r].port))
        if restarted:
            e["PEER_RESTARTED"] = "1"
        return e

    cmd = [sys.executable, TRAIN, a.peer] + train_args
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # ends in the finally below
    procs = {r: start(cmd, rank_env(r, False), f"[rank {r}]:", lock, threads) for r in range(WORLD)}
    restarts, rc, first_done = 0, {}, None
    try:
        while len(rc) < WORLD:
            time.sleep(0.005)
            if first_done is None and 0 in rc.values():
                first_done = time.monotonic()
            if first_done is not None and time.monotonic() - first_done > GRACE_S:
                for r in [r for r in procs if r not in rc]:
                    print(f"[launch]: rank {r} still running {GRACE_S:g} s after the first rank ended; "
                          "killed", flush=True)
                    os.killpg(procs[r].pid, signal.SIGKILL)
                    procs[r].wait()
                    rc[r] = procs[r].returncode
            for r, p in list(procs.items()):
                if r in rc or p.poll() is None:
                    continue
                if p.returncode != 0 and restarts < a.restarts:
                    restarts += 1
                    print(f"[launch]: rank {r} exited {p.returncode}; starting it again "
                          f"({restarts}/{a.restarts})", flush=True)
                    procs[r] = start(cmd, rank_env(r, True), f"[rank {r}]:", lock, threads)
                else:
                    rc[r] = p.returncode
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        for p in list(procs.values()) + others:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except OSError:
                pass
        for t in threads:
            t.join(timeout=2)
        # The ranks' kill and start marks (torch_peers_train.py's kill_file()).
        for f in glob.glob(os.path.join(tempfile.gettempdir(), f"reform_ddp_kill.{env['PEER_RUN_ID']}*")):
            os.unlink(f)
    bad = {r: c for r, c in rc.items() if c != 0}
    print(f"[launch]: exit codes {dict(sorted(rc.items()))}", flush=True)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
