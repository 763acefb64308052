"""Heartbeats and sections from Python, without the C++ SDK: `ddprun.liveness`.

With ddprun installed by pip, use the package directly:

    from ddprun import liveness as live
    for batch in loader:
        with live.section("step"):
            live.heartbeat()
            train_step(batch)

This file keeps the import name `ddp_liveness` working from a source checkout
(put worker_sdk/examples on sys.path): it takes `ddprun.liveness` from an
installed ddprun, else from python/ddprun in this checkout. Outside ddprun
(DDP_LIVENESS_FILE unset) both do nothing.
"""
import os
import sys

try:
    from ddprun.liveness import enabled, heartbeat, section
except ImportError:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
    write_bytecode, sys.dont_write_bytecode = sys.dont_write_bytecode, True  # no __pycache__ in the checkout
    try:
        from ddprun.liveness import enabled, heartbeat, section
    finally:
        sys.dont_write_bytecode = write_bytecode

__all__ = ["enabled", "heartbeat", "section"]
