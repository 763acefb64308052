"""Joining a generation (docs/reform.md, "A worker joins generation G"), as the
C++ SDK's ElasticGroup::Impl::join does."""
from __future__ import annotations

import time
from typing import List, Optional

from . import _elastic_io as io
from . import _reform_keys as keys


def _joined(eg, g: int) -> List[int]:
    """The slots that joined generation g so far."""
    key = keys.reform_members_key(eg._root, g)
    text = eg._store.get(key) if eg._store.exists(key) else ""
    return [s for s, _ in io.parse_members(text, 1 << 30)]


def _timed_out(eg, g: int, n: int, candidates: List[int]) -> None:
    joined = _joined(eg, g)
    missing = [s for s in candidates if s not in joined]
    raise TimeoutError(
        f"reform: slot {eg.slot} timed out after {eg._reform_timeout:g} s waiting for generation {g} "
        f"to gather {n} member(s) (joined: {_ints(joined)}; never joined: slot(s) {_ints(missing)}); "
        "set DDP_REFORM_TIMEOUT (seconds) to wait longer")


def _ints(v: List[int]) -> str:
    return ", ".join(str(x) for x in v) or "none"


def _report_stall(eg, g: int, candidates: List[int]) -> None:
    """R/stalled = g: the agent of a slot that never joins g kills and replaces
    it (a survivor stopped or stuck in the kernel; docs/reform.md)."""
    eg._store.set(keys.reform_stalled_key(eg._root), str(g))
    joined = _joined(eg, g)
    io.say(f"reform: generation {g} waited {eg._stall_s:g} s (DDP_REFORM_STALL_TIMEOUT); slot(s) "
           f"{_ints([s for s in candidates if s not in joined])} never joined (joined: {_ints(joined)})")


def _gather(eg, g: int, deadline: float, candidates: List[int]) -> Optional[int]:
    """Waits until generation g is full (None) or abandoned for a newer one
    (returned). Polls the full key: a torch client's timed-out wait logs.
    Past the stall timeout (re-forms only, not the first world) it names the
    generation as stalled, again every as long while it lasts."""
    full = keys.reform_full_key(eg._root, g)
    newer: List[int] = []
    stall_at = [time.monotonic() + eg._stall_s if g > 0 and eg._stall_s > 0 else float("inf")]

    def settled() -> bool:
        if eg._store.exists(full):
            return True
        now = eg._store.read(eg._gen_key)
        if now > g and not eg._store.exists(full):
            newer.append(now)
            return True
        if time.monotonic() >= stall_at[0]:
            _report_stall(eg, g, candidates)
            stall_at[0] = time.monotonic() + eg._stall_s
        return False

    if not io.poll_until(deadline, settled):
        raise TimeoutError()
    return newer[0] if newer else None


def _generation_past(eg, g: int, until: float) -> int:
    """Reads the generation until it is past `g` or the monotonic time `until`
    passes; returns the last one read."""
    seen = g

    def moved() -> bool:
        nonlocal seen
        seen = eg._store.read(eg._gen_key)
        return seen > g

    io.poll_until(until, moved)
    return seen


def join(eg, after: int, candidates: List[int], started: float):
    """Joins the first generation past `after`; returns (ReformInfo, member slots)."""
    from .elastic import ReformInfo

    deadline = started + eg._reform_timeout
    g = _generation_past(eg, after, deadline)
    if g <= after:
        raise TimeoutError(f"reform: slot {eg.slot} waited {eg._reform_timeout:g} s for the generation "
                           f"to move past {after}; reform() is for after a MembershipChanged")
    had_state = eg._has_state
    while True:
        n = eg._base_world + eg._store.read(keys.reform_size_key(eg._root))
        if n < 1:
            raise RuntimeError(f"reform: generation {g} has no members")
        joined_at = time.monotonic()
        eg._store.append(keys.reform_members_key(eg._root, g), f"{eg.slot}:{1 if had_state else 0},")
        if eg._store.add(keys.reform_joined_key(eg._root, g), 1) == n:
            eg._store.set(keys.reform_full_key(eg._root, g), "1")
        try:
            newer = _gather(eg, g, deadline, candidates)
        except TimeoutError:
            _timed_out(eg, g, n, candidates)
        if newer is not None:
            g = newer
            continue
        members = io.parse_members(eg._store.get(keys.reform_members_key(eg._root, g)), n)
        slots = [s for s, _ in members]
        if eg.slot not in slots:
            # R/size was read between the agent's two adds: G filled up without
            # us, and the generation moves on at once.
            moved = _generation_past(eg, g, deadline)
            if moved > g:
                g = moved
                continue
            raise RuntimeError(f"reform: slot {eg.slot} joined generation {g} after it was full "
                               f"(members: {_ints(slots)})")
        info = ReformInfo(generation=g, rank=slots.index(eg.slot), world_size=len(slots), had_state=had_state)
        info.state_root = next((i for i, (_, state) in enumerate(members) if state), 0)
        info.new_slots = [s for s, state in members if not state]
        info.lost_slots = [s for s in eg._members if s not in slots]
        full_at = time.monotonic()
        try:
            eg._form(g, info.rank, info.world_size)
        except Exception as error:
            # A member died after joining or while connecting (the watcher shut
            # the sockets when the generation moved on): so do we. A peer that
            # closed its connections mid-connect is one whose agent has not yet
            # moved the generation (a node's loss waits for its lease): wait for
            # it as a failed collective does, SETTLE_S at most.
            from .elastic import _PEER_ERRORS, SETTLE_S

            now = eg._store.read(eg._gen_key)
            text = f"{type(error).__name__} {error}".lower()
            if now <= g and any(w in text for w in _PEER_ERRORS):
                first = str(error).splitlines()[0] if str(error) else type(error).__name__
                io.say(f"reform: slot {eg.slot} could not connect generation {g} ({first}); "
                       f"waiting up to {SETTLE_S:g} s for the generation to move on")
                now = _generation_past(eg, g, min(deadline, time.monotonic() + SETTLE_S))
            if now <= g:
                raise
            eg._drop_group()
            g = now
            continue
        now = time.monotonic()
        info.took_s, info.wait_s, info.form_s = now - started, full_at - joined_at, now - full_at
        io.info(f"generation {g}: slot {eg.slot} is rank {info.rank} of {info.world_size} "
                f"(new: {_ints(info.new_slots)}, lost: {_ints(info.lost_slots)}) "
                f"in {info.took_s * 1e3:.1f} ms: "
                f"{(joined_at - started) * 1e3:.1f} ms to the generation, {info.wait_s * 1e3:.1f} ms for the "
                f"members, {info.form_s * 1e3:.1f} ms to form the group")
        return info, slots
