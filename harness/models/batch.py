"""``--batch``: a run's requests go through the provider's batch interface (``harness.models.batch_api``).

``BatchBackend`` wraps the run's backend and answers ``generate`` through a ``Batcher``: a request
joins the batch being gathered, which is sent once no request has joined it for ``--batch-window``
seconds (or it is full); the caller awaits its own result. Every open sample's next request lands in
the same gathering, so multi-turn strategies run in waves, one batch per round. The time a request
waits for its batch is not on its sample's clock (``--sample-timeout``), as a request queued for a
turn is not.

Crash safety: ``RUN_DIR/batches.jsonl`` is appended (flushed, fsynced) before anything is paid for:

* ``prepared``: the batch's key and its custom_id -> (sample, epoch, request hash) map, before the
  create call (OpenAI's batch carries the key in ``metadata.harness_key``; Anthropic's is the batch
  of as many requests created since, checked by its results' custom_ids: so a batch created just
  before a kill is found again, ``adopted``). The search reads the provider's whole batch list and
  is retried like any call (``--max-attempts``); only a list read to its end without the batch lets
  its requests go again; a search that cannot finish stops the run in one line and sends nothing
  (a rerun searches again): a batch is never paid twice. A create call that failed in a way that
  may have created it (a timeout, a 5xx) leaves the batch prepared, for the next search;
* ``submitted``: the provider's batch id, before polling starts;
* ``ended``: its final status, once its results (normalized, ``batches/KEY.results.jsonl``) are on disk;
* ``used``: a result handed to a sample (with the invocation), ``abandoned``: never created.

A rerun polls every submitted batch that has not ended (one that finished while nothing ran is
downloaded), and a sample's request is answered by a recorded request of the same sample, epoch and
request hash that no row has counted yet, never sent again. Expired, cancelled and failed batches and
per-request errors are failures with their reason, sent again in a new batch while ``--max-attempts``
allows (a batch that cannot be polled is never resent: a rerun resumes it). Answers that came back
but that no sample used are billed all the same: ``unused_usages`` (the run adds them to spent_usd).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
import uuid
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from harness.errors import ContextOverflowError, ModelError, TransientModelError
from harness.models.base import WAIT_CLOCK, ModelBackend, ModelResponse
from harness.models.batch_api import BatchState, VLLMRunBatch, chunks, provider_for
from harness.records import (
    FAILURES_FILE,
    SAMPLES_FILE,
    JsonlAppender,
    iter_jsonl,
    record_epoch,
    work_key,
)
from harness.text import hash_bytes

log = logging.getLogger(__name__)

BATCHES_FILE = "batches.jsonl"
BATCHES_DIR = "batches"
# (sample id, epoch) of the request being made: the runner sets it in each sample's task
REQUEST_ORIGIN: ContextVar[tuple[str, int] | None] = ContextVar("harness_request_origin", default=None)


def request_hash(body: dict[str, Any]) -> str:
    """What a request asks, as sent: equal bodies, equal hashes."""
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(hash_bytes(text)).hexdigest()


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def refused(exc: BaseException) -> bool:
    """A create call's failure that rules the batch out: the server answered with a 4xx (429
    included): it refused the call. A timeout, a dropped connection, a 5xx (a gateway may answer 502
    or 504 for a call the API went on with) or a 200 without an id may hide a batch created."""
    status = getattr(exc, "status", None)
    return isinstance(status, int) and 400 <= status < 500 and status != 408


def line_error(
    status: int | None, message: str, where: str, model: str, overflow: Callable[[str], bool] | None = None
) -> Exception:
    """One request's error in a batch, as the same status would be for a single request: never ran,
    429, 5xx -> transient (sent again); a prompt over the context -> ContextOverflowError (that sample
    fails, the run goes on); other 4xx -> ModelError (the run stops, as it does without --batch).
    ``overflow``: the provider's own words for a prompt over the context (vllm run-batch's engine)."""
    from harness.models.openai_compat import _OVERFLOW_RE

    text = f"{where}: {message}"
    if status is None or status in (408, 409, 429) or status >= 500:
        return TransientModelError(text if status is None else f"{where}: {status}: {message}", status=status)
    if status in (400, 413, 422) and (_OVERFLOW_RE.search(message) or (overflow is not None and overflow(message))):
        return ContextOverflowError(f"prompt exceeds the context of {model} ({status}): {message}")
    return ModelError(f"{where} rejected a request ({status}): {message}")


@dataclass(eq=False)
class Request:
    origin: tuple[str | None, int]
    build: Callable[[], dict[str, Any]]
    body: dict[str, Any]
    hash: str
    future: asyncio.Future
    tries: int = 0
    # refuses a result whose usage its request could not have used (ModelBackend.check_usage)
    check: Callable[[ModelResponse], None] | None = None


@dataclass(eq=False)
class Batch:
    key: str
    provider: str
    invocation: int | None
    requests: dict[str, dict[str, Any]]  # custom_id -> {"sample", "epoch", "hash", "try"}
    batch_id: str | None = None
    prepared_at: str | None = None  # when it was recorded as prepared (its create call came after)
    adopted: bool = False  # found again by a search (Anthropic's: a guess its results confirm)
    state: str = "prepared"  # submitted, ended, abandoned; unfollowed (this invocation gave up polling it)
    status: str | None = None
    reason: str | None = None
    waiters: dict[str, Request] = field(default_factory=dict)
    results: dict[str, dict[str, Any]] | None = None  # read from its results file when first needed

    def failure(self) -> str:
        return f"batch {self.batch_id} {self.status}" + (f": {self.reason}" if self.reason else "")


class BatchStore:
    """``RUN_DIR/batches.jsonl`` and ``RUN_DIR/batches/``: what was sent, what came back, what was used."""

    def __init__(self, run_dir: Path, invocation: int):
        self.run_dir = Path(run_dir)
        self.invocation = invocation
        self.path = self.run_dir / BATCHES_FILE
        self.batches: dict[str, Batch] = {}
        self.used: dict[str, int] = {}  # custom_id -> the invocation whose sample got it
        # custom_ids whose reply reported usage its request could not have used: never billed as unused
        self.refused: set[str] = set()
        self.index: dict[tuple[str | None, int, str], list[tuple[str, str]]] = {}
        self.claimed: set[str] = set()  # this invocation's: each recorded request answers once
        self._out: JsonlAppender | None = None  # opened at the first event: a run that never sends writes nothing
        if self.path.is_file():
            for _, event in iter_jsonl(self.path, strict=False):
                self._apply(event)
        self.rows = self._row_invocations()
        for leftover in (self.run_dir / BATCHES_DIR).glob(".*.tmp"):  # a results file a kill cut short
            leftover.unlink(missing_ok=True)

    def _apply(self, event: dict[str, Any]) -> None:
        kind, key = event.get("event"), event.get("key")
        if kind == "used":
            self.used[event.get("custom_id")] = event.get("invocation")
            return
        if kind == "refused":
            self.refused.add(event.get("custom_id"))
            return
        if kind == "prepared" and isinstance(event.get("requests"), dict):
            batch = Batch(key, event.get("provider", ""), event.get("invocation"), event["requests"])
            batch.prepared_at = event.get("at")
            self.batches[key] = batch
            for cid, req in batch.requests.items():
                self.index.setdefault((req.get("sample"), req.get("epoch", 1), req.get("hash")), []).append((key, cid))
            return
        batch = self.batches.get(key)
        if batch is None:
            return
        if kind == "submitted":
            batch.state, batch.batch_id = "submitted", event.get("batch_id")
        elif kind == "ended":
            batch.state, batch.status, batch.reason = "ended", event.get("status"), event.get("reason")
        elif kind == "abandoned":
            batch.state, batch.reason = "abandoned", event.get("reason")

    def _row_invocations(self) -> dict[str, set[int]]:
        """Per sample (work key), the invocations that wrote a row for it: a result used in one of
        them is counted in that row's cost."""
        rows: dict[str, set[int]] = {}
        for name in (SAMPLES_FILE, FAILURES_FILE):
            path = self.run_dir / name
            if path.is_file():
                for _, row in iter_jsonl(path, strict=False):
                    if isinstance(row.get("id"), str):
                        rows.setdefault(work_key(row["id"], record_epoch(row)), set()).add(row.get("invocation"))
        return rows

    def _write(self, event: dict[str, Any], sync: bool = True) -> None:
        if self._out is None:
            self._out = JsonlAppender(self.path)
        self._out.append(event)
        if sync:
            self._out.sync()

    def results_path(self, key: str) -> Path:
        return self.run_dir / BATCHES_DIR / f"{key}.results.jsonl"

    # events ------------------------------------------------------------------------
    def prepare(self, provider: str, reqs: list[Request]) -> Batch:
        key = uuid.uuid4().hex[:16]
        batch = Batch(key, provider, self.invocation, {})
        for i, req in enumerate(reqs):
            cid = f"{key}-{i}"
            req.tries += 1
            batch.requests[cid] = {"sample": req.origin[0], "epoch": req.origin[1], "hash": req.hash, "try": req.tries}
            batch.waiters[cid] = req
            self.index.setdefault((req.origin[0], req.origin[1], req.hash), []).append((key, cid))
            self.claimed.add(cid)
        self.batches[key] = batch
        batch.prepared_at = _now()
        self._write(
            {"event": "prepared", "key": key, "provider": provider, "invocation": self.invocation,
             "at": batch.prepared_at, "requests": batch.requests}  # fmt: skip
        )
        return batch

    def submitted(self, batch: Batch, batch_id: str) -> None:
        batch.state, batch.batch_id = "submitted", batch_id
        self._write({"event": "submitted", "key": batch.key, "batch_id": batch_id, "at": _now()})

    def ended(self, batch: Batch, state: BatchState) -> None:
        batch.state, batch.status, batch.reason = "ended", state.status, state.reason
        self._write(
            {"event": "ended", "key": batch.key, "batch_id": batch.batch_id, "status": state.status,
             "reason": state.reason, "counts": state.counts, "at": _now()}  # fmt: skip
        )

    def abandon(self, batch: Batch, reason: str) -> None:
        batch.state, batch.reason = "abandoned", reason
        self._write({"event": "abandoned", "key": batch.key, "reason": reason, "at": _now()})

    def refuse(self, cid: str, reason: str) -> None:
        """A result refused as malformed (absurd usage): sent again, and never priced as a billed answer."""
        self.refused.add(cid)
        self._write({"event": "refused", "custom_id": cid, "reason": reason}, sync=False)

    def use(self, cid: str) -> None:
        """A result handed to a sample (flushed; a kill loses nothing flushed)."""
        self.used[cid] = self.invocation
        self._write({"event": "used", "custom_id": cid, "invocation": self.invocation}, sync=False)

    async def save_results(self, batch: Batch, results) -> int:
        """The provider's results, normalized, written whole (atomically) before ``ended`` is recorded."""
        from harness.models.batch_api import AtomicLines

        kept: dict[str, dict[str, Any]] = {}
        with AtomicLines(self.results_path(batch.key)) as out:
            async for result in results:
                if result["custom_id"] in batch.requests:
                    out.write(result)
                    kept[result["custom_id"]] = result
        batch.results = kept
        return len(kept)

    def result(self, batch: Batch, cid: str) -> dict[str, Any] | None:
        if batch.results is None:
            path = self.results_path(batch.key)
            batch.results = {}
            if path.is_file():
                for _, line in iter_jsonl(path, strict=False):
                    if isinstance(line.get("custom_id"), str):
                        batch.results[line["custom_id"]] = line
        return batch.results.get(cid)

    def claim(self, origin: tuple[str | None, int], digest: str) -> tuple[Batch, str] | None:
        """A recorded request of this sample, epoch and hash whose answer is still to come or came
        and was counted by no row: it answers this request instead of a new one."""
        for key, cid in self.index.get((origin[0], origin[1], digest), ()):
            batch = self.batches.get(key)
            if cid in self.claimed or batch is None or batch.state not in ("submitted", "ended"):
                continue
            used_in = self.used.get(cid)
            if used_in is not None and origin[0] is not None and used_in in self.rows.get(work_key(*origin), ()):
                continue  # a row has it (and its cost) already
            if batch.state == "ended" and (self.result(batch, cid) or {}).get("status") != 200:
                continue
            self.claimed.add(cid)
            return batch, cid
        return None

    def close(self) -> None:
        if self._out is not None:
            self._out.close()


async def _nothing():
    return
    yield


class Batcher:
    """Gathers requests into batches, sends them, polls them and hands each caller its result."""

    def __init__(self, provider: Any, backend: ModelBackend):
        self.provider = provider
        self.backend = backend
        options = backend.options
        self.window = options.batch_window
        self.poll_interval = options.batch_poll_interval
        self.max_attempts = options.max_attempts
        self.retry_max_wait = options.retry_max_wait
        self.store: BatchStore | None = None
        self.pending: list[Request] = []
        self.timer: asyncio.TimerHandle | None = None
        self.tasks: set[asyncio.Task] = set()
        self.last_reason = ""  # of the last request sent again
        self.facts: dict[str, Any] = {
            "submitted": 0,
            "requests_sent": 0,
            "resumed": 0,
            "adopted": 0,
            "abandoned": 0,
            "results_reused": 0,
            "requests_resent": 0,
            "ended": {},
            "batch_ids": [],
        }

    def attach(self, run_dir: Path, invocation: int) -> None:
        self.store = BatchStore(run_dir, invocation)

    async def start(self) -> None:
        """Batches of earlier invocations: a created one found again, the submitted ones polled."""
        if self.store is None:
            raise ModelError("--batch needs a run directory to record its batches in (harness run gives one)")
        for batch in list(self.store.batches.values()):
            if batch.state == "prepared":
                await self._recover(batch)
            if batch.state == "submitted":
                self.facts["resumed"] += 1
                self._note_id(batch.batch_id)
                self._spawn(self._poll(batch))

    async def _find(self, batch: Batch) -> str | None:
        """The provider's batch for ``batch``, or None when its whole list was read without it; a
        failure to read it is retried as any call is, then raised."""
        from harness.models.retry import retrying

        return await retrying(
            lambda: self.provider.find(batch.key, len(batch.requests), batch.prepared_at, self._known_ids()),
            self.max_attempts,
            self.retry_max_wait,
        )

    def _known_ids(self) -> set[str]:
        """The provider ids of the batches recorded: never taken for another one."""
        return {b.batch_id for b in self.store.batches.values() if b.batch_id}

    async def _recover(self, batch: Batch) -> None:
        """A batch recorded as prepared but not as submitted: the harness stopped around its create
        call. Sent again only on a definite "not there"; a search that fails stops the run."""
        try:
            found = await self._find(batch)
        except (TransientModelError, ModelError) as exc:
            raise ModelError(
                f"--batch: batch {batch.key} ({len(batch.requests)} requests) was being created when an earlier "
                f"invocation stopped, and the provider's batch list could not be read to find it ({exc}); nothing "
                "was sent again, so that it is never paid twice: rerun the same command later (it searches again)"
            ) from None
        if found:
            self.facts["adopted"] += 1
            batch.adopted = True
            self.store.submitted(batch, found)
            return
        self.facts["abandoned"] += 1
        self.store.abandon(batch, "no batch of this key at the provider (its whole batch list read)")

    def _note_id(self, batch_id: str | None) -> None:
        if batch_id and len(self.facts["batch_ids"]) < 1000:
            self.facts["batch_ids"].append(batch_id)

    def _spawn(self, coro) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    # requests ------------------------------------------------------------------------
    async def generate(self, messages, params, tools=None, tool_choice=None) -> ModelResponse:
        if self.store is None:
            raise ModelError("--batch needs a run directory to record its batches in (harness run gives one)")
        origin = REQUEST_ORIGIN.get() or (None, 1)

        def build() -> dict[str, Any]:
            return self.provider.body(messages, params, tools, tool_choice)

        body = build()
        req = Request(origin, build, body, request_hash(body), asyncio.get_running_loop().create_future())
        req.check = lambda response: self.backend.check_usage(response, params, messages, tools)
        started = time.monotonic()
        claim = self.store.claim(origin, req.hash)
        if claim is not None:
            batch, cid = claim
            req.tries = 1
            self.facts["results_reused"] += 1
            if batch.state == "ended":
                self._deliver(batch, cid, req)
            else:
                batch.waiters[cid] = req
        else:
            self._enqueue(req)
        clock = WAIT_CLOCK.get()
        if clock is not None:
            clock.queue()  # waiting for a batch is not the sample's own time
        try:
            response = await req.future
        finally:
            if clock is not None:
                clock.unqueue()
        response.latency_s = time.monotonic() - started
        response.attempts = req.tries
        return response

    def _enqueue(self, req: Request) -> None:
        self.pending.append(req)
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if len(self.pending) >= self.provider.max_requests:
            self._flush()
        else:
            self.timer = asyncio.get_running_loop().call_later(self.window, self._flush)

    def _flush(self) -> None:
        self.timer = None
        reqs = [r for r in self.pending if not r.future.done()]  # a sample that ended meanwhile sends nothing
        self.pending = []
        if not reqs:
            return
        sizes = [len(json.dumps(r.body, default=str)) + 200 for r in reqs]
        for part in chunks(reqs, sizes, self.provider.max_requests, self.provider.max_bytes):
            self._spawn(self._run(part))

    async def _run(self, reqs: list[Request]) -> None:
        batch = None
        try:
            batch = self.store.prepare(self.provider.name, reqs)  # recorded (fsynced) before anything is sent
            lines = [self.provider.line(cid, r.body) for cid, r in batch.waiters.items()]
            batch_id = await self._create(batch, lines)
        except asyncio.CancelledError:
            raise  # left as prepared: the next invocation looks for it
        except Exception as exc:  # already retried within --max-attempts: its requests fail
            kind = TransientModelError if isinstance(exc, TransientModelError) else ModelError
            message = f"the batch could not be created: {exc}"
            if batch is not None and getattr(exc, "maybe_created", False):
                # left prepared: the next invocation searches for it before anything is sent again
                message = (
                    f"batch {batch.key}'s create call failed and may have gone through ({exc}); not sent "
                    "again in this invocation: a rerun looks for it first"
                )
            elif batch is not None:
                self.store.abandon(batch, str(exc))
            for req in reqs:
                if not req.future.done():
                    req.future.set_exception(kind(message))
            return
        self.store.submitted(batch, batch_id)  # fsynced before the first poll
        self.facts["submitted"] += 1
        self.facts["requests_sent"] += len(lines)
        self._note_id(batch_id)
        await self._poll(batch)

    async def _create(self, batch: Batch, lines: list[dict[str, Any]]) -> str:
        """Upload, then create; a create call retried after one that may have gone through searches
        first. A failure that leaves it unknown whether the batch exists is marked ``maybe_created``."""
        from harness.models.retry import retrying

        uploaded = await retrying(
            lambda: self.provider.upload(batch.key, lines), self.max_attempts, self.retry_max_wait
        )
        unsure = False  # a create call went out and its failure does not rule the batch out

        async def create() -> str:
            nonlocal unsure
            if unsure:  # the last try may have created it before failing to answer
                found = await self.provider.find(batch.key, len(lines), batch.prepared_at, self._known_ids())
                if found:
                    batch.adopted = True
                    return found
                unsure = False  # the whole list read: it does not exist
            try:
                return await self.provider.create(batch.key, uploaded, lines)
            except Exception as exc:
                unsure = not refused(exc)
                raise

        try:
            return await retrying(create, self.max_attempts, self.retry_max_wait)
        except Exception as exc:
            if unsure:
                exc.maybe_created = True  # type: ignore[attr-defined]
            raise

    async def _poll(self, batch: Batch) -> None:
        try:
            state = await self._wait_ended(batch)
            if state is None:
                return
            for attempt in range(1, self.max_attempts + 1):
                try:
                    results = self.provider.results(batch.batch_id, state) if state.has_results else _nothing()
                    kept = await self.store.save_results(batch, results)
                    if batch.adopted and state.has_results and not kept:
                        log.warning(
                            "batch %s, found for %s, has none of its requests' results: not ours; "
                            "its requests count unanswered (sent again while they have tries left)",
                            batch.batch_id, batch.key,
                        )  # fmt: skip
                    break
                except TransientModelError as exc:
                    if attempt == self.max_attempts:
                        self._give_up(batch, exc)
                        return
                    await asyncio.sleep(min(self.poll_interval * attempt, max(self.retry_max_wait, 0.01)))
            self.store.ended(batch, state)
            ended = self.facts["ended"]
            ended[state.status] = ended.get(state.status, 0) + 1
            waiters, batch.waiters = batch.waiters, {}
            resent = self.facts["requests_resent"]
            for cid, req in waiters.items():
                self._deliver(batch, cid, req)
            if self.facts["requests_resent"] > resent:
                log.warning(
                    "%s: %d of its requests failed (%s); sent again in a new batch",
                    batch.failure(), self.facts["requests_resent"] - resent, self.last_reason,
                )
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug must not leave samples waiting for ever
            self._give_up(batch, ModelError(f"batch {batch.batch_id}: {type(exc).__name__}: {exc}"))

    async def _wait_ended(self, batch: Batch) -> BatchState | None:
        failures = 0
        while True:
            try:
                state = await self.provider.poll(batch.batch_id)
                failures = 0
            except TransientModelError as exc:
                failures += 1
                if failures >= self.max_attempts:
                    self._give_up(batch, exc)
                    return None
                await asyncio.sleep(min(self.poll_interval * 2**failures, max(self.retry_max_wait, self.poll_interval)))
                continue
            except ModelError as exc:
                if getattr(exc, "status", None) == 404:  # the provider no longer knows it: its requests go again
                    return BatchState("failed", True, f"not found at the provider: {exc}", has_results=False)
                self._give_up(batch, exc)  # a refused key: the run stops, the batch stays to resume
                return None
            if state.terminal:
                return state
            await asyncio.sleep(self.poll_interval)

    def _give_up(self, batch: Batch, exc: Exception) -> None:
        """The batch could not be followed to its end: its requests fail without being sent again
        (it may still be answered and billed; it stays recorded, so a rerun resumes it)."""
        reason = f"batch {batch.batch_id} could not be followed ({exc}); a rerun resumes it"
        batch.state = "unfollowed"  # in memory only: recorded as submitted, so a rerun polls it again
        waiters, batch.waiters = batch.waiters, {}
        for req in waiters.values():
            if not req.future.done():
                req.future.set_exception(
                    TransientModelError(reason) if isinstance(exc, TransientModelError) else ModelError(reason)
                )

    def _deliver(self, batch: Batch, cid: str, req: Request) -> None:
        if req.future.done():  # its sample ended meanwhile (timeout, stop): the result stays unused
            return
        where = f"{self.provider.where()}, batch {batch.batch_id}"
        result = self.store.result(batch, cid)
        if result is None:
            self._failed(req, TransientModelError(f"{batch.failure()} before answering this request"))
            return
        if result.get("status") == 200:
            try:
                response = self.provider.parse(result.get("body"), where)
                if req.check is not None:
                    try:
                        req.check(response)
                    except TransientModelError as exc:
                        self.store.refuse(cid, str(exc))
                        raise
            except TransientModelError as exc:
                self._failed(req, exc)
                return
            self.store.use(cid)
            req.future.set_result(response)
            return
        error = str(result.get("error"))
        drop = getattr(self.provider, "drop_rejected", None)
        if result.get("status") == 400 and drop is not None and drop(error, req.body):
            req.tries -= 1  # asked without that parameter, as a request on its own would be
            self._failed(req, TransientModelError(f"{where}: {error}"))
            return
        overflow = getattr(self.provider, "is_context_overflow", None)
        self._failed(req, line_error(result.get("status"), error, where, self.backend.model, overflow))

    def _failed(self, req: Request, exc: Exception) -> None:
        if req.future.done():
            return
        if isinstance(exc, TransientModelError) and req.tries < self.max_attempts:
            self.facts["requests_resent"] += 1
            self.last_reason = str(exc)
            req.body = req.build()
            req.hash = request_hash(req.body)
            self._enqueue(req)
            return
        if isinstance(exc, TransientModelError):
            exc = TransientModelError(f"{exc} (try {req.tries} of {self.max_attempts})", status=exc.status)
        req.future.set_exception(exc)

    def unused_usages(self):
        """The usage of each answer that came back (and is billed) but that no sample has taken, in
        any invocation: a sample that stopped first, a selection that changed. In no row's cost: the
        run adds them to spent_usd."""
        if self.store is None:
            return
        for batch in self.store.batches.values():
            if batch.state != "ended":
                continue
            for cid in batch.requests:
                result = self.store.result(batch, cid)
                if cid in self.store.used or cid in self.store.refused or not result or result.get("status") != 200:
                    continue
                try:
                    yield self.provider.parse(result.get("body"), "").usage
                except TransientModelError:
                    continue

    def unused(self) -> dict[str, int]:
        """``unused_usages`` counted: requests and tokens."""
        out = {"requests": 0, "prompt_tokens": 0, "completion_tokens": 0}
        for usage in self.unused_usages():
            out["requests"] += 1
            out["prompt_tokens"] += usage.prompt_tokens
            out["completion_tokens"] += usage.completion_tokens
        return out

    async def close(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        for req in self.pending:
            req.future.cancel()
        self.pending = []
        tasks = list(self.tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self.store is not None:
            self.store.close()


class BatchBackend(ModelBackend):
    """The run's backend with ``generate`` answered through its provider's batch interface; every
    other fact (context size, tokens, identity, cache key) is the wrapped backend's."""

    def __init__(self, inner: ModelBackend):
        self.inner = inner
        self.provider = provider_for(inner)  # one line for a backend without a batch interface
        super().__init__(inner.model, inner.options)
        self.prefix = inner.prefix
        self.plugin = inner.plugin
        self.supports_auto_tool_choice = inner.supports_auto_tool_choice
        self.batcher = Batcher(self.provider, inner)

    @property
    def native_tools(self) -> bool:
        return bool(getattr(self.inner, "native_tools", False))

    @native_tools.setter
    def native_tools(self, value: bool) -> None:
        self.inner.native_tools = value  # vllm/: run-batch gets the launched server's parsers

    @property
    def log_dir(self) -> Path | None:
        return self.inner.log_dir

    @log_dir.setter
    def log_dir(self, value: Path | None) -> None:
        self.inner.log_dir = value
        if isinstance(self.provider, VLLMRunBatch):
            self.provider.log_dir = value

    def attach_run(self, run_dir: Path, invocation: int) -> None:
        """Where the batches are recorded (the run directory), and which invocation this is."""
        self.batcher.attach(run_dir, invocation)

    async def start(self) -> None:
        if isinstance(self.provider, VLLMRunBatch):
            self.provider.executable()  # no server to start: says at once that vLLM is needed
        else:
            await self.inner.start()
            await self.provider.probe()
        await self.batcher.start()

    async def close(self) -> None:
        try:
            await self.batcher.close()
            await self.provider.close()
        finally:
            await self.inner.close()

    async def generate(self, messages, params, tools=None, tool_choice=None) -> ModelResponse:
        messages, tools = self._sendable(messages, tools)
        return await self.batcher.generate(messages, params, tools, tool_choice)

    async def _generate(self, messages, params, tools=None, tool_choice=None) -> ModelResponse:
        return await self.batcher.generate(messages, params, tools, tool_choice)

    def context_size(self) -> int | None:
        return self.inner.context_size()

    def max_context_size(self) -> int | None:
        return self.inner.max_context_size()

    def count_tokens(self, text: str) -> int:
        if isinstance(self.provider, VLLMRunBatch):
            raise ModelError(
                "--batch with vllm/ runs vllm run-batch: there is no server to count tokens with, so a strategy "
                "that fits text by tokens cannot run; drop --batch"
            )
        return self.inner.count_tokens(text)

    def tokenizer_name(self) -> str:
        return self.inner.tokenizer_name()

    def context_size_warning(self) -> str | None:
        return self.inner.context_size_warning()

    def endpoint(self) -> str | None:
        return self.inner.endpoint()

    def identity_facts(self) -> dict[str, Any]:
        return self.inner.identity_facts()

    def cache_identity(self) -> dict[str, Any]:
        return self.inner.cache_identity()  # the same model answers: shared with runs without --batch

    def describe(self) -> dict[str, Any]:
        return {
            **self.inner.describe(),
            "batch": {
                "provider": self.provider.name,
                "where": self.provider.where(),
                "window_s": self.options.batch_window,
                "poll_interval_s": self.options.batch_poll_interval,
                "record": BATCHES_FILE,
            },
        }

    def usage_facts(self) -> dict[str, Any]:
        return {**self.inner.usage_facts(), "batches": {**self.batcher.facts, "unused": self.batcher.unused()}}

    def unused_batch_usages(self):
        """Billed answers no sample took (``Batcher.unused_usages``): the run counts them spent."""
        return self.batcher.unused_usages()


__all__ = ["BATCHES_FILE", "REQUEST_ORIGIN", "BatchBackend", "BatchStore", "Batcher", "request_hash"]
