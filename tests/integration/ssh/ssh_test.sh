#!/bin/bash
# shellcheck disable=SC2016  # wait_for evaluates its single-quoted condition at each poll
# ddprun --hostfile / --hosts over real OpenSSH: two sshd started here on
# 127.0.0.2 and 127.0.0.3 with a key generated for the test; a two-host job,
# ranks in the host list's order, a failure on one host stopping the other and
# named in the last line, every run, a restart of both hosts keeping their
# ranks, the remote agents' logs on stderr and only the program's output on
# stdout (python -u workers' lines whole, 5 runs), the earliest of two hosts'
# failures named in the last line, Ctrl-C, killing the launcher leaving no
# worker on either host, a
# host's ssh connection dying, a --local_addr the hosts cannot reach, and an
# unreachable host.
#   ssh_test.sh BIN_DIR
# Exits 77 (skipped) with the reason where sshd cannot run (not root).
set -u
BIN=$(cd "$1" && pwd)
skip() { echo "SKIP: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "needs root to run sshd"
SSHD=/usr/sbin/sshd
[ -x $SSHD ] || skip "openssh-server is not installed (scripts/setup.sh installs it)"
for c in ssh ssh-keygen ss; do command -v $c >/dev/null 2>&1 || skip "$c is not installed"; done

TMP=$(mktemp -d /tmp/ddp-ssh.XXXXXX)
chmod 755 "$TMP"
# Every process started here, and (through DDP_SSH_ENV) every remote ddprun and
# worker, carries this mark: the EXIT trap kills what is left by it.
export DDP_SSH_TEST=$TMP
PIDS=""
marked() {
  for d in /proc/[0-9]*; do
    [ "${d#/proc/}" = "$$" ] && continue
    { tr "\0" "\n" <"$d/environ"; } 2>/dev/null | grep -qx "DDP_SSH_TEST=$TMP" && echo "${d#/proc/}"
  done
}
cleanup() {
  trap '' INT TERM HUP  # finish even if `timeout` signals the whole group again
  for p in $PIDS; do kill -TERM "$p" 2>/dev/null; done
  for p in $PIDS $(marked); do kill -KILL "$p" 2>/dev/null; done
  for p in $PIDS; do wait "$p" 2>/dev/null; done
  rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP PIPE
. "$(dirname "${BASH_SOURCE[0]}")/../../support/shell_lib.sh"  # free_port, wait_for
fail() { echo "FAIL: $*"; for f in "$TMP"/*.log "$TMP"/*.out; do [ -f "$f" ] && { echo "--- $f"; cat "$f"; }; done; exit 1; }

mkdir -p /run/sshd  # sshd's privilege separation directory (made by its service otherwise)
ssh-keygen -q -t ed25519 -N '' -f "$TMP/host_key" || fail "ssh-keygen"
ssh-keygen -q -t ed25519 -N '' -f "$TMP/user_key" || fail "ssh-keygen"
cp "$TMP/user_key.pub" "$TMP/authorized_keys"
cat >"$TMP/sshd_config" <<CONF
HostKey $TMP/host_key
AuthorizedKeysFile $TMP/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PidFile none
ForceCommand echo 'motd: a chatty login shell'; eval "\$SSH_ORIGINAL_COMMAND"
CONF
: >"$TMP/ssh_config"
i=1
for addr in 127.0.0.2 127.0.0.3; do
  port=$(free_port)
  $SSHD -D -e -f "$TMP/sshd_config" -o "ListenAddress=$addr" -o "Port=$port" >"$TMP/sshd$i.log" 2>&1 &
  PIDS="$PIDS $!"
  wait_for 100 "ss -Htln 'sport = :$port' | grep -q ." || skip "sshd did not start on $addr:$port: $(cat "$TMP/sshd$i.log")"
  cat >>"$TMP/ssh_config" <<CONF
Host h$i
  HostName $addr
  Port $port
CONF
  i=$((i + 1))
done
cat >>"$TMP/ssh_config" <<CONF
Host *
  User root
  IdentityFile $TMP/user_key
  IdentitiesOnly yes
  StrictHostKeyChecking no
  UserKnownHostsFile /dev/null
  GlobalKnownHostsFile /dev/null
CONF
ssh -F "$TMP/ssh_config" -o BatchMode=yes h1 true >"$TMP/probe.out" 2>&1 || skip "ssh to a test sshd failed: $(cat "$TMP/probe.out")"

# What the hosts' login shell prints before the launcher's command runs (a
# ~/.bashrc that writes, a motd; here the sshd's ForceCommand's first line,
# and on the test machines root's ~/.bashrc's `pyenv init`, whose rehash races
# between the two hosts' sessions) is not the program's: it goes to stderr.

# The user's ssh config is ~/.ssh/config; the test brings its own.
export DDP_SSH_COMMAND="ssh -F $TMP/ssh_config"
export DDP_SSH_ENV=DDP_SSH_TEST,FAKE_ENV_DUMP,FAKE_PID_FILE,FAKE_HANG,FAKE_PRINT,FAKE_ONLY_RANK,FAKE_EXIT,FAKE_OTHERS_HANG,FAKE_ERROR_MESSAGE,FAKE_FAIL_ON_RESTART_BELOW
unset PET_NNODES PET_NPROC_PER_NODE PET_STANDALONE SLURM_JOB_ID SLURM_JOBID
cd "$TMP" || exit 1
printf '# two hosts\nh1 slots=2\nh2 slots=2  # the second\n' >hostfile

echo "== a two-host --hostfile job"
mkdir -p env
FAKE_ENV_DUMP=$TMP/env FAKE_PRINT=1 timeout 60 "$BIN/ddprun" --hostfile hostfile --local_addr=127.0.0.1 \
  --no_python "$BIN/fake_worker" >job.out 2>job.log || fail "the hostfile job failed"
for r in 0 1 2 3; do
  grep -qx "WORLD_SIZE=4" env/rank_$r.env || fail "rank $r did not see a world of 4"
done
[ "$(grep -h '^GROUP_RANK=' env/*.env | sort | uniq -c | awk '{print $1}' | tr '\n' ' ')" = "2 2 " ] ||
  fail "the ranks are not 2 per host"
{ grep -q "^h1: \[rank [0-3]\]:" job.out && grep -q "^h2: \[rank [0-3]\]:" job.out; } || fail "lines are not prefixed with their host"
grep -q $'\r' job.out job.log && fail "the remote terminal's carriage returns reached the output"
# The remote terminal merges stdout and stderr; they must come apart again, as
# with a local ddprun: stdout holds the workers' stdout only (> out.jsonl stays clean).
bad=$(grep -v '^h[12]: \[rank [0-3]\]:out 0 of rank [0-3]$' job.out)
[ -z "$bad" ] || fail "stdout holds more than the workers' stdout: $bad"
[ "$(wc -l <job.out)" = 4 ] || fail "stdout does not hold the 4 workers' lines"
for h in h1 h2; do
  grep -q "^$h: \[rank [0-3]\]:err 0 of rank [0-3]$" job.log || fail "$h's workers' stderr is not on stderr"
  grep -q "^$h: .* ddprun \[agent\] \[info\] rendezvous complete" job.log || fail "$h's agent log is not on stderr"
  grep -qx "$h: motd: a chatty login shell" job.log || fail "$h's login shell's line is not on stderr"
done
grep -q $'\x1e' job.out job.log && fail "the stream tags reached the output"

echo "== python -u workers' lines reach stdout whole: no empty line between them"
# python -u writes print()'s text and its newline apart, and the remote agent
# streams its workers' terminals: another rank's line could come in between,
# and the newline then went out alone (before: an empty "h2: " line in about
# half of these runs).
printf 'import os\nfor i in range(200):\n    print(f"out {i} of rank {os.environ[\x27RANK\x27]}")\n' >printer.py
for run in 1 2 3 4 5; do
  timeout 60 "$BIN/ddprun" --hostfile hostfile --local_addr=127.0.0.1 --python /usr/bin/python3 printer.py \
    >py.out 2>py.log || fail "run $run: the python job failed"
  odd=$(grep -vE '^h[12]: \[rank [0-3]\]:out [0-9]+ of rank [0-3]$' py.out | head -n 3)
  [ -z "$odd" ] || fail "run $run: stdout holds lines that are no worker's: $(printf '%q' "$odd")"
  [ "$(wc -l <py.out)" = 800 ] || fail "run $run: $(wc -l <py.out) lines on stdout, not 800"
done

echo "== ranks follow the host list: rank 0 on its first host"
# As with DeepSpeed's and MPI's launchers; ranks 0-1 on the hostfile's h1 above.
for r in 0 1; do grep -qx "h1: \[rank $r\]:out 0 of rank $r" job.out || fail "rank $r is not on h1, the first host"; done
for r in 2 3; do grep -qx "h2: \[rank $r\]:out 0 of rank $r" job.out || fail "rank $r is not on h2, the second host"; done
# The first host's ssh starts a second late here, so that it arrives last.
cat >slow_ssh <<SCRIPT
#!/bin/bash
for a in "\$@"; do [ "\$a" = h2 ] && sleep 1; done
exec ssh -F $TMP/ssh_config "\$@"
SCRIPT
chmod +x slow_ssh
DDP_SSH_COMMAND=$TMP/slow_ssh FAKE_PRINT=1 timeout 60 "$BIN/ddprun" --hosts h2,h1 --nproc_per_node=2 \
  --local_addr=127.0.0.1 --rdzv_conf=join_timeout=30 --rdzv_id=order-job --no_python "$BIN/fake_worker" \
  >order.out 2>order.log || fail "the --hosts h2,h1 job failed"
# The user's --rdzv_conf and --rdzv_id reach each host once, merged with the launcher's.
grep -q "given 2 times" order.log && fail "a host got a flag twice: $(grep 'given 2 times' order.log)"
for h in h1 h2; do
  grep -q "^$h: .*run_id=order-job" order.log || fail "$h did not run with --rdzv_id order-job"
done
[ "$(sed -n 's/^\(h[12]\): \[rank \([0-3]\)\]:out .*/\2 \1/p' order.out | sort | tr '\n' ' ')" = \
  "0 h2 1 h2 2 h1 3 h1 " ] || fail "--hosts h2,h1 did not put ranks 0-1 on h2: $(cat order.out)"

echo "== a failure with --max_restarts restarts both hosts, each keeping its ranks"
FAKE_PRINT=1 FAKE_ONLY_RANK=3 FAKE_FAIL_ON_RESTART_BELOW=1 timeout 60 "$BIN/ddprun" --hostfile hostfile \
  --local_addr=127.0.0.1 --max_restarts=1 --no_python "$BIN/fake_worker" >again.out 2>again.log ||
  fail "a job whose rank 3 failed once did not succeed on its restart"
grep -q "^h1: .* started 2 workers attempt=1 restart_count=1/1 ranks=0\.\.1 " again.log ||
  fail "h1 did not restart ranks 0-1"
grep -q "^h2: .* started 2 workers attempt=1 restart_count=1/1 ranks=2\.\.3 " again.log ||
  fail "h2 did not restart ranks 2-3"
[ "$(grep -c '^h2: \[rank 3\]:out 0 of rank 3$' again.out)" = 2 ] || fail "rank 3 did not run twice on h2"

echo "== a failure on one host stops the other, and the last line names it every time"
# Rank 3 runs on h2. Both agents exit 1, in either order. Which host ends
# first is a race: 10 runs, each must name rank 3's host.
for run in 1 2 3 4 5 6 7 8 9 10; do
  rm -f fail.pids
  FAKE_PRINT=1 FAKE_ONLY_RANK=3 FAKE_EXIT=3 FAKE_ERROR_MESSAGE="bad batch 17" FAKE_OTHERS_HANG=1 \
    FAKE_PID_FILE=$TMP/fail.pids timeout 60 "$BIN/ddprun" --hostfile hostfile --local_addr=127.0.0.1 \
    --stop_timeout=5 --no_python "$BIN/fake_worker" >fail.out 2>fail.log
  rc=$?
  [ "$rc" = 1 ] || fail "run $run: a failed worker gave exit $rc, not 1"
  failed=$(sed -n 's/^\(h[12]\): \[rank 3\]:out 0 of rank 3$/\1/p' fail.out)
  [ "$failed" = h2 ] || fail "run $run: rank 3's stdout line is not h2's: $(cat fail.out)"
  last=$(tail -n 1 fail.log)
  [ "$last" = "ddprun: error: workers failed: rank 3 on $failed: exit code 3 (bad batch 17)" ] ||
    fail "run $run: rank 3 failed on $failed, but the last line is: $last"
  [ "$(grep -c '^ddprun: error:' fail.log)" = 1 ] || fail "run $run: not one error line of the launcher's"
  grep -q "^$failed: Root cause (first failure):" fail.log || fail "run $run: $failed's failure report is not on stderr"
  grep -q -e 'Root cause' -e 'ddprun' fail.out && fail "run $run: the agents' lines reached stdout"
  # shellcheck disable=SC2013  # pids, one word each; a loop in a pipe could not fail the test
  for p in $(awk '/ start / {print $1}' fail.pids); do
    wait_for 100 "! kill -0 $p 2>/dev/null" || fail "run $run: worker $p outlived the failed job"
  done
done

echo "== with failures on both hosts the last line names the earliest, not the first host to end"
# Rank 0 (h1) fails first, and h1 takes its --stop_timeout to stop its other
# worker, which ignores SIGTERM; rank 2 (h2) fails two seconds later, and h2
# ends first. The launcher reads the agents' failure records in its store.
mkdir -p first_sync
timeout 90 "$BIN/ddprun" --hostfile hostfile --local_addr=127.0.0.1 --stop_timeout=6 --python /usr/bin/python3 \
  "$(cd "$(dirname "${BASH_SOURCE[0]}")/../../support" && pwd)/first_failure_worker.py" "$TMP/first_sync" 0 2 \
  >first.out 2>first.log
rc=$?
[ "$rc" = 1 ] || fail "two failed hosts gave exit $rc, not 1"
last=$(tail -n 1 first.log)
[ "$last" = "ddprun: error: workers failed: rank 0 on h1: exit code 1 (first failure)" ] ||
  fail "rank 0 failed first on h1, but the last line is: $last"

# Starts a job of 2 hosts x 2 hanging workers in the background (LAUNCHER: its
# pid), its stdout/stderr in $1.out/$1.log and its workers' pids in $1.pids, and
# returns once all 4 workers run.
start_hanging_job() {
  FAKE_HANG=1 FAKE_PID_FILE=$TMP/$1.pids "$BIN/ddprun" --hosts h1,h2 --nproc_per_node=2 --local_addr=127.0.0.1 \
    --stop_timeout=5 --no_python "$BIN/fake_worker" >"$1.out" 2>"$1.log" &
  LAUNCHER=$!
  wait_for 300 "[ \"\$(grep -c ' start ' $1.pids 2>/dev/null)\" = 4 ]" || fail "the 4 workers did not start"
}

# Fails unless every worker started in job $1 is gone within 15 s ($2: after what).
expect_workers_gone() {
  # shellcheck disable=SC2013  # pids, one word each; a loop in a pipe could not fail the test
  for p in $(awk '/ start / {print $1}' "$1.pids"); do
    wait_for 150 "! kill -0 $p 2>/dev/null" || fail "worker $p outlived $2"
  done
}

echo "== Ctrl-C stops every host and exits 130"
start_hanging_job int
kill -INT $LAUNCHER
wait $LAUNCHER
rc=$?
[ "$rc" = 130 ] || fail "SIGINT gave exit $rc, not 130"
expect_workers_gone int "Ctrl-C"

echo "== killing the launcher stops the workers on both hosts"
start_hanging_job hang
kill -KILL $LAUNCHER
wait $LAUNCHER 2>/dev/null
expect_workers_gone hang "the killed launcher"
wait_for 150 '[ -z "$(marked | xargs -r ps -o comm= -p | grep -E "ddprun|fake_worker|ddp-guard")" ]' ||
  fail "processes outlived the killed launcher: $(marked | xargs -r ps -o pid,args -p)"

echo "== a host whose ssh connection dies stops its workers, and the job stops everywhere"
start_hanging_job cut
SSH_H1=$(ps -o pid=,args= --ppid $LAUNCHER | awk '/ h1 -- / {print $1}')
[ -n "$SSH_H1" ] || fail "no ssh child for h1"
# shellcheck disable=SC2086  # SSH_H1 may list more than one pid
kill -KILL $SSH_H1
wait $LAUNCHER
rc=$?
[ "$rc" = 3 ] || fail "a lost connection gave exit $rc, not 3"
[ "$(tail -n 1 cut.log)" = "ddprun: error: host h1: its ssh was killed by signal 9" ] ||
  fail "the last line does not name the host whose connection died"
expect_workers_gone cut "its host's ssh connection"

echo "== a --local_addr the hosts cannot reach is exit 2 naming it"
# The launcher's store listens before any host starts: a host that cannot reach
# it gives up within 30 s (here the shorter join timeout), not a node's wait.
timeout 60 "$BIN/ddprun" --hosts h1,h2 --local_addr=no-such-launcher.invalid --rdzv_conf=join_timeout=3 \
  --no_python /bin/true >addr.out 2>addr.log
rc=$?
[ "$rc" = 2 ] || fail "an unreachable --local_addr gave exit $rc, not 2"
tail -n 1 addr.log | grep -Eq "^ddprun: error: host h[12]: ddprun exited with code 2: cannot reach the rendezvous \
store at no-such-launcher.invalid:[0-9]+ \(--local_addr of the launching ddprun\) after waiting 3.0s: " ||
  fail "the last line does not name --local_addr"

echo "== an unreachable host is exit 3 naming it"
timeout 60 "$BIN/ddprun" --hosts h1,127.0.0.1:1 --local_addr=127.0.0.1 --no_python /bin/true >down.out 2>down.log
rc=$?
[ "$rc" = 3 ] || fail "an unreachable host gave exit $rc, not 3"
[ "$(tail -n 1 down.log)" = "ddprun: error: host 127.0.0.1: ssh failed or lost the connection (see its lines above)" ] ||
  fail "the last line does not name the unreachable host"
grep -q "^127.0.0.1: ssh: connect to host 127.0.0.1 port [0-9]*: " down.log || fail "ssh's own message is not on stderr"
[ -s down.out ] && fail "an unreachable host wrote to stdout: $(cat down.out)"
echo PASS
