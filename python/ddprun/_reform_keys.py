"""The store keys of --on_failure=reform (docs/reform.md, "The contract between
agent and SDK"), spelled once for Python. They mirror the reform_* functions of
rendezvous/src/store/job_keys.cpp; scripts/lint/check_py_job_keys.py (label
lint) checks that both spell every key alike.
"""


def reform_prefix(worker_prefix: str) -> str:
    return worker_prefix + "reform/"


def reform_generation_key(reform_prefix: str) -> str:
    return reform_prefix + "generation"


def reform_size_key(reform_prefix: str) -> str:
    return reform_prefix + "size"


def reform_lost_key(reform_prefix: str, slot: int) -> str:
    return reform_prefix + "lost/" + str(slot)


def reform_stalled_key(reform_prefix: str) -> str:
    return reform_prefix + "stalled"


def reform_finished_key(reform_prefix: str) -> str:
    return reform_prefix + "finished"


def reform_generation_prefix(reform_prefix: str, generation: int) -> str:
    return reform_prefix + "g" + str(generation) + "/"


def reform_members_key(reform_prefix: str, generation: int) -> str:
    return reform_generation_prefix(reform_prefix, generation) + "members"


def reform_joined_key(reform_prefix: str, generation: int) -> str:
    return reform_generation_prefix(reform_prefix, generation) + "joined"


def reform_full_key(reform_prefix: str, generation: int) -> str:
    return reform_generation_prefix(reform_prefix, generation) + "full"


def reform_pg_prefix(reform_prefix: str, generation: int) -> str:
    """py-only: where generation G's torch process group keeps its keys
    (R/g<G>/pg/); the C++ SDK names its own under reform_generation_prefix."""
    return reform_generation_prefix(reform_prefix, generation) + "pg/"
