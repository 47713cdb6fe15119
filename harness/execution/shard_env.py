"""``--shard auto``: shard I of K read from the scheduler that started this process, so the same
command line runs unchanged on every worker of a Slurm job array, a Kubernetes Indexed Job or a
launcher's task.

What each scheduler sets (every index 0-based; the harness's shard I is the index + 1):

* **Slurm job array** (``sbatch --array``): ``SLURM_ARRAY_TASK_ID`` (this task's id),
  ``SLURM_ARRAY_TASK_COUNT`` (how many tasks), ``SLURM_ARRAY_TASK_MIN``/``MAX`` (the smallest and
  largest id) and ``SLURM_ARRAY_TASK_STEP`` (the index step size): sbatch(1), OUTPUT ENVIRONMENT
  VARIABLES (https://slurm.schedmd.com/sbatch.html). slurmctld sets the four array-wide ones together
  (SchedMD/slurm@284c3b95 src/slurmctld/job_mgr.c ``_create_job_array``): COUNT the ids in the
  array, MIN and MAX its first and last id, STEP the number after the spec's first ``:`` (else 1), so
  ``--array=0-15:4`` gives ids 0, 4, 8, 12 with MIN 0, MAX 12, STEP 4, COUNT 4, and a list such as
  ``--array=1,3,7`` gives STEP 1. Ids need not start at 0: a task's shard is its place in the array,
  ``(ID - MIN) / STEP``. Accepted: arrays whose ids are exactly MIN, MIN+STEP, ..., MAX (a range
  ``A-B``, ``A-B:S``, with or without a ``%`` throttle); anything else (a list with gaps, a mixed
  spec) is refused, since K and the task's place in the array cannot be told from the variables.
* **Kubernetes Indexed Job** (``completionMode: Indexed``): ``JOB_COMPLETION_INDEX``, 0 to
  ``.spec.completions - 1``, set in every container by the Job controller
  (https://kubernetes.io/docs/tasks/job/indexed-parallel-processing-static/;
  kubernetes/kubernetes@78fc8e44 pkg/controller/job/indexed_job_utils.go
  ``addCompletionIndexEnvVariable``). The Job's completions reach no container, so the manifest
  passes them as ``HARNESS_SHARD_COUNT`` (examples/k8s_shards.yaml; tests check the two agree).
* **Any other launcher** (the Ray launcher's tasks): ``HARNESS_SHARD_INDEX`` (0-based) and
  ``HARNESS_SHARD_COUNT``.

Variables of two schedulers that say different shards are refused, as is an index without a count,
an index at or past the count and a value that is not a whole number: one line, before anything
runs. The variables read are recorded (``config.shard_env``); ``config.shard`` is ``I/K`` as
``--shard I/K`` would have written it, so the run key, the shard's directory name and ``harness
merge`` are those of the explicit command.
"""

from __future__ import annotations

from collections.abc import Mapping

from harness.errors import ConfigError

SLURM_ID = "SLURM_ARRAY_TASK_ID"
SLURM_VARS = (SLURM_ID, "SLURM_ARRAY_TASK_COUNT", "SLURM_ARRAY_TASK_MIN", "SLURM_ARRAY_TASK_MAX", "SLURM_ARRAY_TASK_STEP")
K8S_INDEX = "JOB_COMPLETION_INDEX"
INDEX = "HARNESS_SHARD_INDEX"
COUNT = "HARNESS_SHARD_COUNT"
ALL_VARS = (*SLURM_VARS, K8S_INDEX, INDEX, COUNT)

NONE_SET = (
    "--shard auto: no scheduler's shard variables are set: expected a Slurm job array "
    f"({SLURM_ID} with SLURM_ARRAY_TASK_COUNT/MIN/MAX/STEP), a Kubernetes Indexed Job ({K8S_INDEX} with "
    f"{COUNT}) or a launcher's {INDEX} with {COUNT}; or give --shard I/K"
)


def is_auto(value: object) -> bool:
    return isinstance(value, str) and value.strip().lower() == "auto"


def shard_env_line(read: Mapping[str, str]) -> str:
    """``SLURM_ARRAY_TASK_ID=8, ...``: the variables a shard was read from (whole numbers, checked),
    for its start line and refusals."""
    return ", ".join(f"{name}={value.strip()}" for name, value in read.items())


def shard_from_env(environ: Mapping[str, str]) -> tuple[str, dict[str, str]]:
    """(``"I/K"``, the variables read, name -> value as set) from ``environ``; a ConfigError of one
    line where they are missing, malformed or disagree."""
    read = {name: environ[name] for name in ALL_VARS if name in environ}

    def number(name: str) -> int:
        text = read[name].strip()
        if not (text.isascii() and text.isdigit()) or len(text) > 9:
            raise ConfigError(f"--shard auto: {name}={read[name]!r} is not a whole number from 0 to 999999999")
        return int(text)

    said: list[tuple[str, int, int]] = []  # (who, 0-based index, K)
    if any(name in read for name in SLURM_VARS):
        missing = [n for n in SLURM_VARS if n not in read]
        if missing:
            raise ConfigError(
                f"--shard auto: a Slurm job array sets {', '.join(SLURM_VARS)}; {', '.join(missing)} "
                f"{'is' if len(missing) == 1 else 'are'} not set (not a job array task, or a Slurm too old "
                "to set them): give --shard I/K"
            )
        task, tasks, first, last, step = (number(n) for n in SLURM_VARS)
        where = shard_env_line({n: read[n] for n in SLURM_VARS})
        if tasks < 1 or step < 1 or last != first + (tasks - 1) * step:
            raise ConfigError(
                f"--shard auto: the Slurm array is not a range ({where}): its {tasks} ids in steps of {step} from "
                f"{first} do not end at {last} (a list or gaps, e.g. --array=1,3,7): submit --array=A-B or "
                "A-B:STEP, or give --shard I/K"
            )
        if not first <= task <= last or (task - first) % step:
            raise ConfigError(f"--shard auto: task {task} is not one of the Slurm array's ids ({where})")
        said.append((f"the Slurm job array ({where})", (task - first) // step, tasks))
    count = number(COUNT) if COUNT in read else None
    for name in (K8S_INDEX, INDEX):
        if name not in read:
            continue
        index = number(name)
        if count is None:
            what = "the Job's completions" if name == K8S_INDEX else "the number of shards"
            raise ConfigError(f"--shard auto: {name}={index} but {COUNT} ({what}) is not set")
        if count < 1 or index >= count:
            raise ConfigError(
                f"--shard auto: {name}={index} with {COUNT}={count}: the index must be below "
                "the count (the first shard's is 0)"
            )
        said.append((f"{name}={index} with {COUNT}={count}", index, count))
    if not said:
        if count is not None:
            raise ConfigError(f"--shard auto: {COUNT}={count} without an index ({K8S_INDEX} or {INDEX})")
        raise ConfigError(NONE_SET)
    who, index, k = said[0]
    for other, o_index, o_k in said[1:]:
        if (o_index, o_k) != (index, k):
            raise ConfigError(
                f"--shard auto: {who} says shard {index + 1}/{k}, {other} says {o_index + 1}/{o_k}: "
                "unset one, or give --shard I/K"
            )
    if count is not None and count != k:  # HARNESS_SHARD_COUNT beside a Slurm array: a check on K
        raise ConfigError(f"--shard auto: {who} says {k} shards, {COUNT}={count}: unset one, or give --shard I/K")
    if k > 1_000_000:
        raise ConfigError(f"--shard auto: {who}: {k} shards, at most 1000000")
    return f"{index + 1}/{k}", read
