# shellcheck shell=sh
# shellcheck disable=SC2016  # wait_for evaluates its single-quoted condition at each poll
# Sourced by the netns tests: three hosts, the daemon D, agent A and agent B,
# each in its own network namespace, joined by veth pairs (addresses only
# inside them), and the daemon started in D. Set before sourcing:
#   BIN     the directory of the binaries
#   P       a short unique prefix (interface names have at most 15 characters)
#   NET     the first two octets, e.g. 10.77: D has $NET.1.1 towards A
#           ($NET.1.2) and $NET.2.1 towards B ($NET.2.2)
# Gives NS_D, NS_A, NS_B, TMP (removed at exit), PIDS (killed at exit),
# PORT (the daemon's), wait_for TENTHS CONDITION, fail MESSAGE, skip REASON and
# expect_a_lost_store TENTHS.
skip() { echo "SKIP: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "needs root for ip netns"
command -v ip >/dev/null 2>&1 || skip "the ip command (iproute2) is not installed"

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
ip netns add "$NS_D" 2>/dev/null || skip "ip netns add is not allowed here"
ip netns add "$NS_A" && ip netns add "$NS_B" || exit 1

ip link add "${P}da" netns "$NS_D" type veth peer name "${P}ad" netns "$NS_A" || skip "cannot create veth pairs"
ip link add "${P}db" netns "$NS_D" type veth peer name "${P}bd" netns "$NS_B" || exit 1
ip -n "$NS_D" addr add "$NET.1.1/24" dev "${P}da" && ip -n "$NS_A" addr add "$NET.1.2/24" dev "${P}ad" &&
ip -n "$NS_D" addr add "$NET.2.1/24" dev "${P}db" && ip -n "$NS_B" addr add "$NET.2.2/24" dev "${P}bd" || exit 1
for ns in $NS_D $NS_A $NS_B; do ip -n "$ns" link set lo up; done
ip -n "$NS_D" link set "${P}da" up && ip -n "$NS_D" link set "${P}db" up &&
ip -n "$NS_A" link set "${P}ad" up && ip -n "$NS_B" link set "${P}bd" up || exit 1

# Polls a condition for up to $1 tenths of a second.
wait_for() {
  n=$1; shift
  while [ "$n" -gt 0 ]; do
    # shellcheck disable=SC2294  # the condition is one shell string, evaluated as written
    if eval "$@"; then return 0; fi
    sleep 0.1; n=$((n - 1))
  done
  return 1
}
fail() { echo "FAIL: $*"; for f in "$TMP"/*.log; do echo "--- $f"; cat "$f"; done; exit 1; }

# Fails unless agent A (its pid in A_PID, its log $TMP/a.log), cut off from the
# daemon, exits 3 within $1 tenths of a second naming the store it lost.
expect_a_lost_store() {
  wait_for "$1" '! kill -0 $A_PID 2>/dev/null' || fail "agent A still runs $(($1 / 10)) s after losing its link"
  wait "$A_PID"
  A_CODE=$?
  [ "$A_CODE" = 3 ] || fail "agent A exited $A_CODE, expected 3"
  grep -q "rendezvous store lost.*no answer from the rendezvous store at $NET.1.1:$PORT" "$TMP/a.log" ||
    fail "agent A's error does not name the silent store"
}

ip netns exec "$NS_D" "$BIN/ddp-rendezvousd" --host 0.0.0.0 --port 0 --port-file "$TMP/port" \
  --log-level warn >"$TMP/daemon.log" 2>&1 &
PIDS="$PIDS $!"
wait_for 100 '[ -s "$TMP/port" ]' || fail "the daemon did not start"
PORT=$(cat "$TMP/port")
