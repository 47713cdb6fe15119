"""Scoring that streams with a run: each finished sample is scored by the streamable metrics in a
worker process (spaCy's lemmatizer and ROUGE never hold up the event loop), its values kept in the
sample's record, and the end of the run only aggregates (``score_answers(precomputed=...)``).

The values are the batch scorer's, question for question (``score_one`` calls the same metric on one
question), and the aggregates are computed from them in the same order, so a streamed run's scores
equal ``harness score RUN_DIR`` exactly (tests/test_streaming_scoring.py). A record carries
``scored_with``, a fingerprint of what scored it (metrics, options, harness version): a resumed run
with other metrics or options, or an older record, is scored at the end instead.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from harness.datasets.base import Sample
from harness.errors import describe_exit
from harness.scoring.metrics import ScoringOptions, resolve_metrics, score_one, score_some

log = logging.getLogger(__name__)


def streamable_metrics(names: list[str]) -> list[str]:
    return [name for name, entry in resolve_metrics(names).items() if getattr(entry.obj, "streamable", False)]


def fingerprint(names: list[str], options: ScoringOptions) -> str:
    from harness._version import __version__

    canonical = json.dumps(
        {"metrics": names, "options": options.model_dump(mode="json", exclude={"cluster_by"}), "harness": __version__}, sort_keys=True
    )
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def _warm(names: list[str], options: ScoringOptions) -> None:
    """Load the metrics' libraries (spaCy, ROUGE) before the first sample needs them."""
    probe = Sample(id="warm-up", question="", answer=["warm up"])
    try:
        score_one(probe, "warm up", names, options)
    except Exception:  # a metric that cannot score a probe still scores real samples (or fails there)
        pass


class StreamingScorer:
    """One worker process scoring finished samples. Samples that finish while it is busy are sent
    together as the next batch, so it keeps up with any request rate (one spaCy batch per call)."""

    def __init__(self, names: list[str], options: ScoringOptions):
        self.names = streamable_metrics(names)
        self.options = options
        self.fingerprint = fingerprint(names, options)
        self.info: dict[str, Any] = {}
        self._pool: ProcessPoolExecutor | None = None
        self._workers: list[Any] = []
        self._queue: list[tuple[Sample, Any, asyncio.Future]] = []
        self._batch: asyncio.Task | None = None
        if self.names:
            # spawn, not fork: the parent may hold a loaded model, server threads and locks
            self._pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"))
            self._pool.submit(_warm, self.names, options)
            # the worker's Process, started by the submit above: its exit code says how it died
            self._workers = list(getattr(self._pool, "_processes", {}).values())

    @property
    def active(self) -> bool:
        return self._pool is not None

    async def score(self, sample: Sample, answer: Any) -> dict[str, Any] | None:
        """{metric: value} for the record, or None (no answer, or the worker failed: scored at the end)."""
        if self._pool is None or answer is None:
            return None
        future = asyncio.get_running_loop().create_future()
        self._queue.append((sample, answer, future))
        if self._batch is None or self._batch.done():
            self._batch = asyncio.create_task(self._drain())
        return await future

    async def _drain(self) -> None:
        loop = asyncio.get_running_loop()
        while self._queue and self._pool is not None:
            batch, self._queue = self._queue, []
            samples = [s for s, _, _ in batch]
            try:
                result = await loop.run_in_executor(
                    self._pool, score_some, samples, [a for _, a, _ in batch], self.names, self.options
                )
            except Exception as exc:  # never lose a finished sample over its score: the end scores it
                why = await asyncio.to_thread(self._why, exc)  # joins the dead worker: off the event loop
                log.warning("streaming scoring stopped (%s); the remaining samples are scored at the end", why)
                self._stop()  # a broken worker (a script without `if __name__ == "__main__"`) stays broken
                result = [None] * len(batch)
            for (sample, _, future), values in zip(batch, result):  # by position: one per (question, epoch)
                for name, value in (values or {}).items():
                    self.info.setdefault(name, value["info"])
                if not future.done():
                    future.set_result({name: value["raw"] for name, value in values.items()} if values else None)
        self._release_queue()  # stopped with samples waiting: they are scored at the end

    def _why(self, exc: Exception) -> str:
        """``the scoring worker process (pid 7) died of signal 11, SIGSEGV``, else the exception."""
        from concurrent.futures.process import BrokenProcessPool

        if isinstance(exc, BrokenProcessPool):
            for process in self._workers:
                process.join(timeout=2)  # reaped by the pool's manager thread: its exit code is kept
                if process.exitcode is not None:
                    return f"the scoring worker process (pid {process.pid}) died of {describe_exit(process.exitcode)}"
        return f"{type(exc).__name__}: " + " ".join(str(exc).split())[:200]

    def _release_queue(self) -> None:
        for _, _, future in self._queue:
            if not future.done():
                future.set_result(None)
        self._queue = []

    def _stop(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    def close(self) -> None:
        self._release_queue()
        self._stop()


def precomputed_from(records: list[dict[str, Any]], names: list[str], options: ScoringOptions, info: dict[str, Any]):
    """{metric: {"raw": {qid: value}, "info"}} from records scored with this fingerprint."""
    mark = fingerprint(names, options)
    out: dict[str, dict[str, Any]] = {}
    for record in records:
        if record.get("scored_with") != mark or not isinstance(record.get("scores"), dict):
            continue
        for name, value in record["scores"].items():
            out.setdefault(name, {"raw": {}, "info": info.get(name)})["raw"][record["id"]] = value
    return out
