#!/usr/bin/python3
"""ddprun beside its peers, torchrun (torch 2.x) and NVIDIA's ft_launcher
(nvidia-resiliency-ext), on the same torch script (peers_train.py, gloo, CPU).
scripts/bench/peers.sh runs it; docs/performance.md, "The peers".

  launch    --standalone, 2 workers: launch -> the first training step done on
            both ranks (and -> both workers running, -> the launcher's exit)
  failure   --standalone, 2 workers, --max_restarts=1: rank 1 exits 1 after the
            first all-reduce; its exit -> the restarted group's first
            all-reduce done on both ranks
  nodekill  two launchers ("nodes") on this machine started at once,
            --nnodes=1:2, 2 workers each, c10d rendezvous on a free port
            (node A hosts it: is_host=1); once all 4 ranks all-reduce every
            50 ms, SIGKILL node B's launcher and every process it started, at
            once; the kill -> both ranks of A done with their first
            all-reduce in a world of 2 (and -> both of A's replacements
            running). Each launcher's default rendezvous timings.
  nodekill-tuned  the same with --rdzv_conf=TUNED_RDZV for all (last call 1 s,
            keep-alive 1 s x 3)
  hang      --standalone, 2 workers, --max_restarts=0: rank 1 stops in step 5
            (rank 0 goes on); its last report (FileTimer scope entered, or
            last heartbeat) -> its pid gone, with a 2 s timeout; "past the
            deadline" is that minus 2 s

Launchers: ddprun (also with --preload torch, and another build's with
PEERS_BASELINE_BUILD: see BASELINE), torchrun (python -m torch.distributed.run)
and ft_launcher, all with .venv's python and torch. --hogs N adds N busy
loops in sessions of their own for the whole run.

Each repetition runs every launcher once, the order reversed every other
repetition; medians. Every process a run starts carries PEERS_BENCH_TAG in its
environment; whatever carries it is SIGKILLed when the run ends, so nothing is
left behind (torchrun's and ft_launcher's workers outlive a kill -9 of their
launcher). Logs of failed runs are kept under --keep (default: a temp dir that
is printed).
"""
import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

from elastic_bench import free_port, gone, wait_for  # this directory: the helpers both benches use

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BIN = os.path.join(os.environ.get("BUILD_DIR", os.path.join(ROOT, "build")), "bin")
VENV = os.environ.get("PEERS_VENV", os.path.join(ROOT, ".venv"))
PY = os.path.join(VENV, "bin", "python")
TRAIN = os.path.join(HERE, "peers_train.py")
HANG_TIMEOUT_S = 2
# A standalone run takes 5-20 s on the 2-core box; past this it is stuck (seen: torchrun's
# restarted gloo group waiting in connectFullMesh), killed and counted as failed.
RUN_TIMEOUT_S = 150

DDPRUN = [os.path.join(BIN, "ddprun"), "--log_level=warn"]
# torchrun and ft_launcher start each worker in a session of its own (Popen's
# start_new_session), and so does ddprun (its guard leads the worker's session,
# docs/agent-workers.md "Sessions"): with the kernel's autogroup scheduling
# (/proc/sys/kernel/sched_autogroup_enabled) each worker is a scheduling entity
# of its own beside the other sessions' processes. PEERS_BASELINE_BUILD=DIR
# adds "ddprun, baseline": the ddprun of another build (DIR/bin/ddprun, e.g. an
# older commit's), measured in the same run.
BASELINE = os.environ.get("PEERS_BASELINE_BUILD")
LAUNCHERS = {
    "ddprun": lambda: DDPRUN + ["--python", PY],
    "ddprun --preload torch": lambda: DDPRUN + ["--python", PY, "--preload", "torch"],
    "ddprun, baseline": lambda: [os.path.join(BASELINE, "bin", "ddprun"), "--log_level=warn", "--python", PY],
    "torchrun": lambda: [PY, "-m", "torch.distributed.run"],
    "ft_launcher": lambda: [os.path.join(VENV, "bin", "ft_launcher")],
}


def listening(port):
    try:
        socket.create_connection(("127.0.0.1", port), 0.2).close()
        return True
    except OSError:
        return False


def tagged(tag):
    """Pids of the live processes whose environment carries PEERS_BENCH_TAG=tag."""
    needle = ("PEERS_BENCH_TAG=%s\0" % tag).encode()
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open("/proc/%s/environ" % d, "rb") as f:
                    if needle in f.read() + b"\0":
                        out.append(int(d))
            except OSError:
                pass
    return out


def kill_tagged(tag, pids=()):
    """SIGKILL the given pids and everything carrying the tag, until none is left."""
    for _ in range(50):
        victims = set(pids) | set(tagged(tag))
        victims.discard(os.getpid())
        if not victims:
            return
        for pid in victims:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        pids = ()
        time.sleep(0.05)


def exited(rc):
    return "no exit within %d s (killed)" % RUN_TIMEOUT_S if rc is None else "exit %d" % rc


def events(path):
    """peers_train.py's event lines: [(name, ns, {field: value})]."""
    out = []
    try:
        with open(path) as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 2:
                    out.append(
                        (parts[0], int(parts[1]), dict(p.split("=", 1) for p in parts[2:] if "=" in p))
                    )
    except FileNotFoundError:
        pass
    return out


def last(evs, name, n, **match):
    """The latest ns of event `name` once n of them (matching the fields) are there, else None."""
    hits = [ns for e, ns, f in evs if e == name and all(f.get(k) == str(v) for k, v in match.items())]
    return max(hits) if len(hits) >= n else None


class Run:
    """One launcher process (a node) with its own tag, log and events file."""

    def __init__(self, work, name, argv, extra_env=None):
        self.tag = uuid.uuid4().hex
        self.log = os.path.join(work, "%s.log" % name.replace(" ", "_"))
        env = {k: v for k, v in os.environ.items() if not k.startswith("PET_") and k != "OMP_NUM_THREADS"}
        env.update(extra_env or {}, PEERS_BENCH_TAG=self.tag, PYTHONUNBUFFERED="1")
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)

    def wait(self, timeout):
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def kill(self):
        """kill -9 of the launcher and every process it started, all at once."""
        kill_tagged(self.tag, [self.proc.pid])
        self.proc.wait()

    def tail(self, n=15):
        with open(self.log, errors="replace") as f:
            return "".join(f.readlines()[-n:])


class Bench:
    def __init__(self, keep):
        self.keep = keep
        self.failures = []  # (measure, launcher, what happened, log path)

    def workdir(self, measure, launcher, rep):
        d = os.path.join(self.keep, "%s-%s-%d" % (measure, launcher.replace(" ", "_"), rep))
        os.makedirs(d, exist_ok=True)
        return d

    def fail(self, measure, launcher, what, run):
        self.failures.append((measure, launcher, what, run.log if run else ""))
        print("  %s / %s: %s (log %s)" % (measure, launcher, what, run.log if run else "-"), flush=True)
        if run:
            print("    " + run.tail(8).replace("\n", "\n    "), flush=True)

    # -- launch -> first step -------------------------------------------------
    def launch(self, launcher, rep):
        work = self.workdir("launch", launcher, rep)
        ev = os.path.join(work, "events")
        t0 = time.time_ns()
        run = Run(work, launcher, LAUNCHERS[launcher]() + ["--standalone", "--nproc_per_node=2", TRAIN,
                                                        "first_step", ev])
        rc = run.wait(RUN_TIMEOUT_S)
        t_exit = time.time_ns()
        kill_tagged(run.tag)
        evs = events(ev)
        first, running = last(evs, "first_step", 2), last(evs, "start", 2)
        if rc != 0 or first is None:
            self.fail(
                "launch",
                launcher,
                "%s, %s first_step lines" % (exited(rc), sum(e[0] == "first_step" for e in evs)),
                run,
            )
            if first is None:
                return None
        return {
            "running": (running - t0) / 1e6,
            "first_step": (first - t0) / 1e6,
            "exit": (t_exit - t0) / 1e6,
            "rc": rc,
        }

    # -- worker failure -> replacement's first collective ---------------------
    def failure(self, launcher, rep):
        work = self.workdir("failure", launcher, rep)
        ev = os.path.join(work, "events")
        run = Run(
            work,
            launcher,
            LAUNCHERS[launcher]()
            + ["--standalone", "--nproc_per_node=2", "--max_restarts=1", TRAIN, "fail", ev],
        )
        rc = run.wait(RUN_TIMEOUT_S)
        kill_tagged(run.tag)
        evs = events(ev)
        fail = last(evs, "fail", 1)
        done = last(evs, "first_collective", 2)
        running = last(evs, "start", 2, restart=1)
        if rc != 0 or fail is None or done is None:
            self.fail("failure", launcher, "%s, fail=%s, %d first_collective lines"
                      % (exited(rc), fail is not None, sum(e[0] == "first_collective" for e in evs)), run)
            if fail is None or done is None:
                return None
        return {
            "running": (running - fail) / 1e6 if running else float("nan"),
            "collective": (done - fail) / 1e6,
            "rc": rc,
        }

    # -- node kill -9 -> world re-formed ---------------------------------------
    def nodekill(self, launcher, rep, conf=None):
        work = self.workdir("nodekill" if conf is None else "nodekill-tuned", launcher, rep)
        ev = os.path.join(work, "events")
        port = free_port()

        def argv(is_host):  # A hosts the store: B is the one killed, so the store survives
            c = ("%s," % conf if conf else "") + "is_host=%d" % is_host
            return LAUNCHERS[launcher]() + [
                "--nnodes=1:2",
                "--nproc_per_node=2",
                "--rdzv_backend=c10d",
                "--rdzv_endpoint=127.0.0.1:%d" % port,
                "--rdzv_id=peers%d" % port,
                "--max_restarts=3",
                "--rdzv_conf=" + c,
                TRAIN,
                "nodekill",
                ev,
                "4",
            ]

        # Both at once: with a short last call, a node arriving later than that after the
        # first one joined would make a world of its own first (torchrun's and
        # ft_launcher's B needs seconds to import torch). But ddprun's B hosts the store
        # when it binds first, is_host=0 or not (torchrun's never does), and A then
        # exits 2 "cannot host ...": so ddprun's B starts once A listens, which costs it
        # milliseconds.
        a = Run(work, launcher + "-A", argv(1))
        if launcher.startswith("ddprun"):
            wait_for(lambda: listening(port) or a.proc.poll() is not None, 60, 0.001)
        b = Run(work, launcher + "-B", argv(0))
        try:
            try:
                if not wait_for(lambda: last(events(ev), "collective", 4, world=4), 240, 0.02):
                    self.fail("nodekill", launcher, "the world of 4 never formed", b)
                    return None
                t_kill = time.time_ns()
                b.kill()
            finally:
                kill_tagged(b.tag)
            ok = wait_for(lambda: last(events(ev), "reformed", 2, world=2), 150, 0.005)
            if not ok:
                self.fail(
                    "nodekill",
                    launcher,
                    "survivors did not re-form within 150 s (A %s)"
                    % ("still running" if a.proc.poll() is None else "exited %d" % a.proc.returncode),
                    a,
                )
                return None
            evs = events(ev)
            reformed = last(evs, "reformed", 2, world=2)
            running = last(evs, "start", 2, world=2)
            rc = a.wait(60)
            if rc != 0:
                self.fail("nodekill", launcher, "node A exit %s after re-forming" % rc, a)
            return {"reformed": (reformed - t_kill) / 1e6, "running": (running - t_kill) / 1e6}
        finally:
            kill_tagged(a.tag)

    # -- hung rank -> killed ---------------------------------------------------
    def hang(self, variant, rep):
        launcher, how, flags, env = HANG_VARIANTS[variant]
        work = self.workdir("hang", variant, rep)
        ev = os.path.join(work, "events")
        env = dict(env, HANG_TIMEOUT=str(HANG_TIMEOUT_S))
        run = Run(
            work,
            variant,
            LAUNCHERS[launcher]()
            + ["--standalone", "--nproc_per_node=2", "--max_restarts=0"]
            + flags
            + [TRAIN, "hang", ev, how],
            env,
        )
        try:
            if not wait_for(lambda: last(events(ev), "hang", 1) or run.proc.poll() is not None, 240, 0.002):
                self.fail("hang", variant, "no rank hung within 240 s", run)
                return None
            hung = [(ns, int(f["pid"])) for e, ns, f in events(ev) if e == "hang"]
            if not hung:
                self.fail(
                    "hang", variant, "the launcher exited %s before a rank hung" % run.proc.returncode, run
                )
                return None
            t_hang, pid = hung[0]
            if not wait_for(lambda: gone(pid), 60, 0.0005):
                self.fail("hang", variant, "the hung rank was not killed within 60 s", run)
                return None
            t_gone = time.time_ns()
            rc = run.wait(120)
            # What the launcher left running when it exited (torchrun 2.x's FileTimerServer
            # SIGKILLs its own agent after reaping a worker).
            left = [p for p in tagged(run.tag) if not gone(p)]
            cost = [int(f["ns_per_call"]) for e, ns, f in events(ev) if e == "report_cost"]
            return {
                "killed": (t_gone - t_hang) / 1e6,
                "past": (t_gone - t_hang) / 1e6 - HANG_TIMEOUT_S * 1000,
                "cost_ns": cost[0] if cost else float("nan"),
                "rc": rc,
                "left": len(left),
            }
        finally:
            kill_tagged(run.tag)


# Rendezvous timings a user would tune for quick recovery, the same for every launcher:
# torch's defaults are last call 30 s and keep-alive 5 s x 3.
TUNED_RDZV = "last_call_timeout=1,keep_alive_interval=1,keep_alive_max_attempt=3"

HANG_VARIANTS = {  # name: (launcher, worker's watchdog, launcher flags, env)
    "ddprun, heartbeat": ("ddprun", "ddprun", ["--heartbeat_timeout", str(HANG_TIMEOUT_S)], {}),
    "ddprun, FileTimer": ("ddprun", "filetimer", [], {"TORCHELASTIC_ENABLE_FILE_TIMER": "1"}),
    "torchrun, FileTimer": ("torchrun", "filetimer", [], {"TORCHELASTIC_ENABLE_FILE_TIMER": "1"}),
    "ft_launcher, FileTimer": ("ft_launcher", "filetimer", [], {"TORCHELASTIC_ENABLE_FILE_TIMER": "1"}),
    "ft_launcher, heartbeat": ("ft_launcher", "ft", ["--ft-initial-rank-heartbeat-timeout=120",
                                                     "--ft-rank-heartbeat-timeout=%d" % HANG_TIMEOUT_S], {}),
    "ft_launcher, heartbeat, check 0.1 s": ("ft_launcher", "ft", [
        "--ft-initial-rank-heartbeat-timeout=120", "--ft-rank-heartbeat-timeout=%d" % HANG_TIMEOUT_S,
        "--ft-workload-check-interval=0.1"], {}),
}


def column(res, name, key):
    """The `key` figure of every run of `name` (None for a failed run); [] when not run."""
    return [v[key] if v else None for v in res.get(name) or []]


def med(values):
    values = [v for v in values if v is not None and v == v]
    return statistics.median(values) if values else None


def fmt(v, unit=" ms"):
    return "—" if v is None else "{:,.0f}{}".format(v, unit)


def spread(values):
    values = sorted(v for v in values if v is not None and v == v)
    if not values:
        return "n=0"
    return "{:,.0f}–{:,.0f}, n={}".format(values[0], values[-1], len(values))


def ratio(v, base):
    return "—" if v is None or not base else "%.2f" % (v / base)


ONLY = []  # --only: run just the launchers / variants whose name contains one of these


def repeat(fn, names, reps):
    """fn(name, rep) for every name, reps times, the order reversed every other repetition."""
    run = [n for n in names if not ONLY or any(o in n for o in ONLY)]
    out = {n: ([] if n in run else None) for n in names}
    for rep in range(reps):
        for n in (run if rep % 2 == 0 else run[::-1]):
            r = fn(n, rep)
            out[n].append(r)
            print("  rep %d %-38s %s" % (rep, n, r), flush=True)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("what", nargs="*", default=["launch", "failure", "nodekill", "nodekill-tuned", "hang"])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--keep", help="directory for the runs' logs (default: a new temp dir)")
    ap.add_argument("--only", action="append", default=[],
                    help="only the launchers (or hang variants) whose name contains this; repeatable")
    ap.add_argument(
        "--hogs",
        type=int,
        default=0,
        help="start this many busy loops, each in a session of its own, for the whole run (a loaded "
        "machine, reproducibly)",
    )
    a = ap.parse_args()
    ONLY.extend(a.only)
    keep = a.keep or tempfile.mkdtemp(prefix="peers-bench-")
    os.makedirs(keep, exist_ok=True)
    print("logs under", keep, flush=True)
    b = Bench(keep)
    hog_tag = uuid.uuid4().hex
    hogs = [subprocess.Popen(["/usr/bin/python3", "-c", "while True: pass"], start_new_session=True,
                             env=dict(os.environ, PEERS_BENCH_TAG=hog_tag)) for _ in range(a.hogs)]
    if hogs:
        print("%d busy loops running, each in its own session" % len(hogs), flush=True)
    try:
        return report(a, b)
    finally:
        kill_tagged(hog_tag, [h.pid for h in hogs])


def report(a, b):
    rows = []  # markdown table rows

    def row(measure, name, values, key, base, note=None):
        if values is None:
            return None
        if note is None:  # runs measured although the launcher then failed
            bad = [v["rc"] for v in values if v and "rc" in v and v["rc"] != 0]
            note = (
                "; %d of them then exited %s" % (len(bad), "/".join(sorted({str(r) for r in bad})))
                if bad
                else ""
            )
        vs = column({name: values}, name, key)
        m = med(vs)
        ok = sum(v is not None for v in vs)
        failed = "" if ok == len(vs) else ", %d of %d runs failed" % (len(vs) - ok, len(vs))
        rows.append("| %s | %s | %s (%s%s)%s | %s |" % (measure, name, fmt(m), spread(vs), failed, note,
                                                        ratio(m, base)))
        return m

    all_launchers = ["ddprun", "ddprun --preload torch"] + (["ddprun, baseline"] if BASELINE else [])
    all_launchers += ["torchrun", "ft_launcher"]
    no_baseline = [n for n in all_launchers if n != "ddprun, baseline"]
    tuned = ", " + TUNED_RDZV
    # what: (launchers, heading, one run, [(measure, key)]): each measure a row per
    # launcher, against ddprun's median of that key.
    scenarios = {
        "launch": (
            all_launchers,
            "launch -> first step on both ranks (--standalone, 2 workers)",
            b.launch,
            [
                ("launch → first step, both ranks", "first_step"),
                ("launch → both workers running (their first line)", "running"),
                ("launch → launcher exited (3 steps)", "exit"),
            ],
        ),
        "failure": (
            all_launchers,
            "worker failure -> the restarted group's first all-reduce (--max_restarts=1, 2 workers)",
            b.failure,
            [
                ("worker exit 1 → restarted group's first all-reduce", "collective"),
                ("worker exit 1 → both replacements running", "running"),
            ],
        ),
        "nodekill": (
            no_baseline,
            "node kill -9 -> survivors re-formed (--nnodes=1:2, 2 x 2 workers, c10d)",
            b.nodekill,
            [
                ("node B kill -9 → node A's 2 ranks all-reduced in a world of 2", "reformed"),
                ("node B kill -9 → node A's 2 replacements running", "running"),
            ],
        ),
        "nodekill-tuned": (
            no_baseline,
            "node kill -9 -> survivors re-formed, --rdzv_conf=%s" % TUNED_RDZV,
            lambda n, rep: b.nodekill(n, rep, TUNED_RDZV),
            [
                ("node B kill -9 → node A's 2 ranks all-reduced in a world of 2" + tuned, "reformed"),
                ("node B kill -9 → node A's 2 replacements running" + tuned, "running"),
            ],
        ),
    }
    for what, (names, heading, one_run, measures) in scenarios.items():
        if what not in a.what:
            continue
        print(heading, flush=True)
        res = repeat(one_run, names, a.reps)
        for measure, key in measures:
            base = med(column(res, "ddprun", key))
            for n in names:
                row(measure, n, res[n], key, base)
    if "hang" in a.what:
        names = list(HANG_VARIANTS)
        print("hung rank -> killed (timeout %d s, 2 workers)" % HANG_TIMEOUT_S, flush=True)
        res = repeat(b.hang, names, a.reps)
        bases = {"heartbeat": med(column(res, "ddprun, heartbeat", "past")),
                 "FileTimer": med(column(res, "ddprun, FileTimer", "past"))}
        for n in names:
            base = bases["FileTimer" if "FileTimer" in n else "heartbeat"]
            if res[n] is None:
                continue
            done = [v for v in res[n] if v]
            note = "; launcher exit %s" % "/".join(sorted({str(v["rc"]) for v in done}))
            if any(v["left"] for v in done):
                note += "; workers left running after it: %s" % "/".join(str(v["left"]) for v in done)
            row("hung rank → killed, past the %d s deadline" % HANG_TIMEOUT_S, n, res[n], "past", base, note)
        for n in names:
            if res[n] is None:
                continue
            vs = column(res, n, "cost_ns")
            rows.append(
                "| one report per step from the Python worker (rank 0, mean of 2000 calls; 100 for FileTimer)"
                " | %s | %s | |"
                % (n, fmt(med(vs), " ns"))
            )

    print()
    print("| measure | launcher | median (min–max, n) | vs ddprun |")
    print("|---|---|---:|---:|")
    for r in rows:
        print(r)
    if b.failures:
        print()
        print("failed or incomplete runs:")
        for measure, launcher, what, log in b.failures:
            print("  %s / %s: %s (%s)" % (measure, launcher, what, log))
    return 0


if __name__ == "__main__":
    sys.exit(main())
