"""torchrun for Debian's python3-torch 1.13 on Python 3.11.

torch 1.13's Std.from_str returns None on Python 3.11 for its own default "0"
(enum membership changed), so torchrun crashes before starting anything. This
wrapper patches it and calls torch.distributed.run.main(); arguments are
torchrun's. Used by the tests and benchmarks that compare against torchrun.
"""
import re
import sys

from torch.distributed.elastic.multiprocessing import api


def _from_str(vm):
    if re.fullmatch(r"\d", vm):
        return api.Std(int(vm))
    return {int(k): api.Std(int(v)) for k, v in (kv.split(":") for kv in vm.split(","))}


api.Std.from_str = staticmethod(_from_str)

import torch.distributed.run  # noqa: E402  (after the patch on purpose)

sys.exit(torch.distributed.run.main())
