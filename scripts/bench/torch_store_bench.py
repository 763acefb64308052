#!/usr/bin/python3
"""PyTorch TCPStore side of scripts/bench/store_vs_torch.sh.

One torch TCPStore server (in this process) and N client processes, each with
its own torch.distributed.TCPStore client doing M gets of its own key, like
`ddp-bench store --op get`. Prints one line in ddp-bench's format:
  torch op=get clients=4 ops=... seconds=... ops_per_s=... p50_us=... p99_us=...
Run with Debian's python3-torch (/usr/bin/python3).
"""
import argparse
import datetime
import multiprocessing as mp
import time

import torch.distributed as dist


def client(port, index, ops, value_size, barrier, results):
    store = dist.TCPStore("127.0.0.1", port, None, False, datetime.timedelta(seconds=60))
    key = "bench/%d" % index
    store.set(key, "v" * value_size)
    lat = []
    now = time.perf_counter_ns
    barrier.wait()
    for _ in range(ops):
        t0 = now()
        store.get(key)
        lat.append(now() - t0)
    results.put(lat)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--ops", type=int, default=20000, help="gets per client")
    ap.add_argument("--value-size", type=int, default=16)
    args = ap.parse_args()

    server = dist.TCPStore("127.0.0.1", 0, None, True, datetime.timedelta(seconds=60),
                           wait_for_workers=False)
    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(args.clients + 1)
    results = ctx.Queue()
    procs = [ctx.Process(target=client, args=(server.port, i, args.ops, args.value_size, barrier, results))
             for i in range(args.clients)]
    for p in procs:
        p.start()
    barrier.wait()
    t0 = time.perf_counter()
    lat = []
    for _ in procs:
        lat.extend(results.get())
    seconds = time.perf_counter() - t0
    for p in procs:
        p.join()
    lat.sort()

    def pct(p):
        return lat[min(len(lat) - 1, int(p * len(lat)))] / 1000.0

    print("torch op=get clients=%d ops=%d value_size=%d seconds=%.3f ops_per_s=%.0f p50_us=%.1f p99_us=%.1f"
          % (args.clients, len(lat), args.value_size, seconds, len(lat) / seconds, pct(0.50), pct(0.99)),
          flush=True)


if __name__ == "__main__":
    main()
