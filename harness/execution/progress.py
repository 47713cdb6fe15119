"""The run's progress on stderr: a live bar on a terminal, plain lines in logs, with the running
headline score of the samples scored as they finish."""

from __future__ import annotations

import asyncio
import math
import sys
import time
from typing import Any


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
        self._timer = None
        self._headline: str | None = None  # "METRIC.VALUE" of the first scored sample
        self._score_sum = 0.0
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
            self._add_score(scores)
        if self._progress is not None:
            self._progress.update(self._task, advance=1, failed=self.failed)
        if self.lines:
            done = self.ok + self.failed
            if done - self._done_at_line >= self.every_n or time.monotonic() - self._last_line >= self.every_s:
                self._line()

    def _add_score(self, scores: dict[str, Any]) -> None:
        """Sums the headline value (the first metric's first number that is not a precision, a recall or
        a count: FanOutQA acc, set-F1 f1, EM) of each sample scored as it finished."""
        if self._headline is None:
            for metric, value in scores.items():
                leaf = _first_headline_leaf(value)
                if leaf is not None:
                    self._headline = f"{metric}.{'.'.join(leaf)}"
                    break
            else:
                return
        metric, *path = self._headline.split(".")
        value: Any = scores.get(metric)  # a record's scores: {metric: its per-question values}
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            self._score_sum += value
            self._scored += 1

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
        if self._scored:
            parts.append(f"{self._headline} {self._score_sum / self._scored:.3f} (mean of {self._scored} scored)")
        return ", ".join(parts)

    def _line(self) -> None:
        print(self.line(), file=self.stream, flush=True)
        self._last_line = time.monotonic()
        self._done_at_line = self.ok + self.failed

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
        if self.lines and self.ok + self.failed > self._done_at_line:
            self._line()
        return False


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
