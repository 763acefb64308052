#!/usr/bin/python3
"""Plots for docs/performance.md, drawn from the benchmarks' own output.

Each benchmark's output is kept as text under docs/data/ (the command that
produced it is in its first lines and in docs/performance.md); this script
reads it and writes the PNG next to the table it illustrates:

  plot.py rendezvous docs/data/rendezvous.txt docs/img/rendezvous.png
      `ddp-bench rendezvous --restart` output: time to form a round, and to
      re-form it after a failure, against N simulated agents
  plot.py launcher docs/data/launcher.txt docs/img/launcher.png
      scripts/bench/launcher_vs_torchrun.sh: launch wall time, ddprun and torchrun
  plot.py restart docs/data/restart.txt docs/img/restart.png
      scripts/bench/elastic.sh restart reform: restart latency with last call 5 s
  plot.py allreduce docs/data/allreduce.txt docs/img/allreduce.png
      `ddp-bench allreduce`: busbw against message size, SDK and raw Gloo
  plot.py bootstrap docs/data/bootstrap.txt docs/img/bootstrap.png
      scripts/bench/bootstrap_vs_torch.sh: N torch ranks bootstrap on one store
  plot.py reform docs/data/reform.txt docs/img/reform.png
      scripts/bench/reform_vs_restart.sh: a SIGKILLed rank, re-form in place vs restart
  plot.py launch_floor docs/data/launch_floor.txt docs/img/launch_floor.png
      scripts/bench/launch_floor.sh with OLD_BUILD_DIR: guarded, exec'd, bare and old wall times

Regenerate every plot: scripts/bench/plot.py all   (needs python3-matplotlib)
"""
import os
import re
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


def finish(fig, out):
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    print("wrote", out)


def loglog(ax, xlabel, ylabel, title):
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)


def log_bars(ax, ticks, labels, xlabel, ylabel, title):
    """A bar chart's axes: log y, one labelled tick per group, a grid along y only."""
    ax.set_yscale("log")
    ax.set_xticks(ticks)
    ax.set_xticklabels(labels)
    if xlabel:
        ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(True, axis="y", which="both", alpha=0.3)
    ax.legend(fontsize=8)


def rendezvous(src, out):
    """`ddp-bench rendezvous [--restart]`: the table row, then the restart line."""
    rows, n = [], None
    for line in open(src):
        first = re.match(r"\s*(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s", line)
        if first:
            n = int(first.group(1))
            rows.append({"n": n, "connect": float(first.group(2)), "watching": float(first.group(4))})
            continue
        m = re.search(r"all closed ([\d.]+) s, all watching ([\d.]+) s", line)
        if m and rows and rows[-1]["n"] == n:
            rows[-1]["restart"] = float(m.group(2))
    rows.sort(key=lambda r: r["n"])
    ns = [r["n"] for r in rows]
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    ax.plot(ns, [r["watching"] for r in rows], "o-", label="first round: start → all agents watching")
    ax.plot(ns, [r["watching"] - r["connect"] for r in rows], "^--",
            label="first round: last connect → all watching")
    restarted = [r for r in rows if "restart" in r]
    if restarted:
        ax.plot([r["n"] for r in restarted], [r["restart"] for r in restarted], "s-",
                label="restart: failure → all watching round 1")
    ax.plot(ns, [x / 10000 * 3 for x in ns], ":", color="grey", label="goal: 3 s at 10,000 (first round)")
    ax.plot(ns, [x / 10000 for x in ns], "-.", color="grey", label="goal: 1 s at 10,000 (restart)")
    loglog(
        ax, "simulated agents N", "seconds", "c10d rendezvous on one store (ddp-bench rendezvous --restart)"
    )
    finish(fig, out)


def launcher(src, out):
    """launcher_vs_torchrun.sh section 1: `N ddprun torchrun torchrun(0.1) ...` rows (ms)."""
    rows = []
    section = 0
    for line in open(src):
        m = re.match(r"(\d)\. ", line)
        if m:
            section = int(m.group(1))
            continue
        cells = line.split()
        if section == 1 and len(cells) >= 4 and cells[0].isdigit():
            rows.append([int(cells[0])] + [float(c) for c in cells[1:4]])
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    labels = [str(r[0]) for r in rows]
    x = range(len(rows))
    width = 0.27
    for i, (name, col) in enumerate(
        [("ddprun", 1), ("torchrun (monitor 0.1)", 3), ("torchrun (defaults)", 2)]
    ):
        ax.bar([p + (i - 1) * width for p in x], [r[col] for r in rows], width, label=name)
    log_bars(
        ax,
        list(x),
        labels,
        "workers (--nproc_per_node, --no_python /bin/true)",
        "wall time, ms (median)",
        "launch → all workers done: ddprun vs torchrun 1.13",
    )
    finish(fig, out)


def restart(src, out):
    """elastic_bench.py: 'restart (...): median X ms (min A, max B, n=K)' and 'reform ...'."""
    found = {}
    for line in open(src):
        m = re.match(r"(restart|reform) .*median ([\d.]+) ms \(min ([\d.]+), max ([\d.]+), n=(\d+)\)", line)
        if m:
            found[m.group(1)] = tuple(float(v) for v in m.group(2, 3, 4))
    names = {
        "restart": "worker failure →\nall nodes run replacements",
        "reform": "node kill -9 →\nworld of 2 runs",
    }
    keys = [k for k in ("restart", "reform") if k in found]
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    med = [found[k][0] for k in keys]
    err = [[found[k][0] - found[k][1] for k in keys], [found[k][2] - found[k][0] for k in keys]]
    ax.bar(range(len(keys)), med, 0.5, yerr=err, capsize=6, label="ddprun (median, min–max)")
    ax.axhline(
        5000, color="tab:red", linestyle="--", label="last call 5 s (what a re-rendezvous waited before)"
    )
    ax.axhline(100, color="grey", linestyle=":", label="goal 100 ms")
    log_bars(ax, range(len(keys)), [names[k] for k in keys], None, "ms",
             "elastic restart with last_call_timeout=5 (real agents)")
    finish(fig, out)


def reform(src, out):
    """reform_vs_restart.sh lines:
    'rep I POLICY: rank killed -> next step X ms, steps lost L, one step S ms, ...'."""
    reps = {"reform": [], "restart": []}
    step, lost = [], {}
    for line in open(src):
        m = re.match(r"rep \d+ (reform|restart): rank killed -> next step ([\d.]+) ms, steps lost (\d+), "
                     r"one step ([\d.]+) ms", line)
        if m:
            reps[m.group(1)].append(float(m.group(2)))
            lost[m.group(1)] = int(m.group(3))
            step.append(float(m.group(4)))
    one = statistics.median(step)
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    keys = ["reform", "restart"]
    med = [statistics.median(reps[k]) for k in keys]
    err = [
        [med[i] - min(reps[k]) for i, k in enumerate(keys)],
        [max(reps[k]) - med[i] for i, k in enumerate(keys)],
    ]
    ax.bar([0, 1], med, 0.4, yerr=err, capsize=6, label="SIGKILL → next completed step (median, min–max)")
    ax.bar([0.4, 1.4], [med[i] + lost[k] * one for i, k in enumerate(keys)], 0.4, color="tab:orange",
           label="… plus the lost steps done again")
    ax.axhline(
        50 + one,
        color="grey",
        linestyle=":",
        label="goal: 50 ms + one step (%.1f ms) = %.1f ms" % (one, 50 + one),
    )
    ax.set_xticks([0.2, 1.2])
    ax.set_xticklabels(["--on_failure=reform\n(%d steps lost)" % lost["reform"],
                        "--on_failure=restart\n(%d steps lost)" % lost["restart"]])
    ax.set_ylabel("ms")
    ax.set_title("4 Gloo workers, one SIGKILLed (%d reps)" % len(reps["reform"]), fontsize=10)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    finish(fig, out)


def allreduce(src, out):
    """`ddp-bench allreduce`: per 'allreduce: N ranks' block, rows
    'bytes iters | raw alg bus | sdk alg bus | ovh'."""
    blocks, ranks = {}, None
    for line in open(src):
        m = re.match(r"allreduce: (\d+) ranks", line)
        if m:
            ranks = int(m.group(1))
            blocks[ranks] = []
            continue
        parts = [p.split() for p in line.split("|")]
        if ranks and len(parts) == 4 and parts[0] and parts[0][0].isdigit():
            blocks[ranks].append((int(parts[0][0]), float(parts[1][1]), float(parts[2][1])))
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for r, rows in sorted(blocks.items()):
        line, = ax.plot([b for b, _, _ in rows], [s for _, _, s in rows], "o-", label="ddp SDK, %d ranks" % r)
        ax.plot([b for b, _, _ in rows], [g for _, g, _ in rows], "x--", color=line.get_color(),
                label="raw Gloo, %d ranks" % r)
    loglog(ax, "message bytes (float32 sum)", "busbw GB/s", "all-reduce, gloo over TCP on 127.0.0.1")
    finish(fig, out)


def bootstrap(src, out):
    """bootstrap_vs_torch.sh lines:
    'bootstrap server=S dialect=D ranks=N ... total_s=T ... server_cpu_s=C'."""
    runs = {}
    for line in open(src):
        m = re.match(r"bootstrap server=(\S+) dialect=(\d) ranks=(\d+) .*total_s=([\d.]+)", line)
        if not m:
            continue
        cpu = re.search(r"server_cpu_s=([\d.]+)", line)
        key = (m.group(1), int(m.group(2)))
        runs.setdefault(key, {}).setdefault(int(m.group(3)), []).append(
            (float(m.group(4)), float(cpu.group(1)) if cpu else None))
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(10, 4.2))
    names = {("torch", 1): "torch 1.13 TCPStore server", ("ddp", 1): "ddp-rendezvousd (torch 1.x protocol)",
             ("ddp", 2): "ddp-rendezvousd (torch 2.x protocol)"}
    for key, per_n in sorted(runs.items()):
        ns = sorted(per_n)
        label = names.get(key, "%s dialect %d" % key)
        ax.plot(ns, [statistics.median(t for t, _ in per_n[n]) for n in ns], "o-", label=label)
        cpu_ns = [n for n in ns if all(c is not None for _, c in per_n[n])]
        if cpu_ns:
            ax2.plot(cpu_ns, [max(statistics.median(c for _, c in per_n[n]), 0.005) for n in cpu_ns], "o-",
                     label=label)
    loglog(ax, "simulated torch ranks N", "seconds until the last rank is past the barrier",
           "process-group bootstrap over TCPStore (wall)")
    loglog(ax2, "simulated torch ranks N", "server CPU seconds", "the same runs: the server's CPU time")
    finish(fig, out)


def launch_floor(src, out):
    """launch_floor.sh: `N case wall spawn` rows (ms), one table per run; medians over the runs."""
    walls = {}
    for line in open(src):
        cells = line.split()
        if len(cells) == 4 and cells[0] in ("1", "8") and not cells[1].startswith("/"):
            walls.setdefault((int(cells[0]), cells[1]), []).append(float(cells[2]))
    ns = sorted({n for n, _ in walls})
    names = {
        "guarded": "guarded (guard server)",
        "exec": "guarded (each guard exec'd)",
        "bare": "bare (no guard)",
        "old": "before containment (24509ac)",
    }
    cases = [c for c in names if any((n, c) in walls for n in ns)]
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    width = 0.8 / len(cases)
    for i, c in enumerate(cases):
        xs = [k + (i - (len(cases) - 1) / 2) * width for k in range(len(ns))]
        ax.bar(xs, [statistics.median(walls.get((n, c), [0])) for n in ns], width, label=names[c])
    ax.set_xticks(list(range(len(ns))))
    ax.set_xticklabels([str(n) for n in ns])
    ax.set_xlabel("workers (--nproc_per_node, --no_python /bin/true)")
    ax.set_ylabel("wall time, ms (median of runs)")
    ax.set_title("ddprun --standalone launch: containment against the anchors", fontsize=10)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    finish(fig, out)


PLOTS = {"rendezvous": rendezvous, "launcher": launcher, "restart": restart, "allreduce": allreduce,
         "bootstrap": bootstrap, "reform": reform, "launch_floor": launch_floor}


def main():
    if len(sys.argv) == 2 and sys.argv[1] == "all":
        for name, fn in PLOTS.items():
            src = os.path.join(ROOT, "docs", "data", name + ".txt")
            if os.path.exists(src):
                fn(src, os.path.join(ROOT, "docs", "img", name + ".png"))
        return 0
    if len(sys.argv) != 4 or sys.argv[1] not in PLOTS:
        sys.stderr.write(__doc__)
        return 2
    kind, src, out = sys.argv[1:]
    try:
        PLOTS[kind](src, out)
    except OSError as e:
        sys.stderr.write("plot.py: %s: %s\n" % (e.filename or src, e.strerror or e))
        return 1
    except (ValueError, IndexError, KeyError, ZeroDivisionError, statistics.StatisticsError) as e:
        sys.stderr.write("plot.py %s: %s is not the output this plot reads (%s); see docs/performance.md "
                         "for the command that writes it\n" % (kind, src, e))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
