"""A worker decorated with torch's @record that raises on rank 1."""
import os
import time

from torch.distributed.elastic.multiprocessing.errors import record


def load_batch(i):
    raise ValueError(f"corrupt batch {i} in shard 3")


@record
def main():
    if os.environ["RANK"] == "1":
        load_batch(42)
    time.sleep(60)  # rank 0 waits until the agent stops it


if __name__ == "__main__":
    main()
