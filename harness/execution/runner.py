"""The run loop: select samples, skip those already finished, solve the rest concurrently,
append each finished sample as it finishes, then score and write results.json.

Re-running the same command continues the run: the run directory is keyed by a hash of the
configuration, finished samples are never re-run or duplicated, failed ones are tried again.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import math
import shutil
import subprocess
import sys
import threading
import time
import traceback
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from harness.models.cache import ResponseCache
from harness.execution.config import RunConfig
from harness._version import __version__
from harness.execution.cost import Budget, BudgetExhausted, load_price_table, pricing_for, run_cost, spent_in_records
from harness.datasets import Dataset, Sample, load_dataset
from harness.errors import (
    ConfigError,
    HarnessError,
    ContextOverflowError,
    MissingEvidenceError,
    ModelError,
    ProcessDiedError,
    SampleFailure,
    TransientModelError,
)
from harness.models import create_backend
from harness.models.base import WAIT_CLOCK, WaitClock
from harness.models.concurrency import AdaptiveLimit
from harness.records import (
    CONFIG_FILE,
    ERROR_LOG,
    FAILURES_FILE,
    LOG_DIR,
    RESULTS_FILE,
    SAMPLES_FILE,
    JsonlAppender,
    answer_stored_once,
    load_finished,
    record_epoch,
    work_key,
    iter_jsonl,
    read_json,
    slug,
    write_json_atomic,
)
from harness.redact import redact
from harness.execution.lock import RunLock
from harness.scoring.results import RESULTS_FORMAT
from harness.execution.scoring import score_records
from harness.strategy import AgentContext, create_agent, resolve_agent

log = logging.getLogger(__name__)



class RunStopped(HarnessError):
    """The run stopped because a process it depends on died; one line says what, and what is kept."""

    exit_code = ProcessDiedError.exit_code

    def __init__(self, died: ProcessDiedError, run_dir: Path, finished: int, total: int):
        self.died = died
        super().__init__(
            f"{died.describe()}. {finished} of {total} samples are finished and kept in {run_dir}; run the same "
            "command again to resume (a crash that repeats: see README, Local models and crashes)"
        )


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def git_commit() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=5,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    dirty = subprocess.run(
        ["git", "status", "--porcelain"], cwd=Path(__file__).resolve().parent, capture_output=True, text=True
    )
    return out.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


async def _within_own_time(coro, timeout: float, clock: WaitClock):
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


def select_samples(dataset: Dataset, config: RunConfig) -> list[Sample]:
    """sample ids -> --sample-filter -> --shuffle / --stratify-by -> --limit (``harness.execution.selection``)."""
    from harness.execution.selection import select_samples as select

    return select(dataset, config)


def check_sample_ids(dataset: Dataset, data_path: str | None) -> None:
    """Ids key resume and scoring: a missing or repeated id would merge or drop samples."""
    where = data_path or dataset.info.spec()
    seen: set[str] = set()
    for n, sample in enumerate(dataset.samples, 1):
        if not isinstance(sample.id, str) or not sample.id.strip():
            raise ConfigError(f"{where}: sample {n} has no id")
        if sample.id in seen:
            raise ConfigError(f"{where}: duplicate sample id {sample.id!r} (sample {n})")
        seen.add(sample.id)


class Run:
    """One invocation of ``harness run`` over a run directory."""

    def __init__(self, config: RunConfig, *, show_progress: bool = True):
        # The setting a strategy runs in is resolved first (a strategy never runs in a setting it
        # does not implement), and recorded resolved.
        _, setting = resolve_agent(config.agent, config.setting)
        resolved: dict[str, Any] = {"setting": setting}
        if config.shuffle and config.shuffle_seed is None:  # recorded as used: --seed's value
            from harness.execution.selection import shuffle_seed

            resolved["shuffle_seed"] = shuffle_seed(config)
        self.config = config = config.model_copy(update=resolved)
        self.show_progress = show_progress
        self.dataset = load_dataset(config.dataset, config.data_path)
        self.samples = select_samples(self.dataset, config)
        self.agent = create_agent(config)
        # Constructed now (cheap: no model load, no server) so a bad model name or a missing
        # API key is reported before anything is written.
        self.backend = create_backend(config.model, config.backend)
        self.snapshot = self._open_snapshot()
        info = self.dataset.info
        self.hash_extra = {
            "dataset_resolved": info.spec(),
            "dataset_sha256": info.sha256,
            "agent_identity": self.agent.identity(),
        }
        # plugins' identities (file sha256, package version): a changed plugin starts a new run
        for kind, plugin in (("backend", self.backend.plugin), ("dataset", info.plugin)):
            identity = {k: v for k, v in plugin.items() if k in ("package", "version", "sha256")}
            if identity:
                self.hash_extra[f"{kind}_plugin"] = identity
        if self.snapshot is not None:
            self.hash_extra["snapshot_content_hash"] = snapshot_hash(self.snapshot)
        if config.epochs > 1 and config.generation.temperature == 0:
            print(
                f"--epochs {config.epochs} at temperature 0: greedy decoding repeats its answers unless the "
                "backend follows the seed (each epoch's is --seed + epoch - 1); set --temperature above 0",
                file=sys.stderr,
            )
        self.config_hash = config.config_hash(self.hash_extra)
        self.run_id = self.config_hash[:12]
        if config.out:
            self.run_dir = Path(config.out)
        else:
            name = f"{slug(info.name)}-{info.split}-{info.version}-{slug(config.model)}-{config.setting}-{self.run_id}"
            self.run_dir = Path("results") / name
        self.price_table = load_price_table(config.price_table)
        self.pricing = pricing_for(config.model, self.price_table)
        if config.max_cost is not None and not self.pricing.priced:
            raise ConfigError(f"--max-cost needs a price for {config.model}: {self.pricing.reason}")
        self.budget: Budget | None = None
        self.invocation: dict[str, Any] = {}
        self.scoring_options = config.scoring_options()
        self.max_answer_chars = self.scoring_options.max_answer_chars
        self.metric_names = list(config.metrics or self.dataset.metrics)
        self.scorer = None  # StreamingScorer while samples are being solved
        self._died: ProcessDiedError | None = None  # the model's process died: the run stops
        self._preflight()

    # checks before anything is spent ------------------------------------------------
    def _preflight(self) -> None:
        """Everything checkable without a model: a doomed run exits 2 before the first request."""
        check_sample_ids(self.dataset, self.config.data_path)
        from harness.scoring.metrics import get_metric

        for name in self.config.metrics or []:
            get_metric(name)  # unknown names: one line listing the known ones
        self.agent.check_template(self.samples)
        if self.config.cache:
            ResponseCache(self.config.cache_path).close()

    def _preflight_started_backend(self) -> None:
        """Checks that need the backend's facts (an attached server's context size), before any sample."""
        if self.agent.needs_context_size and not self.backend.context_size():
            raise ConfigError(
                f"--setting {self.config.setting} (agent {self.agent.name}) packs pages into the context, but the "
                f"context size of {self.config.model} is unknown: pass --context-size N"
            )
        self.agent.check_backend(self.backend)  # e.g. a context the evidence reserve fills
        warning = self.agent.needs_context_size and self.backend.context_size_warning()
        if warning:
            print(warning, file=sys.stderr)

    def _server_slots_note(self) -> dict[str, Any]:
        """A server that runs fewer requests at once than --max-connections: said once, and recorded."""
        slots = self.backend.server_slots()
        if slots is None or self.config.max_connections <= slots:
            return {}
        print(
            f"the server runs {slots} request{'s' if slots != 1 else ''} at a time (--max-connections {self.config.max_connections}: "
            "the rest wait in its queue)",
            file=sys.stderr,
        )
        return {"requests_at_a_time": slots}

    def _samples_at_a_time(self) -> int:
        return 1 if self.backend.one_request_at_a_time else self.config.max_connections

    def _one_at_a_time_note(self) -> dict[str, Any]:
        """A one-request-at-a-time model (one llama.cpp model): samples one after another, said once when --max-connections asked for more."""
        if not self.backend.one_request_at_a_time:
            return {}
        if self.config.max_connections > 1:
            print(
                f"{self.config.model} runs one request at a time (one llama.cpp model): samples run one after another "
                f"(--max-connections {self.config.max_connections} does not apply)",
                file=sys.stderr,
            )
        return {"samples_at_a_time": 1}

    def _open_snapshot(self):
        if not self.config.snapshot:
            if self.agent.needs_snapshot:
                raise ConfigError(
                    f"--setting {self.config.setting} (agent {self.agent.name}) reads Wikipedia pages: pass "
                    "--snapshot SNAP.db (make one with: harness snapshot build --from SOURCE --out SNAP.db)"
                )
            return None
        from wiki_snapshot import Snapshot

        return Snapshot.open(self.config.snapshot)

    # run directory ---------------------------------------------------------------
    def _check_run_dir(self) -> dict[str, Any] | None:
        """Refuse a directory that holds another configuration's run; return its old results."""
        cfg_path = self.run_dir / CONFIG_FILE
        if cfg_path.exists():
            old = read_json(cfg_path)
            if old.get("config_hash") != self.config_hash:
                raise ConfigError(
                    f"{self.run_dir} holds a run with a different configuration "
                    f"(run {str(old.get('config_hash'))[:12]}, this one {self.run_id}); choose another --out"
                )
        elif (self.run_dir / SAMPLES_FILE).exists():
            raise ConfigError(f"{self.run_dir} has samples but no {CONFIG_FILE}; choose another --out")
        results = self.run_dir / RESULTS_FILE
        return read_json(results) if results.exists() else None

    def _claim_run_dir(self) -> None:
        cfg_path = self.run_dir / CONFIG_FILE
        if not cfg_path.exists():
            write_json_atomic(
                cfg_path,
                {"config_hash": self.config_hash, "config": self.config.model_dump(mode="json"), **self.hash_extra},
            )

    # the loop --------------------------------------------------------------------
    async def execute(self) -> dict[str, Any]:
        # One writer per run directory, held until the results are written (the kernel drops it on kill -9).
        lock = RunLock(self.run_dir, purpose="run").acquire()
        died = False
        try:
            return await self._execute_locked()
        except RunStopped:
            died = True
            raise
        finally:
            began = (self.run_dir / CONFIG_FILE).exists()
            if not began and not died:  # a run that failed before it began leaves nothing behind
                shutil.rmtree(self.run_dir / LOG_DIR, ignore_errors=True)
            lock.release(remove_if_empty=not began)

    async def _execute_locked(self) -> dict[str, Any]:
        previous = self._check_run_dir()
        finished = load_finished(self.run_dir)
        # epoch-major: an interrupted run has whole epochs done first
        todo = [(s, e) for e in self._epochs() for s in self.samples if work_key(s.id, e) not in finished]
        if self.config.only_failed:
            todo = self._only_failed(todo, previous)
        if self.config.max_cost is not None:  # the budget covers every invocation of the run
            self.budget = Budget(self.config.max_cost, self.pricing, spent_in_records(self._attempt_records()))
        invocations = list((previous or {}).get("invocations", []))
        self.invocation = {
            "number": len(invocations) + 1,
            "started_at": now_iso(),
            "already_finished": len(self.samples) * self.config.epochs - len(todo),
            "attempted": 0,
            "finished": 0,
            "failed": 0,
            "model_calls": 0,
            "cache_hits": 0,
            "attempted_ids": [work_key(s.id, e) for s, e in todo],
        }
        status = "complete"
        model_info = (previous or {}).get("model")
        failures: dict[str, dict[str, Any]] = {}
        died: ProcessDiedError | None = None
        self.backend.log_dir = self.run_dir / LOG_DIR  # a worker's or server's log, kept with the run
        try:
            if todo:
                await self.backend.start()
                self._preflight_started_backend()
                model_info = self.backend.describe()
                if self.backend.plugin.get("source") not in (None, "builtin"):
                    model_info = {**model_info, "plugin": self.backend.plugin}
                model_info = {**model_info, **self._server_slots_note(), **self._one_at_a_time_note()}
                self.agent.prepare(self.backend, self.snapshot)
            self._claim_run_dir()
            print(
                f"run {self.run_id}: {len(todo)} of {len(self.samples) * self.config.epochs} samples to do"
                + (f" ({len(self.samples)} questions x {self.config.epochs} epochs)" if self.config.epochs > 1 else "")
                + f" -> {self.run_dir}",
                file=sys.stderr,
            )
            if todo:
                await self._solve_all(todo, finished, failures)
        except (asyncio.CancelledError, KeyboardInterrupt):
            status = "interrupted"
            raise
        except ProcessDiedError as exc:  # said after the rows and results.json are safe (below)
            status, died = "error", exc
            self.invocation["error"] = str(exc)
        except BaseException:
            status = "error"
            raise
        finally:
            if todo and model_info is not None:
                model_info = {**model_info, **self.backend.usage_facts()}  # per-server counts
            await self.backend.close()
            # A run that failed before it began (no config.json yet) leaves no files behind.
            if (self.run_dir / CONFIG_FILE).exists():
                if status == "complete" and failures:
                    status = "incomplete"
                if status in ("complete", "incomplete") and self.budget is not None and self.budget.exhausted:
                    status = "budget_exhausted"
                self.invocation["ended_at"] = now_iso()
                self.invocation["status"] = status
                invocations.append(self.invocation)
                results = self._results(finished, failures, status, model_info, invocations, previous)
                write_json_atomic(self.run_dir / RESULTS_FILE, results)
        if died is not None:
            raise RunStopped(died, self.run_dir, len(finished), len(self.samples) * self.config.epochs)
        return results

    def _only_failed(self, todo, previous) -> list:
        """--only-failed: of the samples to do, those with a failed attempt in this run directory (a
        sample finished since is not in ``todo``); none failed: said in one line, nothing to do."""
        if previous is None and not (self.run_dir / CONFIG_FILE).exists():
            raise ConfigError(
                f"--only-failed: {self.run_dir} holds no run yet (run {self.run_id}: give the options of the run "
                "to retry, or its --out)"
            )
        failed = {
            work_key(r["id"], record_epoch(r))
            for r in self._attempt_records()
            if r.get("status") == "error" and isinstance(r.get("id"), str)
        }
        kept = [(s, e) for s, e in todo if work_key(s.id, e) in failed]
        if not kept:
            print(f"--only-failed: no failed sample to retry in {self.run_dir}", file=sys.stderr)
        elif len(kept) < len(todo):
            print(
                f"--only-failed: retrying {len(kept)} failed sample(s); {len(todo) - len(kept)} never tried "
                "are left pending",
                file=sys.stderr,
            )
        return kept

    async def _solve_all(self, todo, finished, failures) -> None:
        cache = None if not self.config.cache else ResponseCache(self.config.cache_path)
        samples_out = JsonlAppender(self.run_dir / SAMPLES_FILE)
        failures_out = JsonlAppender(self.run_dir / FAILURES_FILE)
        semaphore = asyncio.Semaphore(self._samples_at_a_time())
        # requests in flight: --max-connections, fewer while the provider answers 429
        limiter = AdaptiveLimit(self.config.max_connections)
        self.backend.limiter = limiter
        progress = _Progress(len(todo), enabled=self.show_progress)
        if self.dataset.info.has_answers and self._stream_scoring(len(todo)):
            from harness.scoring.streaming import StreamingScorer

            self.scorer = StreamingScorer(self.metric_names, self.scoring_options)
        prefetched = False

        async def one(sample: Sample, epoch: int) -> None:
            nonlocal prefetched
            async with semaphore:
                if self.budget is not None and self.budget.exhausted:
                    return  # over budget: not started, left pending for a rerun with a higher --max-cost
                record = await self._solve_one(sample, cache, epoch)
            if record["status"] == "ok" and self.scorer is not None and self.scorer.active:
                # scored in the worker, outside the semaphore: the next request is already on its way
                scores = await self.scorer.score(sample, record["answer"])
                if scores is not None:
                    record["scores"] = scores
                    record["scored_with"] = self.scorer.fingerprint
            if not prefetched and self.scorer is not None:
                # the error bars' numpy, imported while the run goes (after its first request, so
                # that is not delayed) rather than after the last answer
                prefetched = True
                threading.Thread(target=importlib.import_module, args=("harness.scoring.stats",), daemon=True).start()
            if record["status"] == "ok":
                samples_out.append(record)
                finished[work_key(sample.id, epoch)] = record
                progress.advance(ok=True, scores=record.get("scores"))
            else:
                failures_out.append(record)
                failures[work_key(sample.id, epoch)] = record
                progress.advance(ok=False)
            if self._died is not None:
                raise self._died

        try:
            with progress:
                tasks = [asyncio.create_task(one(s, e)) for s, e in todo]
                try:
                    await asyncio.gather(*tasks)
                except BaseException:
                    for t in tasks:
                        t.cancel()
                    await asyncio.gather(*tasks, return_exceptions=True)
                    raise
        finally:
            self.backend.limiter = None
            self.invocation["concurrency"] = limiter.facts()
            samples_out.close()
            failures_out.close()
            if cache is not None:
                cache.close()
            if self.scorer is not None:
                self.scorer.close()

    STREAM_FROM = 64  # samples to do: below, starting the scoring worker costs more than it saves

    def _stream_scoring(self, n_todo: int) -> bool:
        mode = self.config.stream_scoring
        return mode == "on" or (mode == "auto" and n_todo >= self.STREAM_FROM)

    def _epochs(self) -> range:
        return range(1, self.config.epochs + 1)

    def _epoch_params(self, epoch: int):
        """Epoch E samples with seed --seed + E - 1 (epoch 1 is the run without --epochs)."""
        params = self.config.generation
        if epoch == 1 or params.seed is None:
            return params
        return params.model_copy(update={"seed": (params.seed + epoch - 1) % 2**32})

    async def _solve_one(self, sample: Sample, cache: ResponseCache | None, epoch: int = 1) -> dict[str, Any]:
        ctx = AgentContext(self.backend, self._epoch_params(epoch), cache, self.budget)
        started = time.monotonic()
        started_at = now_iso()
        self.invocation["attempted"] += 1
        error_type = error = None
        missing_titles = None
        result = None
        clock = WaitClock()
        try:
            result = await _within_own_time(self.agent.solve(sample, ctx), self.config.sample_timeout, clock)
        except asyncio.TimeoutError:
            error_type, error = "timeout", f"no answer within {self.config.sample_timeout:g} s"
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
            self._died = exc
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
            **({"epoch": epoch} if self.config.epochs > 1 or epoch > 1 else {}),
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
            "finish_reason": last_finish,
            # The answer hit max_tokens: kept, but flagged rather than passed off as complete.
            "truncated_output": last_finish == "length",
            # longer than scoring reads (ScoringOptions.max_answer_chars): kept whole, scored on its start
            "oversized_answer": oversized,
            # written once: the transcript's final assistant message points to the answer
            "messages": answer_stored_once(result.messages, result.answer) if oversized else result.messages,
            "extra": result.extra,
        }

    def _attempt_records(self):
        """Every attempt recorded so far: finished samples and failed attempts."""
        for name in (SAMPLES_FILE, FAILURES_FILE):
            path = self.run_dir / name
            if path.exists():
                for _, record in iter_jsonl(path, strict=False):
                    yield record

    # results ---------------------------------------------------------------------
    def _results(self, finished, failures, status, model_info, invocations, previous) -> dict[str, Any]:
        selected = self.samples
        keys = [work_key(s.id, e) for e in self._epochs() for s in selected]
        done = [finished[k] for k in keys if k in finished]
        failed_now = [k for k in keys if k in failures and k not in finished]
        scores = None
        scoring_note = None
        if self.dataset.info.has_answers:  # the same path as `harness score RUN_DIR` (score_run)
            from harness.scoring.streaming import precomputed_from

            info = self.scorer.info if self.scorer is not None else {}
            if self.config.epochs == 1:
                precomputed = precomputed_from(done, self.metric_names, self.scoring_options, info)
            else:  # each epoch's streamed values apart
                precomputed = {
                    e: precomputed_from(
                        [r for r in done if record_epoch(r) == e], self.metric_names, self.scoring_options, info
                    )
                    for e in self._epochs()
                }
            scores = score_records(
                self.dataset,
                selected,
                done,
                self.config.metrics,
                self.scoring_options,
                precomputed=precomputed,
                epochs=self.config.epochs,
                reducer=self.config.epoch_reducer,
            )
        else:
            scoring_note = f"{self.dataset.info.spec()} has no reference answers; export the generations to score them"
        tokens_prompt = sum(r["usage"]["prompt_tokens"] for r in done)
        tokens_completion = sum(r["usage"]["completion_tokens"] for r in done)
        info = self.dataset.info
        return {
            "results_format": RESULTS_FORMAT,
            "run_id": self.run_id,
            "config_hash": self.config_hash,
            "status": status,
            "harness": {"version": __version__, "git_commit": git_commit(), "python": sys.version.split()[0]},
            "dataset": {
                "name": info.name,
                "split": info.split,
                "version": info.version,
                "spec": info.spec(),
                "path": info.path,
                "sha256": info.sha256,
                "license": info.license,
                **({"plugin": info.plugin} if info.plugin.get("source") not in (None, "builtin") else {}),
                "n_total": len(self.dataset.samples),
                "n_selected": len(selected),
            },
            "setting": self.config.setting,
            "agent": self.agent.describe(),
            "model": model_info,
            "generation": self.config.generation.model_dump(),
            "config": self.config.model_dump(mode="json"),
            "started_at": (previous or {}).get("started_at") or invocations[0]["started_at"],
            "ended_at": now_iso(),
            "counts": {
                # with --epochs, samples are question x epoch
                "selected": len(keys),
                **({"questions": len(selected), "epochs": self.config.epochs} if self.config.epochs > 1 else {}),
                "finished": len(done),
                "failed": len(failed_now),
                "pending": len(keys) - len(done) - len(failed_now),
                "truncated_output": sum(1 for r in done if r.get("truncated_output")),
            },
            "tokens": {
                "prompt": tokens_prompt,
                "completion": tokens_completion,
                "total": tokens_prompt + tokens_completion,
            },
            "model_calls": sum(r.get("model_calls", 0) for r in done),
            "cost": run_cost(
                self.pricing,
                self.price_table,
                done,
                list(self._attempt_records()),
                scores,
                self.budget,
                self.config.max_cost,
            ),
            "stopped_on_budget": bool(self.budget is not None and self.budget.exhausted),
            "failures": {
                sid: {"type": failures[sid]["error_type"], "error": failures[sid]["error"]} for sid in failed_now
            },
            "sample_ids": [s.id for s in selected],
            "outcomes": _outcomes(done),
            "retrieval": _retrieval_summary(done),
            "snapshot": _snapshot_info(self.snapshot),
            "invocations": invocations,
            "scores": scores,
            "scoring_note": scoring_note,
            "files": {"samples": SAMPLES_FILE, "failures": FAILURES_FILE, "config": CONFIG_FILE},
        }


def snapshot_hash(snapshot) -> str:
    meta = snapshot.metadata
    return str(meta.get("content_hash") or meta.get("content_sha256") or meta.get("hash"))


def _snapshot_info(snapshot) -> dict[str, Any] | None:
    if snapshot is None:
        return None
    return {
        "path": str(getattr(snapshot, "path", "")),
        "content_hash": snapshot_hash(snapshot),
        "metadata": snapshot.metadata,
    }


def _outcomes(done: list[dict[str, Any]]) -> dict[str, int]:
    """How finished samples ended (answered, max_rounds, context_full, ...); closed-book: answered."""
    counts: dict[str, int] = {}
    for r in done:
        outcome = (r.get("extra") or {}).get("outcome", "answered")
        counts[outcome] = counts.get(outcome, 0) + 1
    return counts


def _retrieval_summary(done: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Agent evidence recall (open-book) and packing facts (evidence-provided), averaged."""
    recalls = [
        r["extra"]["evidence_recall"]["recall"]
        for r in done
        if (r.get("extra") or {}).get("evidence_recall", {}).get("recall") is not None
    ]
    packed = [r["extra"]["evidence"] for r in done if (r.get("extra") or {}).get("evidence")]
    looped = [r["extra"] for r in done if "malformed_tool_calls" in (r.get("extra") or {})]
    if not recalls and not packed and not looped:
        return None
    out: dict[str, Any] = {}
    if looped:  # open-book loops: tool calls that could not be read, and those written as text
        out["malformed_tool_calls"] = sum(e["malformed_tool_calls"] for e in looped)
        out["text_tool_calls"] = sum(e.get("text_tool_calls", 0) for e in looped)
    if recalls:
        searches = [len(r["extra"].get("searches", [])) for r in done if "searches" in (r.get("extra") or {})]
        out["evidence_recall_mean"] = sum(recalls) / len(recalls)
        out["evidence_recall_n"] = len(recalls)
        if searches:  # open-book agents search; retrieve-read agents query an index once
            out["searches_mean"] = sum(searches) / len(searches)
    if packed:
        out["evidence_cut"] = sum(1 for p in packed if p["cut"])
        out["chunks_packed_mean"] = sum(p["chunks_packed"] for p in packed) / len(packed)
        out["prompt_tokens_mean"] = sum(p["prompt_tokens"] for p in packed) / len(packed)
    return out


class _Progress:
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
