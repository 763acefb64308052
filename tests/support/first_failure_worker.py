"""A worker of a multi-node job with two failures (the first-failure tests):

  first_failure_worker.py DIR FIRST SECOND

Once every rank of the job runs (a file each in DIR), rank FIRST fails
("first failure", exit 1); its node's other ranks ignore SIGTERM, so that
node takes --stop_timeout to stop and reports late. Rank SECOND fails
("second failure") two seconds after FIRST did (time enough for FIRST's node
to record its failure on a loaded machine); its node stops at once and
reports first. Every other rank waits to be stopped.
"""
import os
import signal
import sys
import time

d, first, second = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rank = int(os.environ["RANK"])
world = int(os.environ["WORLD_SIZE"])
node = int(os.environ["GROUP_RANK"])
with open(os.path.join(d, "node.%d.tmp" % rank), "w") as f:
    f.write(str(node))
os.rename(os.path.join(d, "node.%d.tmp" % rank), os.path.join(d, "node.%d" % rank))
open(os.path.join(d, "up.%d" % rank), "w").close()
while len([f for f in os.listdir(d) if f.startswith("up.")]) < world:
    time.sleep(0.01)


def node_of(r):
    with open(os.path.join(d, "node.%d" % r)) as f:  # written before its "up" file
        return int(f.read())


if rank == first:
    # Not before every other rank is set (its node-mates ignore SIGTERM): a
    # node-mate stopped before that would end at once and report early.
    while len([f for f in os.listdir(d) if f.startswith("ready.")]) < world - 1:
        time.sleep(0.01)
    open(os.path.join(d, "failed.first"), "w").close()
    sys.exit("first failure")
if node_of(first) == node:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
open(os.path.join(d, "ready.%d" % rank), "w").close()
if rank == second:
    while not os.path.exists(os.path.join(d, "failed.first")):
        time.sleep(0.01)
    time.sleep(2)
    sys.exit("second failure")
while True:
    time.sleep(3600)
