#!/usr/bin/python3
"""Elastic rendezvous benchmarks of ddprun (scripts/bench/elastic.sh runs it).

  fanout    kill -9 one worker on node A; time until the last worker of node B
            is gone (/proc polled every 0.2 ms)
  deadnode  kill -9 agent A; time until node B's workers are gone, with the
            default rdzv_conf (keep-alive 5 s x 3) and a short one (0.2 s x 3)
  restart   --nnodes=2:3 with last_call_timeout=5: kill -9 one worker on A;
            time until both A and B run replacement workers (the restart
            round closes without the last call)
  reform    --nnodes=2:4, three agents, last_call_timeout=5: kill -9 agent C;
            time until A and B both run workers of the world of two
  e2e       2 agents x 2 workers, launch -> every worker started, and launch ->
            every worker through a torch TCPStore barrier (MASTER_ADDR/PORT),
            ddprun --rdzv_backend=c10d beside torchrun's c10d backend

Agents and workers are real: ddprun, ddp-rendezvousd, fake_worker from
$BUILD_DIR/bin. Needs Debian's python3-torch for e2e's worker and torchrun.
"""
import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.join(os.environ.get("BUILD_DIR", os.path.join(ROOT, "build")), "bin")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def gone(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (FileNotFoundError, ProcessLookupError):
        return True


def wait_for(cond, timeout, step=0.0002):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(step)
    return False


def started_pids(path):
    try:
        with open(path) as f:
            return [int(line.split()[0]) for line in f if " start " in line]
    except FileNotFoundError:
        return []


class Job:
    """A ddp-rendezvousd and two ddprun agents of fake_workers that hang."""

    def __init__(self, work, conf, nproc=2, max_restarts=0, nnodes="2:2", names=("a", "b")):
        self.work = work
        portfile = os.path.join(work, "port")
        self.daemon = subprocess.Popen(
            [
                os.path.join(BIN, "ddp-rendezvousd"),
                "--host",
                "127.0.0.1",
                "--port",
                "0",
                "--port-file",
                portfile,
                "--log-level",
                "warn",
            ]
        )
        wait_for(lambda: os.path.exists(portfile) and open(portfile).read().strip(), 10, 0.001)
        endpoint = "127.0.0.1:" + open(portfile).read().strip()
        self.agents, self.pidfiles = [], []
        for name in names:
            pidfile = os.path.join(work, name + ".pids")
            env = dict(os.environ, FAKE_HANG="1", FAKE_PID_FILE=pidfile)
            argv = [os.path.join(BIN, "ddprun"), "--nnodes=" + nnodes, "--nproc_per_node=%d" % nproc,
                    "--rdzv_backend=c10d", "--rdzv_endpoint=" + endpoint, "--rdzv_id=bench",
                    "--max_restarts=%d" % max_restarts, "--log_level=warn"]
            if conf:
                argv.append("--rdzv_conf=" + conf)
            argv += ["--event_log", os.path.join(work, name + ".events")]
            argv.append(os.path.join(BIN, "fake_worker"))
            self.agents.append(subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL,
                                                stderr=open(os.path.join(work, name + ".err"), "w")))
            self.pidfiles.append(pidfile)
        if not wait_for(lambda: all(len(started_pids(p)) == nproc for p in self.pidfiles), 60, 0.005):
            raise RuntimeError("workers did not start; see " + work)

    def startup_after(self, i, t0_wall):
        """The `startup` event log lines (docs/agent.md, "Startup times") of agent i written after t0_wall."""
        out = []
        path = os.path.join(self.work, "%s.events" % "abc"[i])
        if os.path.exists(path):
            for line in open(path):
                e = json.loads(line)
                if e["event"] == "startup" and e["ts"] >= t0_wall:
                    out.append(e)
        return out

    def workers(self, i):
        return started_pids(self.pidfiles[i])

    def close(self):
        for p in self.agents:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.agents:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.daemon.terminate()
        self.daemon.wait()


def fanout(reps):
    out = []
    for _ in range(reps):
        with tempfile.TemporaryDirectory() as work:
            job = Job(work, "last_call_timeout=0.2,keep_alive_interval=0.2,keep_alive_max_attempt=3")
            victim, others = job.workers(0)[0], job.workers(1)
            t0 = time.monotonic()
            os.kill(victim, signal.SIGKILL)
            ok = wait_for(lambda: all(gone(p) for p in others), 10)
            out.append((time.monotonic() - t0) * 1000 if ok else float("inf"))
            job.close()
    return out


def deadnode(reps, conf):
    out = []
    for _ in range(reps):
        with tempfile.TemporaryDirectory() as work:
            job = Job(work, conf)
            others = job.workers(1)
            t0 = time.monotonic()
            job.agents[0].kill()
            ok = wait_for(lambda: all(gone(p) for p in others), 60, 0.001)
            out.append((time.monotonic() - t0) * 1000 if ok else float("inf"))
            job.close()
    return out


LONG_LAST_CALL = "last_call_timeout=5,keep_alive_interval=0.2,keep_alive_max_attempt=3"


def restart(reps):
    out, rdzv, spawn = [], [], []
    for _ in range(reps):
        with tempfile.TemporaryDirectory() as work:
            job = Job(work, LONG_LAST_CALL, nproc=2, max_restarts=3, nnodes="2:3")
            victim = job.workers(0)[0]
            t0_wall = time.time()
            t0 = time.monotonic()
            os.kill(victim, signal.SIGKILL)
            ok = wait_for(lambda: all(len(job.workers(i)) >= 4 for i in (0, 1)), 30)
            out.append((time.monotonic() - t0) * 1000 if ok else float("inf"))
            # The agents' own account of the restarted attempt.
            wait_for(lambda: all(job.startup_after(i, t0_wall) for i in (0, 1)), 5, 0.01)
            for i in (0, 1):
                for e in job.startup_after(i, t0_wall):
                    rdzv.append(e["rendezvous_s"] * 1000)
                    spawn.append(e["spawn_s"] * 1000)
            job.close()
    return out, rdzv, spawn


def reform(reps):
    out = []
    for _ in range(reps):
        with tempfile.TemporaryDirectory() as work:
            job = Job(work, LONG_LAST_CALL, nproc=1, max_restarts=3, nnodes="2:4", names=("a", "b", "c"))
            t0 = time.monotonic()
            job.agents[2].kill()
            ok = wait_for(lambda: all(len(job.workers(i)) >= 2 for i in (0, 1)), 30)
            out.append((time.monotonic() - t0) * 1000 if ok else float("inf"))
            job.close()
    return out


WORKER = r'''
import datetime, os, sys, time
open(os.path.join(sys.argv[1], "start_%s" % os.environ["RANK"]), "w").write(str(time.time_ns()))
import torch.distributed as dist
# As init_process_group("env://") does: rank 0 hosts the store unless the agent
# already serves one there (ddprun does; torchrun 1.13's c10d backend does not).
master = os.environ["RANK"] == "0" and os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True"
s = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), int(os.environ["WORLD_SIZE"]),
                  master, datetime.timedelta(seconds=60))
prefix = "bench_barrier/%s/" % os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
s.add(prefix + "count", 1)
s.set(prefix + os.environ["RANK"], "1")
s.wait([prefix + str(r) for r in range(int(os.environ["WORLD_SIZE"]))])
open(os.path.join(sys.argv[1], "done_%s" % os.environ["RANK"]), "w").write(str(time.time_ns()))
'''


# The same barrier without Python: ddp-store against ddprun's store (native
# protocol; torchrun's workers have no such store to talk to).
NATIVE_WORKER = r'''#!/bin/sh
set -e
date +%s%N > "$1/start_$RANK"
s="$DDP_STORE --endpoint $MASTER_ADDR:$MASTER_PORT --timeout 20"
$s set "${DDP_STORE_PREFIX}barrier_$RANK" 1 >/dev/null
keys=""
r=0
while [ $r -lt "$WORLD_SIZE" ]; do keys="$keys ${DDP_STORE_PREFIX}barrier_$r"; r=$((r + 1)); done
$s wait $keys >/dev/null
date +%s%N > "$1/done_$RANK"
'''


def e2e_once(launcher, extra, native=False):
    with tempfile.TemporaryDirectory() as work:
        script = os.path.join(work, "worker")
        with open(script, "w") as f:
            f.write(NATIVE_WORKER if native else WORKER)
        port = free_port()
        endpoint = "127.0.0.1:%d" % port
        if launcher == "ddprun":
            base = [os.path.join(BIN, "ddprun"), "--log_level=warn"]
        else:
            base = ["/usr/bin/python3", os.path.join(ROOT, "scripts", "torchrun_compat.py")]
        argv = (
            base
            + [
                "--nnodes=2",
                "--nproc_per_node=2",
                "--rdzv_backend=c10d",
                "--rdzv_endpoint=" + endpoint,
                "--rdzv_id=e2e",
            ]
            + extra
            + ["--no_python", "/bin/sh" if native else "/usr/bin/python3", script, work]
        )
        env = dict(os.environ, DDP_STORE=os.path.join(BIN, "ddp-store"))
        for k in ("PET_NNODES", "PET_NPROC_PER_NODE", "OMP_NUM_THREADS"):
            env.pop(k, None)
        t0 = time.time_ns()
        procs = [subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                 for _ in range(2)]
        for p in procs:
            _, err = p.communicate(timeout=180)
            if p.returncode != 0:
                raise RuntimeError("%s failed (%d): %s" % (launcher, p.returncode, err.decode()[-2000:]))

        def stamp(kind):
            return max(int(open(os.path.join(work, "%s_%d" % (kind, r))).read()) for r in range(4))
        return (stamp("start") - t0) / 1e6, (stamp("done") - t0) / 1e6


def e2e(reps, launcher, extra, native=False):
    runs = [e2e_once(launcher, extra, native) for _ in range(reps)]
    return [r[0] for r in runs], [r[1] for r in runs]


def summary(values):
    return "median %.1f ms (min %.1f, max %.1f, n=%d)" % (statistics.median(values), min(values), max(values),
                                                         len(values))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("what", nargs="*", default=["fanout", "deadnode", "e2e"])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--torch-reps", type=int, default=2)
    ap.add_argument("--default-reps", type=int, default=1, help="dead node with the default 15 s window")
    a = ap.parse_args()
    if "fanout" in a.what:
        print("fanout: worker killed on A -> last worker of B gone:", summary(fanout(a.reps)), flush=True)
    if "deadnode" in a.what:
        short = "last_call_timeout=0.2,keep_alive_interval=0.2,keep_alive_max_attempt=3"
        print("deadnode (keep-alive 0.2 s x 3): agent A kill -9 -> B's workers gone:",
              summary(deadnode(a.reps, short)), flush=True)
        if a.default_reps > 0:
            print("deadnode (default keep-alive 5 s x 3): agent A kill -9 -> B's workers gone:",
                  summary(deadnode(a.default_reps, "last_call_timeout=0.2")), flush=True)
    if "restart" in a.what:
        total, rdzv, spawn = restart(a.reps)
        print("restart (--nnodes=2:3, last_call_timeout=5): worker killed on A -> A and B run replacements:",
              summary(total), flush=True)
        if rdzv:
            print(
                "  of which, per agent (event log 'startup'): rendezvous",
                summary(rdzv),
                "; spawn of 2 workers",
                summary(spawn),
                flush=True,
            )
    if "reform" in a.what:
        print(
            "reform (--nnodes=2:4, 3 agents, last_call_timeout=5): "
            "agent C kill -9 -> A and B run the world of 2:",
            summary(reform(a.reps)),
            flush=True,
        )
    if "e2e" in a.what:
        started, done = e2e(a.reps, "ddprun", [], native=True)
        print(
            "e2e ddprun c10d, sh + ddp-store worker: "
            "launch -> 4 workers started: %s; launch -> barrier done: %s"
            % (summary(started), summary(done)),
            flush=True,
        )
        for name, launcher, extra, reps in (("ddprun c10d", "ddprun", [], a.reps),
                                            ("torchrun c10d", "torchrun", [], a.torch_reps),
                                            ("torchrun c10d --monitor_interval=0.1", "torchrun",
                                             ["--monitor_interval=0.1"], a.torch_reps)):
            started, done = e2e(reps, launcher, extra)
            print("e2e %s: launch -> 4 workers started: %s; launch -> barrier done: %s" %
                  (name, summary(started), summary(done)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
