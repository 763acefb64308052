"""Every operation torch's own TCPStore client sends, against HOST PORT.

Exits 0 when the server answered each the way torch's own server does;
an AssertionError names the operation otherwise.
"""
import datetime
import os
import sys
import threading

import torch.distributed as dist

# HOST PORT, or the launcher's MASTER_ADDR/MASTER_PORT when run as a worker.
host = sys.argv[1] if len(sys.argv) > 2 else os.environ["MASTER_ADDR"]
port = int(sys.argv[2] if len(sys.argv) > 2 else os.environ["MASTER_PORT"])
timeout = datetime.timedelta(seconds=10)


def client():
    return dist.TCPStore(host, port, 1, False, timeout=timeout)


s = client()
s.set("k", "v1")
assert s.get("k") == b"v1", "set/get"
s.set("bin", bytes(range(256)))
assert s.get("bin") == bytes(range(256)), "binary value"

# add stores decimal text and returns the new value
assert s.add("ctr", 5) == 5, "add on a missing key"
assert s.add("ctr", -2) == 3, "add"
assert s.get("ctr") == b"3", "add stores decimal text"

# compare_set: torch semantics
assert s.compare_set("k", "v1", "v2") == b"v2", "compare_set swap"
assert s.compare_set("k", "nope", "v3") == b"v2", "compare_set mismatch returns current"
assert s.compare_set("absent", "x", "y") == b"x", "compare_set on a missing key returns expected"
assert s.compare_set("fresh", "", "new") == b"new", "compare_set creates with empty expected"

# wait/get block until another client sets the key
other = client()
got = {}
t = threading.Thread(target=lambda: got.setdefault("v", s.get("later")))
t.start()
other.set("later", "here")
t.join(10)
assert got.get("v") == b"here", "blocking get released by another client"
s.wait(["k", "later"])
try:
    s.wait(["never"], datetime.timedelta(milliseconds=200))
    raise AssertionError("wait on a missing key must time out")
except RuntimeError as e:
    assert "imeout" in str(e), f"wait timeout error: {e}"

# a fresh client, since torch 1.13 leaves a timed-out wait pending on its socket
s = client()
n = s.num_keys()
assert n >= 6, f"num_keys {n}"
assert s.delete_key("k") is True, "delete_key existing"
assert s.delete_key("k") is False, "delete_key missing"
assert s.num_keys() == n - 1, "num_keys after delete"

# PrefixStore, as torch's env:// rendezvous uses it
p = dist.PrefixStore("/worker/attempt_0", s)
p.set("x", "y")
assert p.get("x") == b"y", "prefix store"
assert s.get("/worker/attempt_0/x") == b"y", "prefix layout"
print("tcpstore ops ok", flush=True)
