"""The run loop: select samples, skip those already finished, solve the rest concurrently,
append each finished sample as it finishes, then score and write results.json.

Re-running the same command continues the run: the run directory is keyed by a hash of the
configuration, finished samples are never re-run or duplicated, failed ones are tried again.
"""

from __future__ import annotations

import asyncio
import importlib
import itertools
import logging
import shutil
import sys
import threading
from pathlib import Path
from typing import Any

from harness.datasets import Dataset, Sample, load_dataset
from harness.errors import ConfigError, HarnessError, ProcessDiedError
from harness.execution.attempt import SampleAttempts
from harness.execution.config import RunConfig
from harness.execution.cost import Budget, load_price_table, pricing_for, run_cost, spent_in_records
from harness.execution.lock import RunLock
from harness.execution.paths import directory_run_id, portable, portable_record
from harness.execution.progress import Progress
from harness.execution.record import RunResults, read_results, write_results
from harness.execution.scoring import run_metrics, score_records, stopped_reason
from harness.execution.shard_env import shard_env_line
from harness.scoring.metrics import resolve_metrics
from harness.execution.summary import build_results, now_iso, search_space_info, snapshot_hash, snapshot_text_search
from harness.execution.guard import LoopGuard, leftover_tasks
from harness.execution.watchdog import LoopWatch
from harness.models import create_backend
from harness.models.batch import REQUEST_ORIGIN
from harness.models.cache import ResponseCache
from harness.models.concurrency import AdaptiveLimit
from harness.records import (
    CONFIG_FILE,
    FAILURES_FILE,
    LOG_DIR,
    RESULTS_FILE,
    SAMPLES_FILE,
    HeldRows,
    JsonlAppender,
    iter_jsonl,
    load_finished,
    read_json,
    record_epoch,
    slug,
    work_key,
    write_json_atomic,
)
from harness.strategy import create_agent, resolve_agent

log = logging.getLogger(__name__)

# a row's fields that the end of a run never reads: kept in samples.jsonl / failures.jsonl only
# Fields of a row the end of a run never reads (they are in samples.jsonl): not held until then
ROW_FIELDS_IN_FILES_ONLY = frozenset(
    {
        "messages",
        "question",
        "started_at",
        "finished_at",
        "invocation",
        "latency_s",
        "waited_s",
        "spent_usd",  # summed from the run's files (spent_in_records)
        "finish_reason",
        "oversized_answer",
    }
)



class RunStopped(HarnessError):
    """The run stopped because a process it depends on died; one line says what, and what is kept."""

    exit_code = ProcessDiedError.exit_code

    def __init__(self, died: ProcessDiedError, run_dir: Path, finished: int, total: int):
        self.died = died
        super().__init__(
            f"{died.describe()}. {finished} of {total} samples are finished and kept in {run_dir}; run the same "
            "command again to resume (a crash that repeats: see docs/models.md#local-models-and-crashes)"
        )


def _part(shard: str | None) -> str:
    return f"shard {shard}" if shard else "the whole selection (no --shard)"


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
        self.agent = create_agent(config)
        self.scorer = None  # StreamingScorer while samples are being solved
        # the scoring worker loads its libraries (spaCy: seconds) while the dataset loads
        self._early_scorer = self._start_scorer_early()
        try:
            self._load()
        except BaseException:
            self._close_early_scorer()
            raise

    def _load(self) -> None:
        """The dataset, its selection, the backend, the run key and directory, the preflight checks."""
        config = self.config
        self.dataset = load_dataset(config.dataset, config.data_path)
        self.samples = select_samples(self.dataset, config)
        metrics = run_metrics(  # recorded: `score RUN_DIR` reads it
            config.metrics, self.dataset, self.agent.records, config.confidence, config.citations
        )
        if metrics != config.metrics:
            self.config = config = config.model_copy(update={"metrics": metrics})
        # Constructed now (cheap: no model load, no server) so a bad model name or a missing
        # API key is reported before anything is written.
        self.backend = create_backend(config.model, config.backend)
        # a native tool strategy: vllm/ launches its server with a tool-call parser (refused here without one)
        self.backend.native_tools = self.agent.protocol == "native"
        # the decoding knobs against the model's facts (a thinking budget a model refuses): before any request
        self.backend.check_params(config.generation)
        self.backend.run_params = config.generation
        self.snapshot = self._open_snapshot()
        self._check_search_space()  # before the gold pages are looked up, and before any model is started
        self.search_space = search_space_info(self.snapshot, self.samples)
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
        self.hash_extra.update(self.backend.identity_facts())  # e.g. an endpoint named by OPENAI_BASE_URL
        if self.snapshot is not None:
            self.hash_extra["snapshot_content_hash"] = snapshot_hash(self.snapshot)
            text_search = snapshot_text_search(self.snapshot)  # a tantivy sidecar answers search
            if text_search is not None:
                self.hash_extra["snapshot_text_search"] = text_search
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
            if config.shard:  # the shards of one run share its key, each in a directory of its own
                name += "-shard{}of{}".format(*config.shard.split("/"))
            self.run_dir = Path("results") / name
        self.price_table = load_price_table(config.price_table)
        # whether an unpriced model is free or unknown is its backend's (bills_per_token), not --batch's wrapper's
        billing = getattr(self.backend, "inner", self.backend)
        self.pricing = pricing_for(config.model, self.price_table, batch=config.backend.batch, backend=billing)
        if config.max_cost is not None and not self.pricing.priced:
            raise ConfigError(f"--max-cost needs a price for {config.model}: {self.pricing.reason}")
        self.budget: Budget | None = None
        self.invocation: dict[str, Any] = {}
        self.scoring_options = config.scoring_options()
        self.max_answer_chars = self.scoring_options.max_answer_chars
        self.metric_names = list(config.metrics or self.dataset.metrics)
        # a plugin metric that reads rows may read any field of them: it gets the rows whole
        self.keep_whole_rows = any(
            entry.obj.reads_rows and entry.source != "builtin" for entry in resolve_metrics(self.metric_names).values()
        )
        self.attempts: SampleAttempts | None = None  # this invocation's, while samples are solved
        self._preflight()

    # checks before anything is spent ------------------------------------------------
    def _preflight(self) -> None:
        """Everything checkable without a model: a doomed run exits 2 before the first request."""
        check_sample_ids(self.dataset, self.config.data_path)
        from harness.scoring.metrics import check_metrics

        # names, gold types, a judge or checkpoint, metric options: each metric's declaration
        check_metrics(self.dataset, self.samples, self.metric_names, self.scoring_options)
        if self.config.epochs > 1:  # --epoch-reducer mode on continuous values: refused here
            from harness.scoring.epochs import check_reducer
            from harness.scoring.metrics import resolve_metrics

            fns = {name: entry.obj for name, entry in resolve_metrics(self.metric_names).items()}
            check_reducer(self.config.epoch_reducer, fns, self.config.epochs)
        self.agent.check_dataset(self.dataset, self.samples)
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
        if self.config.backend.batch:  # every open sample's request joins the batch being gathered
            return sys.maxsize
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
        if self.config.search_url:
            return self._open_search_service()
        if self.config.search == "mediawiki":
            return self._open_live_search()
        if not self.config.snapshot:
            if self.agent.needs_snapshot:
                raise ConfigError(
                    f"--setting {self.config.setting} (agent {self.agent.name}) reads Wikipedia pages: pass "
                    "--snapshot SNAP.db (make one with: harness snapshot build --from SOURCE --out SNAP.db)"
                )
            return None
        from harness.wiki_snapshot import open_wiki

        wiki = open_wiki(self.config.snapshot)
        if self.config.setting == "open-book":  # a ZIM without a full-text index says what that changes to search
            for notice in getattr(wiki, "notices", ()):
                print(notice, file=sys.stderr)
        return wiki

    def _check_search_space(self) -> None:
        """A searching strategy over a snapshot of a dataset's evidence (or its contexts) measures a
        search among answers: refused in one line unless --search-space evidence-only says it is
        meant; the option is refused where it is not true."""
        from harness.wiki_snapshot.space import EVIDENCE_ONLY_SCOPES, SCOPE_EVIDENCE, scope_of

        config = self.config
        if self.snapshot is None:
            if config.search_space:
                raise ConfigError(f"--search-space {config.search_space}: no --snapshot to search")
            return
        scope, dataset = scope_of(self.snapshot.metadata)
        evidence_only = scope in EVIDENCE_ONLY_SCOPES
        where = config.snapshot or self.snapshot.path  # a search service: its URL, without credentials
        if config.search_space == "evidence-only" and not evidence_only:
            raise ConfigError(
                f"--search-space evidence-only: {where} is not evidence-only (scope {scope}: all of its "
                "source); leave the option out"
            )
        if evidence_only and self.agent.searches and config.search_space != "evidence-only":
            what = "evidence pages" if scope == SCOPE_EVIDENCE else "context paragraphs"
            raise ConfigError(
                f"{where} holds only the {what} of {dataset}, scope {scope}: --setting {config.setting} "
                f"(agent {self.agent.name}) would search a space made of answers, where every similar title is a "
                "gold page, and its numbers are not open-book over Wikipedia; search a whole-Wikipedia snapshot or "
                "ZIM (--snapshot wikipedia_en_all_nopic_YYYY-MM.zim, or one built from a dump), or pass "
                "--search-space evidence-only to mean it (recorded, in the run key)"
            )

    def _open_search_service(self):
        """``--search-url``: the snapshot a search service serves, its identity fetched (and then part of
        the run key) before any model call; unreachable: one line."""
        config = self.config
        if config.snapshot:
            raise ConfigError(
                "--search-url reads the snapshot its service serves; --snapshot would not be read: "
                "give one or the other"
            )
        if config.search == "mediawiki":
            raise ConfigError(
                "--search mediawiki asks the live API; --search-url a search service: give one or the other"
            )
        from harness.redact import strip_credentials
        from harness.wiki_snapshot.errors import SnapshotError
        from harness.wiki_snapshot.remote import RemoteWiki

        try:
            wiki = RemoteWiki.connect(
                config.search_url, shown=strip_credentials(config.search_url), attempts=config.search_max_attempts
            )
        except SnapshotError as exc:
            raise ConfigError(str(exc)) from None
        if config.setting == "open-book":
            for notice in wiki.notices:
                print(notice, file=sys.stderr)
        return wiki

    def _open_live_search(self):
        """``--search mediawiki``: the live API, checked with one request before any model call."""
        config = self.config
        if config.snapshot:
            raise ConfigError(
                "--search mediawiki asks the live API; --snapshot would not be read: give one or the other"
            )
        if config.setting != "open-book":
            raise ConfigError(
                f"--search mediawiki is the open-book search; --setting {config.setting} reads pages from --snapshot"
            )
        from harness.wiki_snapshot.errors import SnapshotError
        from harness.wiki_snapshot.mediawiki_live import FANOUTQA_EPOCH, MediaWikiLive

        try:
            live = MediaWikiLive(
                config.search_api_url,
                as_of=config.search_date or FANOUTQA_EPOCH,
                rate_limit=config.search_rate_limit,
            )
            live.check()
        except SnapshotError as exc:
            raise ConfigError(str(exc)) from None
        return live

    # run directory ---------------------------------------------------------------
    def _check_run_dir(self) -> RunResults | None:
        """Refuse a directory that holds another configuration's run; return its old results."""
        cfg_path = self.run_dir / CONFIG_FILE
        if cfg_path.exists():
            old = read_json(cfg_path)
            if old.get("config_hash") != self.config_hash:
                raise ConfigError(self._other_run(old))
            # the directory's run: its id as claimed (a directory claimed before ids had one: the key's)
            if isinstance(old.get("run_id"), str) and old["run_id"].startswith(self.config_hash[:12]):
                self.run_id = old["run_id"]
            held = (old.get("config") or {}).get("shard") if isinstance(old.get("config"), dict) else None
            if held != self.config.shard:  # what `harness merge` reads a directory's part of the run from
                raise ConfigError(
                    f"{self.run_dir} holds {_part(held)} of run {self.run_id}, this is {_part(self.config.shard)}: "
                    "a run directory holds one shard; choose another --out"
                )
        elif (self.run_dir / SAMPLES_FILE).exists():
            raise ConfigError(f"{self.run_dir} has samples but no {CONFIG_FILE}; choose another --out")
        results = self.run_dir / RESULTS_FILE
        return read_results(results) if results.exists() else None

    def _other_run(self, old: dict[str, Any]) -> str:
        """The refusal of a directory holding another configuration's run: every field of the run
        key that differs (old -> new), and the two ways on."""
        from harness.execution.config import identity_changes
        from harness.execution.record import RunClaim

        head = (
            f"{self.run_dir} holds a run with a different configuration "
            f"(run {str(old.get('config_hash'))[:12]}, this one {self.run_id})"
        )
        ways = (
            f"To go on, choose another --out for this configuration, or run the configuration {self.run_dir} "
            f"holds ({self.run_dir / CONFIG_FILE}) to resume it"
        )
        try:
            claim = RunClaim.model_validate(old)
            extra = {k: v for k, v in old.items() if k not in ("config_hash", "config", "run_id")}
            changes = identity_changes(  # this configuration's paths as the claim writes them
                claim.config.identity(extra),
                portable(self.config.identity(self.hash_extra)),
                portable(self.config.model_dump(mode="json")),
            )
        except Exception:  # noqa: BLE001 - an unreadable claim: the refusal without the differences
            return f"{head}. {ways}"
        if not changes:
            changes = ["no field differs as this harness reads them (the run key's rules changed since that run)"]
        return f"{head}: {'; '.join(changes)}. {ways}"

    def _claim_run_dir(self) -> None:
        cfg_path = self.run_dir / CONFIG_FILE
        if not cfg_path.exists():
            self.run_id = directory_run_id(self.config_hash, self.run_dir, now_iso())
            config = self.config.model_dump(mode="json")
            claim = {"config_hash": self.config_hash, "run_id": self.run_id, "config": config}
            write_json_atomic(cfg_path, portable({**claim, **self.hash_extra}))  # no home directory in it

    # the loop --------------------------------------------------------------------
    def _start_scorer_early(self):
        """The StreamingScorer of the metrics this run will have, started before its dataset is
        loaded (its loader's metrics are known without it); None where it would not stream (--stream-scoring
        off, a --limit below STREAM_FROM) or the metrics cannot be told yet. ``_execute_locked`` keeps it
        if the run streams with these metrics, and stops it otherwise."""
        config = self.config
        known = min(n for n in (config.limit, len(config.sample_ids or ()) or None, sys.maxsize) if n is not None)
        if config.stream_scoring == "off" or (config.stream_scoring == "auto" and known * config.epochs < self.STREAM_FROM):
            return None
        try:
            from harness.datasets import parse_spec
            from harness.datasets.base import DATASETS
            from harness.scoring.streaming import StreamingScorer, streamable_metrics

            loader = DATASETS.resolve(parse_spec(config.dataset)[0]).obj
            names = list(
                run_metrics(config.metrics, loader, self.agent.records, config.confidence, config.citations)
                or loader.metrics
            )
            if not streamable_metrics(names):
                return None
            return StreamingScorer(names, config.scoring_options())
        except Exception:  # noqa: BLE001 - the dataset's own loading says what is wrong with it
            return None

    def _close_early_scorer(self) -> None:
        if self._early_scorer is not None and self._early_scorer is not self.scorer:
            self._early_scorer.close()
        self._early_scorer = None

    def _streaming_scorer(self):
        """This run's StreamingScorer: the one started early when it scores these metrics so."""
        from harness.scoring.streaming import StreamingScorer, fingerprint

        early = self._early_scorer
        if early is not None and early.fingerprint == fingerprint(self.metric_names, self.scoring_options):
            return early
        return StreamingScorer(self.metric_names, self.scoring_options)

    async def execute(self) -> RunResults:
        """Run (or resume) the evaluation; returns the run record written to results.json."""
        # One writer per run directory, held until the results are written (the kernel drops it on kill -9).
        try:
            lock = RunLock(self.run_dir, purpose="run").acquire()
        except BaseException:
            self._close_early_scorer()
            raise
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

    async def _execute_locked(self) -> RunResults:
        previous = self._check_run_dir()
        finished = load_finished(self.run_dir, keep=self._kept, into=HeldRows(self.run_dir))
        # epoch-major: an interrupted run has whole epochs done first
        todo = [(s, e) for e in self._epochs() for s in self.samples if work_key(s.id, e) not in finished]
        if self.config.only_failed:
            todo = self._only_failed(todo, previous)
        if self.config.max_cost is not None:  # the budget covers every invocation of the run
            self.budget = Budget(self.config.max_cost, self.pricing, spent_in_records(self._attempt_records()))
        invocations = [i.model_dump(mode="json", exclude_unset=True) for i in previous.invocations] if previous else []
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
        if self.config.shard_env:  # --shard auto: what this invocation read its shard from (a rerun may differ)
            self.invocation["shard_env"] = dict(self.config.shard_env)
        status = "complete"
        model_info = previous.model.model_dump(mode="json", exclude_unset=True) if previous and previous.model else None
        failures: dict[str, dict[str, Any]] = {}
        died: ProcessDiedError | None = None
        self.backend.log_dir = self.run_dir / LOG_DIR  # a worker's or server's log, kept with the run
        if self.config.backend.batch:  # batches are recorded in the run directory (harness.models.batch)
            self.backend.attach_run(self.run_dir, self.invocation["number"])
        try:
            if todo and self.dataset.info.has_answers and self._stream_scoring(len(todo)):
                self.scorer = self._streaming_scorer()
            self._close_early_scorer()  # unless it is the one used
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
                f"run {self.run_id}{f' shard {self.config.shard}' if self.config.shard else ''}"
                + (f" (--shard auto: {shard_env_line(self.config.shard_env)})" if self.config.shard_env else "")
                + ": "
                f"{len(todo)} of {len(self.samples) * self.config.epochs} samples to do"
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
        except BaseException as exc:
            status = "error"
            if isinstance(exc, Exception):  # said in results.json: why the questions left were not asked
                from harness.redact import redact

                self.invocation["error"] = " ".join(redact(exc).split())[:500]
            raise
        finally:
            self._close_early_scorer()
            if self.scorer is not None:  # stopped before its samples were solved (the backend did not start)
                self.scorer.close()
            if todo and model_info is not None:
                model_info = {**model_info, **self.backend.usage_facts()}  # per-server counts
                if self.backend.replaced_surrogates:  # said once when it happened; counted here
                    model_info["replaced_surrogates"] = self.backend.replaced_surrogates
            await self.backend.close()
            n_finished = len(finished)  # before results.json takes the rows
            try:
                # A run that failed before it began (no config.json yet) leaves no files behind.
                if (self.run_dir / CONFIG_FILE).exists():
                    if status == "complete" and failures:
                        status = "incomplete"
                    if status in ("complete", "incomplete") and self.budget is not None and self.budget.exhausted:
                        status = "budget_exhausted"
                    self.invocation["ended_at"] = now_iso()
                    self.invocation["status"] = status
                    invocations.append(self.invocation)
                    record = self._results(finished, failures, status, model_info, invocations, previous)
                    record = portable_record(record)  # no home directory in it
                    write_results(self.run_dir / RESULTS_FILE, record)
                    results = record
            finally:
                finished.close()  # its spool file
        if died is not None:
            raise RunStopped(died, self.run_dir, n_finished, len(self.samples) * self.config.epochs)
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
        progress = Progress(len(todo), enabled=self.show_progress)
        # a strategy blocking the loop is named on stderr, and its stall charged to its own sample; one
        # that never returns ends the run (exit 5)
        timeout, grace = self.config.sample_timeout, self.config.freeze_grace
        watch = LoopWatch(
            min(self.WATCHDOG_AFTER_S, timeout),
            freeze_after_s=timeout + grace,
            freeze_limit=f"--sample-timeout {timeout:g} s plus --freeze-grace {grace:g} s",
        )
        self.attempts = attempts = SampleAttempts(
            self.agent,
            self.backend,
            pricing=self.pricing,
            budget=self.budget,
            run_dir=self.run_dir,
            sample_timeout=self.config.sample_timeout,
            epochs=self.config.epochs,
            max_answer_chars=self.max_answer_chars,
            invocation=self.invocation,
            watch=watch,
        )
        watch.who = attempts.who
        # a strategy's sys.exit, cancel or loop.stop beyond its sample fails that sample (harness.execution.guard)
        guard = LoopGuard.install()
        guard.who = attempts.who
        run_fault = guard.open_run()
        prefetched = False

        async def one(sample: Sample, epoch: int) -> None:
            """One sample; its turn (``semaphore``) was taken for it and is given back once it has
            answered: scoring it does not hold up the next request."""
            nonlocal prefetched
            REQUEST_ORIGIN.set((sample.id, epoch))  # this task's requests, for --batch's record
            try:
                if self.budget is not None and self.budget.exhausted:
                    return  # over budget: not started, left pending for a rerun with a higher --max-cost
                record = await attempts.attempt(sample, cache, epoch, self._epoch_params(epoch))
            finally:
                semaphore.release()
            if not prefetched and self.scorer is not None:
                # the error bars' numpy, imported while the run goes (after its first request, so
                # that is not delayed) rather than after the last answer
                prefetched = True
                threading.Thread(target=importlib.import_module, args=("harness.scoring.stats",), daemon=True).start()
            key = work_key(sample.id, epoch)
            if record["status"] == "ok":
                # written before it is scored: a stalled or killed scorer never holds a finished row back
                samples_out.append(record)
                finished[key] = self._kept(record)
                progress.advance(ok=True)
                if self.scorer is not None and self.scorer.active:
                    # scored in the worker while the run goes on: the values are held with the row
                    # for the end's aggregate (the row is written), and join the progress line's headline
                    scorer = self.scorer
                    scorer.submit(sample, record["answer"]).add_done_callback(
                        lambda future: self._scored(finished, key, future, scorer.fingerprint, progress)
                    )
            else:
                failures_out.append(record)
                failures[key] = self._kept(record)
                progress.advance(ok=False)
            if attempts.died is not None:
                raise attempts.died

        try:
            watch.start()
            with progress:
                # the streaming scorer's queue bounds what waits for it: the run keeps pace
                await self._run_tasks(
                    one, todo, semaphore, self.scorer.room if self.scorer is not None else None, run_fault
                )
                if self.scorer is not None:
                    await self.scorer.drain()  # the last values, before the last progress line
        finally:
            # tasks the strategy started and left running end while the guard still holds them
            leftovers = leftover_tasks({getattr(sys.modules.get(type(self.agent).__module__), "__file__", None)})
            for task in leftovers:
                task.cancel()
            if leftovers:  # a task that will not end is left to the loop's close
                await asyncio.wait(leftovers, timeout=self.LEFTOVER_WAIT_S)
            watch.stop()
            guard.close_run()
            guard.uninstall()
            if watch.stalls:  # the loop's stalls a strategy caused, for the record
                self.invocation["loop_stalls"] = watch.stalls[:20]
            self.backend.limiter = None
            self.invocation["concurrency"] = limiter.facts()
            samples_out.close()
            failures_out.close()
            if cache is not None:
                cache.close()
            if self.scorer is not None:
                self.scorer.close()
                self.invocation["streamed_scores"] = self.scorer.streamed
                if self.scorer.stopped:
                    self.invocation["streaming_stopped"] = self.scorer.stopped
        if run_fault.done():  # an escape after the last sample ended (a leftover task's sys.exit)
            raise run_fault.exception()

    @staticmethod
    async def _run_tasks(
        one, todo, semaphore: asyncio.Semaphore, room=None, fault: asyncio.Future | None = None
    ) -> None:
        """``one(sample, epoch)`` for each of ``todo`` in order, a task started only once ``semaphore``
        gives it a turn (``one`` gives it back) and ``room()`` (if given) has returned: tasks exist for
        the samples in flight, not for the whole run (100,000 waiting tasks held ~2 KB each). The
        first error (or ``fault``, once it fails: a strategy's escape no sample holds) stops the
        rest: the tasks in flight are cancelled, and it is raised once they have ended."""
        running: set[asyncio.Task] = set()
        errors: list[BaseException] = []
        wake: asyncio.Future | None = None  # set once the tasks in flight have all ended, or on the first error

        def poke() -> None:
            if wake is not None and not wake.done():
                wake.set_result(None)

        def failed(exc: BaseException) -> None:
            if not errors:
                errors.append(exc)
                if semaphore.locked():
                    semaphore.release()  # wakes the feeder below, waiting for a turn
            poke()

        def ended(task: asyncio.Task) -> None:
            running.discard(task)
            if not task.cancelled() and task.exception() is not None:
                failed(task.exception())
            elif not running:
                poke()

        def faulted(future: asyncio.Future) -> None:
            if not future.cancelled():
                failed(future.exception())

        if fault is not None:
            fault.add_done_callback(faulted)
        try:
            for sample, epoch in todo:
                if room is not None:
                    await room()
                await semaphore.acquire()
                if errors:
                    break
                task = asyncio.create_task(one(sample, epoch))
                running.add(task)
                task.add_done_callback(ended)
            while running and not errors:
                wake = asyncio.get_running_loop().create_future()
                await wake
        finally:
            if fault is not None:
                fault.remove_done_callback(faulted)
            for task in running:
                task.cancel()
            if running:
                await asyncio.gather(*running, return_exceptions=True)
        if errors:
            raise errors[0]

    @staticmethod
    def _scored(
        finished: HeldRows, key: str, future: asyncio.Future, fingerprint: str, progress: Progress
    ) -> None:
        """A sample's streamed values came back (None: it is scored at the end)."""
        scores = None if future.cancelled() else future.result()
        if scores is not None:
            finished.update(key, scores=scores, scored_with=fingerprint)
            progress.add_scores(scores)

    def _kept(self, record: dict[str, Any]) -> dict[str, Any]:
        """What this invocation holds of a written row until the end (scores, counts, tokens, cost,
        outcomes, failures, the strategy's summary): all but its transcript and timestamps, which
        are in the run's files (a plugin metric that reads rows gets them whole)."""
        if self.keep_whole_rows:
            return record
        return {k: v for k, v in record.items() if k not in ROW_FIELDS_IN_FILES_ONLY}

    LEFTOVER_WAIT_S = 5.0  # a strategy's task left running at the end: this long to end once cancelled
    WATCHDOG_AFTER_S = 10.0  # the loop still this long: the watchdog names what holds it (at most --sample-timeout)
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

    def _unused_batch_spend(self):
        """--batch: answers billed that no sample took (in no row), as one record of their cost."""
        usages = getattr(self.backend, "unused_batch_usages", None)
        if usages is None or not self.pricing.priced:
            return
        yield {"spent_usd": sum(self.pricing.request_cost(u) or 0.0 for u in usages())}

    def _attempt_records(self):
        """Every attempt recorded so far: finished samples and failed attempts."""
        for name in (SAMPLES_FILE, FAILURES_FILE):
            path = self.run_dir / name
            if path.exists():
                for _, record in iter_jsonl(path, torn_tail=True):
                    yield record

    # results ---------------------------------------------------------------------
    def _results(self, finished, failures, status, model_info, invocations, previous: RunResults | None) -> RunResults:
        selected = self.samples
        keys = [work_key(s.id, e) for e in self._epochs() for s in selected]
        failed_now = [k for k in keys if k in failures and k not in finished]
        done = finished.take(keys)  # decoded, each let go of as packed
        scores = None
        scoring_note = None
        if not selected and self.config.shard:  # a shard that got none of the questions (K above their number)
            scoring_note = f"shard {self.config.shard} holds none of the selected questions: nothing to score"
        elif self.dataset.info.has_answers:  # the same path as `harness score RUN_DIR` (score_run)
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
                failures={k: failures[k] for k in failed_now},
                stopped=stopped_reason(status, self.invocation.get("error")),
            )
        else:
            scoring_note = f"{self.dataset.info.spec()} has no reference answers; export the generations to score them"
        return build_results(
            run_id=self.run_id,
            config_hash=self.config_hash,
            status=status,
            config=self.config,
            dataset=self.dataset,
            selected=selected,
            keys=keys,
            done=done,
            failed={k: failures[k] for k in failed_now},
            agent=self.agent,
            model_info=model_info,
            invocations=invocations,
            started_at=(previous.started_at if previous else None) or invocations[0]["started_at"],
            cost=run_cost(
                self.pricing,
                self.price_table,
                done,
                itertools.chain(self._attempt_records(), self._unused_batch_spend()),  # never all in memory
                scores,
                self.budget,
                self.config.max_cost,
            ),
            stopped_on_budget=bool(self.budget is not None and self.budget.exhausted),
            snapshot=self.snapshot,
            search_space=self.search_space,
            scores=scores,
            scoring_note=scoring_note,
        )
