#!/usr/bin/env bash
# One harness run split over K Slurm nodes (a job array), then merged into one run directory.
#
#   K=4 MODEL=vllm/Qwen/Qwen2.5-7B-Instruct bash examples/slurm_shards.sh
#
# submits K array tasks, task ID running `harness run ... --shard ID/K --out $RUNS/shard-ID`, and a
# merge job that starts when every task has ended (afterany: a shard with failed samples still merges,
# its failures counted) and writes $RUNS/merged, equal to the run on one machine. Every shard gets the
# same options (they make the run's key; harness merge refuses shards of different configurations).
# Resubmitting a task (or the whole script) resumes its shard; to finish what the shards left failed
# or pending, run the unsharded command with --out $RUNS/merged. Tested by tests/test_sharding.py
# (a stand-in sbatch runs the tasks, a scripted model answers).
#SBATCH --job-name=harness-shards
#SBATCH --nodes=1
#SBATCH --gres=gpu:1
#SBATCH --cpus-per-task=8
#SBATCH --time=08:00:00
#SBATCH --output=slurm-%x-%A_%a.out
set -euo pipefail

K=${K:-4}
RUNS=${RUNS:-runs}
MODEL=${MODEL:-vllm/Qwen/Qwen2.5-7B-Instruct}
DATASET=${DATASET:-fanoutqa:dev}
# EXTRA_ARGS: more run options, e.g. "--epochs 3 --temperature 0.7" (word-split on purpose)
# shellcheck disable=SC2206
RUN_ARGS=(--model "$MODEL" --dataset "$DATASET" --setting closed-book ${EXTRA_ARGS:-})

case "${1:-submit}" in
  submit)
    array=$(sbatch --parsable --array=1-"$K" --export=ALL,K="$K" "$0" shard)
    sbatch --parsable --dependency=afterany:"${array%%;*}" --export=ALL,K="$K" "$0" merge
    ;;
  shard)
    ID=$SLURM_ARRAY_TASK_ID
    harness run "${RUN_ARGS[@]}" --shard "$((SLURM_ARRAY_TASK_ID))/$K" --out "$RUNS/shard-$ID"
    ;;
  merge)
    shards=()
    for i in $(seq 1 "$K"); do shards+=("$RUNS/shard-$i"); done
    harness merge "${shards[@]}" --out "$RUNS/merged"
    ;;
  *)
    echo "usage: $0 [submit|shard|merge]" >&2
    exit 2
    ;;
esac
