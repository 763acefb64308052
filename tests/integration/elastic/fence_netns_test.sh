#!/bin/sh
# shellcheck disable=SC2016  # wait_for evaluates its single-quoted condition at each poll
# No two worlds at once: a node cut off from the store, whose workers ignore
# SIGTERM, must have its workers dead before the other node's new world
# starts. The daemon, agent A and agent B each run in their own network
# namespace joined by veth pairs; A's link is cut (no FIN, no RST). Every
# worker appends "<GROUP_WORLD_SIZE> <RANK> <CLOCK_MONOTONIC ns>" to its node's
# file every 10 ms (one clock: the namespaces share the host), so the overlap
# is read from the outside: the last line of the old world (2 nodes) must come
# before the first line of the new one (B alone).
#   fence_netns_test.sh BIN_DIR
# Needs root (ip netns); exits 77 (skipped) with the reason otherwise.
set -u
BIN=$1
P=ddf$$ NET=10.78
. "$(dirname "$0")/netns_three_hosts.sh"

# Keep-alive window 1 s x 3 = 3 s. --stop_timeout=10 is what A's workers would
# get after SIGTERM without the fence: ten seconds of two worlds.
CONF=keep_alive_interval=1,keep_alive_max_attempt=3,last_call_timeout=1,join_timeout=30
agent() {  # agent NAME NETNS DAEMON_ADDR [VAR=VALUE...]
  name=$1 ns=$2 addr=$3; shift 3
  ip netns exec "$ns" env -u PET_NNODES -u PET_NPROC_PER_NODE -u PET_STANDALONE FAKE_HANG=1 \
    FAKE_TICK_FILE="$TMP/ticks.$name" "$@" \
    "$BIN/ddprun" --nnodes=1:2 --nproc_per_node=2 --rdzv_backend=c10d --rdzv_endpoint="$addr:$PORT" \
    --rdzv_id=fence --rdzv_conf=$CONF --max_restarts=3 --stop_timeout=10 --log_level=info \
    "$BIN/fake_worker" >"$TMP/$name.log" 2>&1 &
  PIDS="$PIDS $!"
}
# Distinct ranks that wrote in a world of $1 nodes.
ranks_in() { cat "$TMP"/ticks.* 2>/dev/null | awk -v w="$1" '$1 == w { print $2 }' | sort -u | wc -l; }
# The last (or first) write of the world of $2 nodes in the files $3...
last_in() { w=$1; shift; cat "$@" | awk -v w="$w" '$1 == w && $3 > m { m = $3 } END { printf "%.0f", m }'; }
first_in() { w=$1; shift; cat "$@" | awk -v w="$w" '$1 == w && (m == "" || $3 < m) { m = $3 } END { printf "%.0f", m }'; }
ms_between() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", (b - a) / 1e6 }'; }
agent a $NS_A 10.78.1.1 FAKE_IGNORE_SIGTERM=1
A_PID=$!
agent b $NS_B 10.78.2.1
B_PID=$!
wait_for 300 '[ "$(ranks_in 2)" -ge 4 ]' || fail "the two nodes did not start a world of 4 workers"

# The partition: the daemon's end of A's link goes down. A keeps its address and
# route, its packets are dropped without an error: no FIN, no RST, no ICMP.
ip -n $NS_D link set ${P}da down

wait_for 300 '[ "$(ranks_in 1)" -ge 2 ]' || fail "agent B did not start a new world alone"
expect_a_lost_store 300

# From the outside: the old world's last write, the new world's first.
OLD_LAST=$(last_in 2 "$TMP"/ticks.*)
NEW_FIRST=$(first_in 1 "$TMP"/ticks.*)
GAP_MS=$(ms_between "$OLD_LAST" "$NEW_FIRST")
A_GAP_MS=$(ms_between "$(last_in 2 "$TMP/ticks.a")" "$NEW_FIRST")
echo "old world's last write to the new world's first: $GAP_MS ms (the cut node's last: $A_GAP_MS ms)"
awk -v o="$OLD_LAST" -v n="$NEW_FIRST" 'BEGIN { exit !(o < n) }' ||
  fail "two worlds at once: the old world's last write came $GAP_MS ms (negative: after) before the new world's first"
kill -0 $B_PID 2>/dev/null || fail "agent B exited"
echo "PASS: the old world was gone $GAP_MS ms before the new one wrote (the cut node's workers $A_GAP_MS ms)"
