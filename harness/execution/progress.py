"""The run's progress on stderr: a live bar on a terminal, plain lines in logs, with the running
headline score of the samples scored as they finish."""

from __future__ import annotations

import asyncio
import math
import sys
import time
from typing import Any

from harness.scoring.uncertainty import leaf


class Progress:
    """done/failed/ETA on stderr: a live display (rich) on a terminal; otherwise (logs, nohup, CI) one
    line every ``EVERY_S`` seconds or ``EVERY_SHARE`` of the samples, whichever comes first, and one
    at the end, with the running headline score when samples are scored as they finish."""

    EVERY_S = 30.0
    EVERY_SHARE = 0.1

    def __init__(self, total: int, enabled: bool, stream=None, every_s: float | None = None):
        self.total = total
        self.ok = 0
        self.failed = 0
        self.stream = stream if stream is not None else sys.stderr
        tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.enabled = enabled and tty
        self.lines = enabled and not tty
        self.every_s = self.EVERY_S if every_s is None else every_s
        self.every_n = max(1, math.ceil(total * self.EVERY_SHARE))
        self._progress = None
        self._started = self._last_line = time.monotonic()
        self._done_at_line = 0
        self._scored_at_line = 0
        self._timer = None
        self._headline: str | None = None  # the metric of the headline: the first one scored
        self._rows: list[dict[str, Any]] = []  # its per-question values, where no running mean gives it
        self._follow: tuple[tuple[str, ...], str] | None = None  # (per-question leaf, headline name): a running mean
        self._sum = 0.0
        self._summed = 0
        self._undefined = False  # a question's value was None: the mean has none (as mean_values says)
        self._scored = 0

    def __enter__(self):
        if self.enabled:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self._progress = Progress(
                TextColumn("[bold]samples"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("failed {task.fields[failed]}"),
                TimeElapsedColumn(),
                TextColumn("ETA"),
                TimeRemainingColumn(),
                console=Console(stderr=True),
            )
            self._progress.start()
            self._task = self._progress.add_task("run", total=self.total, failed=0)
        if self.lines:
            self._schedule()
        return self

    def advance(self, ok: bool, scores: dict[str, Any] | None = None) -> None:
        if ok:
            self.ok += 1
        else:
            self.failed += 1
        if scores:
            self.add_scores(scores)
        if self._progress is not None:
            self._progress.update(self._task, advance=1, failed=self.failed)
        if self.lines:
            done = self.ok + self.failed
            if done - self._done_at_line >= self.every_n or time.monotonic() - self._last_line >= self.every_s:
                self._line()

    def add_scores(self, scores: dict[str, Any]) -> None:
        """Keeps the first metric's values of each sample scored as it finished: the headline is that
        metric's first aggregate number that is not a precision, a recall or a count (FanOutQA
        acc.loose, set-F1 f1, EM), computed as the run's scores compute it, so on their scale
        (TopiOCQA's EM x100)."""
        if self._headline is None:
            for metric, value in scores.items():
                if _first_headline_leaf(value) is not None:
                    self._headline = metric
                    break
            else:
                return
        value = scores.get(self._headline)  # a record's scores: {metric: its per-question values}
        if not isinstance(value, dict):
            return
        if not self._scored:
            self._follow = _running_mean_of(self._headline, value)
        self._scored += 1
        if self._follow is None:
            self._rows.append(value)
            return
        # the headline is the mean of one per-question leaf: summed as it comes, no row kept (a
        # row a sample held ~1 KB to the end of a run; summed in the same order, the same float)
        number = leaf(value, self._follow[0])
        if number is None:
            self._undefined = self._undefined or _holds(value, self._follow[0])
        elif isinstance(number, (bool, int, float)):
            self._sum += float(number)
            self._summed += 1

    def headline(self) -> tuple[str, float] | None:
        """("METRIC.NAME", value) of the samples scored so far, or None."""
        if self._follow is not None:
            if not self._summed or self._undefined:
                return None
            return f"{self._headline}.{self._follow[1]}", self._sum / self._summed
        if not self._rows:
            return None
        from harness.scoring.values import mean_values

        aggregate_rows = _aggregate_of(self._headline)
        try:
            values = aggregate_rows(self._rows, len(self._rows)) if aggregate_rows else mean_values(self._rows)
        except Exception:  # noqa: BLE001 - a progress line never stops a run
            values = mean_values(self._rows)
        leaf = _first_headline_leaf(values)
        if leaf is None:
            return None
        value: Any = values
        for key in leaf:
            value = value[key]
        return f"{self._headline}.{'.'.join(leaf)}", float(value)

    def line(self) -> str:
        done = self.ok + self.failed
        elapsed = max(time.monotonic() - self._started, 1e-9)
        rate = done / elapsed
        parts = [f"progress: {done}/{self.total} samples done, {self.failed} failed"]
        parts.append(f"{rate:.2f}/s" if rate >= 1 else f"{rate * 60:.1f}/min")
        if done >= self.total:
            parts.append(f"took {_duration(elapsed)}")
        elif rate > 0:
            parts.append(f"ETA {_duration((self.total - done) / rate)}")
        else:
            parts.append("ETA unknown")
        headline = self.headline() if self._scored else None
        if headline is not None:
            parts.append(f"{headline[0]} {headline[1]:.3f} (mean of {self._scored} scored)")
        return ", ".join(parts)

    def _line(self) -> None:
        print(self.line(), file=self.stream, flush=True)
        self._last_line = time.monotonic()
        self._done_at_line = self.ok + self.failed
        self._scored_at_line = self._scored

    def _tick(self) -> None:
        """A line every ``every_s`` even while no sample finishes (a slow model, a hang)."""
        if time.monotonic() - self._last_line >= self.every_s * 0.999:
            self._line()
        self._schedule()

    def _schedule(self) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        wait = max(0.01, self.every_s - (time.monotonic() - self._last_line))
        self._timer = loop.call_later(wait, self._tick)

    def __exit__(self, *exc):
        if self._progress is not None:
            self._progress.stop()
        if self._timer is not None:
            self._timer.cancel()
        if self.lines and (self.ok + self.failed > self._done_at_line or self._scored > self._scored_at_line):
            self._line()  # the last one: every sample and every score that came back
        return False


def _aggregate_of(metric: str | None):
    """The metric's own aggregate of per-question rows (``streamable(aggregate)``), or None: the mean."""
    if metric is None:
        return None
    try:
        from harness.scoring.metrics import METRICS

        return METRICS.get(metric).aggregation.rows
    except Exception:  # noqa: BLE001 - a plugin metric named by file: its rows' mean
        return None


def _running_mean_of(metric: str, row: dict[str, Any]) -> tuple[tuple[str, ...], str] | None:
    """(the per-question leaf, the headline's name) where the metric's headline is the mean of one
    per-question leaf: a metric aggregated by the mean (its first headline leaf), or one whose own
    aggregate declares its headline leaf the mean of a per-question one (``per_question_leaves``,
    e.g. fanoutqa-string's ``acc.loose``: the mean of ``acc``); None: its rows are kept instead."""
    aggregate_rows = _aggregate_of(metric)
    if aggregate_rows is None:
        found = _first_headline_leaf(row)
        return (found, ".".join(found)) if found is not None else None
    try:
        from harness.scoring.metrics import METRICS

        declared = METRICS.get(metric).aggregation.per_question_leaves
        found = _first_headline_leaf(aggregate_rows([row], 1))
    except Exception:  # noqa: BLE001 - a progress line never stops a run
        return None
    if found is None or ".".join(found) not in declared:
        return None
    return tuple(declared[".".join(found)].split(".")), ".".join(found)


def _holds(row: dict[str, Any], path: tuple[str, ...]) -> bool:
    """Whether ``row`` has ``path`` itself (None there: the mean is undefined, as in mean_values)."""
    for part in path[:-1]:
        row = row.get(part) if isinstance(row, dict) else None
    return isinstance(row, dict) and path[-1] in row


def _first_headline_leaf(raw: Any, path: tuple[str, ...] = ()) -> tuple[str, ...] | None:
    """Path of the first number in ``raw`` that is a headline value (not a precision, a recall or an
    ``n_`` count), depth first in its order."""
    if isinstance(raw, dict):
        for key, value in raw.items():
            name = str(key)
            if name.startswith("n_") or name.endswith(("precision", "recall")):
                continue
            found = _first_headline_leaf(value, (*path, name))
            if found is not None:
                return found
        return None
    if isinstance(raw, (int, float)) and not isinstance(raw, bool) and path:
        return path
    return None


def _duration(seconds: float) -> str:
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"
