#!/usr/bin/env bash
# A torch job that loses ranks and nodes, over and over, and keeps its
# survivors: the fault figures of docs/reliability.md, "Kill cycles under
# re-form", and the torchreform stress test.
#
#   PYTHON=.venv/bin/python [PRELOAD=torch] [NODES=2] [NPROC=4] [RDZV=etcd] \
#     scripts/bench/reform_kill_cycles.sh [CYCLES] [OUT_DIR]
#
# NODES nodes of NPROC workers (--nnodes=NODES:NODES, --on_failure=reform;
# 2 x 4 by default) train python/examples/reform_ddp.py on one
# ddp-rendezvousd, and one more node waits as a hot spare. The cycles take
# turns:
#   rank:   kill -9 of one worker, chosen at random;
#   twice:  kill -9 of one worker, then 0-400 ms later of another (the
#           second often lands inside the re-form of the first);
#   node:   kill -9 of a member node's agent; the spare takes its ranks and
#           a new node is started as the next spare.
# PRELOAD=M starts every node with `--preload M`: replacements are forked
# from a zygote that imported M. RDZV=etcd rendezvous on a one-member etcd
# (`etcd` on PATH) instead: there the workers' store is hosted by one node's
# agent, and losing that node ends the job (docs/reform.md), so node kills
# spare it.
# A cycle is done when a generation newer than the last has all ranks and
# stays the newest for 1 s. One not done within 120 s is a stall: the script
# saves the nodes' output and every worker's thread stacks (gdb) under OUT_DIR
# and stops; so does a node that exits. Prints one line per cycle, then a
# summary: cycles done, stalls, per kind the median and the slowest time from
# the (last) kill to that generation, how many ranks ended a step blocked in
# Gloo themselves, and how many lines said a re-form fell back to a restart.
# Exits 1 on a stall or a fall-back, 2 on a usage or setup mistake.
# Needs torch 2.x ($PYTHON) and $BUILD_DIR's ddprun and ddp-rendezvousd.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cycles=${1:-90}
[[ "$cycles" =~ ^[1-9][0-9]*$ ]] || bench_usage_error "CYCLES '$cycles' is not a positive number"
nodes=${NODES:-2} nproc=${NPROC:-4}
[[ "$nodes" =~ ^([2-9]|[1-9][0-9])$ ]] ||
  bench_usage_error "NODES '$nodes' is not a number of nodes from 2 to 99 (a node kill needs survivors)"
[[ "$nproc" =~ ^[1-9][0-9]?$ ]] || bench_usage_error "NPROC '$nproc' is not a number of workers (1-99)"
world=$((nodes * nproc))
rdzv=${RDZV:-c10d}
[[ "$rdzv" == c10d || "$rdzv" == etcd ]] || bench_usage_error "RDZV '$rdzv' is neither c10d nor etcd"
require_bins ddprun ddp-rendezvousd
require_torch
[[ "$rdzv" == c10d ]] || command -v etcd >/dev/null || bench_usage_error "RDZV=etcd needs etcd on PATH (apt install etcd-server)"
out=${2:-$(mktemp -d /tmp/reform_kill_cycles.XXXXXX)}
mkdir -p "$out"
cd "$root"

declare -A agent=()  # node name -> agent pid, every node started
daemon=""
cleanup() {
  kill -9 "${agent[@]}" "$daemon" 2>/dev/null || true
}
trap cleanup EXIT
if [[ "$rdzv" == c10d ]]; then
  "$build/bin/ddp-rendezvousd" --host 127.0.0.1 --port 0 --port-file "$out/port" --log-level warn \
    >"$out/daemon.log" 2>&1 &
  daemon=$!
  for _ in $(seq 100); do [[ -s "$out/port" ]] && break; sleep 0.1; done
  [[ -s "$out/port" ]] || bench_usage_error "ddp-rendezvousd wrote no port file ($out/daemon.log)"
  port=$(cat "$out/port")
  # Keep-alives every 0.5 s: a lost node's fence margin is 0.25 s.
  conf=keep_alive_interval=0.5
else
  read -r port peer < <("$python" -c 'import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*(x.getsockname()[1] for x in s))')
  etcd --name kills --data-dir "$out/etcd" --listen-client-urls "http://127.0.0.1:$port" \
    --advertise-client-urls "http://127.0.0.1:$port" --listen-peer-urls "http://127.0.0.1:$peer" \
    --initial-advertise-peer-urls "http://127.0.0.1:$peer" --initial-cluster "kills=http://127.0.0.1:$peer" \
    --heartbeat-interval 50 --election-timeout 500 --log-level warn >"$out/daemon.log" 2>&1 &
  daemon=$!
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break; sleep 0.1; done
  curl -sf "http://127.0.0.1:$port/health" >/dev/null || bench_usage_error "etcd did not start ($out/daemon.log)"
  # etcd's leases count whole seconds.
  conf=keep_alive_interval=1
fi
# On etcd the address is where the workers reach the store's host.
addr() { if [[ "$rdzv" == c10d ]]; then echo "$1"; else echo 127.0.0.1; fi; }

export PYTHONPATH="$root/python" PYTHONUNBUFFERED=1 DDP_LOG_LEVEL=info
unset OMP_NUM_THREADS
script="python/examples/reform_ddp.py --steps 1000000000 --step-sleep-ms 15"
start_node() {  # name
  # shellcheck disable=SC2086
  "$build/bin/ddprun" --python "$python" --nnodes=$nodes:$nodes --nproc_per_node=$nproc --rdzv_backend=$rdzv \
    --rdzv_endpoint="127.0.0.1:$port" --rdzv_id=kills \
    --rdzv_conf=join_timeout=120,last_call_timeout=3,$conf --local_addr="$(addr "$1")" \
    --on_failure=reform --max_restarts=100000 ${PRELOAD:+--preload "$PRELOAD"} $script >"$out/$1.log" 2>&1 &
  agent[$1]=$!
}
# "G N" for each generation G that N ranks reported, in every node's output.
generations() {
  cat "$out"/node*.log | sed -n 's/.*ddprun\.elastic: generation \([0-9]*\): slot .*/\1/p' | sort -n | uniq -c |
    awk '{print $2, $1}'
}
newest() { generations | tail -n 1; }
newest_gen() { local g; g=$(newest | cut -d' ' -f1); echo "${g:--1}"; }
# Whether the newest generation is past $1 and has all the ranks.
formed_past() {  # generation
  local g n
  read -r g n <<<"$(newest)"
  [[ -n "${g:-}" ]] && ((g > $1 && n == world))
}
alive_members() {
  local name
  for name in "${members[@]}"; do kill -0 "${agent[$name]}" 2>/dev/null || return 1; done
}
# The workers of the member nodes: the python processes running the script
# (not the agents and guards, whose command lines hold it too) under an agent.
worker_pids() {
  local p q name
  for p in $(pgrep -f -- "$script"); do
    [[ $(cat "/proc/$p/comm" 2>/dev/null) == python* ]] || continue
    q=$(ps -o ppid= -p "$p" 2>/dev/null | tr -d ' ')
    while [[ -n "$q" && "$q" != 1 && "$q" != 0 ]]; do
      for name in "${members[@]}"; do
        [[ "$q" == "${agent[$name]}" ]] && { echo "$p"; continue 3; }
      done
      q=$(ps -o ppid= -p "$q" 2>/dev/null | tr -d ' ')
    done
  done
}
pick() { shuf -n 1; }
stall() {  # cycle message
  echo "cycle $1: $2: output and stacks in $out/stall.$1" >&2
  mkdir -p "$out/stall.$1"
  cp "$out"/node*.log "$out/daemon.log" "$out/stall.$1/"
  for p in $(pgrep -f -- "$script" || true); do
    timeout 60 gdb -p "$p" -batch -ex "thread apply all bt" >"$out/stall.$1/gdb.$p" 2>&1 || true
  done
}

members=()
for ((k = 0; k < nodes; k++)); do
  members+=("node$k")
  start_node "node$k"
done
for _ in $(seq 1800); do formed_past -1 && break; sleep 0.1; done
formed_past -1 || { echo "$bench_name: the two nodes did not start (see $out)" >&2; exit 1; }
next=$nodes
spare=node$next
start_node "$spare"
for _ in $(seq 600); do grep -q "hot spare: round" "$out/$spare.log" && break; sleep 0.1; done
grep -q "hot spare: round" "$out/$spare.log" || { echo "$bench_name: $spare is no hot spare (see $out)" >&2; exit 1; }

declare -A times=([rank]="" [twice]="" [node]="")
stalls=0 done=0 kinds=(rank twice node)
for ((i = 1; i <= cycles; i++)); do
  kind=${kinds[$(((i - 1) % 3))]}
  sleep "0.$((RANDOM % 10))"
  before=$(newest_gen)
  what=""
  case $kind in
    rank | twice)
      victim=$(worker_pids | pick)
      [[ -n "$victim" ]] || { stall "$i" "no worker of the member nodes found"; ((stalls++)) || true; break; }
      kill -9 "$victim"
      what="worker $victim"
      if [[ $kind == twice ]]; then
        sleep "0.$(printf '%03d' $((RANDOM % 400)))"
        victim=$(worker_pids | grep -vx "$victim" | pick || true)
        [[ -n "$victim" ]] && { kill -9 "$victim"; what+=", then worker $victim"; }
      fi
      ;;
    node)
      lost=$(for name in "${members[@]}"; do
        grep -q "hosting the workers' store" "$out/$name.log" || echo "$name"
      done | pick)
      kill -9 "${agent[$lost]}"
      wait "${agent[$lost]}" 2>/dev/null || true
      what="agent of $lost"
      mapfile -t members < <(printf '%s\n' "${members[@]}" | grep -vx "$lost")
      members+=("$spare")
      ;;
  esac
  t0=$(date +%s%N)
  ok=0
  for _ in $(seq 1200); do
    if formed_past "$before"; then
      # The newest generation stays the newest for 1 s (a second kill may start another).
      g=$(newest_gen)
      sleep 1
      [[ $(newest_gen) == "$g" ]] && formed_past "$before" && { ok=1; break; }
      continue
    fi
    alive_members || break
    sleep 0.05
  done
  if ((ok == 0)); then
    ((stalls++)) || true
    alive_members || what+="; a member node exited"
    stall "$i" "$kind ($what): no generation of $world ranks within 120 s"
    break
  fi
  # The time to the generation of all ranks, less the 1 s it had to stay the newest.
  ms=$((($(date +%s%N) - t0) / 1000000 - 1000))
  took=$(printf '%d.%03d' $((ms / 1000)) $((ms % 1000)))
  times[$kind]+="$took "
  if [[ $kind == node ]]; then
    next=$((next + 1))
    spare=node$next
    start_node "$spare"
    for _ in $(seq 600); do grep -q "hot spare: round" "$out/$spare.log" && break; sleep 0.1; done
  fi
  done=$i
  echo "cycle $i: $kind ($what): generation $(newest_gen) of $world after $took s"
done
summary="cycles=$done stalls=$stalls"
for kind in "${kinds[@]}"; do
  sorted=$(tr ' ' '\n' <<<"${times[$kind]}" | grep . | sort -n || true)
  n=$(grep -c . <<<"$sorted" || true)
  if ((n > 0)); then
    summary+=" ${kind}_n=$n ${kind}_median_s=$(echo "$sorted" | sed -n "$(((n + 1) / 2))p")"
    summary+=" ${kind}_slowest_s=$(echo "$sorted" | tail -n 1)"
  fi
done
# Ranks that ended a step blocked in Gloo themselves (docs/reform.md), and lines of a failed re-form.
summary+=" wedged_exits=$(cat "$out"/node*.log | grep -c "Exiting so that ddprun replaces this rank" || true)"
fallbacks=$(cat "$out"/node*.log | grep -c "falling back\|restarting workers" || true)
summary+=" fallbacks=$fallbacks"
echo "$summary out=$out"
((stalls == 0 && fallbacks == 0))
