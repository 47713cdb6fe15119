#!/usr/bin/env bash
# One harness run split over the tasks of a Slurm job array, then merged into one run directory.
#
#   K=4 MODEL=vllm/Qwen/Qwen2.5-7B-Instruct bash examples/slurm_shards.sh
#
# submits a job array (--array=0-(K-1); ARRAY=SPEC for another range: A-B, A-B:STEP, %N to run at most
# N at once) whose every task runs the same command, `harness run ... --shard auto --out
# $RUNS/task-ID`: the harness reads its shard I of K from the array's variables (SLURM_ARRAY_TASK_ID,
# _COUNT, _MIN, _MAX, _STEP; a list such as 1,3,7 is refused, one line, exit 2). Then a merge job that
# starts when every task has ended (afterany: a shard with failed samples still merges, its failures
# counted) and writes $RUNS/merged, equal to the run on one machine. Every shard gets the same options
# (they make the run's key; harness merge refuses shards of different configurations). Resubmitting
# the script resumes every shard (a finished one has nothing left to do; the merge refuses a
# non-empty $RUNS/merged: move it away first); to finish what the shards left failed or pending, run
# the unsharded command with --out $RUNS/merged. Tested by tests/test_sharding.py (a stand-in sbatch
# sets the array variables as slurmctld does and runs the tasks; a scripted model answers).
#SBATCH --job-name=harness-shards
#SBATCH --nodes=1
#SBATCH --gres=gpu:1
#SBATCH --cpus-per-task=8
#SBATCH --time=08:00:00
#SBATCH --output=slurm-%x-%A_%a.out
set -euo pipefail

K=${K:-4}
ARRAY=${ARRAY:-0-$((K - 1))}
RUNS=${RUNS:-runs}
MODEL=${MODEL:-vllm/Qwen/Qwen2.5-7B-Instruct}
DATASET=${DATASET:-fanoutqa:dev}
# EXTRA_ARGS: more run options, e.g. "--epochs 3 --temperature 0.7" (word-split on purpose)
# shellcheck disable=SC2206
RUN_ARGS=(--model "$MODEL" --dataset "$DATASET" --setting closed-book ${EXTRA_ARGS:-})
# the response cache is SQLite: on node-local disk, not on a file system many nodes write at once
export HARNESS_CACHE_DIR=${HARNESS_CACHE_DIR:-${TMPDIR:-/tmp}/harness-cache}

case "${1:-submit}" in
  submit)
    array=$(sbatch --parsable --array="$ARRAY" "$0" shard)
    sbatch --parsable --dependency=afterany:"${array%%;*}" "$0" merge
    ;;
  shard)
    harness run "${RUN_ARGS[@]}" --shard auto --out "$RUNS/task-$SLURM_ARRAY_TASK_ID"
    ;;
  merge)
    harness merge "$RUNS"/task-* --out "$RUNS/merged"
    ;;
  *)
    echo "usage: $0 [submit|shard|merge]" >&2
    exit 2
    ;;
esac
