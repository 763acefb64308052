"""State without a checkpoint: the state root's parameters, buffers,
optimizer state and counters, broadcast to every rank of the new group."""
from __future__ import annotations

from typing import Optional


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


def broadcast_state(dist, root: int, rank: int, module, optimizer, counters: Optional[dict]):
    import torch

    meta = None
    if rank == root and optimizer is not None:
        params, tensors = _tensors_of(optimizer)
        state = {}
        for i, p in enumerate(params):
            state[i] = {name: (("tensor", tuple(v.shape), v.dtype) if isinstance(v, torch.Tensor) else v)
                        for name, v in optimizer.state.get(p, {}).items()}
        groups = [{k: v for k, v in group.items() if k != "params"} for group in optimizer.param_groups]
        meta = {"state": state, "groups": groups}
    box = [meta, counters]
    dist.broadcast_object_list(box, src=root)
    meta, counters = box
    with torch.no_grad():
        for t in list(module.parameters()) + list(module.buffers()):
            dist.broadcast(t.data, src=root)
    if optimizer is None:
        return counters
    params = [p for group in optimizer.param_groups for p in group["params"]]
    if rank != root:
        for group, given in zip(optimizer.param_groups, meta["groups"]):
            group.update(given)
        optimizer.state.clear()
        for i, entries in meta["state"].items():
            optimizer.state[params[i]] = {
                name: (torch.empty(v[1], dtype=v[2], device=params[i].device)
                       if isinstance(v, tuple) and len(v) == 3 and v[0] == "tensor" else v)
                for name, v in entries.items()}
    for _, _, tensor in _tensors_of(optimizer)[1]:
        dist.broadcast(tensor, src=root)
    return counters
