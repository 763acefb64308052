#!/usr/bin/env python3
"""Time one large TCPStore request against a running store server.

Sends torch 2.x's VALIDATE, then one MULTI_GET of N keys of K bytes (about
N*(K+8) bytes on the wire) and reports the seconds from the first byte sent to the
last reply byte read, and the server's CPU seconds over the same span
(utime+stime of --server-pid from /proc). The request arrives in whatever
reads the kernel delivers (typically 64 KiB), so a parser that starts over on
every read does quadratic work here.

Usage: tcpstore_big_request.py HOST:PORT --server-pid PID [--keys N] [--key-bytes K] [--repeat R]
"""
import argparse
import os
import socket
import struct
import time


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def recv_exact(s, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(min(1 << 20, n - len(buf)))
        if not chunk:
            raise SystemExit(f"server closed the connection after {len(buf)} of {n} reply bytes")
        buf += chunk
    return bytes(buf)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("endpoint")
    ap.add_argument("--server-pid", type=int, required=True)
    ap.add_argument("--keys", type=int, default=128 * 1024)
    ap.add_argument("--key-bytes", type=int, default=560)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    host, port = a.endpoint.rsplit(":", 1)
    parts = [b"\x0a", struct.pack("<Q", a.keys)]
    for i in range(a.keys):
        key = (b"/k%09d" % i).ljust(a.key_bytes, b"x")
        parts.append(struct.pack("<Q", len(key)) + key)
    request = b"".join(parts)
    reply_bytes = 8 * a.keys  # every key missing: one empty value each
    for r in range(a.repeat):
        s = socket.create_connection((host, int(port)))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.sendall(b"\x00\xce\xf7\x85\x3c")
        cpu0 = cpu_seconds(a.server_pid)
        t0 = time.perf_counter()
        s.sendall(request)
        recv_exact(s, reply_bytes)
        t1 = time.perf_counter()
        cpu1 = cpu_seconds(a.server_pid)
        s.close()
        print(f"run {r + 1}: request_mb={len(request) / 1e6:.1f} keys={a.keys} seconds={t1 - t0:.3f} "
              f"server_cpu_seconds={cpu1 - cpu0:.2f}")


if __name__ == "__main__":
    main()
