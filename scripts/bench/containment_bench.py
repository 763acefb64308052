"""Containment and silent-store timings (docs/performance.md, "Containment").

orphans:  8 workers x 4 children each (2 background jobs, 1 setsid child,
          1 double-forked orphan); SIGKILL ddprun; time until the last process
          carrying the run's tag is gone.
silent:   a ddp-rendezvousd and one ddprun agent (2 workers); SIGSTOP the
          daemon; time until every worker is gone, for the default keep-alive
          (5 s x 3) and short ones.

Everything is real processes; /proc is polled every 0.5 ms (zombies count as gone).
"""
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

BIN = os.path.join(os.environ.get("BUILD_DIR", "build"), "bin")

WORKER = r"""#!/bin/sh
sleep 1234 &
sleep 1234 &
setsid sh -c 'trap "" TERM HUP INT; exec sleep 1234' &
( trap "" TERM HUP INT; sleep 1234 & )
touch "$MARKS/ready_$RANK"
wait
"""


def tagged(tag):
    needle = ("DDP_BENCH_TAG=" + tag).encode()
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/environ" % name, "rb") as f:
                if needle not in f.read().split(b"\0"):
                    continue
            with open("/proc/%s/stat" % name) as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    continue
        except OSError:
            continue
        out.append(int(name))
    return out


def alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_for(pred, timeout):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.0005)
    return False


def summary(name, xs):
    xs = sorted(xs)
    print(
        "%-52s median %8.1f ms  (min %.1f, max %.1f, n=%d)"
        % (name, statistics.median(xs), xs[0], xs[-1], len(xs))
    )


def orphans(reps):
    times = []
    for _ in range(reps):
        with tempfile.TemporaryDirectory() as d:
            script = os.path.join(d, "w.sh")
            with open(script, "w") as f:
                f.write(WORKER)
            tag = uuid.uuid4().hex
            env = dict(os.environ, DDP_BENCH_TAG=tag, MARKS=d)
            p = subprocess.Popen(
                [os.path.join(BIN, "ddprun"), "--nproc_per_node=8", "--no_python", "/bin/sh", script],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            if not wait_for(
                lambda: all(os.path.exists(os.path.join(d, "ready_%d" % r)) for r in range(8)), 60
            ):
                p.kill()
                sys.exit("workers did not start")
            n = len(tagged(tag))
            t0 = time.monotonic()
            p.kill()
            p.wait()
            if not wait_for(lambda: not tagged(tag), 30):
                sys.exit("processes survived: %s" % tagged(tag))
            times.append((time.monotonic() - t0) * 1000)
    summary("kill -9 of ddprun -> last of %d processes gone" % n, times)


def silent(reps, interval, attempts):
    times = []
    for _ in range(reps):
        with tempfile.TemporaryDirectory() as d:
            port_file = os.path.join(d, "port")
            daemon = subprocess.Popen(
                [
                    os.path.join(BIN, "ddp-rendezvousd"),
                    "--host",
                    "127.0.0.1",
                    "--port",
                    "0",
                    "--port-file",
                    port_file,
                    "--log-level",
                    "warn",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            wait_for(lambda: os.path.exists(port_file) and open(port_file).read().strip(), 10)
            port = open(port_file).read().strip()
            pids = os.path.join(d, "pids")
            env = dict(os.environ, FAKE_HANG="1", FAKE_PID_FILE=pids)
            for k in ("PET_NNODES", "PET_NPROC_PER_NODE", "PET_STANDALONE"):
                env.pop(k, None)
            conf = "keep_alive_interval=%s,keep_alive_max_attempt=%d,last_call_timeout=0.2" % (
                interval,
                attempts,
            )
            agent = subprocess.Popen(
                [
                    os.path.join(BIN, "ddprun"),
                    "--nnodes=1",
                    "--nproc_per_node=2",
                    "--rdzv_backend=c10d",
                    "--rdzv_endpoint=127.0.0.1:" + port,
                    "--rdzv_id=bench",
                    "--rdzv_conf=" + conf,
                    os.path.join(BIN, "fake_worker"),
                ],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )

            def started():
                if not os.path.exists(pids):
                    return []
                return [int(line.split()[0]) for line in open(pids) if " start " in line]

            if not wait_for(lambda: len(started()) == 2, 30):
                sys.exit("workers did not start")
            workers = started()
            time.sleep(2 * float(interval))  # a few keepalives succeed first
            t0 = time.monotonic()
            daemon.send_signal(signal.SIGSTOP)
            ok = wait_for(lambda: not any(alive(w) for w in workers), 120)
            t = (time.monotonic() - t0) * 1000
            code = agent.wait(30)
            daemon.send_signal(signal.SIGCONT)
            daemon.kill()
            daemon.wait()
            if not ok or code != 3:
                sys.exit("workers alive=%s agent exit=%s" % (not ok, code))
            times.append(t)
    summary("silent store, keep-alive %s s x %d -> workers gone" % (interval, attempts), times)


def main():
    args = sys.argv[1:]
    reps = 5
    if "--reps" in args:
        i = args.index("--reps")
        reps = int(args[i + 1])
        del args[i:i + 2]
    what = args or ["orphans", "silent"]
    if "orphans" in what:
        orphans(reps)
    if "silent" in what:
        silent(reps, "1", 3)
        silent(max(1, min(reps, 2)), "5", 3)  # the default: 15 s per run


main()
