# Rank 1 hangs inside a torch FileTimer scope on the first attempt while
# rank 0 waits in a barrier; after a restart both finish.
import os
import time

import torch.distributed as dist
import torch.distributed.elastic.timer as timer


def stall_forever():
    while True:
        time.sleep(0.05)  # the hanging line


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    timer.configure(timer.FileTimerClient(os.environ["TORCHELASTIC_TIMER_FILE"]))
    first = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0"
    if rank == 1:
        with timer.expires(after=2, scope="rank1-step"):
            if first:
                print("rank 1 stalls", flush=True)
                stall_forever()
    dist.barrier()
    print(f"rank {rank} done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
