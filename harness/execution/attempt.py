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
from harness.records import ERROR_LOG, answer_stored_once, work_key
from harness.redact import redact
from harness.strategy import Agent, AgentContext


async def within_own_time(coro, timeout: float, clock: WaitClock):
    """``coro``'s result, or TimeoutError once it has run ``timeout`` seconds of its own: time its
    requests spent queued for a turn (counted on ``clock``) extends the deadline."""
    token = WAIT_CLOCK.set(clock)
    try:
        task = asyncio.ensure_future(coro)  # copies the context: the sample's requests see ``clock``
    finally:
        WAIT_CLOCK.reset(token)
    started = time.monotonic()
    try:
        while True:
            left = timeout - (time.monotonic() - started - clock.waited_s())
            if left <= 0:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
                raise asyncio.TimeoutError
            done, _ = await asyncio.wait({task}, timeout=left)
            if done:
                return task.result()
    except asyncio.CancelledError:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        raise




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
    ):
        self.agent, self.backend, self.pricing, self.budget = agent, backend, pricing, budget
        self.run_dir, self.sample_timeout, self.epochs = run_dir, sample_timeout, epochs
        self.max_answer_chars = max_answer_chars
        self.invocation = invocation
        self.died: ProcessDiedError | None = None  # the model's process died: the run stops

    async def attempt(self, sample: Sample, cache: ResponseCache | None, epoch: int, params: GenerationParams) -> dict[str, Any]:
        """Solve ``sample`` once: its row (``status`` ok or error). A ModelError (a backend that fails
        every sample) propagates; a process that died is this sample's failure and is kept in ``died``."""
        ctx = AgentContext(self.backend, params, cache, self.budget)
        started = time.monotonic()
        started_at = now_iso()
        self.invocation["attempted"] += 1
        error_type = error = None
        missing_titles = None
        result = None
        clock = WaitClock()
        try:
            result = await within_own_time(self.agent.solve(sample, ctx), self.sample_timeout, clock)
        except asyncio.TimeoutError:
            error_type, error = "timeout", f"no answer within {self.sample_timeout:g} s"
        except ContextOverflowError as exc:
            error_type, error = "context_overflow", str(exc)
        except MissingEvidenceError as exc:
            error_type, error = "missing_evidence", str(exc)
            missing_titles = exc.titles
        except TransientModelError as exc:
            error_type, error = "model_unavailable", f"gave up after retries: {exc}"
        except BudgetExhausted as exc:
            error_type, error = "budget_exhausted", str(exc)
        except SampleFailure as exc:  # a strategy's own verdict (no_evidence_packed): recorded, not answered
            error_type, error = exc.error_type, str(exc)
        except ProcessDiedError as exc:  # recorded as this sample's failure, then the run stops
            exc.sample_id = work_key(sample.id, epoch)
            error_type, error = "process_died", str(exc.describe())
            self.died = exc
        except ModelError:
            raise  # a broken backend (bad key, server gone) fails every sample: stop the run
        except Exception as exc:  # a bug or malformed response must not sink the whole run
            error_type, error = "exception", f"{type(exc).__name__}: {exc}"
            with open(self.run_dir / ERROR_LOG, "a", encoding="utf-8") as f:
                f.write(f"--- {now_iso()} sample {sample.id}\n{redact(traceback.format_exc())}\n")
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
            "cost_usd": self.pricing.usage_cost(ctx.usage),
            "spent_usd": self.pricing.usage_cost(ctx.sent_usage),
        }
        if error_type is not None:
            self.invocation["failed"] += 1
            record = {**common, "status": "error", "error_type": error_type, "error": redact(error)}
            if missing_titles is not None:
                record["missing_titles"] = missing_titles
            # the transcript up to the failure: the last request and the reply it got (if any), and
            # what the strategy recorded so far (its searches); secrets masked as in every record
            record["messages"] = ctx.transcript
            if ctx.partial:
                record["extra"] = dict(ctx.partial)
            return record
        self.invocation["finished"] += 1
        last_finish = ctx.finish_reasons[-1] if ctx.finish_reasons else None
        oversized = isinstance(result.answer, str) and len(result.answer) > self.max_answer_chars
        return {
            **common,
            "status": "ok",
            "question": sample.question,
            "answer": result.answer,
            "outcome": result.outcome,
            "finish_reason": last_finish,
            # The answer hit max_tokens: kept, but flagged rather than passed off as complete.
            "truncated_output": last_finish == "length",
            # longer than scoring reads (ScoringOptions.max_answer_chars): kept whole, scored on its start
            "oversized_answer": oversized,
            # written once: the transcript's final assistant message points to the answer
            "messages": answer_stored_once(result.messages, result.answer) if oversized else result.messages,
            "extra": result.extra,
        }

