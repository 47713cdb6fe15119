"""The run record, typed: what ``results.json`` holds (``RunResults``), one line of ``samples.jsonl``
(``SampleRow``) and the run's configuration (``RunConfig``). The runner builds a ``RunResults`` and
writes it; every reader (score, report, compare, leaderboard, export, ablate, ceiling, power) goes
through ``read_results``, so a field is named in one place and a broken file is refused in one line.

``results_format`` 3 is this typed record. Formats 1 and 2 (harness before it) still read: their
scores are upgraded (``harness.scoring.results.upgrade``), and a configuration field a later harness
dropped is kept aside in ``legacy_config`` instead of failing the file. ``harness schema results``
prints the JSON Schema (draft 2020-12) a format-3 file validates against.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic_core import PydanticSerializationError, to_json

from harness.errors import HarnessError
from harness.execution.config import RunConfig
from harness.records import (
    CONFIG_FILE,
    RESULTS_FILE,
    RETRIEVAL_FILE,
    read_json,
    transcript_of,
    write_atomic,
    write_bytes_atomic,
    write_json_atomic,
)
from harness.redact import mentions_secret
from harness.text import json_bytes
from harness.scoring.results import RESULTS_FORMAT, SECTIONS
from harness.scoring.scores import Interval, Scores, ScoresMeta  # noqa: F401 - their home is harness.scoring.scores

JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"

RunStatus = Literal["complete", "incomplete", "interrupted", "error", "budget_exhausted", "running"]


class _Open(BaseModel):
    """A section whose producer (a backend, a strategy, a plugin) may add facts of its own: the
    fields named here are typed and checked, others are kept as they are."""

    model_config = ConfigDict(extra="allow", protected_namespaces=())


class _Closed(BaseModel):
    model_config = ConfigDict(extra="forbid", protected_namespaces=())


class HarnessInfo(_Open):
    version: str | None = None
    git_commit: str | None = None
    python: str | None = None


class DatasetRecord(_Open):
    name: str
    split: str | None = None
    version: str | None = None
    spec: str
    path: str | None = None
    sha256: str | None = None
    license: str | None = None
    plugin: dict[str, Any] | None = None
    n_total: int = Field(ge=0)
    n_selected: int = Field(ge=0)


class AgentRecord(_Open):
    name: str
    settings: list[str] | None = Field(None, description="the settings it implements (None: a run from before they were recorded)")
    knobs: dict[str, Any] = {}
    plugin: dict[str, Any] | None = None
    prompt_template: str | None = None
    prompt_sha256: str | None = None
    records: list[str] | None = Field(
        None, description="the shared record kinds (harness.strategy.RECORD_KINDS) it writes in each sample's extra"
    )
    protocol: Literal["native", "text"] | None = Field(
        None, description="how a tool-using strategy calls its tools: the API's tool calls or tags in text"
    )
    chosen_by: str | None = Field(
        None,
        description="agent option (--agent), dataset default (the dataset's strategy for the setting) or "
        "setting default",
    )


class ModelRecord(_Open):
    """The backend's ``describe()`` (with its usage facts): backend name and context size typed."""

    backend: str | None = None
    model: str | None = None
    context_size: int | None = Field(None, ge=1)
    tokenizer: str | None = None
    endpoint: str | None = Field(None, description="the server's URL, credentials stripped (API backends)")
    replaced_surrogates: int | None = Field(
        None, ge=1, description="lone surrogates (\\udXXX escapes in replies, the dataset) sent to the model as U+FFFD"
    )


# max_tokens_source's forms (harness.execution.config) shortened for a table cell
_BUDGET_SOURCES = (
    ("--max-tokens", "--max-tokens"),
    ("model facts", "model facts"),
    ("embedded default model", "measured"),
    ("default", "default"),
)


class Decoding(_Closed):
    """The model-side conditions of a run's numbers, read from what the run recorded: the answer budget
    and where it came from, the reasoning effort and thinking budget sent (None: the provider's
    default), the API used, the sampling parameters sent, and the model facts entry (or a probe)."""

    max_tokens: int | None = None
    max_tokens_source: str | None = None
    reasoning_effort: str | None = Field(None, description="sent; None: not sent, the provider's default")
    provider_default_effort: str | None = Field(None, description="the facts' default_reasoning_effort")
    thinking_budget: int | None = None
    api: str | None = Field(None, description="openai/: responses or chat")
    sampling_sent: list[str] | None = None
    facts: str | None = Field(None, description="the model facts entry used; 'probed' where the table lacks it")

    def label(self) -> str:
        """One cell: ``max 25000 (model facts), effort medium (provider default), api responses``."""
        parts = []
        if self.max_tokens is not None:
            source = self.max_tokens_source or ""
            short = next((label for prefix, label in _BUDGET_SOURCES if source.startswith(prefix)), None)
            parts.append(f"max {self.max_tokens}" + (f" ({short})" if short else ""))
        if self.reasoning_effort:
            parts.append(f"effort {self.reasoning_effort}")
        elif self.provider_default_effort:
            parts.append(f"effort {self.provider_default_effort} (provider default)")
        if self.thinking_budget:
            parts.append(f"thinking {self.thinking_budget}")
        if self.api:
            parts.append(f"api {self.api}")
        if self.facts == "probed":
            parts.append("facts probed")
        return ", ".join(parts)


class Counts(_Open):
    selected: int = Field(ge=0, description="samples selected: questions x epochs")
    questions: int | None = Field(None, ge=0, description="with --epochs: the questions")
    epochs: int | None = Field(None, ge=1)
    finished: int = Field(ge=0)
    failed: int = Field(ge=0)
    pending: int = Field(ge=0)
    truncated_output: int = Field(0, ge=0)


class Tokens(_Closed):
    prompt: int = Field(ge=0)
    completion: int = Field(ge=0)
    total: int = Field(ge=0)
    cache_read: int = Field(0, ge=0, description="of prompt: read from the provider's prompt cache")
    cache_write: int = Field(0, ge=0, description="of prompt: written to the provider's prompt cache")
    reasoning: int = Field(0, ge=0, description="of completion: hidden reasoning or thinking (finished samples)")
    reasoning_failed: int = Field(
        0, ge=0, description="reasoning tokens spent by failed samples (a truncated answer spent its budget thinking)"
    )


class FailureNote(_Open):
    type: str
    error: str | None = None


class CostRecord(_Open):
    currency: str = "USD"
    price: dict[str, Any] | None = None
    model_usd: float | None = None
    per_sample_usd: float | None = None
    spent_usd: float | None = None
    judge_usd: float | None = None
    total_usd: float | None = None
    max_cost_usd: float | None = None


class Invocation(_Open):
    number: int = Field(ge=1)
    started_at: str
    ended_at: str | None = None
    status: str | None = None
    already_finished: int = 0
    attempted: int = 0
    finished: int = 0
    failed: int = 0
    model_calls: int = 0
    cache_hits: int = 0
    attempted_ids: list[str] = []
    error: str | None = None


class SnapshotRecord(_Open):
    path: str
    content_hash: str
    metadata: dict[str, Any] = {}


BACKEND_NAMES = {"wiki-snapshot": "snapshot", "zim": "ZIM", "mediawiki-live": "live MediaWiki"}


def share_text(share: float) -> str:
    """``94%``, ``2.0%``, ``0.0043%``: two significant digits below 10%, so a whole Wikipedia's share is not 0%."""
    percent = float(f"{100 * share:.2g}")  # two significant digits first: 9.99 reads 10%
    if percent >= 10 or percent == 0:
        return f"{percent:.0f}%"
    return f"{percent:.{1 - math.floor(math.log10(percent))}f}%"  # positional, never 5.8e-05%


class SearchSpaceRecord(_Open):
    """What a run's searches ran over (``harness.wiki_snapshot.space``): the backend, its size and source,
    whether it holds a dataset's evidence only, and how much of it is the selection's gold pages.
    ``label`` is the one line every output shows beside the run's numbers."""

    backend: str | None = Field(
        None, description="the metadata's format: wiki-snapshot (SQLite), zim (read in place), mediawiki-live"
    )
    path: str | None = None
    pages: int | None = Field(None, ge=0, description="articles in the space (None: not known, the live API)")
    redirects: int | None = Field(None, ge=0)
    source: str | None = None
    revision_date: str | None = None
    scope: str = Field(
        "source",
        description="source: all its dump, archive or records held; evidence: a dataset's evidence pages; "
        "dataset-contexts: a dataset's own context paragraphs (HotpotQA's distractor setting)",
    )
    scope_dataset: str | None = Field(None, description="whose evidence or contexts (evidence-only scopes)")
    evidence_only: bool = Field(
        False, description="evidence or dataset-contexts: a space made of answers, not an open-book space over Wikipedia"
    )
    gold_needed: int | None = Field(None, ge=0, description="distinct page titles the selected questions need")
    gold_pages: int | None = Field(
        None, ge=0, description="the distinct pages of the space those titles resolve to (any case, redirects followed)"
    )
    gold_share: float | None = Field(None, ge=0, le=1, description="gold_pages / pages: the share of the space that is gold")
    gold_note: str | None = Field(None, description="why the gold pages were not counted")
    label: str = ""

    @staticmethod
    def label_of(
        backend: str | None,
        source: str | None,
        revision_date: str | None,
        pages: int | None,
        scope: str,
        scope_dataset: str | None,
        evidence_only: bool,
        gold_share: float | None,
    ) -> str:
        """``evidence-only: fanoutqa:dev evidence, 1,317 pages (gold 94%)`` or
        ``whole source: ZIM wikipedia_en_all_nopic_2023-11.zim 2023-11-01, 6,912,000 pages (gold 0.0043%)``."""
        size = f"{pages:,} pages" if pages is not None else "pages not counted"
        gold = f" (gold {share_text(gold_share)})" if gold_share is not None else ""
        if evidence_only:
            what = "evidence" if scope == "evidence" else "contexts"
            return f"evidence-only: {scope_dataset or 'a dataset'} {what}, {size}{gold}"
        name = Path(source).name if source and "://" not in source else source
        parts = [BACKEND_NAMES.get(backend or "", backend or "snapshot"), name, revision_date]
        return f"whole source: {' '.join(p for p in parts if p)}, {size}{gold}"


def mixed_spaces_warning(spaces: "list[tuple[str, SearchSpaceRecord | dict[str, Any] | None]]") -> str | None:
    """One line when some runs searched an evidence-only space and others a whole source: their numbers
    measure different searches (None otherwise). ``spaces``: (name, search_space record or None)."""
    searched = [(name, space) for name, space in spaces if space]
    narrow = [
        name
        for name, space in searched
        if (space.evidence_only if isinstance(space, SearchSpaceRecord) else space.get("evidence_only"))
    ]
    if not narrow or len(narrow) == len(searched):
        return None
    return (
        f"{len(narrow)} of the {len(searched)} runs with a search space searched an evidence-only one (a dataset's evidence "
        f"or contexts: {', '.join(narrow[:3])}{', ...' if len(narrow) > 3 else ''}), the others a whole source: "
        "their numbers measure different searches (see each run's search space)"
    )


class RunResults(BaseModel):
    """``results.json``."""

    model_config = ConfigDict(extra="forbid", protected_namespaces=(), json_schema_extra={"$schema": JSON_SCHEMA_DIALECT})

    results_format: Literal[1, 2, 3] = RESULTS_FORMAT
    run_id: str
    config_hash: str
    status: RunStatus
    harness: HarnessInfo = Field(default_factory=HarnessInfo)
    dataset: DatasetRecord
    setting: str
    agent: AgentRecord | None = None
    model: ModelRecord | None = None
    generation: dict[str, Any] = {}
    max_tokens_source: str | None = Field(
        None,
        description="where generation.max_tokens came from: '--max-tokens', 'model facts ENTRY: SOURCE' "
        "(the facts table's default_max_tokens), 'embedded default model, measured (README)', 'default 512'",
    )
    config: RunConfig
    legacy_config: dict[str, Any] = Field(
        {}, description="fields of a format 1/2 file's config that this harness no longer has (kept, unused)"
    )
    started_at: str | None = None
    ended_at: str | None = None
    counts: Counts
    tokens: Tokens | None = None
    model_calls: int = Field(0, ge=0)
    cost: CostRecord | None = None
    stopped_on_budget: bool = False
    failures: dict[str, FailureNote] = {}
    sample_ids: list[str] = []
    outcomes: dict[str, int] = {}
    retrieval: dict[str, Any] | None = Field(None, description="the strategy's summary of what it recorded")
    snapshot: SnapshotRecord | None = None
    search_space: SearchSpaceRecord | None = Field(
        None, description="what the strategies searched (every run given a --snapshot); shown with its numbers"
    )
    invocations: list[Invocation] = []
    scores: Scores | None = None
    scoring_note: str | None = None
    files: dict[str, str] = {}

    @model_validator(mode="before")
    @classmethod
    def _read_older_formats(cls, data: Any) -> Any:
        """Formats 1 and 2: config fields since dropped move to ``legacy_config``; keys a format-3
        file never has are dropped with them rather than refusing a file the harness itself wrote."""
        if not isinstance(data, dict) or data.get("results_format") == RESULTS_FORMAT:
            return data
        data = {"results_format": 1, **data}  # format 1 did not say so
        config = data.get("config")
        if isinstance(config, dict):
            known = set(RunConfig.model_fields)
            data["config"] = {k: v for k, v in config.items() if k in known}
            data["legacy_config"] = {k: v for k, v in config.items() if k not in known}
        for key in list(data):
            if key not in cls.model_fields:
                data.setdefault("legacy_config", {})[key] = data.pop(key)
        return data

    # facts read in several places, named once ------------------------------------------------
    @property
    def context_size(self) -> int | None:
        return self.model.context_size if self.model is not None else None

    @property
    def model_name(self) -> str:
        """The model as its backend named it (``gpt-4o``), else as ``--model`` gave it."""
        return (self.model.model if self.model is not None else None) or self.config.model

    @property
    def agent_name(self) -> str | None:
        return self.agent.name if self.agent is not None else self.config.agent

    @property
    def native_tool_calling(self) -> bool:
        return self.agent is not None and self.agent.protocol == "native"

    @property
    def backend(self) -> str | None:
        return self.model.backend if self.model is not None else None

    def decoding(self) -> Decoding:
        """What the model was asked under (``Decoding``), for every consumer that shows a number."""
        generation = self.config.generation
        model = self.model.model_dump() if self.model is not None else {}
        facts = model.get("facts") if isinstance(model.get("facts"), dict) else None
        sent = model.get("sent") if isinstance(model.get("sent"), dict) else {}
        return Decoding(
            max_tokens=generation.max_tokens,
            max_tokens_source=self.max_tokens_source,
            reasoning_effort=generation.reasoning_effort,
            provider_default_effort=(facts or {}).get("default_reasoning_effort") if facts and facts.get("reasoning") else None,
            thinking_budget=generation.thinking_budget,
            api=model.get("api") if isinstance(model.get("api"), str) else None,
            sampling_sent=sent.get("sampling") if isinstance(sent.get("sampling"), list) else None,
            facts=(facts or {}).get("entry") or ("probed" if model.get("probe") else None),
        )

    @property
    def search_space_label(self) -> str | None:
        """The search space as every output shows it beside the numbers (None: the run searched nothing)."""
        return self.search_space.label if self.search_space is not None else None

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude={"legacy_config"} if not self.legacy_config else None)


class Usage(_Open):
    prompt_tokens: int = Field(0, ge=0)
    completion_tokens: int = Field(0, ge=0)
    cache_read_tokens: int = Field(0, ge=0, description="of prompt_tokens: read from the provider's prompt cache")
    cache_write_tokens: int = Field(0, ge=0, description="of prompt_tokens: written to the provider's prompt cache")
    reasoning_tokens: int = Field(0, ge=0, description="of completion_tokens: hidden reasoning or thinking")


class SampleRow(_Open):
    """One line of ``samples.jsonl`` (``status: ok``) or ``failures.jsonl`` (``status: error``)."""

    id: str
    epoch: int = Field(1, ge=1)
    invocation: int | None = None
    status: Literal["ok", "error"]
    started_at: str | None = None
    finished_at: str | None = None
    latency_s: float | None = None
    waited_s: float | None = None
    model_calls: int = 0
    cache_hits: int = 0
    usage: Usage = Field(default_factory=Usage)
    cost_usd: float | None = None
    spent_usd: float | None = None
    question: Any = None
    answer: Any = None
    outcome: str | None = Field(
        None,
        description="how the strategy ended: answered, max_rounds, context_full, ...; refused where its answer "
        "is the model declining (the last reply a refusal): every outcome but answered is a sample without an answer",
    )
    finish_reason: str | None = None
    truncated_output: bool = False
    oversized_answer: bool = False
    messages: list[Any] = []
    extra: dict[str, Any] = Field({}, description="what the strategy recorded (its searches, evidence, ...)")
    scores: dict[str, Any] | None = None
    scored_with: str | None = None
    error_type: str | None = None
    error: str | None = None

    def transcript(self) -> list[Any]:
        """The messages as sent and received (a long answer is stored once: its message points to ``answer``)."""
        return transcript_of({"messages": self.messages, "answer": self.answer})

    @model_validator(mode="before")
    @classmethod
    def _outcome_from_extra(cls, data: Any) -> Any:
        """Rows written before ``outcome`` was a field kept it in ``extra``."""
        if isinstance(data, dict) and data.get("outcome") is None and isinstance(data.get("extra"), dict):
            if "outcome" in data["extra"]:
                data = {**data, "outcome": data["extra"]["outcome"]}
        return data


class RunClaim(BaseModel):
    """``config.json``: written when a run directory is claimed, before the first sample; the
    configuration and the resolved facts (dataset sha256, the strategy's identity, ...) in its key."""

    model_config = ConfigDict(extra="allow", protected_namespaces=())

    config_hash: str
    config: RunConfig
    dataset_resolved: str | None = None
    dataset_sha256: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _drop_retired_fields(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("config"), dict):
            data = {**data, "config": {k: v for k, v in data["config"].items() if k in RunConfig.model_fields}}
        return data


RETRIEVAL_FORMAT = 1


class RetrievalDataset(_Open):
    """The questions a retriever was scored on: the dataset and the selection."""

    name: str | None = None
    split: str | None = None
    version: str | None = None
    spec: str
    sha256: str | None = None
    n_total: int | None = Field(None, ge=0)
    n_selected: int = Field(ge=0)
    limit: int | None = Field(None, description="--limit: only the first N questions")
    sample_ids: list[str] | None = Field(None, description="--sample-id: only these questions")


class RetrievalSnapshot(_Open):
    path: str
    content_sha256: str | None = Field(None, description="the snapshot's content identity (the index is built on it)")


class RetrievalQuestion(_Open):
    """One question: its query, the ranking searched, its values (or why it was skipped)."""

    id: str
    query: str
    hits: list[list[Any]] = Field(description="[passage id, page title, score], best first")
    values: dict[str, dict[str, float]] | None = Field(None, description="METRIC -> K -> value")
    skipped: str | None = None


class RetrievalResults(BaseModel):
    """``retrieval.json`` (``harness retrieval-eval --out-dir DIR``; ``--out FILE`` writes the same):
    a retriever scored alone, no reader. ``kind: retrieval`` tells it from a run's results; the
    leaderboard lists each as a retriever row, apart from the runs. Its conditions: the snapshot
    and search space, the index (retriever, passages, its build options), the dataset and the
    questions selected, the metrics' options; ``per_question`` holds each question's values, so
    every interval (``uncertainty["METRIC@K"]``) can be computed again."""

    model_config = ConfigDict(extra="forbid", protected_namespaces=(), json_schema_extra={"$schema": JSON_SCHEMA_DIALECT})

    kind: Literal["retrieval"] = "retrieval"
    retrieval_format: Literal[1] = RETRIEVAL_FORMAT
    created_at: str | None = None
    harness: HarnessInfo = Field(default_factory=HarnessInfo)
    dataset_name: str
    dataset: RetrievalDataset
    snapshot: RetrievalSnapshot
    search_space: SearchSpaceRecord | None = None
    index: dict[str, Any] = Field(
        description="the index searched, as its meta.json says (retriever, passages, bm25/dense options)"
    )
    retriever: str
    passages: str | None = None
    question_representation: str
    ks: list[int]
    ndcg_k: int | None = Field(None, description="nDCG's cutoff (None: written before nDCG was computed)")
    cluster_by: str | None = Field(None, description="the sample field clustering the intervals (None: by question)")
    n_questions: int = Field(ge=0)
    n_evaluated: int = Field(ge=0)
    skipped: dict[str, int] = Field(description="questions not evaluated, by reason")
    gold_coverage: dict[str, int] = Field(description="gold pages, and of them those in the snapshot")
    metric_names: list[str] = Field(description="the metrics at every K (nDCG apart, at ndcg_k)")
    metrics: dict[str, dict[str, float]] = Field(description="METRIC -> K -> mean over the questions with a value")
    metric_counts: dict[str, int] = Field(description="METRIC -> questions with a value")
    uncertainty: dict[str, Interval] = Field({}, description="METRIC@K -> value, stderr, 95% interval, method, kind")
    metric_info: dict[str, Any] = {}
    metric_options: dict[str, dict[str, Any]] = {}
    timing: dict[str, Any] = {}
    per_question: list[RetrievalQuestion] = []


def read_retrieval(path: str | Path) -> RetrievalResults:
    """A ``retrieval.json`` (or its folder), typed; one line naming the file and the field otherwise."""
    path = Path(path)
    file = path / RETRIEVAL_FILE if path.is_dir() else path
    if not file.exists():
        raise HarnessError(f"{path}: no {RETRIEVAL_FILE} there")
    data = read_json(file)
    if not isinstance(data, dict) or data.get("kind", "retrieval") != "retrieval" or "retriever" not in data:
        raise HarnessError(f"{file}: not a harness retrieval-eval file")
    version = data.get("retrieval_format", RETRIEVAL_FORMAT)
    if version != RETRIEVAL_FORMAT:
        raise HarnessError(f"{file}: retrieval format {version!r}; this harness reads format {RETRIEVAL_FORMAT}")
    try:
        return RetrievalResults.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        more = f"; {exc.error_count() - 1} more" if exc.error_count() > 1 else ""
        raise HarnessError(f"{file}: field {_where(first)}: {first['msg'].lower()}{more}") from None


SCHEMAS = {"results": RunResults, "samples": SampleRow, "config": RunConfig, "retrieval": RetrievalResults}


def json_schema(name: str) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of ``results``, ``samples`` (one row), ``config`` or ``retrieval``."""
    schema = SCHEMAS[name].model_json_schema(mode="serialization" if name != "config" else "validation")
    return {"$schema": JSON_SCHEMA_DIALECT, **{k: v for k, v in schema.items() if k != "$schema"}}


def _where(error: dict[str, Any]) -> str:
    return ".".join(str(p) for p in error["loc"]) or "(top level)"


def parse_results(data: Any, file: str | Path) -> RunResults:
    """A results.json's parsed JSON as a ``RunResults``; one line naming the file and the field otherwise."""
    if not isinstance(data, dict) or "run_id" not in data and "config_hash" not in data:
        raise HarnessError(f"{file}: not a harness results file")
    version = data.get("results_format", 1)
    if version not in (1, 2, RESULTS_FORMAT):
        raise HarnessError(f"{file}: results format {version!r}; this harness reads formats 1 to {RESULTS_FORMAT}")
    try:
        return RunResults.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        got = first.get("input")
        shown = f" (got {got!r})" if isinstance(got, (int, float, str, bool)) and len(repr(got)) < 60 else ""
        more = f"; {exc.error_count() - 1} more" if exc.error_count() > 1 else ""
        raise HarnessError(f"{file}: field {_where(first)}: {first['msg'].lower()}{shown}{more}") from None
    except HarnessError as exc:  # a scores format this harness cannot read
        raise HarnessError(f"{file}: {exc}") from None


def read_claim(file: str | Path) -> RunClaim:
    """A run directory's config.json, typed; one line naming the file and the field otherwise."""
    data = read_json(file)
    if not isinstance(data, dict):
        raise HarnessError(f"{file}: not a harness {CONFIG_FILE}")
    try:
        return RunClaim.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise HarnessError(f"{file}: field {_where(first)}: {first['msg'].lower()}") from None


def results_path(path: str | Path) -> Path:
    """A run directory's results.json, or the file itself."""
    path = Path(path)
    return path / RESULTS_FILE if path.is_dir() else path


def read_results(path: str | Path) -> RunResults:
    """A run's results (its directory or its results.json), typed; a missing, unreadable or
    invalid file is one line naming it (and the field), exit 2."""
    path = Path(path)
    file = results_path(path)
    if not file.exists():
        if path.is_dir():
            raise HarnessError(f"{path}: not a run directory (no {RESULTS_FILE})")
        raise HarnessError(f"{path}: no such run directory or results file")
    return parse_results(read_json(file), file)


def metric_names_of(scores: Scores | None) -> list[str]:
    return [k for k in (scores.metrics() if scores is not None else {}) if k not in SECTIONS]


def results_dict(record: RunResults) -> dict[str, Any]:
    """``record.model_dump(mode="json", exclude_unset=True)``, its per-question score rows
    (``scores.raw``) handed over as they are where they are JSON values already, not copied: a
    copy of 100,000 rows was the largest allocation at the end of a run."""
    raw = record.scores.raw if record.scores is not None else []
    if not raw or not all(_plain_json(row) for row in raw):  # NaN, a tuple: the dump converts them
        return record.model_dump(mode="json", exclude_unset=True)
    data = record.model_dump(mode="json", exclude_unset=True, exclude={"scores": {"raw": {"__all__"}}})
    data["scores"]["raw"] = list(raw)  # in its place: the dump left it there, empty
    return data


def _plain_json(value: Any) -> bool:
    """What ``model_dump(mode="json")`` gives back unchanged: dicts with text keys, lists, text,
    whole numbers, finite floats, booleans, null."""
    kind = type(value)
    if kind is dict:
        return all(type(k) is str and _plain_json(v) for k, v in value.items())
    if kind is list:
        return all(_plain_json(v) for v in value)
    if kind is float:
        return math.isfinite(value)
    return value is None or kind in (str, int, bool)


def write_results(path: str | Path, record: RunResults) -> None:
    """results.json of ``record``, serialized by pydantic (10x faster than the json module's
    indented writer, which runs in Python: seconds at 100,000 samples; floats in positional
    notation, 0.00008 for 8e-05, the same numbers), its per-question rows one at a time into the
    file, never all of it in one string. A text holding a secret is written from the masked values
    instead, as every file is (``write_json_atomic``), and so is one holding a lone surrogate
    (pydantic cannot encode it; ``write_json_atomic`` writes it as JSON's escape)."""
    rows = record.scores.raw if record.scores is not None else []
    try:
        head = record.model_dump_json(
            indent=2, exclude_unset=True, exclude={"scores": {"raw": {"__all__"}}} if rows else None
        )
    except PydanticSerializationError:
        return write_json_atomic(path, results_dict(record))
    scores = head.find('\n  "scores": {')
    at = head.find(_EMPTY_ROWS, scores) if rows and scores >= 0 else -1
    if mentions_secret(head) or (rows and at < 0):
        return write_json_atomic(path, results_dict(record))

    def write(f) -> None:
        f.write(head[: at + len(_EMPTY_ROWS) - 1].encode("utf-8"))  # up to the list's "["
        for i, row in enumerate(rows):
            try:
                text = to_json(row, indent=2, inf_nan_mode="null").decode("utf-8")
            except PydanticSerializationError:  # a lone surrogate: nothing written yet counts
                raise _SlowPath from None
            if mentions_secret(text):
                raise _SlowPath
            f.write(("," if i else "").encode() + ("\n      " + text.replace("\n", "\n      ")).encode("utf-8"))
        f.write(("\n    ]" + head[at + len(_EMPTY_ROWS) :] + "\n").encode("utf-8"))

    if not rows:
        return write_bytes_atomic(path, json_bytes(head + "\n"))
    try:
        write_atomic(path, write)
    except _SlowPath:
        write_json_atomic(path, results_dict(record))


_EMPTY_ROWS = '\n    "raw": []'  # scores.raw as the dump leaves it when its rows are excluded


class _SlowPath(Exception):
    """A row holds a secret or a lone surrogate: the file is written by ``write_json_atomic``."""
