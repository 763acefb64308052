"""Heartbeats and sections for Python workers under ddprun.

Writes the agent's liveness file (docs/agent-liveness.md, "The liveness
file, byte for byte"), so `--heartbeat_timeout` and `--section_timeouts`
catch a hung rank:

    from ddprun import liveness

    for batch in loader:
        with liveness.section("step"):
            liveness.heartbeat()
            train_step(batch)

    @liveness.section("checkpoint")
    def save(): ...

Standard library only (no torch): importing it costs microseconds. A heartbeat
and a section are a few stores into shared memory, no system call unless the
agent asked to hear of the change. Use sections from one thread (a process has
one current section); heartbeats from any. Outside ddprun (DDP_LIVENESS_FILE
unset) both do nothing, after one warning on first use.
"""
import mmap
import os
import struct
import time

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs milliseconds to import: not at run time (its names are quoted)
    from typing import Callable, Dict, Optional, TypeVar

    F = TypeVar("F", bound=Callable[..., object])

__all__ = ["heartbeat", "section", "enabled"]

_MAGIC = b"DDPL"
_VERSION = 1
_SIZE = 4096
_NO_SECTION = 0xFFFFFFFF
_MAX_SECTIONS = 16
_NAME_MAX = 32

# Header offsets (the table in docs/agent-liveness.md).
_HEARTBEATS = 16
_LAST_BEAT = 24
_LONGEST_GAP = 32
_NOTIFY_ENTRY_BEFORE = 40
_NOTIFY_BEAT = 48
_SLOTS_CLAIMED = 52
_NOTIFY_SLOTS = 56
_SECTION_SEQ = 64
_SECTION_AT = 72
_SECTION_SLOT = 80
_SLOT0 = 128
_SLOT_SIZE = 64

_mem: "Optional[mmap.mmap]" = None
_pipe = -1
_slots: "Dict[bytes, int]" = {}
_why_off = ""  # why heartbeats do nothing: told once, on first use
_warned = False


def _open() -> None:
    global _mem, _pipe, _why_off
    path = os.environ.get("DDP_LIVENESS_FILE")
    if not path:
        _why_off = "DDP_LIVENESS_FILE is not set (not started by ddprun)"
        return
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        try:
            mem = mmap.mmap(fd, _SIZE)
        finally:
            os.close(fd)
    except (OSError, ValueError) as e:
        _why_off = f"cannot map DDP_LIVENESS_FILE={path}: {e}"
        return
    if mem[0:4] != _MAGIC or struct.unpack_from("<I", mem, 4)[0] != _VERSION:
        _why_off = (
            f"DDP_LIVENESS_FILE={path} is not a version {_VERSION} liveness file (ddprun too new or too old?)"
        )
        mem.close()
        return
    _mem = mem
    pipe = os.environ.get("DDP_LIVENESS_PIPE")
    if pipe:
        try:
            _pipe = os.open(pipe, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            pass  # the agent still sees every change when its timer fires


_open()


def enabled() -> bool:
    """True when this process writes a liveness file that ddprun watches."""
    return _mem is not None


def _warn_once() -> None:
    global _warned
    if _warned:
        return
    _warned = True
    import warnings

    warnings.warn(f"ddprun.liveness does nothing: {_why_off}", RuntimeWarning, stacklevel=3)


def _u32(off: int) -> int:
    assert _mem is not None
    value: int = struct.unpack_from("<I", _mem, off)[0]
    return value


def _u64(off: int) -> int:
    assert _mem is not None
    value: int = struct.unpack_from("<Q", _mem, off)[0]
    return value


def _notify() -> None:
    if _pipe >= 0:
        try:
            os.write(_pipe, b"x")
        except OSError:
            pass  # a full pipe already holds a wake-up


def heartbeat() -> None:
    """Tells ddprun this worker is making progress."""
    mem = _mem
    if mem is None:
        _warn_once()
        return
    now = time.monotonic_ns()
    last = _u64(_LAST_BEAT)
    if last and now - last > _u64(_LONGEST_GAP):
        struct.pack_into("<Q", mem, _LONGEST_GAP, now - last)
    struct.pack_into("<Q", mem, _LAST_BEAT, now)
    struct.pack_into("<Q", mem, _HEARTBEATS, _u64(_HEARTBEATS) + 1)
    if _u32(_NOTIFY_BEAT):
        struct.pack_into("<I", mem, _NOTIFY_BEAT, 0)
        _notify()


def _slot(name: str) -> int:
    assert _mem is not None
    data = name.encode()[:_NAME_MAX]
    found = _slots.get(data)
    if found is not None:
        return found
    used = min(_u32(_SLOTS_CLAIMED), _MAX_SECTIONS)
    for i in range(used):
        off = _SLOT0 + _SLOT_SIZE * i
        if _u32(off) == 1 and bytes(_mem[off + 8 : off + 8 + _u32(off + 4)]) == data:
            _slots[data] = i
            return i
    slot = _u32(_SLOTS_CLAIMED)
    struct.pack_into("<I", _mem, _SLOTS_CLAIMED, slot + 1)
    if slot >= _MAX_SECTIONS:
        slot = _NO_SECTION  # more than 16 names: outside any section
    else:
        off = _SLOT0 + _SLOT_SIZE * slot
        _mem[off + 8 : off + 8 + len(data)] = data
        struct.pack_into("<I", _mem, off + 4, len(data))
        struct.pack_into("<I", _mem, off, 1)
    _slots[data] = slot
    return slot


def _set_section(slot: int, at: int) -> None:
    assert _mem is not None
    seq = _u64(_SECTION_SEQ)
    struct.pack_into("<Q", _mem, _SECTION_SEQ, seq + 1)
    struct.pack_into("<QI", _mem, _SECTION_AT, at, slot)
    struct.pack_into("<Q", _mem, _SECTION_SEQ, seq + 2)
    if slot != _NO_SECTION and at < _u64(_NOTIFY_ENTRY_BEFORE) and (_u32(_NOTIFY_SLOTS) >> slot) & 1:
        _notify()


class section:
    """The code inside is in section `name` (≤ 32 bytes of UTF-8): ddprun
    kills the worker when it stays longer than `--section_timeouts` allows.
    Sections nest. A context manager (`with section("step"):`) and a
    decorator (`@section("checkpoint")`: each call is the section)."""

    __slots__ = ("_name", "_slot", "_outer", "_enter")

    def __init__(self, name: str) -> None:
        self._name = name
        self._slot = _NO_SECTION
        self._outer = _NO_SECTION
        self._enter = 0

    def __enter__(self) -> None:
        if _mem is None:
            _warn_once()
            return
        self._slot = _slot(self._name)
        self._outer = _u32(_SECTION_SLOT)
        self._enter = time.monotonic_ns()
        _set_section(self._slot, self._enter)

    def __exit__(self, *exc: object) -> None:
        mem = _mem
        if mem is None:
            return
        now = time.monotonic_ns()
        slot = self._slot
        if slot != _NO_SECTION:
            off = _SLOT0 + _SLOT_SIZE * slot
            took = now - self._enter
            if took > _u64(off + 48):
                struct.pack_into("<Q", mem, off + 48, took)
            struct.pack_into("<Q", mem, off + 56, _u64(off + 56) + took)
            struct.pack_into("<Q", mem, off + 40, _u64(off + 40) + 1)
        _set_section(self._outer, 0 if self._outer == _NO_SECTION else now)

    def __call__(self, func: "F") -> "F":
        import functools

        name = self._name

        @functools.wraps(func)
        def in_section(*args: object, **kwargs: object) -> object:
            with section(name):  # a fresh one per call: calls may nest or recurse
                return func(*args, **kwargs)

        return in_section  # type: ignore[return-value]
