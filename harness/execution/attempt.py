"""One attempt at one sample: the strategy solves it on its own clock, and whatever happens becomes
one row (``samples.jsonl`` when it answered, ``failures.jsonl`` with the reason when it did not)."""

from __future__ import annotations

import asyncio
import time
import traceback
from pathlib import Path
from typing import Any

from harness.datasets import Sample
from harness.errors import (
    ContextOverflowError,
    MissingEvidenceError,
    ModelError,
    ProcessDiedError,
    SampleFailure,
    TransientModelError,
)
from harness.execution.cost import Budget, BudgetExhausted, Pricing
from harness.execution.summary import now_iso
from harness.models.base import WAIT_CLOCK, GenerationParams, ModelBackend, WaitClock
from harness.models.cache import ResponseCache
from harness.execution.guard import LoopGuard, StrategyEscape
from harness.execution.watchdog import SAMPLE, LoopWatch
from harness.records import ERROR_LOG, answer_stored_once, to_json, work_key
from harness.redact import redact
from harness.strategy import Agent, AgentContext, SampleResult
from harness.text import LOG_ERRORS
from harness.wiki_snapshot.errors import SearchServiceChanged, SearchServiceUnavailable


class LoopBlocked(asyncio.TimeoutError):
    """Past its timeout, having held the event loop itself (a blocking call in the strategy)."""

    def __init__(self, seconds: float, where: str):
        super().__init__(seconds, where)
        self.seconds, self.where = seconds, where


class PluginExit(Exception):
    """``sys.exit`` in a strategy, caught inside its task: the event loop would re-raise it and end the run."""


async def _exits_caught(coro):
    try:
        return await coro
    except SystemExit as exc:
        raise PluginExit(f"called sys.exit({exc.code!r})") from None


async def within_own_time(coro, timeout: float, clock: WaitClock, watch: LoopWatch | None = None, sample: str | None = None):
    """``coro``'s result, or TimeoutError once it has run ``timeout`` seconds of its own: time its
    requests spent queued for a turn (counted on ``clock``) extends the deadline, and so do stalls of
    the event loop that other samples caused (``watch``). A sample that caused a stall itself and
    is past its deadline once the loop is free is LoopBlocked, even if it has answered meanwhile. A
    strategy that reaches past its sample (harness.execution.guard: sys.exit in a task it started,
    a cancel of a task not its own, loop.stop) is StrategyEscape, its task cancelled."""
    guard = LoopGuard.current() if sample is not None else None
    if guard is None:
        return await _within_own_time(coro, timeout, clock, watch, sample, None)
    with guard.sample(sample) as escaped:
        return await _within_own_time(coro, timeout, clock, watch, sample, escaped)


async def _within_own_time(coro, timeout, clock, watch, sample, escaped: asyncio.Future | None):
    token, owner = WAIT_CLOCK.set(clock), SAMPLE.set(sample)
    try:
        task = asyncio.ensure_future(_exits_caught(coro))  # copies the context: the sample's requests see ``clock``
    finally:
        WAIT_CLOCK.reset(token)
        SAMPLE.reset(owner)
    started = time.monotonic()
    stalled_before = watch.stalled_total() if watch is not None else 0.0

    def own_s() -> float:
        elapsed = time.monotonic() - started - clock.waited_s()
        if watch is not None and sample is not None:
            elapsed -= watch.stalled_total() - stalled_before - watch.charged_to(sample)
        return elapsed

    def blocked() -> LoopBlocked | None:
        charged = watch.charged_to(sample) if watch is not None and sample is not None else 0.0
        return LoopBlocked(charged, watch.blocked_at(sample)) if charged else None

    try:
        while True:
            left = timeout - own_s()
            if left <= 0:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
                raise blocked() or asyncio.TimeoutError()
            waited = {task} if escaped is None else {task, escaped}
            await asyncio.wait(waited, timeout=left, return_when=asyncio.FIRST_COMPLETED)
            waited = None  # its sets not kept: they would hold the task (below)
            if escaped is not None and escaped.done():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
                raise escaped.exception()
            if task.done():
                late = blocked() if own_s() > timeout else None
                if late is not None:
                    raise late
                return task.result()
    except asyncio.CancelledError:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        raise
    finally:
        if task.done():
            coro.close()  # a no-op once run; one cancelled before it started is not "never awaited"
        # what the task raised holds this frame (its traceback) and the task holds it: without this,
        # a cycle kept every failed sample's frames (a refused reply's, issue 45) until a full collection
        task = None


def _json_problem(value: Any) -> str | None:
    """Why ``value`` cannot be written to a JSON line, or None (masking secrets, which only ever
    changes text, changes nothing to that)."""
    try:
        to_json(value)
    except (TypeError, ValueError, RecursionError) as exc:
        return " ".join(str(exc).split())[:200]
    return None


def _raised_at(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    return f" (at {frames[-1].filename}:{frames[-1].lineno} in {frames[-1].name})" if frames else ""


def _empty(answer: Any) -> bool:
    if answer is None:
        return True
    if isinstance(answer, str):
        return not answer.strip()
    return isinstance(answer, (list, dict, tuple)) and not answer


def truncated_empty_answer(answer: Any, ctx: Any, params: GenerationParams) -> str | None:
    """An empty answer from a reply cut at the token limit (``finish_reason: length``; Anthropic's
    ``max_tokens``, an ``incomplete`` Responses reply) is not an answer: a reasoning model spent the
    budget thinking. The sample fails as ``truncated`` (counted, not scored), with what it spent. Only
    where that last reply itself showed nothing (no text, no tool call): a strategy whose answer is
    empty after a reply that said something cut short (a classifier's "Yes, bec", a tool call written
    as text) answered, and is scored as it answered."""
    last = ctx.finish_reasons[-1] if ctx.finish_reasons else None
    if last != "length" or not _empty(answer):
        return None
    reply = ctx.last_reply or {}
    if not _empty(reply.get("content")) or reply.get("tool_calls"):
        return None
    reasoning = ctx.usage.reasoning_tokens
    spent = f" after {reasoning} reasoning tokens" if reasoning else ""
    return (
        f"no answer: the reply stopped at the token limit (--max-tokens {params.max_tokens}){spent} with its text "
        "empty; raise --max-tokens (a reasoning model spends it thinking) or lower --reasoning-effort"
    )


def refused_answer(result: Any, reply: dict[str, Any] | None) -> bool:
    """The strategy says it answered, but its answer is the model declining: the last reply was a
    refusal (OpenAI ``message.refusal``, Anthropic ``stop_reason: refusal``: ``ModelResponse.refusal``)
    and the answer is empty or came from that reply. Recorded as outcome ``refused``: kept and scored
    (as wrong, the metrics' rule), and counted apart from the answers."""
    if result.outcome != "answered" or not reply or not reply.get("refusal"):
        return False
    if _empty(result.answer):
        return True
    said = f"{reply.get('content') or ''}\n{reply['refusal']}"
    return isinstance(result.answer, str) and result.answer.strip() in said


class SampleAttempts:
    """Attempts samples for one invocation; tallies them in ``invocation`` (recorded in results.json)."""

    def __init__(
        self,
        agent: Agent,
        backend: ModelBackend,
        *,
        pricing: Pricing,
        budget: Budget | None,
        run_dir: Path,
        sample_timeout: float,
        epochs: int,
        max_answer_chars: int,
        invocation: dict[str, Any],
        watch: LoopWatch | None = None,
    ):
        self.agent, self.backend, self.pricing, self.budget = agent, backend, pricing, budget
        self.watch = watch
        ref = agent.plugin.get("ref") if agent.plugin.get("source") not in (None, "builtin") else None
        self.who = f"agent {ref or agent.name}"  # a plugin by its reference: FILE.py:NAME
        self.run_dir, self.sample_timeout, self.epochs = run_dir, sample_timeout, epochs
        self.max_answer_chars = max_answer_chars
        self.invocation = invocation
        self.died: ProcessDiedError | None = None  # the model's process died: the run stops

    async def attempt(self, sample: Sample, cache: ResponseCache | None, epoch: int, params: GenerationParams) -> dict[str, Any]:
        """Solve ``sample`` once: its row (``status`` ok or error). A ModelError (a backend that fails
        every sample) propagates; a process that died is this sample's failure and is kept in ``died``."""
        ctx = AgentContext(self.backend, params, cache, self.budget, self.pricing)
        started = time.monotonic()
        started_at = now_iso()
        self.invocation["attempted"] += 1
        error_type = error = None
        missing_titles = None
        result = None
        clock = WaitClock()
        key = work_key(sample.id, epoch)
        try:
            result = await within_own_time(self.agent.solve(sample, ctx), self.sample_timeout, clock, self.watch, key)
            error = self._not_a_result(result)
            if error is not None:
                error_type = "plugin_error"
            else:
                error = truncated_empty_answer(result.answer, ctx, params)
                if error is not None:
                    error_type = "truncated"
        except LoopBlocked as exc:
            error_type, error = "timeout", (
                f"no answer within {self.sample_timeout:g} s: it held the event loop {exc.seconds:.1f} s at {exc.where} "
                f"({self.who} blocks instead of awaiting)"
            )
        except asyncio.TimeoutError:
            error_type, error = "timeout", f"no answer within {self.sample_timeout:g} s"
        except ContextOverflowError as exc:
            error_type, error = "context_overflow", str(exc)
        except MissingEvidenceError as exc:
            error_type, error = "missing_evidence", str(exc)
            missing_titles = exc.titles
        except TransientModelError as exc:
            # not retried (x-should-retry: false, a Retry-After past --retry-max-wait): it says why
            said = "gave up after retries" if getattr(exc, "should_retry", True) else "not retried"
            error_type, error = "model_unavailable", f"{said}: {exc}"
        except BudgetExhausted as exc:
            error_type, error = "budget_exhausted", str(exc)
        except SearchServiceUnavailable as exc:  # --search-url down: this sample's, retried by a rerun
            error_type, error = "search_unavailable", str(exc)
        except SearchServiceChanged:
            raise  # the service now serves another snapshot: every later search would too; the run stops
        except SampleFailure as exc:  # a strategy's own verdict (no_evidence_packed): recorded, not answered
            error_type, error = exc.error_type, str(exc)
        except ProcessDiedError as exc:  # recorded as this sample's failure, then the run stops
            exc.sample_id = work_key(sample.id, epoch)
            error_type, error = "process_died", str(exc.describe())
            self.died = exc
        except ModelError:
            raise  # a broken backend (bad key, server gone) fails every sample: stop the run
        except PluginExit as exc:
            error_type, error = "plugin_error", f"{self.who}: {exc} in solve (a strategy cannot end the run)"
        except StrategyEscape as exc:
            error_type, error = "plugin_error", f"{self.who}: {exc}"
        except Exception as exc:  # a bug or malformed response must not sink the whole run
            error_type, error = "exception", f"{type(exc).__name__}: {exc}{_raised_at(exc)}"
            self._log_traceback(sample)
        except asyncio.CancelledError as exc:
            if _being_cancelled():  # the run is stopping (Ctrl-C, SIGTERM, another sample's fatal error)
                raise
            error_type, error = "plugin_error", f"{self.who}: solve raised CancelledError{_raised_at(exc)}"
        except KeyboardInterrupt:
            raise  # a real Ctrl-C interrupts (rc 130), whoever's code it landed in
        except BaseException as exc:  # noqa: BLE001 - a strategy's own BaseException is its sample's failure
            error_type, error = "plugin_error", f"{self.who}: solve raised {type(exc).__name__}: {exc}{_raised_at(exc)}"
            self._log_traceback(sample)
        finally:
            self.invocation["model_calls"] += ctx.model_calls
            self.invocation["cache_hits"] += ctx.cache_hits
        common = {
            "id": sample.id,
            **({"epoch": epoch} if self.epochs > 1 or epoch > 1 else {}),
            "invocation": self.invocation["number"],
            "started_at": started_at,
            "finished_at": now_iso(),
            "latency_s": round(time.monotonic() - started, 3),
            # of which queued for a turn (a request slot, the one local model): not on the sample's clock
            "waited_s": round(clock.waited_s(), 3),
            "model_calls": ctx.model_calls,
            "cache_hits": ctx.cache_hits,
            **({"servers": ctx.servers} if ctx.servers else {}),
            "usage": ctx.usage.model_dump(),
            # list price of the sample's tokens, and money actually spent (requests sent); None: unpriced
            # (each reply priced as it was recorded: a price may change with each request's prompt size)
            "cost_usd": ctx.cost_usd,
            "spent_usd": ctx.spent_usd,
        }
        if error_type is None:
            last_finish = ctx.finish_reasons[-1] if ctx.finish_reasons else None
            oversized = isinstance(result.answer, str) and len(result.answer) > self.max_answer_chars
            record = {
                **common,
                "status": "ok",
                "question": sample.question,
                "answer": result.answer,
                "outcome": "refused" if refused_answer(result, ctx.last_reply) else result.outcome,
                "finish_reason": last_finish,
                # The answer hit max_tokens: kept, but flagged rather than passed off as complete.
                "truncated_output": last_finish == "length",
                # longer than scoring reads (ScoringOptions.max_answer_chars): kept whole, scored on its start
                "oversized_answer": oversized,
                # written once: the transcript's final assistant message points to the answer
                "messages": answer_stored_once(result.messages, result.answer) if oversized else result.messages,
                "extra": result.extra,
            }
            # what the strategy returned must be written whole, or the sample fails: never half a row
            fields = ("answer", "outcome", "extra", "messages")
            problem = _json_problem([record[field] for field in fields]) and next(  # each apart: only to name it
                (f"{field}: {why}" for field in fields if (why := _json_problem(record[field]))), None
            )
            if problem is None:
                self.invocation["finished"] += 1
                return record
            error_type, error = "plugin_error", f"{self.who}: its result cannot be written as JSON ({problem})"
        self.invocation["failed"] += 1
        record = {**common, "status": "error", "error_type": error_type, "error": redact(error)}
        if missing_titles is not None:
            record["missing_titles"] = missing_titles
        # the transcript up to the failure: the last request and the reply it got (if any), and
        # what the strategy recorded so far (its searches); secrets masked as in every record
        record["messages"] = ctx.transcript
        if ctx.partial:
            record["extra"] = dict(ctx.partial)
        for field in ("extra", "messages"):  # the strategy's own, so perhaps not JSON: dropped, said
            why = _json_problem(record.get(field))
            if why is not None:
                record[field] = {"unwritable": why} if field == "extra" else []
        return record

    def _not_a_result(self, result: Any) -> str | None:
        if not isinstance(result, SampleResult):
            return f"{self.who}: solve returned {type(result).__name__}, not a SampleResult"
        for field, kind in (("messages", list), ("extra", dict), ("outcome", str)):
            value = getattr(result, field)
            if not isinstance(value, kind):
                return f"{self.who}: its SampleResult.{field} is {type(value).__name__}, not {kind.__name__}"
        return None

    def _log_traceback(self, sample: Sample) -> None:
        # a log: a lone surrogate in a message is written as its escape (harness.text)
        with open(self.run_dir / ERROR_LOG, "a", encoding="utf-8", errors=LOG_ERRORS) as f:
            f.write(f"--- {now_iso()} sample {sample.id}\n{redact(traceback.format_exc())}\n")


def _being_cancelled() -> bool:
    task = asyncio.current_task()
    return task is None or task.cancelling() > 0

