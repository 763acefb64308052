"""FSDP2 under re-form: a mesh over the current group, and checkpoints.

A lost FSDP rank takes its shard of the parameters and of the optimizer state
with it, so the survivors cannot broadcast the state as sync_state() does for
DDP. They keep their processes, re-form, build the model and optimizer again,
fully_shard them on the new group's mesh (device_mesh()) and load the last
complete checkpoint in process (load()); a replacement does the same at start.
torch.distributed.checkpoint (DCP) re-shards on load, so a smaller world (a
lost node with no spare) loads it too. The steps since that checkpoint are
done again.

A checkpoint of step S is <dir>/step-<S>/ (DCP's files: one per rank and
.metadata). It is complete once <dir>/latest names it: rank 0 writes that
file (a JSON with the step and the counters; written to a temporary name and
renamed) after its dcp.save() returned, which is after every rank's part was
written (rank 0, DCP's coordinator, gathers their write results before it
writes .metadata). A save a failure interrupted leaves `latest` as it was.
Rank 0 then removes the other step-* folders. On load, rank 0 reads `latest`
and broadcasts what it names, so every rank of the group loads the same one.
"""
from __future__ import annotations

import json
import os
import shutil
from typing import Optional

LATEST = "latest"


def device_mesh(group, backend: str):
    """A 1-D DeviceMesh over `group`: "cuda" for nccl, "cpu" otherwise (gloo)."""
    from torch.distributed.device_mesh import DeviceMesh

    return DeviceMesh.from_group(group, "cuda" if backend == "nccl" else "cpu")


def _step_dir(directory: str, step: int) -> str:
    return os.path.join(directory, f"step-{step:09d}")


def _state(model, optimizer):
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model_sd, optim_sd = get_state_dict(model, optimizer)
    return {"model": model_sd, "optim": optim_sd}


def save(group, rank: int, directory: str, step: int, model, optimizer, counters: Optional[dict]) -> None:
    """Every rank of `group`: its shards of step `step`; rank 0 then marks it
    complete, with `counters` (a JSON-able dict; {"step": step} when None)."""
    import torch.distributed.checkpoint as dcp

    path = _step_dir(directory, step)
    os.makedirs(path, exist_ok=True)
    dcp.save(_state(model, optimizer), checkpoint_id=path, process_group=group)
    if rank != 0:
        return
    tmp = os.path.join(directory, f".{LATEST}.{os.getpid()}")
    with open(tmp, "w") as f:
        json.dump({"step": step, "path": os.path.basename(path),
                   "counters": counters if counters is not None else {"step": step}}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, os.path.join(directory, LATEST))
    for name in os.listdir(directory):
        if name.startswith("step-") and name != os.path.basename(path):
            shutil.rmtree(os.path.join(directory, name), ignore_errors=True)


def latest(directory: str) -> Optional[dict]:
    """What <dir>/latest names ({"step", "path", "counters"}), None without one."""
    path = os.path.join(directory, LATEST)
    try:
        with open(path) as f:
            found = json.load(f)
    except FileNotFoundError:
        return None
    except ValueError as e:  # not JSON (json.JSONDecodeError), or not text
        raise ValueError(f"checkpoint marker {path} is not one save_checkpoint() wrote ({e}); "
                         "remove it to start from scratch, or pass another directory") from None
    if not isinstance(found, dict) or not isinstance(found.get("path"), str):
        raise ValueError(f"checkpoint marker {path} names no checkpoint folder; "
                         "remove it to start from scratch, or pass another directory")
    return found


def load(group, rank: int, directory: str, model, optimizer) -> Optional[dict]:
    """Every rank of `group`: the checkpoint rank 0 finds complete into `model`
    and `optimizer` (built and fully_shard-ed on this group's mesh); its
    counters, or None when there is none (model and optimizer untouched)."""
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import set_state_dict

    found = [latest(directory) if rank == 0 else None]
    dist.broadcast_object_list(found, src=dist.get_global_rank(group, 0), group=group)
    if found[0] is None:
        return None
    state = _state(model, optimizer)
    dcp.load(state, checkpoint_id=os.path.join(directory, found[0]["path"]), process_group=group)
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
    return found[0]["counters"]
