"""Experiment trackers: ``harness run ... --log-to wandb,mlflow`` logs the finished run (its
results.json, as written) to Weights & Biases or MLflow, one small class per tracker behind
``Tracker``, looked up by name in ``TRACKERS`` as strategies and metrics are (built in, an installed
plugin's ``harness.trackers`` entry point, or ``FILE.py:NAME``).

What every tracker gets is one ``TrackedRun``, read from the run directory through the typed record
(``read_results``: never re-scored): the configuration as results.json holds it, flattened
(``generation.temperature``); each score with its interval (point, lower, upper, n, stderr: the
leaderboard's ``RunRow`` values, the ``scores.uncertainty`` entries); the counts; one row per
question x epoch with its values (``harness.analysis.frames.sample_records``); the HTML report (the
run's own when it is newer than results.json, else written by ``harness.analysis.report`` into a
temporary folder: the run's files are never changed); and the link back: the run directory's
absolute path and file URI, the run id and the harness version. Every text sent is masked as the
run's files are (``harness.redact.redact_data``); no environment variable, argv or tracker URI is
sent by us, and each tracker is set up not to send its own (see the tracker classes).

A tracker that fails is said in one line naming it; the run's files are as they were (logging only
reads them), and the same ``harness run`` command logs again without asking the model anything.
"""

from __future__ import annotations

import importlib.util
import json
import math
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from harness._version import DISTRIBUTION, pip_install
from harness.errors import HarnessError
from harness.execution.config import flatten
from harness.registry import Registry

DEFAULT_PROJECT = DISTRIBUTION  # W&B project / MLflow experiment when the environment names none


class Tracker:
    """One experiment tracker. ``package``: the module ``log`` imports (checked before a run starts);
    ``extra``: the optional dependency group that installs it. ``log`` sends one ``TrackedRun`` and
    returns one line saying where it went (no credential in it); any exception is its failure."""

    name: ClassVar[str] = ""
    package: ClassVar[str] = ""
    extra: ClassVar[str] = ""

    @classmethod
    def install_hint(cls) -> str:
        return pip_install(cls.extra or cls.name)

    @classmethod
    def check(cls, given: str) -> None:
        """Refuse, in one line, a tracker whose package is not installed (before any model call)."""
        if cls.package and importlib.util.find_spec(cls.package) is None:
            raise HarnessError(f"--log-to {given}: the {cls.package} package is not installed: {cls.install_hint()}")

    def log(self, run: TrackedRun) -> str:
        raise NotImplementedError


def _validate(obj: Any, name: str) -> None:
    if not (isinstance(obj, type) and issubclass(obj, Tracker)):
        raise HarnessError(f"tracker {name!r}: expected a subclass of harness.analysis.trackers.Tracker")


TRACKERS: Registry[type[Tracker]] = Registry(
    "tracker",
    builtins={
        "wandb": "harness.analysis.trackers.wandb_tracker:WandbTracker",
        "mlflow": "harness.analysis.trackers.mlflow_tracker:MlflowTracker",
    },
    validate=_validate,
    name_attribute="name",
)


def check_trackers(names: list[str] | None) -> None:
    """Every ``--log-to`` name known and its package installed; else one line (exit 2), before anything runs."""
    for name in names or []:
        try:
            tracker = TRACKERS.get(name)
        except HarnessError as exc:
            raise HarnessError(f"--log-to {name}: {exc}") from None
        tracker.check(name)


@dataclass
class Metric:
    """One score of the run: its value (None: n/a, never 0) and interval as results.json records them."""

    value: float | None
    lower: float | None = None
    upper: float | None = None
    n: int | None = None
    stderr: float | None = None

    def numbers(self, key: str) -> dict[str, float]:
        """``{KEY: value, KEY/lower: ..., KEY/upper: ..., KEY/n: ..., KEY/stderr: ...}``, those that exist."""
        parts = {"": self.value, "/lower": self.lower, "/upper": self.upper, "/n": self.n, "/stderr": self.stderr}
        return {f"{key}{suffix}": v for suffix, v in parts.items() if v is not None and math.isfinite(v)}


@dataclass
class TrackedRun:
    """What a tracker logs of one finished run (see the module's docstring)."""

    run_dir: Path  # absolute
    run_id: str
    version: str | None
    status: str
    config: dict[str, Any]  # results.json's config, flattened: ``backend.max_attempts``
    metrics: dict[str, Metric]  # METRIC.NAME -> its value and interval
    headline: str | None
    counts: dict[str, float]
    links: dict[str, str]  # harness.run_id, harness.version, harness.run_dir, harness.run_uri, ...
    columns: list[str]
    rows: list[list[Any]]
    report: Path
    _tmp: Any = field(default=None, repr=False)

    def numbers(self) -> dict[str, float]:
        """Every number logged: the scores with their intervals, then the counts."""
        out: dict[str, float] = {}
        for key, metric in self.metrics.items():
            out.update(metric.numbers(key))
        out.update(self.counts)
        return out

    def close(self) -> None:
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None


def _cell(value: Any) -> Any:
    """A table cell: text, a number, a bool or None; a list or mapping (a QAMPARI answer list, a
    TopiOCQA question) as its JSON text, so every tracker's table takes it."""
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


REPORT_NAME = "report.html"
TABLE_NAME = "questions"


def tracked_run(run_dir: str | Path) -> TrackedRun:
    """A run directory's ``TrackedRun``, read from its files (never re-scored)."""
    from harness.analysis.frames import sample_records
    from harness.analysis.report import REPORT_FILE, write_report
    from harness.analysis.row import RunRow
    from harness.execution.record import read_results
    from harness.records import RESULTS_FILE, read_json
    from harness.redact import redact_data

    run_dir = Path(run_dir).resolve()
    results = read_results(run_dir)
    written = read_json(run_dir / RESULTS_FILE)  # the config as the file holds it
    config = flatten(redact_data(written.get("config") or {}))
    row = RunRow.of(results, run_dir)
    intervals = results.scores.intervals() if results.scores is not None else {}
    metrics: dict[str, Metric] = {}
    for key, value in row.metrics.items():
        interval = intervals.get(key)
        bounds = row.ci95.get(key)
        metrics[key] = Metric(
            value=value,
            lower=bounds[0] if bounds else None,
            upper=bounds[1] if bounds else None,
            n=interval.n if interval is not None else None,
            stderr=row.stderr.get(key),
        )
    c = results.counts
    counts: dict[str, float] = {
        "counts.selected": c.selected,
        "counts.finished": c.finished,
        "counts.failed": c.failed,
        "counts.pending": c.pending,
        "counts.answered": row.answered,
    }
    if results.tokens is not None:
        counts["tokens.total"] = results.tokens.total
    if row.cost_usd is not None:
        counts["cost.total_usd"] = row.cost_usd
    links = {
        "harness.run_id": results.run_id,
        "harness.version": results.harness.version or "unknown",
        "harness.run_dir": str(run_dir),
        "harness.run_uri": run_dir.as_uri(),
        "harness.status": results.status,
        "harness.config_hash": results.config_hash,
        "harness.dataset": results.dataset.spec,
        "harness.setting": results.setting,
        "harness.model": results.model_name,
    }
    if row.headline_key:
        links["harness.headline"] = row.headline_key
    records = sample_records(run_dir, results)
    own = ["id", "epoch", "status", "question", "answer", "outcome", "error_type", "error", "latency_s",
           "prompt_tokens", "completion_tokens", "model_calls", "cost_usd", "truncated_output"]  # fmt: skip
    skip = {*own, "run_id", "dir", "values_of"}  # a run's own facts, in its links
    values = list(dict.fromkeys(k for r in records for k in r if k not in skip))
    columns = [*own, *values]
    rows = redact_data([[_cell(r.get(k)) for k in columns] for r in records])
    tmp = None
    report = run_dir / REPORT_FILE
    results_file = run_dir / RESULTS_FILE
    if not (report.is_file() and report.stat().st_mtime >= results_file.stat().st_mtime):
        # none, or one from before the last invocation: the project's report of the run as it is now
        tmp = tempfile.TemporaryDirectory(prefix="harness-report-")
        report = write_report(run_dir, Path(tmp.name) / REPORT_NAME)
    return TrackedRun(
        run_dir=run_dir,
        run_id=results.run_id,
        version=results.harness.version,
        status=results.status,
        config=config,
        metrics=metrics,
        headline=row.headline_key,
        counts=counts,
        links=redact_data(links),
        columns=columns,
        rows=rows,
        report=report,
        _tmp=tmp,
    )


def log_run(run_dir: str | Path, names: list[str]) -> list[str]:
    """Log the run in ``run_dir`` to each tracker named; prints one line per tracker (where it went,
    or why it failed) on stderr and returns the failures' lines (empty: every one logged). A tracker's
    failure never stops the others, and never touches the run's files."""
    import sys

    from harness.redact import redact

    failures: list[str] = []
    try:
        run = tracked_run(run_dir)
    except Exception as exc:  # noqa: BLE001 - the run's files as they are: said, nothing logged
        line = f"--log-to {','.join(names)}: nothing logged, the run could not be read: {_one_line(redact(exc))}"
        print(f"error: {line}", file=sys.stderr)
        return [line]
    try:
        for name in names:
            try:
                where = TRACKERS.get(name)().log(run)
            except Exception as exc:  # noqa: BLE001 - a tracker's own error, in one line
                line = f"--log-to {name}: logging failed: {_one_line(redact(_why(exc)))}"
                print(f"error: {line}", file=sys.stderr)
                failures.append(line)
            else:
                print(f"logged to {name}: {_one_line(redact(where))}", file=sys.stderr)
    finally:
        run.close()
    return failures


def _why(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if not isinstance(exc, HarnessError) else str(exc)


def _one_line(text: str) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= 500 else text[:499] + "…"  # a tracker's error page: its first 500 characters, said so
