"""A torch trainer under ddprun --on_failure=reform in which rank 1 dies at
step 5 while rank 0's step is held up in its main thread, outside any
collective (12 s, as a stuck data loader would): ddprun.elastic names where
rank 0's main thread is, once, 10 s after its generation ended; then the step
returns, fails, and the ranks re-form with rank 1's replacement."""
import os
import signal
import time

import torch

from ddprun import elastic


def held_up():
    time.sleep(12)


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    eg = elastic.ElasticGroup()
    model = torch.nn.Linear(4, 1)
    state = eg.sync_state(model, None, {"step": 0})
    ddp = eg.ddp(model)
    first = os.environ.get("DDP_REFORM_JOINING") != "1"
    while state["step"] < 20:
        step = state["step"]
        try:
            with eg.step():
                if first and step == 5 and eg.rank == 1:
                    os.kill(os.getpid(), signal.SIGKILL)
                if first and step == 5 and eg.rank == 0 and eg.generation == 0:
                    held_up()
                ddp(torch.ones(2, 4)).sum().backward()
            state["step"] += 1
        except elastic.MembershipChanged:
            eg.reform()
            state = eg.sync_state(model, None, state)
            ddp = eg.ddp(model)
    print(f"rank {eg.rank} done at generation {eg.generation}", flush=True)


if __name__ == "__main__":
    main()
