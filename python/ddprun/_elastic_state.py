"""State without a checkpoint: the state root's parameters, buffers,
optimizer state and counters, broadcast to every rank of the new group.

Few collectives, as each waits for every rank to be scheduled (on a loaded
host one costs milliseconds): the tensors go as one flat broadcast per dtype
and BUCKET_BYTES, and what is not a tensor (the optimizer's param groups and
the shapes of its state, the counters) as one pickle through the group's
store (its PrefixStore, R/g<G>/pg/), set by the root before its first
broadcast and read by the others after it.
"""
from __future__ import annotations

import pickle
from typing import Optional

# At most this much in one flat broadcast (a copy of the state is made per bucket).
BUCKET_BYTES = 64 << 20
STATE_KEY = "ddprun.elastic/state"  # in the group's own store


def _tensors_of(optimizer):
    """(param index, name, tensor) of every tensor in the optimizer's state, in order."""
    import torch

    params = [p for group in optimizer.param_groups for p in group["params"]]
    out = []
    for i, p in enumerate(params):
        for name, value in sorted(optimizer.state.get(p, {}).items()):
            if isinstance(value, torch.Tensor):
                out.append((i, name, value))
    return params, out


def _meta_of(optimizer, counters):
    import torch

    meta = {"counters": counters}
    if optimizer is not None:
        params, _ = _tensors_of(optimizer)
        meta["state"] = {i: {name: (("tensor", tuple(v.shape), v.dtype) if isinstance(v, torch.Tensor) else v)
                             for name, v in optimizer.state.get(p, {}).items()} for i, p in enumerate(params)}
        meta["groups"] = [{k: v for k, v in group.items() if k != "params"}
                          for group in optimizer.param_groups]
    return meta


def _restore_optimizer(optimizer, meta) -> None:
    """The root's param group settings and state entries; tensors empty, filled by the broadcast."""
    import torch

    params = [p for group in optimizer.param_groups for p in group["params"]]
    for group, given in zip(optimizer.param_groups, meta["groups"]):
        group.update(given)
    optimizer.state.clear()
    for i, entries in meta["state"].items():
        optimizer.state[params[i]] = {
            name: (torch.empty(v[1], dtype=v[2], device=params[i].device)
                   if isinstance(v, tuple) and len(v) == 3 and v[0] == "tensor" else v)
            for name, v in entries.items()}


def _buckets(tensors):
    """Lists of tensors of one dtype and device, each at most BUCKET_BYTES (or one tensor)."""
    out, current, size = [], [], 0
    for t in tensors:
        nbytes = t.numel() * t.element_size()
        if current and (t.dtype != current[0].dtype or t.device != current[0].device or
                        size + nbytes > BUCKET_BYTES):
            out.append(current)
            current, size = [], 0
        current.append(t)
        size += nbytes
    if current:
        out.append(current)
    return out


def _broadcast_flat(dist, tensors, root: int, rank: int, group) -> None:
    import torch
    from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

    dense = [t for t in tensors if t.numel() > 0]
    for bucket in _buckets(dense):
        if len(bucket) == 1:
            dist.broadcast(bucket[0], src=root, group=group)
            continue
        flat = _flatten_dense_tensors(bucket)
        dist.broadcast(flat, src=root, group=group)
        if rank == root:
            continue
        with torch.no_grad():
            for t, synced in zip(bucket, _unflatten_dense_tensors(flat, bucket)):
                t.copy_(synced)


def broadcast_state(dist, root: int, rank: int, module, optimizer, counters: Optional[dict], seq: int = 0):
    """`seq`: how many times this generation's ranks called it before (each call its own key)."""
    import torch
    import torch.distributed.distributed_c10d as c10d

    store = c10d._get_default_store()
    group = dist.group.WORLD
    key = f"{STATE_KEY}/{seq}"
    if rank == root:
        store.set(key, pickle.dumps(_meta_of(optimizer, counters)))
    module_tensors = [t.data for t in list(module.parameters()) + list(module.buffers())]
    with torch.no_grad():
        # The parameters and buffers first: the others read the meta once
        # this broadcast is done, so it is in the store by then.
        _broadcast_flat(dist, module_tensors, root, rank, group)
        meta = pickle.loads(store.get(key)) if rank != root else None
        if optimizer is not None:
            if rank != root:
                _restore_optimizer(optimizer, meta)
            _broadcast_flat(dist, [t for _, _, t in _tensors_of(optimizer)[1]], root, rank, group)
    return meta["counters"] if rank != root else counters
