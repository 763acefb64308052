#!/usr/bin/python3
"""Plots `ddp-bench rendezvous --restart` output against N (docs/performance.md).

Usage: ddp-bench rendezvous --restart ... > out.txt
       /usr/bin/python3 scripts/bench/plot_rendezvous_restart.py out.txt docs/img/rendezvous_restart.svg
Needs Debian's python3-matplotlib.
"""
import re
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def parse(path):
    rows, n = [], None
    for line in open(path):
        first = re.match(r"\s*(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s", line)
        if first:
            n = int(first.group(1))
            round0 = float(first.group(4)) - float(first.group(2))  # connected -> watching
            continue
        m = re.search(r"all closed ([\d.]+) s, all watching ([\d.]+) s, ([\d.]+) req/agent", line)
        if m and n is not None:
            rows.append((n, float(m.group(1)), float(m.group(2)), float(m.group(3)), round0))
    return sorted(rows)


def main():
    rows = parse(sys.argv[1])
    n = [r[0] for r in rows]
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    ax.plot(n, [r[1] for r in rows], "o-", label="restart: failure → all hold round 1")
    ax.plot(n, [r[2] for r in rows], "s-", label="restart: failure → all watching round 1")
    ax.plot(n, [r[4] for r in rows], "^--", label="first round: last connect → all watching")
    ax.plot(n, [n_ / 10000 for n_ in n], ":", color="grey", label="goal slope: 1 s at 10,000")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("simulated agents N")
    ax.set_ylabel("seconds")
    ax.set_title("ddp-bench rendezvous --restart (one daemon)")
    ax.legend(fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    ax2.plot(n, [r[3] for r in rows], "o-")
    ax2.set_xscale("log")
    ax2.set_ylim(0, 14)
    ax2.set_xlabel("simulated agents N")
    ax2.set_ylabel("requests per agent in the restart")
    ax2.set_title("cost per agent is flat in N")
    ax2.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(sys.argv[2])


if __name__ == "__main__":
    main()
