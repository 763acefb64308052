"""Prints the worker's whole environment, one `env rank=R NAME=VALUE` line per variable."""
import os

import torch

rank = os.environ["RANK"]
print(f"torch rank={rank} version={torch.__version__}", flush=True)
for name, value in sorted(os.environ.items()):
    print(f"env rank={rank} {name}={value}", flush=True)
