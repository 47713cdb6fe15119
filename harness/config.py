"""Run configuration: every policy knob in one pydantic model, recorded in every results file.

Sources, weakest first: the defaults below (the FanOutQA paper's values), a YAML file
(``--config run.yaml``, keys are the long flag names), then command-line flags.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from harness.errors import ConfigError
from harness.models.base import WEEK_S, BackendOptions, GenerationParams

DEFAULT_MODEL = "local/smollm2"

# Fields that do not change what the model is asked or how it answers: a run can be
# extended (--limit), resumed or sped up without starting a new run directory.
# The snapshot is hashed by its content hash (added by the runner), not by where the file lies.
NOT_HASHED = frozenset(
    {
        "limit",
        "sample_ids",
        "out",
        "max_connections",
        "cache",
        "cache_path",
        "sample_timeout",
        "snapshot",
        "metrics",
        "judge",
        "bleurt_checkpoint",
        "max_cost",  # like --limit: raising the budget resumes the same run
        "price_table",
    }
)
BACKEND_NOT_HASHED = frozenset({"request_timeout", "max_attempts", "retry_max_wait", "startup_timeout", "n_threads"})


class RunConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", protected_namespaces=(), allow_inf_nan=False)

    model: str = DEFAULT_MODEL
    setting: str = "closed-book"
    agent: str | None = Field(None, description="strategy; default: the setting's own")
    dataset: str = "fanoutqa:dev"
    data_path: str | None = None
    limit: int | None = Field(None, ge=1, le=1_000_000_000)
    sample_ids: list[str] | None = None
    out: str | None = None
    max_connections: int = Field(4, ge=1, le=10_000)
    sample_timeout: float = Field(600.0, gt=0, le=WEEK_S, description="seconds per sample (paper: 600)")
    current_date: str = Field("11-20-2023", description="'Current date' in the FanOutQA prompts")
    prompt_template: str | None = Field(None, description="template name in prompts/ or a file path")
    cache: bool = True
    cache_path: str | None = None
    history: Literal["original", "all-history"] = Field(
        "all-history", description="conversational datasets: the question alone, or with all previous turns"
    )
    # scoring (never changes generation) --------------------------------------------------------
    metrics: list[str] | None = Field(None, description="metric names; default: the dataset's")
    judge: str | None = Field(None, description="LLM judge model (none unless asked: it costs money)")
    bleurt_checkpoint: str | None = Field(None, description="BLEURT checkpoint directory")
    # cost (never changes generation) -------------------------------------------------------------
    max_cost: float | None = Field(
        None, ge=0, le=1_000_000, description="USD: stop before a request could pass this budget"
    )
    price_table: str | None = Field(None, description="price table YAML (default: harness/prices.yaml)")
    # open-book and evidence-provided ------------------------------------------------------------
    snapshot: str | None = Field(None, description="wiki snapshot (SQLite) the settings read pages from")
    search_style: Literal["fanoutqa", "paper-2024"] = Field(
        "fanoutqa", description="search tool replies: fanoutqa | paper-2024"
    )
    chunk_size: int = Field(1024, ge=64, le=10_000_000, description="characters per chunk (FanOutQA's chunker)")
    ranking_query: Literal["question", "query"] = Field(
        "question", description="rank a page's chunks by the question or the tool's query"
    )
    budget_fraction: float = Field(0.5, gt=0, le=1, description="share of the context one search result may use")
    max_similar: int = Field(10, ge=0, le=10_000, description="similar titles offered when a title is not found")
    bm25_k1: float = Field(1.5, ge=0, le=100)
    bm25_b: float = Field(0.75, ge=0, le=1)
    bm25_delta: float = Field(1.0, ge=0, le=100)
    max_rounds: int = Field(20, ge=1, le=10_000, description="model turns per sample in the open-book loop")
    context_policy: Literal["stop", "drop-oldest"] = Field(
        "stop", description="when the conversation fills the context: stop | drop-oldest"
    )
    evidence_reserve: int = Field(520, ge=0, le=10_000_000, description="tokens kept free for the answer (paper: 520)")
    repeat_question: bool = Field(False, description="repeat the question after each retrieval (paper F.2)")
    text_protocol_strict: bool = Field(True, description="<search> must open the reply (the paper's parser)")
    # retrieve-read: corpus-level retrieve-and-read baselines over a passage index ---------------
    retriever: Literal["bm25", "dense"] = Field("bm25", description="passage index the retrieve-read strategies search")
    retrieval_k: int | None = Field(
        None,
        ge=1,
        le=1_000_000,
        description="passages (classify: entities) retrieved; default: the strategy's (15, 200, 100)",
    )
    passage_kind: str | None = Field(
        None, pattern=r"^(words\d+|chunk\d+|page)$", description="words100 | chunk1024 | page; default: the strategy's"
    )
    question_representation: Literal["original", "all-history", "rewritten"] = Field(
        "all-history", description="conversations: what retriever and reader see (TopiOCQA section 5.1.2)"
    )
    classify_doc_tokens: int = Field(
        384, ge=16, le=1_000_000, description="retrieve-classify: document tokens shown (QUEST: 384)"
    )
    generation: GenerationParams = Field(default_factory=GenerationParams)
    backend: BackendOptions = Field(default_factory=BackendOptions)

    def identity(self, extra: dict[str, Any] | None = None) -> dict[str, Any]:
        data = self.model_dump(mode="json")
        for key in NOT_HASHED:
            data.pop(key, None)
        for key in BACKEND_NOT_HASHED:
            data["backend"].pop(key, None)
        if extra:
            data.update(extra)
        return data

    def scoring_options(self):
        from harness.scoring.metrics import ScoringOptions

        return ScoringOptions(judge=self.judge, bleurt_checkpoint=self.bleurt_checkpoint, cache_path=self.cache_path)

    def config_hash(self, extra: dict[str, Any] | None = None) -> str:
        """``extra`` adds resolved facts (dataset version and sha256, prompt sha256)."""
        canonical = json.dumps(self.identity(extra), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()


# Flat flag name -> path in RunConfig. YAML files use the same flat names.
GENERATION_KEYS = {"temperature", "top_p", "max_tokens", "seed"}
BACKEND_KEYS = {
    "base_url",
    "context_size",
    "request_timeout",
    "max_attempts",
    "retry_max_wait",
    "startup_timeout",
    "n_threads",
    "server_args",
}


OPTION_NAMES = set(RunConfig.model_fields) | GENERATION_KEYS | BACKEND_KEYS


def build_config(flat: dict[str, Any]) -> RunConfig:
    """Turn flat knobs (flags or YAML) into a validated RunConfig; errors are one line."""
    top: dict[str, Any] = {}
    generation: dict[str, Any] = {}
    backend: dict[str, Any] = {}
    for key, value in flat.items():
        key = key.replace("-", "_")
        if value is None:
            continue
        if key in GENERATION_KEYS:
            generation[key] = value
        elif key in BACKEND_KEYS:
            backend[key] = value
        elif key in ("generation", "backend") and isinstance(value, dict):
            (generation if key == "generation" else backend).update(value)
        else:
            top[key] = value
    for key in ("sample_ids", "metrics"):
        if isinstance(top.get(key), str):
            top[key] = [s for s in top[key].split(",") if s]
    try:
        return RunConfig(**top, generation=GenerationParams(**generation), backend=BackendOptions(**backend))
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = [str(p) for p in first["loc"] if not isinstance(p, int)]
        name = loc[-1] if loc and loc[0] in ("generation", "backend") else (loc[0] if loc else "")
        option = f"--{name.replace('_', '-')}" if name in OPTION_NAMES else (".".join(loc) or "config")
        got = first.get("input")
        shown = f" (got {got!r})" if isinstance(got, (int, float, str)) and len(repr(got)) < 80 else ""
        raise ConfigError(f"{option}: {first['msg'].lower()}{shown}") from None
    except TypeError as exc:
        raise ConfigError(f"invalid configuration: {exc}") from None


def load_yaml(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    from harness.records import read_input_text

    text = read_input_text(path, "--config")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"--config {path}: not valid YAML ({str(exc).splitlines()[0]})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"--config {path}: expected a mapping of option names to values")
    return data
