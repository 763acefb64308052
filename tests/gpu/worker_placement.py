"""Prints what placement a worker got: its GPU and the CPUs it may run on."""
import os

cpus = sorted(os.sched_getaffinity(0))
print(
    f"local_rank={os.environ.get('LOCAL_RANK')} "
    f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')} "
    f"cpus={len(cpus)} first={cpus[0]} last={cpus[-1]}",
    flush=True,
)
