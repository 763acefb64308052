#!/usr/bin/env python3
"""Attack a running ddp-rendezvousd that requires a token, as an unauthenticated client would.

flood: opens N connections, each sending a HELLO frame of the largest size a
server takes before authentication (64 KiB) but one byte short, and keeps them
open; waits until the daemon has read every byte (rx_queue in /proc/net/tcp),
then reports the daemon's VmRSS growth, how many flood connections it closed
(the oldest and the newest of them are named), and whether an authenticated
client's 2 MiB set still succeeds.

lockout: from the same address, sends wrong tokens until F of them were
compared (waiting out each "retry in N ms" a server may answer, as a patient
guesser does), then reports how long a client with the right token takes to
get in.

Usage: preauth_attack.py HOST:PORT --server-pid PID --token-file FILE flood [--connections N]
       preauth_attack.py HOST:PORT --server-pid PID --token-file FILE lockout [--failures F]
Raise `ulimit -n` above 2*N for a flood, for this process and the daemon.
"""
import argparse
import re
import resource
import socket
import struct
import time

HELLO_CAP = 64 * 1024


def frame(op, rid, a, b, keys=(), values=()):
    body = struct.pack("<BIqqI", op, rid, a, b, len(keys))
    body += b"".join(struct.pack("<I", len(k)) + k for k in keys)
    body += struct.pack("<I", len(values)) + b"".join(struct.pack("<I", len(v)) + v for v in values)
    return struct.pack("<I", len(body)) + body


def recv_exact(s, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def reply(s):
    """(status, message) of the next response, or None when the server closed."""
    head = recv_exact(s, 4)
    body = head and recv_exact(s, struct.unpack("<I", head)[0])
    if not body:
        return None
    mlen = struct.unpack("<I", body[21:25])[0]
    return body[4], body[25:25 + mlen].decode(errors="replace")


def connect(host, port, token=None):
    s = socket.create_connection((host, port))
    s.settimeout(10)
    if token is not None:
        s.sendall(b"\xddDPS" + frame(1, 1, 1, 0, values=[token]))
    return s


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) // 1024
    return -1


def unread(port):
    total = 0
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            fields = line.split()
            if fields[3] == "01" and int(fields[1].split(":")[1], 16) == port:
                total += int(fields[4].split(":")[1], 16)
    return total


def closed(s):
    s.setblocking(False)
    try:
        return s.recv(1) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def flood(args, host, port, token):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, 2 * args.connections + 64)), hard))
    good = connect(host, port, token)
    if reply(good)[0] != 0:
        raise SystemExit("the right token was refused before the flood")
    before = rss_mib(args.server_pid)
    part = b"\xddDPS" + struct.pack("<I", HELLO_CAP) + b"h" * (HELLO_CAP - 1)
    socks = []
    for _ in range(args.connections):
        s = connect(host, port)
        try:
            s.sendall(part)
        except OSError:
            pass
        socks.append(s)
    while unread(port) > 0:
        time.sleep(0.05)
    after = rss_mib(args.server_pid)
    gone = [i for i, s in enumerate(socks) if closed(s)]
    good.sendall(frame(2, 9, 0, 0, keys=[b"big"], values=[b"b" * (2 << 20)]))
    r = reply(good)
    print(f"flood of {args.connections} half-sent 64 KiB HELLOs: daemon VmRSS {before} -> {after} MiB "
          f"(+{after - before}); {len(gone)} flood connections closed"
          + (f" (first #{gone[0]}, last #{gone[-1]})" if gone else ""))
    print("authenticated 2 MiB set after the flood: " +
          ("closed by the server" if r is None else ("ok" if r[0] == 0 else f"status {r[0]}: {r[1]}")))


def lockout(args, host, port, token):
    failed, i = 0, 0
    while failed < args.failures:
        s = connect(host, port, b"guess%d" % i)
        i += 1
        r = reply(s)
        s.close()
        m = r and re.search(r"retry in (\d+) ms", r[1])
        if m:
            time.sleep(int(m.group(1)) / 1000)
        else:
            failed += 1
    t0, tries, first = time.monotonic(), 0, None
    while True:
        tries += 1
        s = connect(host, port, token)
        r = reply(s)
        s.close()
        if r and r[0] == 0:
            break
        first = first or (r[1] if r else "closed")
        time.sleep(0.05)
    print(
        f"after {args.failures} wrong tokens the right one got in after "
        f"{(time.monotonic() - t0) * 1000:.0f} ms ({tries} tries)"
        + (f"; first answer: {first}" if first else "")
    )


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("endpoint")
    ap.add_argument("--server-pid", type=int, required=True)
    ap.add_argument("--token-file", required=True)
    sub = ap.add_subparsers(dest="attack", required=True)
    f = sub.add_parser("flood")
    f.add_argument("--connections", type=int, default=4200)
    lo = sub.add_parser("lockout")
    lo.add_argument("--failures", type=int, default=9)
    args = ap.parse_args()
    host, port = args.endpoint.rsplit(":", 1)
    with open(args.token_file, "rb") as f:
        token = f.read().rstrip(b" \t\r\n")
    (flood if args.attack == "flood" else lockout)(args, host, int(port), token)


if __name__ == "__main__":
    main()
