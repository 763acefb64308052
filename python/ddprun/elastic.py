"""In-process re-form for torch 2.x trainers under `ddprun --on_failure=reform`.

The Python side of the contract docs/reform.md describes ("The contract between
agent and SDK"), the same one the C++ SDK's `ddp::ElasticGroup` speaks, over
the round's own store: no server and no port of its own. The loop (the full
example is python/examples/reform_ddp.py):

    eg = elastic.ElasticGroup()
    counters = eg.sync_state(model, opt, counters)   # a replacement gets the state here
    ddp = eg.ddp(model)
    sampler = elastic.ElasticSampler(dataset, eg)    # sampler.set_epoch(epoch, consumed)
    ...
        try:
            with eg.step():                          # check() + failed collectives
                loss = ...; loss.backward(); opt.step()
        except elastic.MembershipChanged:
            eg.reform()
            counters = eg.sync_state(model, opt, counters)
            ddp = eg.ddp(model)                      # and set_epoch(epoch, consumed) again

FSDP2 (python/examples/reform_fsdp.py): a lost rank's shards are gone, so
after reform() the model is built again and fully_shard-ed on device_mesh(),
and load_checkpoint() loads the last complete save_checkpoint() (DCP).

Without DDP_REFORM=1 (torchrun, ddprun --on_failure=restart) it is a plain
process group. With a torch that lacks what a re-form needs (torch 1.x) it
says so in one line and stays plain, so the agent falls back to restart.
"""
from __future__ import annotations

import atexit
import contextlib
import datetime
import gc
import math
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from . import _elastic_io as io
from . import _reform_keys as keys

# How long a failed collective waits for the agent to move the generation on
# before its error is taken as not a membership change (the agent moves it
# within milliseconds of a death). As the C++ SDK's kSettle.
SETTLE_S = 10.0
# How often the watcher thread reads the generation.
WATCH_S = 0.01
# A rank whose generation ended this long ago, its connections shut, that has
# still not left its step gets one line saying where its main thread is.
STUCK_S = 10.0
# A Gloo rank whose main thread has been in torch this long since the
# watcher shut its generation's connections (counted from when it was first
# seen there: a step held up in the script's own code first, then in torch
# for a moment, is not wedged), Gloo having closed every connection and the
# process idle meanwhile (under IDLE_SHARE of one CPU), is waiting on an
# operation only its timeout ends: it exits, and its agent replaces it
# (_exit_if_wedged).
WEDGED_S = 5.0
IDLE_SHARE = 0.05
# Words of the errors a collective fails with when a peer went away.
_PEER_ERRORS = ("gloo", "connection", "timed out", "timeout", "closed", "broken pipe", "reset by peer",
                "nccl", "abort")

__all__ = ["MembershipChanged", "ReformInfo", "ElasticGroup", "ElasticSampler"]


class MembershipChanged(RuntimeError):
    """A peer is gone (a collective failed) or the generation moved on
    (check()). Catch it, call ElasticGroup.reform(), then sync_state()."""

    def __init__(self, generation: int, message: str):
        super().__init__(message)
        self.generation = generation  # the generation that was left


@dataclass
class ReformInfo:
    generation: int = 0
    rank: int = 0
    world_size: int = 1
    state_root: int = 0  # rank to restore state from: the lowest that holds state
    had_state: bool = True  # False: this process joined without state (a replacement)
    lost_slots: List[int] = field(default_factory=list)
    new_slots: List[int] = field(default_factory=list)
    took_s: float = 0.0  # reform() call (or construction) to the group ready
    wait_s: float = 0.0  # of took_s: this rank's join to the generation full (waiting for the others)
    form_s: float = 0.0  # of took_s: init_process_group of the new group


def _supported():
    """None when this torch can re-form, else why not."""
    import torch
    import torch.distributed.distributed_c10d as c10d

    if int(torch.__version__.split(".")[0]) < 2 or not hasattr(c10d, "_abort_process_group"):
        return f"torch {torch.__version__} has no torch.distributed _abort_process_group (torch 2.x has)"
    return None


def _ddp_has_init_sync() -> bool:
    import inspect

    from torch.nn.parallel import DistributedDataParallel

    return "init_sync" in inspect.signature(DistributedDataParallel.__init__).parameters


def _store_unusable():
    """None when the round's store can be reached as a TCPStore, else why not."""
    if not os.environ.get("DDP_STORE_ENDPOINT"):
        return "DDP_STORE_ENDPOINT is not set"
    if os.environ.get("DDP_TOKEN_FILE"):
        return "the store requires a token (DDP_TOKEN_FILE), which a torch TCPStore client cannot present"
    return None


class ElasticGroup:
    """The job's process group (torch's default group), re-formed in place."""

    def __init__(self, backend: str = "gloo", timeout: datetime.timedelta = datetime.timedelta(minutes=2),
                 abandon_after_s: Optional[float] = None):
        import torch.distributed as dist

        self._dist = dist
        self._backend = backend
        self._timeout = timeout  # each collective's (bounded, unlike torch's 30 min)
        self.slot = int(os.environ.get("RANK", "0"))
        self._base_world = int(os.environ.get("WORLD_SIZE", "1"))
        self.info = ReformInfo(rank=self.slot, world_size=self._base_world)
        self.enabled = self._reform_mode()
        self._dropped = 0  # groups dropped by reform()
        if self.enabled:
            why = _supported() or _store_unusable()
            if why:
                if self.slot == 0:  # one line for the job
                    io.say(f"{why}: not re-forming in process; ddprun falls back to --on_failure=restart")
                self.enabled = False
        self._closed = threading.Event()
        if not self.enabled:
            dist.init_process_group(backend, timeout=timeout)
            # Destroyed at exit here too: a Gloo group left to the interpreter's
            # teardown aborted 2 of 5 runs of the example under restart (torch 2.15:
            # "terminate called without an active exception").
            atexit.register(self.close)
            return
        self._reform_timeout = io.env_seconds("DDP_REFORM_TIMEOUT", 300.0)
        self._abandon_s = abandon_after_s or io.env_seconds("DDP_REFORM_ABANDON", 10.0)
        # As the C++ SDK: at most half the reform timeout, so that the agent
        # replaces a slot that never joins before the others give up; 0: never.
        self._stall_s = min(io.env_seconds("DDP_REFORM_STALL_TIMEOUT", 30.0, allow_zero=True),
                            self._reform_timeout / 2)
        self._root = keys.reform_prefix(os.environ.get("DDP_STORE_PREFIX", ""))
        self._gen_key = keys.reform_generation_key(self._root)
        endpoint = os.environ["DDP_STORE_ENDPOINT"]
        self._store = io.Store(endpoint, self._reform_timeout)
        self._watch_store = io.Store(endpoint, self._reform_timeout)
        self._has_state = os.environ.get("DDP_REFORM_JOINING", "") not in ("1", "true", "yes")
        # A node that grew the running world: R/size counts from the world the round began with.
        self._base_world = io.env_count("DDP_REFORM_BASE_WORLD", self._base_world)
        self.generation = -1
        self._members: List[int] = []
        self._lock = threading.Lock()
        self._sockets_before: Dict[int, str] = {}
        self._sockets: Optional[Dict[int, str]] = None  # None while the group forms
        self._forming = -1
        self._released = -1  # the latest generation whose sockets were shut
        self._released_at: Optional[float] = None  # when the watcher shut them (not reform())
        self._shut = 0  # how many it shut
        # Since when (and the process's CPU seconds then) the watcher has seen
        # the main thread in torch after a release; None: not there.
        self._in_torch: Optional[Tuple[float, float]] = None
        self._collective_sockets: Optional[Dict[int, str]] = None  # the group's own, less its store's
        self._stuck_said = -1  # the latest generation the stuck line was said for
        self._raised_at: Optional[float] = None
        self._synced = -1  # the latest generation sync_state() broadcast in
        self._syncs = 0  # how often in that generation
        io.hook_uncaught(MembershipChanged)
        # Watching from the first generation on: a peer lost while generation
        # 0 forms leaves the others in torch's store or connect waits, which
        # only the watcher's shutting of their sockets ends before the timeout.
        self._watcher = threading.Thread(target=self._watch, name="ddprun.elastic watcher", daemon=True)
        self._watcher.start()
        try:
            self._join(-1, list(range(int(os.environ.get("WORLD_SIZE", "1")))), time.monotonic())
        except BaseException:
            self._closed.set()
            self._watcher.join()
            raise
        atexit.register(self.close)

    def close(self) -> None:
        """Stops the watcher and destroys the group (also at exit)."""
        if self._closed.is_set():
            return
        self._closed.set()
        if self.enabled:
            self._watcher.join()
        if self._dist.is_initialized():
            self._dist.destroy_process_group()
        if self._dropped:
            # The groups of generations this process re-formed out of live on
            # in reference cycles (the failed step's frames, FSDP's modules),
            # each with its Gloo threads: freed here, not in the interpreter's
            # teardown, where a group's end can abort the process.
            gc.collect()

    @staticmethod
    def _reform_mode() -> bool:
        text = os.environ.get("DDP_REFORM", "")
        if text.lower() in ("", "0", "false", "no", "off"):
            return False
        if text.lower() in ("1", "true", "yes", "on"):
            return True
        raise ValueError(f"DDP_REFORM='{text}' is not valid: 1 (set by ddprun --on_failure=reform) or 0")

    @property
    def rank(self) -> int:
        return self.info.rank

    @property
    def size(self) -> int:
        return self.info.world_size

    @property
    def group(self):
        return self._dist.group.WORLD

    def check(self) -> None:
        """One store read: raises MembershipChanged when the generation moved
        past ours. A no-op when not enabled."""
        if not self.enabled:
            return
        now = self._store.read(self._gen_key)
        if now > self.generation:
            raise self._changed(f"generation {self.generation} ended (now {now}); call ElasticGroup.reform()")

    @contextlib.contextmanager
    def step(self):
        """A training step: check() at its start, and a collective inside that
        fails because a peer is gone comes out as MembershipChanged."""
        self.check()
        try:
            yield
        except MembershipChanged:
            raise
        except Exception as e:
            if not self.enabled:
                raise
            mc = self._explain(e)
            if mc is None:
                raise
            raise mc from e

    def reform(self) -> ReformInfo:
        """Drops the old group (its connections first, so peers blocked on this
        rank fail at once), joins the next generation and forms its group."""
        if not self.enabled:
            raise RuntimeError("ElasticGroup.reform: DDP_REFORM is not 1 "
                               "(run under ddprun --on_failure=reform)")
        started = time.monotonic()
        with self._lock:
            self._raised_at = None
            self._released_at = None  # the step returned: nothing stuck to say
            self._release(self.generation)
        self._drop_group()
        self._join(self.generation, self._members, started)
        return self.info

    def ddp(self, module, **kwargs):
        """`module` wrapped in DistributedDataParallel on the current group;
        call it again after every reform()."""
        from torch.nn.parallel import DistributedDataParallel

        if self.enabled and self._synced == self.generation and "init_sync" not in kwargs and \
                _ddp_has_init_sync():
            # sync_state() just gave every rank the state root's parameters and
            # buffers: DDP's own start-up check and broadcast would repeat it.
            kwargs["init_sync"] = False
        started = time.monotonic()
        wrapped = DistributedDataParallel(module, process_group=self.group, **kwargs)
        if self.enabled:
            io.info(f"generation {self.generation}: DistributedDataParallel in "
                    f"{(time.monotonic() - started) * 1e3:.1f} ms")
        return wrapped

    def sync_state(self, module, optimizer=None, counters: Optional[dict] = None) -> Optional[dict]:
        """Every rank gets the state root's parameters, buffers, optimizer
        state and `counters` (returned). Call it after construction and after
        every reform(), before ddp(): a replacement has no state, and a peer
        lost mid-step may have let some survivors finish the step and not
        others. Skipped (counters returned as given) in a generation 0 without
        newcomers, where every rank starts alike."""
        if not self.enabled or (self.info.generation == 0 and not self.info.new_slots):
            return counters
        from ._elastic_state import broadcast_state

        started = time.monotonic()
        seq = self._syncs if self._synced == self.generation else 0
        counters = broadcast_state(self._dist, self.info.state_root, self.rank, module, optimizer,
                                   counters, seq)
        self._synced, self._syncs = self.generation, seq + 1
        io.info(f"generation {self.generation}: state from rank {self.info.state_root} in "
                f"{(time.monotonic() - started) * 1e3:.1f} ms")
        return counters

    # -- FSDP2: no state to broadcast (a lost rank took its shards); a checkpoint instead --

    def device_mesh(self):
        """A 1-D DeviceMesh over the current group for fully_shard ("cpu" for
        gloo, "cuda" for nccl); build the model again on a new one after every reform()."""
        from ._elastic_fsdp import device_mesh

        return device_mesh(self.group, self._backend)

    def save_checkpoint(self, directory: str, step: int, model, optimizer, counters: Optional[dict] = None):
        """Every rank: DCP checkpoint of step `step` into directory/step-<step>/,
        complete once rank 0 marked it (directory/latest, with `counters`, a
        JSON-able dict; {"step": step} when None).
        A failed collective comes out as MembershipChanged, as in step()."""
        from ._elastic_fsdp import save

        started = time.monotonic()
        with self.step():
            save(self.group, self.rank, directory, step, model, optimizer, counters)
        if self.enabled:
            io.info(f"generation {self.generation}: checkpoint of step {step} saved in "
                    f"{(time.monotonic() - started) * 1e3:.1f} ms")

    def load_checkpoint(self, directory: str, model, optimizer) -> Optional[dict]:
        """Every rank: the latest complete checkpoint into `model` and
        `optimizer` (fully_shard-ed on device_mesh()), re-sharded for this
        world; its counters, or None when there is none."""
        from ._elastic_fsdp import load

        started = time.monotonic()
        with self.step():
            counters = load(self.group, self.rank, directory, model, optimizer)
        if self.enabled:
            what = "loaded" if counters is not None else "none"
            took = (time.monotonic() - started) * 1e3
            io.info(f"generation {self.generation}: checkpoint {what} in {took:.1f} ms")
        return counters

    # -- below: the protocol ---------------------------------------------------------------

    def _changed(self, what: str) -> MembershipChanged:
        with self._lock:
            if self._raised_at is None:
                self._raised_at = time.monotonic()
        return MembershipChanged(self.generation, "membership changed: " + what)

    def _explain(self, error: Exception) -> Optional[MembershipChanged]:
        """MembershipChanged when the generation moves on within SETTLE_S of a
        failed collective, None otherwise (the error is not ours to explain)."""
        g = self.generation
        now = [g]
        moved = lambda: (now.__setitem__(0, self._store.read(self._gen_key)) or now[0] > g)  # noqa: E731
        try:
            if not moved():
                text = f"{type(error).__name__} {error}".lower()
                if not any(w in text for w in _PEER_ERRORS):
                    return None
                if not io.poll_until(time.monotonic() + SETTLE_S, moved):
                    return None
        except Exception:
            return None  # the store is gone too
        first = str(error).splitlines()[0] if str(error) else type(error).__name__
        return self._changed(f"generation {g} ended (now {now[0]}); call ElasticGroup.reform(). "
                             f"The collective failed with: {first}")

    def _watch(self) -> None:
        """Shuts this generation's sockets once the generation moves past it
        (torch's abort does not release a Gloo operation blocked on a live
        peer), and ends a script that caught MembershipChanged but never
        called reform() within DDP_REFORM_ABANDON seconds."""
        while not self._closed.wait(WATCH_S):
            try:
                now = self._watch_store.read(self._gen_key)
            except Exception:
                time.sleep(0.5)
                continue
            with self._lock:
                target = self._forming if self._sockets is None else self.generation
                if now > target and self._released < target:
                    self._release(target)
                    self._released_at = time.monotonic()
                if self._raised_at is not None and time.monotonic() - self._raised_at > self._abandon_s:
                    self._abandon()
                self._say_if_stuck()
                self._exit_if_wedged()
                self._exit_if_connect_stuck()

    def _abandon(self) -> None:
        line = (f"generation {self.generation} ended {self._abandon_s:g} s ago and this script never called "
                "ElasticGroup.reform(): exiting so that ddprun falls back to --on_failure=restart")
        io.say(line)
        io.write_error_file("MembershipChanged: " + line, "")
        os._exit(1)

    def _say_if_stuck(self) -> None:
        """Under the lock: one line when the watcher shut this generation's
        connections STUCK_S ago and the main thread has neither raised
        MembershipChanged nor re-formed since (a step still blocked)."""
        g = self.generation
        if self._released_at is None or self._released < g or self._raised_at is not None or \
                self._stuck_said >= g or self._sockets is None or \
                time.monotonic() - self._released_at < STUCK_S:
            return
        self._stuck_said = g
        where = _where(_main_frame())
        ago = time.monotonic() - self._released_at
        io.say(f"generation {g} ended {ago:.0f} s ago and this rank shut its {self._shut} connection(s), "
               f"but its step has not returned; main thread in {where}")

    def _exit_if_wedged(self) -> None:
        """Under the lock: ends a Gloo rank whose step waits on an operation
        that nothing but its timeout (the group's, minutes) can end. Gloo's TCP
        transport queues a send that fails with EPIPE or ECONNRESET (its peer,
        or this rank's watcher, shut the connection) and, when it then reads
        the end of that connection, fails only the bound buffers queued, not
        that send: its waitSend waits out the timeout. Seen as a step still
        blocked in torch WEDGED_S after the release, with every one of the
        group's connections closed by Gloo and the process idle. Exits 1, so
        that the agent replaces this rank (docs/reform.md, "Python trainers")."""
        g = self.generation
        if self._backend != "gloo" or self._released_at is None or self._released < g or \
                self._raised_at is not None or not self._collective_sockets:
            self._in_torch = None
            return
        frame = _main_frame_in_torch()
        if frame is None:
            self._in_torch = None  # in the script's own code (its I/O, say): not ours to end
            return
        now, cpu = time.monotonic(), sum(os.times()[:2])
        if self._in_torch is None:
            self._in_torch = (now, cpu)
        there = now - self._in_torch[0]
        if there < WEDGED_S or cpu - self._in_torch[1] > IDLE_SHARE * there or \
                not io.all_closed(self._collective_sockets):
            return
        since = now - self._released_at
        io.say(f"generation {g} ended {since:.0f} s ago and this rank's step is still blocked in torch, "
               f"every connection of its Gloo group closed and the process idle: an operation only its "
               f"timeout ({self._timeout.total_seconds():g} s) would end. Exiting so that ddprun replaces "
               f"this rank; main thread in {_where(frame)}")
        os._exit(1)

    def _exit_if_connect_stuck(self) -> None:
        """Under the lock: ends a Gloo rank still in torch forming generation
        G a while after G ended and the watcher shut its sockets. It waits in
        Gloo's connect for a peer lost before it connected (this rank had the
        listening end), which only the group's timeout ends (docs/reform.md,
        "A connect the release cannot end"). Exits 1 with one line, so that
        its agent replaces it now rather than at the stall timeout, which
        would call it hung."""
        g = self._forming
        if self._backend != "gloo" or self._sockets is not None or g < 0 or self._released < g or \
                self._released_at is None:
            return
        grace = min(STUCK_S, self._stall_s / 2) if self._stall_s > 0 else STUCK_S
        since = time.monotonic() - self._released_at
        if since < grace:
            return
        frame = _main_frame_in_torch()
        if frame is None:
            return
        line = (f"generation {g} ended {since:.0f} s ago while this rank was still connecting its Gloo "
                f"group, waiting for a peer lost before it connected: only the group's timeout "
                f"({self._timeout.total_seconds():g} s) would end that wait. Exiting so that ddprun replaces "
                f"this rank; main thread in {_where(frame)}")
        io.say(line)
        os._exit(1)  # no error file: its type would make the agent fall back to restart

    def _release(self, g: int) -> None:
        """Under the lock: shut generation g's sockets, once."""
        if self._released >= g:
            return
        self._released = g
        socks = self._sockets if self._sockets is not None else io.new_sockets(self._sockets_before)
        self._shut = io.shut_down(socks)

    def _drop_group(self) -> None:
        import torch.distributed.distributed_c10d as c10d

        if not self._dist.is_initialized():
            return
        self._dropped += 1
        try:
            c10d._abort_process_group()  # NCCL: ncclCommAbort; Gloo: its sockets are shut already
        except Exception:
            try:
                self._dist.destroy_process_group()
            except Exception:
                pass

    def _form(self, g: int, rank: int, size: int) -> None:
        """Generation g's process group, under R/g<G>/pg/, on a store
        connection of its own (shut with the group's sockets)."""
        with self._lock:
            self._forming = g
            self._sockets_before = io.tcp_sockets()
            self._sockets = None
            self._collective_sockets = None
        client = io.Store(os.environ["DDP_STORE_ENDPOINT"], self._timeout.total_seconds())
        store_sockets = io.new_sockets(self._sockets_before)
        store = self._dist.PrefixStore(io.Store.name(keys.reform_pg_prefix(self._root, g)), client.client)
        _reset_group_count()
        self._dist.init_process_group(self._backend, store=store, rank=rank, world_size=size,
                                      timeout=self._timeout)
        with self._lock:
            self._sockets = io.new_sockets(self._sockets_before)
            self._collective_sockets = io.connections({fd: link for fd, link in self._sockets.items()
                                                       if store_sockets.get(fd) != link})
            self._forming = g

    def _join(self, after: int, candidates: List[int], started: float) -> None:
        """docs/reform.md, "A worker joins generation G"."""
        from ._elastic_join import join

        info, members = join(self, after, candidates, started)
        self.generation = info.generation
        self._members = members
        self._has_state = True  # the caller restores it from state_root before training on
        self.info = info


def _reset_group_count() -> None:
    """Numbers the next group torch makes 0, as in a fresh process. torch keys
    the default group's store under that number, and counts an
    init_process_group that failed: a rank that could not connect a
    generation would otherwise form the next one under "1/" while a newcomer
    and the ranks that had a group (destroyed, count reset) use "0/", and
    each waits for the others' keys until its timeout."""
    import torch.distributed.distributed_c10d as c10d

    world = getattr(c10d, "_world", None)
    if world is not None and hasattr(world, "group_count"):
        world.group_count = 0


def _main_frame():
    """The main thread's current frame, or None."""
    import sys

    return sys._current_frames().get(threading.main_thread().ident)


def _main_frame_in_torch():
    """The main thread's current frame when its code is torch's, else None."""
    import torch

    frame = _main_frame()
    if frame is None or not os.path.abspath(frame.f_code.co_filename).startswith(
            os.path.dirname(os.path.abspath(torch.__file__)) + os.sep):
        return None
    return frame


def _where(frame) -> str:
    """Its innermost 4 frames: "FUNC (FILE:LINE) <- ..."."""
    if frame is None:
        return "unknown"
    import traceback

    return " <- ".join(f"{f.name} ({os.path.basename(f.filename)}:{f.lineno})"
                       for f in reversed(traceback.extract_stack(frame)[-4:]))


class ElasticSampler:
    """torch's DistributedSampler (shuffle, seed, drop_last=False) over an
    ElasticGroup's world that can start from a position:
    set_epoch(epoch, consumed) deals the samples of the epoch the job has not
    yet consumed among the group's current world (its size and rank when
    iterated), so that none is skipped or seen twice within the epoch. With
    the world size unchanged it yields what DistributedSampler would have from
    that point on."""

    def __init__(self, dataset, group: "ElasticGroup", shuffle: bool = True, seed: int = 0):
        self.n = len(dataset)
        self.group = group
        self.shuffle, self.seed = shuffle, seed
        self.epoch, self.consumed = 0, 0

    def set_epoch(self, epoch: int, consumed: int = 0) -> None:
        self.epoch, self.consumed = epoch, consumed

    def _order(self) -> List[int]:
        import torch

        if not self.shuffle:
            return list(range(self.n))
        g = torch.Generator()
        g.manual_seed(self.seed + self.epoch)
        return torch.randperm(self.n, generator=g).tolist()

    def __iter__(self):
        world, rank = self.group.size, self.group.rank
        order = self._order()
        rest = order[self.consumed:]
        total = math.ceil(len(rest) / world) * world
        pad = total - len(rest)
        rest += (order * math.ceil(pad / max(1, len(order))))[:pad]  # as DistributedSampler pads
        return iter(rest[rank:total:world])

    def __len__(self) -> int:
        return math.ceil((self.n - self.consumed) / self.group.size)
