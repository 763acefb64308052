#!/bin/sh
# shellcheck disable=SC2016  # wait_for evaluates its single-quoted condition at each poll
# A network partition, for real: the daemon, agent A and agent B each in their
# own network namespace, joined by veth pairs (addresses only inside them).
# Cutting A's link leaves A with a silent store: A must stop its workers and
# exit 3 naming the store, while B re-forms alone and keeps running.
#   partition_netns_test.sh BIN_DIR
# Needs root (ip netns); exits 77 (skipped) with the reason otherwise.
set -u
BIN=$1
P=ddp$$ NET=10.77
. "$(dirname "$0")/netns_three_hosts.sh"

# Keep-alive window 1 s x 3 = 3 s. (An interval of at least 1 s matters: each
# keepalive request may wait one interval, at least 1 s, for its answer.)
CONF=keep_alive_interval=1,keep_alive_max_attempt=3,last_call_timeout=1,join_timeout=30
agent() {  # agent NAME NETNS DAEMON_ADDR
  mkdir -p "$TMP/$1"
  ip netns exec "$2" env -u PET_NNODES -u PET_NPROC_PER_NODE -u PET_STANDALONE FAKE_HANG=1 FAKE_PID_FILE="$TMP/$1/pids" \
    "$BIN/ddprun" --nnodes=1:2 --nproc_per_node=2 --rdzv_backend=c10d --rdzv_endpoint="$3:$PORT" \
    --rdzv_id=partition --rdzv_conf=$CONF --max_restarts=3 --stop_timeout=2 --log_level=info \
    "$BIN/fake_worker" >"$TMP/$1.log" 2>&1 &
  PIDS="$PIDS $!"
}
starts() { grep -c " start " "$TMP/$1/pids" 2>/dev/null || echo 0; }
agent a $NS_A 10.77.1.1
A_PID=$!
agent b $NS_B 10.77.2.1
B_PID=$!
wait_for 300 '[ "$(starts a)" -ge 2 ] && [ "$(starts b)" -ge 2 ]' || fail "the two nodes did not start their workers"
grep -q "group_rank=./2" "$TMP/b.log" || fail "B did not join a world of two nodes"
A_WORKERS=$(awk '/ start / {print $1}' "$TMP/a/pids")

# The partition: the daemon's end of A's link goes down. A keeps its address and
# route, its packets are dropped without an error: no FIN, no RST, no ICMP.
ip -n $NS_D link set ${P}da down

expect_a_lost_store 200
for p in $A_WORKERS; do
  if [ -d "/proc/$p" ] && ! grep -q '^State:.*Z' "/proc/$p/status" 2>/dev/null; then
    fail "worker $p of agent A still runs"
  fi
done

# B re-forms alone: a second start of its workers, in a world of one node.
wait_for 300 '[ "$(starts b)" -ge 4 ]' || fail "agent B did not re-form after A was cut off"
grep -q "group_rank=0/1" "$TMP/b.log" || fail "B's new round is not a world of one node"
kill -0 $B_PID 2>/dev/null || fail "agent B exited"
echo "PASS: A exited 3 after the cut, B re-formed alone"
