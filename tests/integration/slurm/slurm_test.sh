#!/bin/bash
# shellcheck disable=SC2016  # wait_for evaluates its single-quoted condition at each poll
# ddprun on a real Slurm cluster (slurm_cluster.sh: two nodes on this machine):
# sbatch + srun with no rendezvous flags, a C++ SDK worker and a torch worker,
# SDK workers started by srun without ddprun, the misuse that exits 2, and
# scancel --signal=USR1 reaching the workers, and scancel of a running job
# leaving no process behind.
#   slurm_test.sh BIN_DIR SOURCE_DIR
# Exits 77 (skipped) with the reason where the daemons cannot start (not root).
set -u
BIN=$(cd "$1" && pwd)
SRC=$(cd "$2" && pwd)
skip() { echo "SKIP: $*"; exit 77; }
. "$SRC/tests/integration/slurm/slurm_cluster.sh"
trap slurm_cluster_stop EXIT
trap 'exit 1' INT TERM HUP PIPE
slurm_cluster_start || skip "$SC_REASON"
# The job's env: nothing that would set ddprun's options behind its back.
unset PET_NNODES PET_NPROC_PER_NODE PET_STANDALONE PET_MASTER_ADDR PET_MASTER_PORT PET_NODE_RANK CUDA_VISIBLE_DEVICES DDP_SLURM
W=$SC_DIR/work
mkdir -p "$W"
cd "$W" || exit 1
fail() {
  echo "FAIL: $*"
  for f in "$W"/*.out "$W"/*.log; do [ -f "$f" ] && { echo "--- $f"; cat "$f"; }; done
  tail -n 20 "$SC_DIR"/log/slurmctld.log "$SC_DIR"/log/slurmd-n*.log
  exit 1
}
# The lines of file $1 matching $2, counted.
count() { grep -c "$2" "$1" 2>/dev/null || echo 0; }

echo "== sbatch: srun ddprun with the C++ SDK worker, no rendezvous flags"
cat >sdk.sbatch <<JOB
#!/bin/bash
srun --ntasks-per-node=1 "$BIN/ddprun" --nproc_per_node=2 --no_python "$BIN/ddp_sdk_test_worker" world
JOB
timeout 120 sbatch --wait -N2 -o sdk.out sdk.sbatch >/dev/null || fail "the SDK job failed"
for r in 0 1 2 3; do
  node=$((r / 2)); local=$((r % 2))
  grep -q "world rank=$r world_size=4 local_rank=$local local_world_size=2 group_rank=$node sum=10 ok" sdk.out ||
    fail "rank $r did not report the world of 4 ranks on 2 nodes"
done

echo "== sbatch: srun ddprun with a torch worker"
if /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  cat >torch.sbatch <<JOB
#!/bin/bash
export JOB_VALUE=3
srun --ntasks-per-node=1 "$BIN/ddprun" --nproc_per_node=2 --python /usr/bin/python3 "$SRC/tests/integration/torch/job_allreduce.py"
JOB
  timeout 180 sbatch --wait -N2 -o torch.out torch.sbatch >/dev/null || fail "the torch job failed"
  [ "$(count torch.out "allreduce job=[0-9]*\.0 world=4 rank=[0-3] sum=30 restart=0 ok")" = 4 ] ||
    fail "the torch ranks did not all see a world of 4 with the job's run id"
else
  echo "python3-torch not installed at /usr/bin/python3: torch job skipped"
fi

echo "== srun without ddprun: the SDK takes its ranks from Slurm"
# n1 is not a DNS name here; on a real cluster the first node's name resolves.
MASTER_ADDR=127.0.0.1 timeout 120 srun -N2 --ntasks-per-node=2 "$BIN/ddp_sdk_test_worker" world >direct.out 2>&1 ||
  fail "the srun-only SDK job failed"
for r in 0 1 2 3; do
  grep -q "world rank=$r world_size=4 local_rank=$((r % 2)) local_world_size=2 group_rank=$((r / 2)) sum=10 ok" direct.out ||
    fail "srun-only rank $r did not report its world"
done

echo "== several ddprun tasks per node: a one-line config error, exit 2 (do not requeue)"
timeout 60 srun -N2 --ntasks-per-node=2 "$BIN/ddprun" --no_python /bin/true >misuse.out 2>&1
rc=$?
[ "$rc" = 2 ] || fail "srun of 2 ddprun tasks per node exited $rc, not 2"
grep -q "ddprun: error: SLURM_STEP_TASKS_PER_NODE=2(x2): ddprun starts the workers of a node itself" misuse.out ||
  fail "the misuse error line is missing"

echo "== scancel --signal=USR1 reaches every worker, which keep running; scancel stops them on both nodes"
cat >worker.sh <<'WORKER'
#!/bin/bash
trap 'echo "$$ $RANK usr1" >>"$PIDS"' USR1
echo "$$ $RANK start" >>"$PIDS"
while :; do sleep 0.2 & wait $!; done
WORKER
chmod +x worker.sh
cat >hang.sbatch <<JOB
#!/bin/bash
srun --ntasks-per-node=1 "$BIN/ddprun" --nproc_per_node=2 --stop_timeout=5 --no_python "$W/worker.sh"
JOB
PIDS=$W/hang.pids sbatch --parsable -N2 -o hang.out hang.sbatch >job.id || fail "sbatch failed"
JOB=$(cut -d';' -f1 job.id)
wait_for 600 '[ "$(count hang.pids " start")" = 4 ]' || fail "the 4 workers of job $JOB did not start"
WORKERS=$(awk '/ start/ {print $1}' hang.pids)
scancel --signal=USR1 "$JOB" || fail "scancel --signal=USR1 failed"
# Each worker gets the notice at least once: from ddprun, and with Slurm's
# process tracking signalling the whole step, from slurmstepd directly too.
notified() { awk '$3 == "usr1" {print $1}' hang.pids | sort -u | wc -l; }
wait_for 300 '[ "$(notified)" = 4 ]' || fail "SIGUSR1 did not reach the 4 workers: $(cat hang.pids)"
for p in $WORKERS; do kill -0 "$p" 2>/dev/null || fail "worker $p died of SIGUSR1"; done
scancel "$JOB" || fail "scancel failed"
wait_for 300 '[ -z "$(sc_pids_with_env "SLURM_JOB_ID=$JOB")" ]' ||
  fail "processes of job $JOB outlived scancel: $(sc_pids_with_env "SLURM_JOB_ID=$JOB" | xargs -r ps -o pid,args -p)"
for p in $WORKERS; do kill -0 "$p" 2>/dev/null && fail "worker $p outlived scancel"; done
wait_for 300 '[ -z "$(squeue -h -j "$JOB" 2>/dev/null)" ]' || fail "job $JOB is still in the queue"
echo "PASS"
