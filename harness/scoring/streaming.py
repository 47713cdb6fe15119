"""Scoring that streams with a run: each finished sample, once its row is written, is scored by the
streamable metrics in a worker process (spaCy's lemmatizer and ROUGE never hold up the event loop),
its values kept with the run's in-memory record, and the end of the run only aggregates
(``score_answers(precomputed=...)``). Rows are written before they are scored, so a stalled or
killed worker never holds a finished sample back; whatever it did not score is scored at the end.

The values are the batch scorer's, question for question (``score_one`` calls the same metric on one
question), and the aggregates are computed from them in the same order, so a streamed run's scores
equal ``harness score RUN_DIR`` exactly (tests/test_streaming_scoring.py). Values carry
``scored_with``, a fingerprint of what scored them (metrics, options, harness version); rows written
by older versions may hold such values, used on resume when the fingerprint matches.

The worker (``harness.scoring.worker``) is a plain child process that dies with the run, kill -9
included (``harness.lifeline``), and leaves no multiprocessing resource tracker. One answer (a batch,
or the warm-up) has ``DEADLINE_S``, and a batch ``PER_SAMPLE_S`` more for each of its samples: a
worker that takes longer is killed, said in one line, and the remaining samples are scored at the end.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import subprocess
import sys
from typing import Any

from harness.datasets.base import Sample
from harness.errors import describe_exit
from harness.scoring.metrics import ScoringOptions, resolve_metrics

log = logging.getLogger(__name__)


def streamable_metrics(names: list[str]) -> list[str]:
    return [name for name, entry in resolve_metrics(names).items() if entry.obj.streaming]


def fingerprint(names: list[str], options: ScoringOptions) -> str:
    from harness._version import __version__

    # cluster_by (error bars) and metric_timeout (a deadline) never change a value
    canonical = json.dumps(
        {
            "metrics": names,
            "options": options.model_dump(mode="json", exclude={"cluster_by", "metric_timeout"}),
            "harness": __version__,
        },
        sort_keys=True,
    )
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


class WorkerStalled(Exception):
    pass


class StreamingScorer:
    """One worker process scoring finished samples. Samples that finish while it is busy are sent
    together as the next batch, so it keeps up with any request rate (one spaCy batch per call)."""

    DEADLINE_S = 120.0  # one batch or the warm-up; builtin metrics take well under a second a batch
    # and each sample of a batch beside it: a 100,000-character answer (max_answer_chars) takes spaCy
    # about a second to normalize on 2 cores, so a big batch of long answers (306 after the warm-up of
    # a fast run) took past 120 s on a slow machine and the worker was stopped as if it hung
    PER_SAMPLE_S = 2.0
    # samples per batch at most: the samples that finished during the warm-up (thousands on a fast
    # server) go in several, so no message pickles them all at once (tens of MB, kept as RSS)
    BATCH_MAX = 500
    # samples waiting before the run starts no new one (``room``), plus those in flight. On a fast
    # server (or a rerun answered from the cache) samples finish faster than one worker scores them:
    # an unbounded queue grew with the run (issue 25: 11,000 waiting at 27,000, ~0.35 KB each), and
    # the run's end waited for it to drain all the same
    BACKLOG_MAX = 2000

    def __init__(self, names: list[str], options: ScoringOptions):
        # by reference, so the worker resolves what this process did (FILE.py:NAME plugins); an
        # in-process registration does not exist there: scored at the end
        self._refs = {
            name: entry.ref if entry.source in ("file", "module") else name
            for name, entry in resolve_metrics(names).items()
            if entry.obj.streaming and entry.source != "registered"
        }
        self.names = list(self._refs)
        self.options = options
        self.fingerprint = fingerprint(names, options)
        self.info: dict[str, Any] = {}
        self.streamed = 0  # samples the worker scored
        self.stopped: str | None = None  # why it stopped early
        self.process: subprocess.Popen | None = None
        self._queue: list[tuple[Sample, Any, asyncio.Future]] = []
        self._batch: asyncio.Task | None = None
        self._room: asyncio.Event | None = None  # set when the queue falls below BACKLOG_MAX
        self._warming = False
        if self.names:
            self._start()

    def _start(self) -> None:
        from harness.lifeline import spawn_piped

        # started from the event-loop thread: the parent-death signal follows that thread
        self.process, self._out, self._in = spawn_piped(
            [sys.executable, "-m", "harness.scoring.worker", "--parent", str(os.getpid())]
        )
        self._out.send(("warm", list(self._refs.values()), self.options))  # small: never blocks
        self._warming = True

    @property
    def active(self) -> bool:
        return self.process is not None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    async def score(self, sample: Sample, answer: Any) -> dict[str, Any] | None:
        """{metric: value}, or None (no answer, or the worker failed: scored at the end)."""
        return await self.submit(sample, answer)

    def submit(self, sample: Sample, answer: Any) -> asyncio.Future:
        """A future of ``score(sample, answer)``'s result: the caller need not wait for it (a sample
        waiting for its score holds no task; thousands finish while the worker warms up)."""
        future = asyncio.get_running_loop().create_future()
        if self.process is None or answer is None:
            future.set_result(None)
            return future
        self._queue.append((sample, answer, future))
        if self._batch is None or self._batch.done():
            self._batch = asyncio.create_task(self._drain())
        return future

    async def room(self) -> None:
        """Until fewer than BACKLOG_MAX samples wait (at once while they do, or once the worker has
        stopped): the run starts its next sample when the scorer can take it."""
        while len(self._queue) >= self.BACKLOG_MAX and self.process is not None:
            if self._room is None:
                self._room = asyncio.Event()
            self._room.clear()
            await self._room.wait()

    def _has_room(self) -> None:
        if self._room is not None and (len(self._queue) < self.BACKLOG_MAX or self.process is None):
            self._room.set()

    async def drain(self) -> None:
        """Until every sample submitted has its values (or None: the worker stopped)."""
        while self._batch is not None and not self._batch.done():
            await asyncio.wait({self._batch})

    async def _drain(self) -> None:
        while self._queue and self.process is not None:
            batch, self._queue = self._queue[: self.BATCH_MAX], self._queue[self.BATCH_MAX :]
            self._has_room()
            samples = [s for s, _, _ in batch]
            result: list[Any] = [None] * len(batch)
            try:
                if self._warming:
                    await self._exchange(None)  # the warm-up's answer, on its own deadline
                    self._warming = False
                refs = list(self._refs.values())
                _, values, failed = await self._exchange(
                    ("score", refs, self.options, samples, [a for _, a, _ in batch])
                )
            except Exception as exc:  # never lose a finished sample over its score: the end scores it
                why = await asyncio.to_thread(self._why, exc)  # reaps the worker: off the event loop
                log.warning("streaming scoring stopped (%s); the remaining samples are scored at the end", why)
                self.stopped = why
                await asyncio.to_thread(self._stop)  # a broken worker stays broken
            else:
                result = values
                self.streamed += len(batch)
                for ref, reason in failed.items():  # that metric alone leaves the worker
                    name = next(n for n, r in self._refs.items() if r == ref)
                    del self._refs[name]
                    log.warning("metric %s failed in the scoring worker (%s); it is scored at the end", name, reason)
            for (sample, _, future), values in zip(batch, result):  # by position: one per (question, epoch)
                for name, value in (values or {}).items():
                    self.info.setdefault(name, value["info"])
                if not future.done():
                    future.set_result({name: value["raw"] for name, value in values.items()} if values else None)
        self._release_queue()  # stopped with samples waiting: they are scored at the end

    async def _exchange(self, message: tuple | None) -> tuple:
        """Send ``message`` (None: only read the warm-up's answer) and read the answer, within DEADLINE_S."""
        call = asyncio.get_running_loop().run_in_executor(None, self._call, message)
        deadline = self.DEADLINE_S + (self.PER_SAMPLE_S * len(message[3]) if message is not None else 0.0)
        try:
            return await asyncio.wait_for(asyncio.shield(call), deadline)
        except asyncio.TimeoutError:
            pid = self.pid
            await asyncio.to_thread(self._kill)  # the pipes break: the call returns
            await asyncio.gather(call, return_exceptions=True)
            what = "warm-up" if message is None else f"batch of {len(message[3])} sample(s)"
            raise WorkerStalled(
                f"the scoring worker process (pid {pid}) gave no answer to a {what} within "
                f"{deadline:g} s and was stopped"
            ) from None

    def _call(self, message: tuple | None) -> tuple:  # in a thread: pipes block
        if message is not None:
            self._out.send(message)
        reply = self._in.recv()
        if reply[0] != "ok":
            raise RuntimeError(f"the scoring worker answered {reply[0]!r}")
        return reply

    def _why(self, exc: Exception) -> str:
        """``the scoring worker process (pid 7) died of signal 11, SIGSEGV``, else the exception."""
        if isinstance(exc, WorkerStalled):
            return str(exc)
        if isinstance(exc, (EOFError, OSError)) and self.process is not None:
            try:
                code = self.process.wait(timeout=2)
            except subprocess.TimeoutExpired:
                code = None
            if code is not None:
                return f"the scoring worker process (pid {self.process.pid}) died of {describe_exit(code)}"
        return f"{type(exc).__name__}: " + " ".join(str(exc).split())[:200]

    def _release_queue(self) -> None:
        for _, _, future in self._queue:
            if not future.done():
                future.set_result(None)
        self._queue = []
        self._has_room()

    def _kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def _stop(self) -> None:
        """End the worker (it holds nothing worth a graceful exit: perhaps mid-warm-up) and its pipes."""
        if self.process is None:
            return
        self._kill()
        for conn in (self._out, self._in):
            conn.close()
        self.process = None

    def close(self) -> None:
        self._release_queue()
        if self._batch is not None and not self._batch.done():  # interrupted mid-batch: its samples are scored at the end
            self._batch.cancel()
        self._stop()  # killed before the pipes close under a thread reading them


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
