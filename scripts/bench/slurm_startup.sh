#!/bin/bash
# Time from srun to every worker running, on the two-node Slurm cluster of the
# tests (tests/integration/slurm/slurm_cluster.sh; both nodes on this machine),
# for 2 nodes x 2 torch workers:
#   ddprun    srun --ntasks-per-node=1 ddprun --nproc_per_node=2 w.py
#   torchrun  the usual sbatch recipe: scontrol show hostnames, an srun for the
#             head node's address, then srun torchrun --rdzv_backend c10d ...
#             (Debian's torch 1.13 through scripts/torchrun_compat.py)
# "running": the last worker's first line; "joined": the last worker past
# init_process_group + barrier. Both from the first command of the recipe.
# Usage (root): BUILD_DIR=build scripts/bench/slurm_startup.sh [reps]
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=$(cd "${BUILD_DIR:-$ROOT/build}/bin" && pwd)
REPS=${1:-5}
PY=/usr/bin/python3
. "$ROOT/tests/integration/slurm/slurm_cluster.sh"
trap slurm_cluster_stop EXIT
trap 'exit 1' INT TERM HUP PIPE
slurm_cluster_start || { echo "cannot start the cluster: $SC_REASON"; exit 1; }
W=$SC_DIR/bench
mkdir -p "$W"
unset PET_NNODES PET_NPROC_PER_NODE PET_STANDALONE CUDA_VISIBLE_DEVICES DDP_SLURM

cat >"$W/bench.sbatch" <<JOB
#!/bin/bash
# Prints "<launcher> <running ms> <joined ms>" per run.
measure() {  # measure NAME: runs the recipe in \$recipe, then reads the workers' stamps
  rm -rf "$W/run"; mkdir -p "$W/run"
  t0=\$(date +%s%N)
  eval "\$recipe" >>"$W/\$1.log" 2>&1 || { echo "\$1 failed"; return; }
  cat "$W"/run/rank_* | awk -v t0=\$t0 -v name=\$1 '{ if (\$1 > s) s = \$1; if (\$2 > j) j = \$2 }
    END { printf "%s %.0f %.0f\n", name, (s - t0) / 1e6, (j - t0) / 1e6 }'
}
export BENCH_DIR=$W/run
for i in \$(seq $REPS); do
  recipe='srun --ntasks-per-node=1 $BIN/ddprun --nproc_per_node=2 --python $PY $ROOT/scripts/bench/slurm_startup.py'
  measure ddprun
  recipe='nodes=( \$(scontrol show hostnames "\$SLURM_JOB_NODELIST") )
    head_ip=\$(srun --nodes=1 --ntasks=1 -w "\${nodes[0]}" hostname --ip-address)
    srun --ntasks-per-node=1 $PY $ROOT/scripts/torchrun_compat.py --nnodes 2 --nproc_per_node 2 \
      --rdzv_id \$RANDOM --rdzv_backend c10d --rdzv_endpoint \$head_ip:29500 $ROOT/scripts/bench/slurm_startup.py'
  measure torchrun
done
JOB
sbatch --wait -N2 -o "$W/bench.out" "$W/bench.sbatch" >/dev/null || { cat "$W/bench.out" "$W"/*.log; exit 1; }
grep failed "$W/bench.out" && { tail -30 "$W"/*.log; exit 1; }
median() { sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
echo "srun -> all 4 workers (2 nodes x 2), median of $REPS (ms)"
printf "%-10s %10s %10s\n" launcher running joined
for l in ddprun torchrun; do
  printf "%-10s %10s %10s\n" $l "$(awk -v l=$l '$1 == l {print $2}' "$W/bench.out" | median)" \
    "$(awk -v l=$l '$1 == l {print $3}' "$W/bench.out" | median)"
done
