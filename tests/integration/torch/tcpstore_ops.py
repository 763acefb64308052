"""Every operation torch's own TCPStore client sends, against HOST PORT.

Exits 0 when the server answered each the way torch's own server does;
an AssertionError names the operation otherwise. With torch 2.x, also the
Store API 1.13 did not have (multi_get/multi_set, append, queue_*, list_keys,
barrier), each where the installed client has it.

  tcpstore_ops.py HOST PORT     against a server
  tcpstore_ops.py --torch       against torch's own server (the judge of
                                what each answer should be), in this process
  (no arguments: MASTER_ADDR/MASTER_PORT, as a worker of a launcher)
"""
import datetime
import os
import sys
import threading

import torch.distributed as dist

timeout = datetime.timedelta(seconds=10)
if sys.argv[1:] == ["--torch"]:
    server = dist.TCPStore("127.0.0.1", 0, 1, True, timeout=timeout, wait_for_workers=False)
    host, port = "127.0.0.1", server.port
else:
    # HOST PORT, or the launcher's MASTER_ADDR/MASTER_PORT when run as a worker.
    host = sys.argv[1] if len(sys.argv) > 2 else os.environ["MASTER_ADDR"]
    port = int(sys.argv[2] if len(sys.argv) > 2 else os.environ["MASTER_PORT"])


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

# torch 2.x's Store API beyond 1.13, each where the client has it.
if hasattr(s, "multi_set"):
    s.multi_set(["m1", "m2"], ["a", bytes([0, 98])])
    assert s.multi_get(["m1", "m2"]) == [b"a", bytes([0, 98])], "multi_set/multi_get"
if hasattr(s, "append"):
    s.append("ap", "x")
    s.append("ap", "yz")
    assert s.get("ap") == b"xyz", "append creates, then appends"
if hasattr(s, "check"):
    assert s.check(["later"]) is True, "check of a present key"
    assert s.check(["later", "nope"]) is False, "check with a missing key"
if hasattr(s, "queue_push"):
    s.queue_push("q", "1")
    s.queue_push("q", "2")
    assert s.queue_len("q") == 2, "queue_len"
    assert s.queue_pop("q") == b"1", "queue_pop is FIFO"
    assert s.queue_pop("q", False) == b"2", "non-blocking queue_pop"
    assert s.queue_len("q") == 0, "queue_len after the pops"
    try:
        s.queue_pop("q", False)
        raise AssertionError("a non-blocking pop of an empty queue must raise")
    except dist.QueueEmptyError:
        pass
    popped = {}
    t = threading.Thread(target=lambda: popped.setdefault("v", s.queue_pop("q2")))
    t.start()
    client().queue_push("q2", "late")
    t.join(10)
    assert popped.get("v") == b"late", "blocking queue_pop released by another client's push"
if hasattr(s, "list_keys"):
    keys = s.list_keys()
    assert "later" in keys and "/worker/attempt_0/x" in keys, f"list_keys {keys}"
if hasattr(s, "barrier"):
    clients = [client() for _ in range(3)]
    errors = []

    def arrive(c):
        try:
            c.barrier("b", 3, datetime.timedelta(seconds=10))
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(e)

    threads = [threading.Thread(target=arrive, args=(c,)) for c in clients]
    for t in threads:
        t.start()
    for t in threads:
        t.join(15)
    assert not errors and not any(t.is_alive() for t in threads), f"barrier of 3: {errors}"
    try:
        client().barrier("b2", 2, datetime.timedelta(milliseconds=300))
        raise AssertionError("a barrier nobody else reaches must time out")
    except RuntimeError:  # torch's DistStoreError derives from it
        pass
    # The timed-out arrival stays counted: the second one completes b2 at once.
    client().barrier("b2", 2, datetime.timedelta(seconds=5))
    s.set("after_barrier", "ok")  # the connection that timed out still works
    assert s.get("after_barrier") == b"ok", "a request after a barrier timeout"
print("tcpstore ops ok", flush=True)
