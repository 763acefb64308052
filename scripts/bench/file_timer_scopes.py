#!/usr/bin/env python3
"""Arming many torch FileTimer scopes in one worker: time and agent memory.

One worker under `ddprun --standalone --nproc_per_node=1` with
TORCHELASTIC_ENABLE_FILE_TIMER=1 arms N distinct scopes an hour ahead, each
request written as torch's FileTimerClient writes it (open the pipe
non-blocking, one JSON line, close; retried while the pipe is full), then
moves its first scope to a time already past, with no signal. The agent
serves the pipe in order, so its log line for that one ("FileTimer expired
... scope=scope-0 with no signal") means every request before it was handled.
Prints the time from the worker's first request to that line, ddprun's VmRSS
and VmHWM (peak) at that moment, and whether ddprun warned that the worker
has the most live scopes it keeps. Needs no torch.

With NPROC workers (default 1) each arms N/NPROC scopes, all on the agent's
one timer, and the time runs to the last worker's line: 30 workers x 1000
scopes are 30,000 live scopes without reaching the per-worker limit (1024).

Usage: scripts/bench/file_timer_scopes.py [N] [NPROC]   (default 30000 1)
Env: BUILD_DIR (default build).
"""
import json
import os
import subprocess
import sys
import tempfile
import time


def worker(n, done_path):
    pipe = os.environ["TORCHELASTIC_TIMER_FILE"]

    def send(scope, expiration, sig):
        line = json.dumps({"version": 1, "pid": os.getpid(), "scope_id": scope,
                           "expiration_time": expiration, "signal": sig}) + "\n"
        while True:
            try:
                fd = os.open(pipe, os.O_WRONLY | os.O_NONBLOCK)
            except OSError:
                time.sleep(0.001)
                continue
            try:
                os.write(fd, line.encode())
                return
            except BlockingIOError:
                time.sleep(0.001)  # the agent is behind: the pipe is full
            finally:
                os.close(fd)

    print("start %.6f" % time.monotonic(), flush=True)
    # Each scope due a little earlier than the one before: every request
    # moves the agent's earliest deadline (the worst case for its timer).
    ahead = time.time() + 3600
    for i in range(n):
        send("scope-%d" % i, ahead - i * 0.001, 9)
    send("scope-0", time.time() - 1, 0)
    print("sent %.6f" % time.monotonic(), flush=True)
    while not os.path.exists(done_path):
        time.sleep(0.01)


def memory(pid):
    out = {}
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0]) // 1024
    return out


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 30000
    nproc = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ddprun = os.path.join(os.environ.get("BUILD_DIR", os.path.join(root, "build")), "bin", "ddprun")
    with tempfile.TemporaryDirectory() as tmp:
        done = os.path.join(tmp, "done")
        env = dict(os.environ, TORCHELASTIC_ENABLE_FILE_TIMER="1")
        cmd = [ddprun, "--standalone", "--nproc_per_node=%d" % nproc, "--log_dir", tmp, "--no_python",
               sys.executable, os.path.abspath(__file__), "--worker", str(n // nproc), done]
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        start = None
        capped = False
        finished = 0
        for line in proc.stdout:
            if "]:start " in line:
                t = float(line.rsplit(" ", 1)[1])
                start = t if start is None else min(start, t)
            elif "live FileTimer scopes" in line:
                capped = True
            elif "scope=scope-0 with no signal" in line:
                finished += 1
                if finished < nproc:
                    continue
                took = time.monotonic() - start
                mem = memory(proc.pid)
                open(done, "w").close()
                print("scopes=%d workers=%d arm_s=%.2f agent_rss_mb=%d agent_peak_mb=%d capped=%s" % (
                    n // nproc * nproc, nproc, took, mem["VmRSS"], mem["VmHWM"], "yes" if capped else "no"),
                    flush=True)
        proc.wait()


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(int(sys.argv[2]), sys.argv[3])
    else:
        main()
