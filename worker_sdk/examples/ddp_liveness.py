"""Heartbeats and sections from Python, without the C++ SDK.

A plain-Python writer of ddprun's liveness file (docs/agent.md, "The liveness
file, byte for byte"); copy it into your project. Use it from the training
loop's thread:

    import ddp_liveness as live
    for batch in loader:
        with live.section("step"):
            live.heartbeat()
            train_step(batch)

Outside ddprun (DDP_LIVENESS_FILE unset) both do nothing.
"""
import contextlib
import mmap
import os
import struct
import time

_MAGIC = b"DDPL"
_NO_SECTION = 0xFFFFFFFF
_MAX_SECTIONS = 16
_mem = None
_pipe = -1
_slots = {}


def _open():
    global _mem, _pipe
    path = os.environ.get("DDP_LIVENESS_FILE")
    if not path:
        return False
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        try:
            mem = mmap.mmap(fd, 4096)
        finally:
            os.close(fd)
    except OSError:
        return False
    if mem[0:4] != _MAGIC or struct.unpack_from("<I", mem, 4)[0] != 1:
        return False
    _mem = mem
    pipe = os.environ.get("DDP_LIVENESS_PIPE")
    if pipe:
        try:
            _pipe = os.open(pipe, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            pass
    return True


_enabled = _open()


def _u32(off):
    return struct.unpack_from("<I", _mem, off)[0]


def _u64(off):
    return struct.unpack_from("<Q", _mem, off)[0]


def _notify():
    if _pipe >= 0:
        try:
            os.write(_pipe, b"x")
        except OSError:
            pass  # a full pipe already holds a wake-up


def heartbeat():
    if not _enabled:
        return
    now = time.monotonic_ns()
    last = _u64(24)
    if last and now - last > _u64(32):
        struct.pack_into("<Q", _mem, 32, now - last)
    struct.pack_into("<Q", _mem, 24, now)
    struct.pack_into("<Q", _mem, 16, _u64(16) + 1)
    if _u32(48):
        struct.pack_into("<I", _mem, 48, 0)
        _notify()


def _slot(name):
    data = name.encode()[:32]
    if data in _slots:
        return _slots[data]
    used = min(_u32(52), _MAX_SECTIONS)
    for i in range(used):
        off = 128 + 64 * i
        if _u32(off) == 1 and bytes(_mem[off + 8:off + 8 + _u32(off + 4)]) == data:
            _slots[data] = i
            return i
    slot = _u32(52)
    struct.pack_into("<I", _mem, 52, slot + 1)
    if slot >= _MAX_SECTIONS:
        slot = _NO_SECTION
    else:
        off = 128 + 64 * slot
        _mem[off + 8:off + 8 + len(data)] = data
        struct.pack_into("<I", _mem, off + 4, len(data))
        struct.pack_into("<I", _mem, off, 1)
    _slots[data] = slot
    return slot


def _set_section(slot, at):
    seq = _u64(64)
    struct.pack_into("<Q", _mem, 64, seq + 1)
    struct.pack_into("<QI", _mem, 72, at, slot)
    struct.pack_into("<Q", _mem, 64, seq + 2)
    if slot != _NO_SECTION and at < _u64(40) and (_u32(56) >> slot) & 1:
        _notify()


@contextlib.contextmanager
def section(name):
    if not _enabled:
        yield
        return
    slot = _slot(name)
    outer = _u32(80)
    enter = time.monotonic_ns()
    _set_section(slot, enter)
    try:
        yield
    finally:
        now = time.monotonic_ns()
        if slot != _NO_SECTION:
            off = 128 + 64 * slot
            took = now - enter
            if took > _u64(off + 48):
                struct.pack_into("<Q", _mem, off + 48, took)
            struct.pack_into("<Q", _mem, off + 56, _u64(off + 56) + took)
            struct.pack_into("<Q", _mem, off + 40, _u64(off + 40) + 1)
        _set_section(outer, 0 if outer == _NO_SECTION else now)
