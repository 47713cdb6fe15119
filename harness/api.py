"""The Python API: ``harness.run(...)`` and ``harness.score(...)`` take the CLI's options as keywords
(long flag names with ``_``: ``model="local/smollm2", limit=3, agent_args={"max_rounds": 5}``).
``run`` returns the run record results.json holds (``harness.execution.record.RunResults``, as
``harness.read_results`` reads it back), ``score`` the scores (``harness.scoring.scores.Scores``;
``.as_dict()`` is their JSON). The CLI is a thin layer over these.

In a notebook (an event loop already running) ``run`` works too: it runs the evaluation on a
worker thread with its own loop; ``await run_async(...)`` runs it on the caller's loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.errors import HarnessError
from harness.execution.config import RunConfig, build_config, load_yaml

if TYPE_CHECKING:
    from harness.execution.record import RunResults
    from harness.scoring.scores import Scores


def build_run_config(options: dict[str, Any] | RunConfig) -> RunConfig:
    """Options (a ``config=`` YAML file, then keywords over it) -> a validated RunConfig; its trackers
    (``log_to``) known and installed."""
    config = options if isinstance(options, RunConfig) else _build_run_config(options)
    if tracked(config):
        from harness.analysis.trackers import check_trackers

        check_trackers(config.log_to)  # a tracker unknown or not installed: one line, before anything runs
    return config


def _build_run_config(options: dict[str, Any]) -> RunConfig:
    options = {k.replace("-", "_"): v for k, v in options.items() if v is not None}
    flat: dict[str, Any] = {}
    if options.get("config"):
        flat = {k.replace("-", "_"): v for k, v in load_yaml(options["config"]).items()}
    given = {k: v for k, v in options.items() if k != "config"}
    if isinstance(flat.get("agent"), dict):
        # flags add to (and override) the YAML agent: section: its name and its knobs
        from harness.execution.config import parse_agent_args

        section = {**flat["agent"], **parse_agent_args(given.pop("agent_args", None))}
        if isinstance(given.get("agent"), str):
            section["name"] = given.pop("agent")
        flat["agent"] = section
    if flat.get("metric_options") is not None and given.get("metric_options") is not None:
        # flags add to (and override) the YAML metric_options: section
        extra = given["metric_options"]
        given["metric_options"] = [flat["metric_options"], *(extra if isinstance(extra, list) else [extra])]
    flat.update(given)
    if "out" in flat:
        from harness.records import check_output_path

        check_output_path(flat["out"], "--out", directory=True)
    return build_config(flat)


async def run_async(
    config: dict[str, Any] | RunConfig | None = None, /, *, show_progress: bool = True, **options: Any
) -> "RunResults":
    """Run (or resume) an evaluation; returns the run record (results.json, typed). With ``log_to``
    the finished run is logged to those trackers; one failing raises ``TrackingError`` (its
    ``record``: the run, whose files are written and untouched)."""
    record, run_dir = await run_in_dir(config if config is not None else options, show_progress=show_progress)
    if tracked(record.config):
        from harness.analysis.trackers import log_run

        failures = log_run(run_dir, record.config.log_to)
        if failures:
            raise TrackingError("; ".join(failures), record)
    return record


async def run_in_dir(config: dict[str, Any] | RunConfig, *, show_progress: bool = True) -> "tuple[RunResults, Path]":
    """Run (or resume) an evaluation, logged nowhere: (the run record, its run directory)."""
    from harness.execution.runner import Run

    run = Run(build_run_config(config), show_progress=show_progress)
    return await run.execute(), run.run_dir


def tracked(config: RunConfig) -> bool:
    """Whether a finished run is logged to trackers here: ``log_to`` given, and not a shard started by
    ``--shards K --launcher``, whose launcher logs the merged run."""
    return bool(config.log_to) and not (config.launcher and config.shard)


class TrackingError(HarnessError):
    """The run finished and its files are written, but logging it to a tracker failed."""

    exit_code = 6

    def __init__(self, message: str, record: "RunResults"):
        super().__init__(message)
        self.record = record


def run(
    config: dict[str, Any] | RunConfig | None = None, /, *, show_progress: bool = True, **options: Any
) -> "RunResults":
    """``harness run`` from Python: ``harness.run(model="local/smollm2", dataset="qampari:sample", limit=3)``.
    Returns the run record (``RunResults``: ``.counts.finished``, ``.scores.metric_values()``, ...);
    ``results_dict(record)`` (``harness.execution.record``) is results.json's JSON."""
    config = build_run_config(config if config is not None else options)  # bad options fail here, nothing started
    coro_factory = lambda: run_async(config, show_progress=show_progress)  # noqa: E731
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro_factory())
    # A loop is running (Jupyter): asyncio.run would refuse, so run on a thread with its own loop.
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro_factory()).result()


def score(
    run_dir: str | None = None,
    *,
    dataset: str | None = None,
    generations: str | list[dict[str, Any]] | None = None,
    data_path: str | None = None,
    metrics: str | list[str] | None = None,
    judge: str | list[str] | None = None,
    bleurt_checkpoint: str | None = None,
    cluster_by: str | None = None,
    strip_reasoning: bool | None = None,
    metric_options: dict[str, dict[str, Any]] | list[str] | None = None,
    max_answer_chars: int | None = None,
    confidence: bool | None = None,
    citations: bool | None = None,
    only_answered: bool = False,
    save: bool = True,
    drop_other_metrics: bool = False,
) -> "Scores":
    """``harness score`` from Python. Either re-score a run directory (its results.json is rewritten
    unless ``save=False``), or score ``generations`` ({"id", "answer"} records, or a JSONL file of
    them) against ``dataset``. ``metric_options``: {metric: {option: value}} or NAME.KEY=VALUE strings,
    over a run's own. ``judge``: a model, or several (a list or comma-separated). ``confidence`` /
    ``citations``: the answers state a confidence / cite pages (default: as the run was made; for
    generations, no). Returns the
    ``Scores`` (``.metric_values()``, ``.summary_lines()``, ``.as_dict()``: the JSON written); no
    model is called (except a named judge).

    Re-scoring a run scores ``metrics`` (default: the run's own) and keeps every other metric's
    numbers the run holds as they were (listed in ``scores.meta.kept_metrics``); the returned scores
    are the run's after it, written or not. ``drop_other_metrics=True``: the metrics scored now
    alone. Which metrics the file holds is said on stderr."""
    from harness.errors import HarnessError
    from harness.execution.config import parse_metric_options
    from harness.scoring.metrics import ScoringOptions, check_metrics, score_answers, validate_metric_options

    if metrics is not None:
        from harness.execution.config import name_list

        metrics = name_list(metrics, "--metrics")
    given = {
        k: v
        for k, v in {
            "judge": judge,
            "bleurt_checkpoint": bleurt_checkpoint,
            "cluster_by": cluster_by,
            "max_answer_chars": max_answer_chars,
            "strip_reasoning": strip_reasoning,
            "confidence": confidence,
            "citations": citations,
        }.items()
        if v is not None
    }
    _check_scoring_options(given)
    if "judge" in given:  # as ScoringOptions keeps it (a run's options are updated with these unvalidated)
        from harness.scoring.metrics import judge_value

        given["judge"] = judge_value(given["judge"])
    named_options = validate_metric_options(parse_metric_options(metric_options))
    if run_dir:
        if generations is not None or dataset:
            raise HarnessError("a run is re-scored on its own dataset: give RUN_DIR, or --dataset and --generations")
        from harness.execution.scoring import rescore_run

        done = rescore_run(
            run_dir,
            metrics,
            given,
            only_answered,
            data_path,
            save=save,
            metric_options=named_options,
            drop_other_metrics=drop_other_metrics,
        )
        if save and not done.saved:
            print(f"warning: {run_dir} has no results.json: scores printed, not saved", file=sys.stderr)
        elif done.saved:
            print(rescored_line(run_dir, done), file=sys.stderr)
        return done.scores
    if drop_other_metrics:
        raise HarnessError("--drop-other-metrics applies to re-scoring a run (RUN_DIR)")
    if not dataset or generations is None:
        raise HarnessError("score needs a RUN_DIR, or --dataset and --generations")
    from harness.datasets import load_dataset

    loaded = load_dataset(dataset, data_path)
    answers = read_generations(generations)
    known = loaded.by_id()
    unknown = [a["id"] for a in answers if a["id"] not in known]
    if unknown:
        print(f"warning: {len(unknown)} id(s) not in {loaded.info.spec()} ignored (e.g. {unknown[0]})", file=sys.stderr)
    options = ScoringOptions(**given, metric_options=named_options)
    check_metrics(loaded, loaded.samples, list(metrics or loaded.metrics), options, answers)
    return score_answers(loaded, loaded.samples, answers, metrics, only_answered, options)


def rescored_line(run_dir: str, done) -> str:
    """What a re-scored run's results.json holds now: the metrics scored now, those kept as they
    were, those dropped."""
    from pathlib import Path

    from harness.records import RESULTS_FILE

    holds = ", ".join(done.scores.meta.metrics) or "no metric's numbers"
    parts = [f"{', '.join(done.scored) or 'no metric'} scored now"]
    if done.kept:
        parts.append(f"{', '.join(done.kept)} kept as they were (--drop-other-metrics drops them)")
    if done.dropped:
        parts.append(f"{', '.join(done.dropped)} dropped")
    return f"{Path(run_dir) / RESULTS_FILE} now holds {holds}: {'; '.join(parts)}"


def _check_scoring_options(given: dict[str, Any]) -> None:
    """Scoring options named now, checked as a run's are: one line naming the option."""
    from pydantic import ValidationError

    from harness.errors import ConfigError
    from harness.scoring.metrics import ScoringOptions

    try:
        ScoringOptions(**given)
    except ValidationError as exc:
        first = exc.errors()[0]
        name = str(first["loc"][0]) if first["loc"] else "scoring"
        got = first.get("input")
        shown = f" (got {got!r})" if isinstance(got, (int, float, str)) and len(repr(got)) < 80 else ""
        raise ConfigError(f"--{name.replace('_', '-')}: {first['msg'].lower()}{shown}") from None


def read_generations(generations: str | list[dict[str, Any]]) -> list[dict[str, Any]]:
    """{"id", "answer"} records from a JSONL file or a list; ids must be unique strings."""
    from harness.errors import HarnessError
    from harness.records import iter_jsonl

    where = generations if isinstance(generations, str) else "generations"
    records = iter_jsonl(generations, option="--generations") if isinstance(generations, str) else enumerate(generations, 1)
    answers = []
    seen: set[str] = set()
    for lineno, record in records:
        if not isinstance(record, dict) or not isinstance(record.get("id"), str) or "answer" not in record:
            raise HarnessError(f"{where}:{lineno}: each line needs 'id' (string) and 'answer'")
        if record["id"] in seen:
            raise HarnessError(f"{where}:{lineno}: duplicate id {record['id']!r}")
        seen.add(record["id"])
        answers.append({"id": record["id"], "answer": record["answer"]})
    return answers


def runs_df(*paths: Any):
    """The runs under ``paths`` (run folders, or folders holding runs; links followed, each real run
    once) as a pandas DataFrame, one row per run: identity, status, ``n`` answered, failures, the
    headline and every metric value with its interval (``KEY.ci_lo``, ``KEY.ci_hi``), tokens, cost.
    Needs pandas (``pip install 'manyanswer-harness[analysis]'``). See ``harness.analysis.frames.runs_df``."""
    from harness.analysis.frames import runs_df as _runs_df

    return _runs_df(*paths)


def samples_df(*paths: Any):
    """The runs' samples as a pandas DataFrame, one row per question x epoch: status, answer,
    outcome, error, latency, tokens, cost, and each metric's per-question values. See
    ``harness.analysis.frames.samples_df``."""
    from harness.analysis.frames import samples_df as _samples_df

    return _samples_df(*paths)
