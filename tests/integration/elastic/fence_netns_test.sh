#!/bin/sh
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
skip() { echo "SKIP: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "needs root for ip netns"
command -v ip >/dev/null 2>&1 || skip "the ip command (iproute2) is not installed"

P=ddf$$  # short: interface names have at most 15 characters
NS_D=${P}d NS_A=${P}a NS_B=${P}b
TMP=$(mktemp -d)
PIDS=""
cleanup() {
  for p in $PIDS; do kill -9 "$p" 2>/dev/null; done
  for ns in $NS_D $NS_A $NS_B; do ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null; done
  for ns in $NS_D $NS_A $NS_B; do ip netns del "$ns" 2>/dev/null; done
  rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP PIPE
ip netns add $NS_D 2>/dev/null || skip "ip netns add is not allowed here"
ip netns add $NS_A && ip netns add $NS_B || exit 1

# D has 10.78.1.1 towards A (10.78.1.2) and 10.78.2.1 towards B (10.78.2.2).
ip link add ${P}da netns $NS_D type veth peer name ${P}ad netns $NS_A || skip "cannot create veth pairs"
ip link add ${P}db netns $NS_D type veth peer name ${P}bd netns $NS_B || exit 1
ip -n $NS_D addr add 10.78.1.1/24 dev ${P}da && ip -n $NS_A addr add 10.78.1.2/24 dev ${P}ad &&
ip -n $NS_D addr add 10.78.2.1/24 dev ${P}db && ip -n $NS_B addr add 10.78.2.2/24 dev ${P}bd || exit 1
for ns in $NS_D $NS_A $NS_B; do ip -n "$ns" link set lo up; done
ip -n $NS_D link set ${P}da up && ip -n $NS_D link set ${P}db up &&
ip -n $NS_A link set ${P}ad up && ip -n $NS_B link set ${P}bd up || exit 1

# Polls a condition for up to $1 tenths of a second.
wait_for() {
  n=$1; shift
  while [ "$n" -gt 0 ]; do
    if eval "$@"; then return 0; fi
    sleep 0.1; n=$((n - 1))
  done
  return 1
}
fail() { echo "FAIL: $*"; for f in "$TMP"/*.log; do echo "--- $f"; cat "$f"; done; exit 1; }

ip netns exec $NS_D "$BIN/ddp-rendezvousd" --host 0.0.0.0 --port 0 --port-file "$TMP/port" \
  --log-level warn >"$TMP/daemon.log" 2>&1 &
PIDS="$PIDS $!"
wait_for 100 '[ -s "$TMP/port" ]' || fail "the daemon did not start"
PORT=$(cat "$TMP/port")

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
wait_for 300 '! kill -0 $A_PID 2>/dev/null' || fail "agent A still runs 30 s after losing its link"
wait $A_PID
A_CODE=$?
[ "$A_CODE" = 3 ] || fail "agent A exited $A_CODE, expected 3"
grep -q "rendezvous store lost.*no answer from the rendezvous store at 10.78.1.1:$PORT" "$TMP/a.log" ||
  fail "agent A's error does not name the silent store"

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
