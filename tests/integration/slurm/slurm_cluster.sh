# shellcheck shell=bash
# shellcheck disable=SC2016  # wait_for evaluates its single-quoted condition at each poll
# A real two-node Slurm cluster on this machine, for tests and benchmarks:
# munged, slurmctld and two slurmd (NodeName n1 and n2 on 127.0.0.1, each on
# its own port) run in the foreground as children of the calling shell, with a
# generated munge key and slurm.conf in a temp dir.
#   . slurm_cluster.sh; slurm_cluster_start || skip ...; ...; (EXIT trap) slurm_cluster_stop
# Sets SC_DIR (the temp dir) and exports SLURM_CONF. Every process it starts,
# and every process of every job (they inherit the environment), carries
# DDP_SLURM_CLUSTER=$SC_DIR in its environment: slurm_cluster_stop kills what
# is left by that mark, so no daemon, step or worker outlives the caller.
# Needs root (the daemons run as root, SlurmUser=root).

SC_DIR=""
SC_PIDS=""
SC_REASON=""

. "$(dirname "${BASH_SOURCE[0]}")/../../support/shell_lib.sh"  # free_port, wait_for

# Pids of the processes carrying this cluster's mark (not the caller's shell),
# or its SLURM_CONF (slurmstepd gets a clean env with only that).
sc_marked_pids() {
  for d in /proc/[0-9]*; do
    p=${d#/proc/}
    [ "$p" = "$$" ] || [ "$p" = "${BASHPID:-}" ] && continue
    { tr "\0" "\n" <"$d/environ"; } 2>/dev/null |
      grep -qx -e "DDP_SLURM_CLUSTER=$SC_DIR" -e "SLURM_CONF=$SC_DIR/slurm.conf" && echo "$p"
  done
}

# Pids of the processes whose environment has `VAR=VALUE`.
sc_pids_with_env() {
  for d in /proc/[0-9]*; do
    { tr "\0" "\n" <"$d/environ"; } 2>/dev/null | grep -qx "$1" && echo "${d#/proc/}"
  done
}

slurm_cluster_start() {
  [ "$(id -u)" = 0 ] || { SC_REASON="needs root to run slurmctld, slurmd and munged"; return 1; }
  for c in munged slurmctld slurmd sbatch srun scancel squeue sinfo ss; do
    command -v "$c" >/dev/null 2>&1 || { SC_REASON="$c is not installed (scripts/setup.sh installs it)"; return 1; }
  done
  SC_DIR=$(mktemp -d /tmp/ddp-slurm.XXXXXX)
  chmod 755 "$SC_DIR"
  export DDP_SLURM_CLUSTER=$SC_DIR
  mkdir -p "$SC_DIR/munge" "$SC_DIR/key" "$SC_DIR/state" "$SC_DIR/spool/n1" "$SC_DIR/spool/n2" "$SC_DIR/log"
  chmod 700 "$SC_DIR/key"
  dd if=/dev/urandom of="$SC_DIR/key/munge.key" bs=1024 count=1 2>/dev/null
  chmod 400 "$SC_DIR/key/munge.key"
  munged -F --force --socket="$SC_DIR/munge/sock" --key-file="$SC_DIR/key/munge.key" \
    --pid-file="$SC_DIR/munge/pid" --seed-file="$SC_DIR/munge/seed" >"$SC_DIR/log/munged.out" 2>&1 &
  SC_PIDS="$SC_PIDS $!"
  wait_for 100 '[ -S "$SC_DIR/munge/sock" ]' || { SC_REASON="munged did not start: $(tail -3 "$SC_DIR/log/munged.out")"; return 1; }

  ctld_port=$(free_port) n1_port=$(free_port) n2_port=$(free_port)
  cat >"$SC_DIR/slurm.conf" <<CONF
ClusterName=ddptest
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$SC_DIR/munge/sock
CredType=cred/munge
StateSaveLocation=$SC_DIR/state
SlurmdSpoolDir=$SC_DIR/spool/%n
SlurmctldPidFile=$SC_DIR/slurmctld.pid
SlurmdPidFile=$SC_DIR/slurmd-%n.pid
SlurmctldLogFile=$SC_DIR/log/slurmctld.log
SlurmdLogFile=$SC_DIR/log/slurmd-%n.log
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
InactiveLimit=0
KillWait=5
MinJobAge=2
NodeName=n1 NodeHostname=$(hostname) NodeAddr=127.0.0.1 Port=$n1_port CPUs=2 RealMemory=1000 State=UNKNOWN
NodeName=n2 NodeHostname=$(hostname) NodeAddr=127.0.0.1 Port=$n2_port CPUs=2 RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
CONF
  export SLURM_CONF=$SC_DIR/slurm.conf
  slurmctld -D -i >"$SC_DIR/log/slurmctld.out" 2>&1 &
  SC_PIDS="$SC_PIDS $!"
  slurmd -D -N n1 >"$SC_DIR/log/slurmd-n1.out" 2>&1 &
  SC_PIDS="$SC_PIDS $!"
  slurmd -D -N n2 >"$SC_DIR/log/slurmd-n2.out" 2>&1 &
  SC_PIDS="$SC_PIDS $!"
  # shellcheck disable=SC2034  # SC_REASON is read by the sourcing script
  if ! wait_for 300 '[ "$(sinfo -h -o "%T" -N 2>/dev/null | grep -cx idle)" = 2 ]'; then
    SC_REASON="the cluster did not come up: $(sinfo -N 2>&1 | tail -2 | tr '\n' ' ') $(tail -2 "$SC_DIR"/log/*.out | tr '\n' ' ')"
    return 1
  fi
}

# Cancels every job, stops the daemons, then kills whatever still carries the
# mark and removes the temp dir.
slurm_cluster_stop() {
  [ -n "$SC_DIR" ] || return 0
  trap '' INT TERM HUP  # finish even if `timeout` signals the whole group again
  # Jobs first, while slurmd can still stop their steps.
  scancel --full --quiet --user=root >/dev/null 2>&1
  wait_for 100 '[ -z "$(squeue -h 2>/dev/null)" ]'
  for p in $SC_PIDS; do kill -TERM "$p" 2>/dev/null; done
  wait_for 50 '! { for p in $SC_PIDS; do kill -0 $p 2>/dev/null && echo x; done; } | grep -q x'
  for p in $SC_PIDS $(sc_marked_pids); do kill -KILL "$p" 2>/dev/null; done
  for p in $SC_PIDS; do wait "$p" 2>/dev/null; done
  wait_for 50 '[ -z "$(sc_marked_pids)" ]'  # SIGKILL is asynchronous
  rm -rf "$SC_DIR"
  SC_DIR=""
}
