# Reports this worker's first step to ddprun the way any torch script can:
# one set on torch's own TCPStore at MASTER_ADDR:MASTER_PORT (the agent's store
# proxy puts it under the round's prefix). docs/agent.md, "Startup times".
import datetime
import os

import torch.distributed as dist

store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
                      timeout=datetime.timedelta(seconds=60))
store.set("ddp/first_step/" + os.environ["RANK"], "1")
