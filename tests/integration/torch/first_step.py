# Reports this worker's first step to ddprun the way any torch script can:
# one set on torch's own TCPStore at MASTER_ADDR:MASTER_PORT (the agent's store
# proxy puts it under the round's prefix). docs/agent.md, "Startup times".
# torch's set is not answered: the get after it waits until the store has
# it, as a script that exits right after its first step must.
import datetime
import os

import torch.distributed as dist

store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
                      timeout=datetime.timedelta(seconds=60))
key = "ddp/first_step/" + os.environ["RANK"]
store.set(key, "1")
assert store.get(key) == b"1"
