"""What ddprun.elastic needs below torch's API: the workers' store as a torch
TCPStore client, the sockets a process group owns, the error file.
"""
from __future__ import annotations

import datetime
import json
import os
import socket
import sys
import time
import traceback
from typing import Dict

# The error file's type of an uncaught MembershipChanged: the agent falls back
# to --on_failure=restart on it (agent/src/reform.cpp), as for the C++ SDK.
ERROR_TYPE = "ddp::MembershipChanged"


def say(line: str) -> None:
    """One line on stderr, named after the module."""
    print("ddprun.elastic: " + line, file=sys.stderr, flush=True)


def env_count(name: str, default: int) -> int:
    """A positive number of workers (`default` when unset)."""
    text = os.environ.get(name, "")
    if not text:
        return default
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"{name}='{text}' is not valid: give a positive number of workers")
    return int(text)


def verbose() -> bool:
    """DDP_LOG_LEVEL asks for info lines (as the C++ SDK's logger reads it)."""
    return os.environ.get("DDP_LOG_LEVEL", "").lower() in ("trace", "debug", "info")


def info(line: str) -> None:
    """say(line) at DDP_LOG_LEVEL=info or more."""
    if verbose():
        say(line)


def env_seconds(name: str, default: float, allow_zero: bool = False) -> float:
    text = os.environ.get(name, "")
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if value < 0 or (value == 0 and not allow_zero) or value != value:
        what = "a number of seconds (0: never)" if allow_zero else "a positive number of seconds"
        raise ValueError(f"{name}='{text}' is not valid: give {what}")
    return value


class Store:
    """A TCPStore client of the round's store itself ($DDP_STORE_ENDPOINT).

    Not the torch store proxy behind MASTER_PORT: the proxy gives a process
    that comes back after its local rank's connections all closed (a
    replacement) a namespace of its own (docs/rendezvous.md), and the re-form
    keys must be the same for every incarnation. TCPStore puts "/" before
    every key, so a key of the store, which starts with "/", is named here
    without it.
    """

    def __init__(self, endpoint: str, timeout_s: float):
        import torch.distributed as dist

        host, _, port = endpoint.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"DDP_STORE_ENDPOINT='{endpoint}' is not HOST:PORT")
        self.client = dist.TCPStore(host.strip("[]"), int(port), is_master=False,
                                    timeout=datetime.timedelta(seconds=timeout_s),
                                    wait_for_workers=False)

    @staticmethod
    def name(key: str) -> str:
        if not key.startswith("/"):
            raise ValueError(f"store key '{key}' does not start with '/' (DDP_STORE_PREFIX)")
        return key[1:]

    def read(self, key: str) -> int:
        return int(self.client.add(self.name(key), 0))

    def add(self, key: str, delta: int) -> int:
        return int(self.client.add(self.name(key), delta))

    def set(self, key: str, value: str) -> None:
        self.client.set(self.name(key), value)

    def append(self, key: str, value: str) -> None:
        self.client.append(self.name(key), value)

    def exists(self, key: str) -> bool:
        return bool(self.client.check([self.name(key)]))

    def get(self, key: str) -> str:
        return self.client.get(self.name(key)).decode()


def poll_until(until: float, moved, fast_s: float = 0.2) -> bool:
    """Calls moved() every 0.5 ms for fast_s, then every 10 ms, until it holds
    or the monotonic time `until` passes."""
    slow_from = time.monotonic() + fast_s
    while True:
        if moved():
            return True
        now = time.monotonic()
        if now >= until:
            return False
        time.sleep(0.0005 if now < slow_from else 0.01)


def tcp_sockets() -> Dict[int, str]:
    """This process's socket descriptors: fd -> "socket:[inode]"."""
    out = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            link = os.readlink("/proc/self/fd/" + name)
        except OSError:
            continue
        if link.startswith("socket:"):
            out[int(name)] = link
    return out


def new_sockets(before: Dict[int, str]) -> Dict[int, str]:
    return {fd: link for fd, link in tcp_sockets().items() if before.get(fd) != link}


def _connected_tcp(fd: int) -> bool:
    """Whether descriptor fd is a TCP socket that is not listening."""
    try:
        s = socket.socket(fileno=fd)
    except OSError:
        return False
    try:
        return s.family in (socket.AF_INET, socket.AF_INET6) and s.type == socket.SOCK_STREAM and \
            not s.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
    except OSError:
        return False
    finally:
        s.detach()


def connections(sockets: Dict[int, str]) -> Dict[int, str]:
    """Those of `sockets` that are connected TCP sockets (not listening ones)."""
    return {fd: link for fd, link in sockets.items() if _connected_tcp(fd)}


def all_closed(sockets: Dict[int, str]) -> bool:
    """Whether none of `sockets` is still open as recorded."""
    for fd, link in sockets.items():
        try:
            if os.readlink(f"/proc/self/fd/{fd}") == link:
                return False
        except OSError:
            pass
    return True


def shut_down(sockets: Dict[int, str]) -> int:
    """shutdown(2) of every connected TCP socket in `sockets` still open as
    recorded: Gloo's event loop sees each as closed by its peer, so an
    operation blocked on it fails, and so do the peers' operations on this
    process. torch's abort does not do it for Gloo (2.15: a no-op there).
    Listening sockets stay (Gloo's listener aborts the process on an error)."""
    done = 0
    for fd, link in sockets.items():
        try:
            if os.readlink(f"/proc/self/fd/{fd}") != link or not _connected_tcp(fd):
                continue  # closed (and the number reused since), or listening
            s = socket.socket(fileno=fd)
        except OSError:
            continue
        try:
            s.shutdown(socket.SHUT_RDWR)
            done += 1
        except OSError:
            pass
        finally:
            s.detach()
    return done


def write_error_file(message: str, stack: str) -> None:
    """The torchelastic error file, with the type the agent reads."""
    path = os.environ.get("TORCHELASTIC_ERROR_FILE", "")
    if not path or os.path.exists(path):
        return
    doc = {"message": {"message": message, "extraInfo": {
        "py_callstack": stack, "timestamp": str(int(time.time())), "error_type": ERROR_TYPE}}}
    try:
        with open(path, "w") as f:
            json.dump(doc, f)
    except OSError:
        pass


def hook_uncaught(kind: type) -> None:
    """An uncaught `kind` leaves the error file that makes the agent fall back
    to restart (as the C++ SDK's ddp::run does)."""
    previous = sys.excepthook

    def hook(etype, value, tb):
        if isinstance(value, kind):
            write_error_file(f"{etype.__name__}: {value}", "".join(traceback.format_tb(tb)))
        previous(etype, value, tb)

    sys.excepthook = hook


def parse_members(text: str, n: int):
    """The first n entries of "<slot>:<s>,..." as (slot, holds_state), by slot."""
    members = []
    for entry in text.split(","):
        if len(members) >= n:
            break
        if not entry:
            continue
        slot, sep, state = entry.partition(":")
        if not sep or not slot.isdigit():
            raise RuntimeError(f"reform: bad member entry '{entry}'")
        members.append((int(slot), state == "1"))
    return sorted(members)
