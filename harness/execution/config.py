"""Run configuration: every policy knob in one pydantic model, recorded in every results file.

Sources, weakest first: the defaults below (the FanOutQA paper's values), a YAML file
(``--config run.yaml``, keys are the long flag names), then command-line flags.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    field_serializer,
    field_validator,
    model_validator,
)

from harness.errors import ConfigError, HarnessError
from harness.execution.shard_env import is_auto, shard_from_env
from harness.models import DEFAULT_MODEL, DEFAULT_MODEL_MAX_TOKENS, parse_model
from harness.models.base import WEEK_S, BackendOptions, GenerationParams

# Fields that do not change what the model is asked or how it answers: a run can be
# extended (--limit), resumed or sped up without starting a new run directory.
# The snapshot is hashed by its content hash (added by the runner), not by where the file lies.
NOT_HASHED = frozenset(
    {
        "limit",
        "sample_ids",
        # which samples of the run this invocation selects (or retries): never what they are asked
        "sample_filter",
        "shuffle",
        "shuffle_seed",
        "stratify_by",
        "only_failed",
        # which part of the selection this run directory holds: every shard of a run has the run's key,
        # so its shards merge into it (``harness merge``); a run directory holds one shard
        "shard",
        "shard_env",  # where --shard auto read I/K from: the key is the explicit --shard I/K's
        # how the shards were started (--launcher ray): a launched run equals the same run on one machine
        "launcher",
        # where the finished run is also logged (--log-to wandb,mlflow): a copy of its numbers, never an answer
        "log_to",
        "out",
        "max_connections",
        "cache",
        "cache_path",
        "sample_timeout",
        "freeze_grace",
        "snapshot",
        # --search mediawiki: the API and the date enter the key through the backend's content hash (as a
        # snapshot's does); the rate limit never changes an answer
        "search_api_url",
        "search_date",
        "search_rate_limit",
        # --search-url: where the snapshot is served from; the snapshot enters the key by its content hash,
        # fetched from the service, so a run over the service and one over the file share their key
        "search_url",
        "search_max_attempts",
        "metrics",
        "judge",
        "bleurt_checkpoint",
        "stream_scoring",
        "metric_timeout",
        # epochs repeat the same questions in the same run directory (like --limit, more resumes it);
        # the reducer only changes how their scores combine
        "epochs",
        "epoch_reducer",
        "cluster_by",  # error bars only: scoring, never generation
        "strip_reasoning",  # what is scored, never what is asked
        "metric_options",
        "max_answer_chars",  # how much of an answer is scored (it is kept whole)
        "max_cost",  # like --limit: raising the budget resumes the same run
        "price_table",
        # the strategy enters the key through its identity (resolved name, plugin, knobs by value)
        "agent",
        "agent_args",
        "prompt_template",  # hashed as the template's source and sha256, in the strategy's identity
    }
)
# how requests are carried out, not what is asked: a retried or refused reply never changes an answer
# kept; the provider's prompt cache changes the bill, never the answer
BACKEND_NOT_HASHED = frozenset(
    {
        "request_timeout",
        "max_attempts",
        "retry_max_wait",
        "startup_timeout",
        "n_threads",
        "max_response_bytes",
        "prompt_cache",
        "batch_window",
        "batch_poll_interval",
        "http_client",
    }
)


class RunConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", protected_namespaces=(), allow_inf_nan=False)

    model: str = DEFAULT_MODEL
    setting: str | None = Field(None, description="closed-book | open-book | evidence-provided | retrieve-read; "
                                "default: the strategy's first (closed-book without --agent)")
    agent: str | None = Field(None, description="strategy: a name, FILE.py:NAME or package.module:NAME; "
                              "default: the setting's own")
    agent_args: dict[str, Any] = Field(
        default_factory=dict, description="the strategy's knobs (--agent-arg KEY=VALUE, YAML agent: section)"
    )
    dataset: str = "fanoutqa:dev"
    data_path: str | None = None
    limit: int | None = Field(None, ge=1, le=1_000_000_000)
    sample_ids: list[str] | None = None
    sample_filter: list[str] | None = Field(
        None, description="FIELD=VALUE on the dataset's group fields (repeat: the same field any of, fields all of)"
    )
    shuffle: bool = Field(False, description="shuffle the selected samples (with --limit: a random subset)")
    shuffle_seed: int | None = Field(None, ge=0, le=2**32 - 1, description="default: --seed")
    stratify_by: str | None = Field(
        None, description="with --limit: a subset proportional to this group field (largest remainder)"
    )
    only_failed: bool = Field(False, description="retry only the samples that failed earlier in this run directory")
    shard: str | None = Field(
        None,
        description="I/K: run only shard I of K of the selected questions (each with all its epochs); "
        "harness merge joins the K shards into the whole run; auto: I and K from the scheduler's variables "
        "(Slurm job array, Kubernetes Indexed Job, HARNESS_SHARD_INDEX/COUNT), recorded here as I/K",
    )
    shard_env: dict[str, str] | None = Field(
        None,
        description="--shard auto: the scheduler's variables I/K was read from, as set (e.g. SLURM_ARRAY_TASK_ID)",
    )
    launcher: Literal["ray"] | None = Field(
        None,
        description="what started this run's shards: ray (harness run --shards K --launcher ray); recorded, "
        "not hashed: a launched run is the same run as on one machine",
    )
    log_to: list[str] | None = Field(
        None,
        description="experiment trackers the finished run is also logged to (wandb, mlflow): its configuration, "
        "numbers with their intervals, per-question table and report; recorded, not hashed",
    )
    out: str | None = None
    max_connections: int = Field(4, ge=1, le=10_000)
    sample_timeout: float = Field(600.0, gt=0, le=WEEK_S, description="seconds per sample (paper: 600)")
    freeze_grace: float = Field(
        60.0,
        gt=0,
        le=WEEK_S,
        description="a strategy holding the event loop (a blocking call) past --sample-timeout plus this many "
        "seconds ends the run, exit status 5 (it never returns control: no sample can go on)",
    )
    current_date: str = Field("11-20-2023", description="'Current date' in the FanOutQA prompts")
    prompt_template: str | None = Field(None, description="template name in prompts/ or a file path")
    # Opt-in instructions added to the prompt whose reply is the answer (harness.strategy.answer_instructions):
    # in the run key when on (they change what is asked), left out when off (keys made before them kept)
    confidence: bool = Field(
        False,
        description="ask for a stated confidence with each answer (BrowseComp's 'Confidence: ...%' line, "
        "prompts/instructions/confidence.txt); read and removed before scoring, scored by the calibration metric",
        json_schema_extra={"neutral": False},
    )
    citations: bool = Field(
        False,
        description="ask each answer to cite the Wikipedia pages it rests on as [Title] (BrowseComp-Plus's "
        "citations, prompts/instructions/citations.txt); read and removed before scoring, scored by the citations metric",
        json_schema_extra={"neutral": False},
    )
    cache: bool = True
    cache_path: str | None = None
    # scoring (never changes generation) --------------------------------------------------------
    metrics: list[str] | None = Field(None, description="metric names; default: the dataset's")
    judge: str | list[str] | None = Field(
        None,
        description="LLM judge model (none unless asked: it costs money); several (a list, comma-separated or "
        "--judge repeated): each question the majority's verdict, each judge's share and their agreement",
    )
    bleurt_checkpoint: str | None = Field(None, description="BLEURT checkpoint directory")
    cluster_by: str | None = Field(
        None, description="sample field whose questions share a cluster in the error bars (e.g. category); "
        "default: the dataset's (TopiOCQA: Conversation_no), 'none' for independent questions"
    )
    strip_reasoning: bool = Field(
        True, description="score answers without their <think>/<reasoning> blocks (the rows keep them)"
    )
    metric_options: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="each metric's options (--metric-option NAME.KEY=VALUE, YAML metric_options: "
        "{quest: {light: true}}), checked against the metric's declared options; default: the official values",
    )
    max_answer_chars: int = Field(
        100_000, ge=1_000, le=10_000_000, description="longer answers are scored on their first this-many characters"
    )
    stream_scoring: Literal["auto", "on", "off"] = Field(
        "auto",
        description="score samples in a worker process as they finish (auto: from 64 samples to do; "
        "below that the end-of-run batch is cheaper than starting the worker)",
    )
    metric_timeout: float = Field(
        600.0, gt=0, le=WEEK_S, description="seconds one plugin metric may take scoring (past it: that metric's "
        "failure, recorded in scores.meta.failed_metrics)",
    )
    epochs: int = Field(
        1, ge=1, le=1000, description="times each question is run (each epoch's seed is --seed + epoch - 1)"
    )
    epoch_reducer: Literal["mean", "max", "mode"] = Field(
        "mean", description="how a question's epochs combine into its score: mean, max (pass@N-like), mode"
    )
    # cost (never changes generation) -------------------------------------------------------------
    max_cost: float | None = Field(
        None, ge=0, le=1_000_000, description="USD: stop before a request could pass this budget"
    )
    price_table: str | None = Field(None, description="price table YAML (default: harness/prices.yaml)")
    snapshot: str | None = Field(None, description="wiki snapshot (SQLite) the strategies read pages from")
    search_space: Literal["evidence-only"] | None = Field(
        None,
        json_schema_extra={"neutral": None},  # unset: out of the run key, so keys made before it are unchanged
        description="evidence-only: searching a snapshot of a dataset's evidence (or contexts) is meant; "
        "without it a searching strategy over one is refused",
    )
    # "snapshot" left out of the run key: runs made before this field keep theirs
    search: Literal["snapshot", "mediawiki"] = Field(
        "snapshot",
        description="what the open-book search asks: the --snapshot, or the live MediaWiki API as FanOutQA's "
        "code does (network; pages at their revision as of --search-date)",
        json_schema_extra={"neutral": "snapshot"},
    )
    search_api_url: str | None = Field(None, description="--search mediawiki: api.php (default English Wikipedia's)")
    search_date: str | None = Field(
        None, description="--search mediawiki: read each page at its revision as of this date (default: FanOutQA's "
        "2023-11-20, the dataset's epoch)"
    )
    search_rate_limit: float | None = Field(
        None, ge=0, le=1000, description="--search mediawiki: requests per second (default 1; 0 = no limit)"
    )
    search_url: str | None = Field(
        None,
        description="a search service (harness search serve SNAPSHOT) the strategies read pages and passages "
        "from instead of --snapshot; recorded without credentials",
    )
    search_max_attempts: int = Field(
        4, ge=1, le=100, description="--search-url: tries per request (waits 0.25 s, 0.5 s, 1 s, ... between); "
        "past them the sample fails as search_unavailable, retried by a rerun",
    )
    generation: GenerationParams = Field(default_factory=GenerationParams)
    backend: BackendOptions = Field(default_factory=BackendOptions)

    # where generation.max_tokens came from (results.json max_tokens_source); set by the validator below
    _max_tokens_source: str = PrivateAttr("")

    @model_validator(mode="after")
    def _default_answer_length(self) -> RunConfig:
        """The answer budget where --max-tokens does not say: the embedded default model's
        DEFAULT_MODEL_MAX_TOKENS (measured on 20 FanOutQA closed-book questions, its scores at 128,
        256 and 512 tokens are equal, its longer answers are repetition, while the wall doubles:
        README); a model whose facts entry (harness/models/model_facts.yaml) gives
        ``default_max_tokens`` (reasoning or thinking shares the budget with the answer: 512 leaves
        a reasoning model an empty reply) that number; else GenerationParams' 512. A config read
        back from a run's files has max_tokens set: its source is the one the run recorded."""
        if "max_tokens" in self.generation.model_fields_set:
            self._max_tokens_source = "--max-tokens"
            return self
        if self.model == DEFAULT_MODEL:
            number, source = DEFAULT_MODEL_MAX_TOKENS, "embedded default model, measured (README)"
        else:
            facts = _model_facts(self.model)
            # only where reasoning or thinking shares the budget in this run: a Claude that thinks only
            # when given --thinking-budget keeps 512 without one
            thinks = facts is not None and (
                facts.reasoning
                or facts.thinking == "always"
                or (
                    facts.thinking == "optional"
                    and (self.generation.thinking_budget is not None or self.generation.reasoning_effort is not None)
                )
            )
            if thinks and facts.default_max_tokens:
                number = facts.default_max_tokens
                source = f"model facts {facts.entry}: {facts.default_max_tokens_source or facts.source}"
            else:
                number, source = None, f"default {self.generation.max_tokens}"
        if number is not None:
            self.generation = self.generation.model_copy(update={"max_tokens": number})
        self._max_tokens_source = source
        return self

    @property
    def max_tokens_source(self) -> str:
        return self._max_tokens_source

    @model_validator(mode="before")
    @classmethod
    def _shard_auto(cls, data: Any) -> Any:
        """--shard auto becomes the I/K of the scheduler's variables (harness.execution.shard_env),
        here, so it is resolved (or refused in one line) before anything runs, from the CLI, a YAML
        file or the Python API alike; the variables read go to shard_env."""
        if isinstance(data, dict) and is_auto(data.get("shard")):
            spec, read = shard_from_env(os.environ)
            data = {**data, "shard": spec, "shard_env": read}
        return data

    @field_validator("shard", mode="before")
    @classmethod
    def _shard_spec(cls, value: Any) -> Any:
        if value is None:
            return None
        i, k = parse_shard(value)
        return f"{i}/{k}"

    @field_validator("search_url")
    @classmethod
    def _search_url(cls, value: str | None) -> str | None:
        if value is None:
            return value
        from harness.redact import http_url_parts, register_url_credentials, strip_credentials

        register_url_credentials(value)  # masked wherever it is said
        if http_url_parts(value) is None:
            raise ValueError(f"must be an http(s) URL like http://127.0.0.1:8765, not {strip_credentials(value)!r}")
        return value

    @field_serializer("search_url")
    def _search_url_written(self, value: str | None) -> str | None:
        from harness.redact import strip_credentials

        return strip_credentials(value)

    @field_validator("log_to", mode="before")
    @classmethod
    def _trackers(cls, value: Any) -> Any:
        """``wandb,mlflow`` or a list (--log-to repeated, each maybe comma-separated) -> their names, each
        once; which names exist is checked where a run starts (``harness.api.build_run_config``), so a
        results.json naming a tracker this machine lacks still reads."""
        if value is None:
            return None
        items = value if isinstance(value, list) else [value]
        if not all(isinstance(item, str) for item in items):
            raise ValueError(f"expected tracker names (wandb, mlflow), got {value!r}")
        names = [name.strip() for item in items for name in item.split(",") if name.strip()]
        if not names:
            raise ValueError(f"{','.join(items)!r} names no tracker (expected wandb, mlflow or both, comma-separated)")
        return list(dict.fromkeys(names))

    @field_validator("judge", mode="before")
    @classmethod
    def _judges(cls, value: Any) -> Any:
        from harness.scoring.metrics import judge_value

        return judge_value(value)

    def identity(self, extra: dict[str, Any] | None = None) -> dict[str, Any]:
        """Core options that change what the model is asked, by value; a field added later with a
        declared neutral value (``harness.strategy.knob``) is left out while it has that value."""
        from harness.strategy import keyed_values

        data = keyed_values(self)
        for key in NOT_HASHED:
            data.pop(key, None)
        for key in BACKEND_NOT_HASHED:
            data["backend"].pop(key, None)
        urls = data["backend"].get("base_url")
        if isinstance(urls, str) and "," in urls:
            # several servers are replicas balanced per request: their order does not change the run
            data["backend"]["base_url"] = ",".join(sorted(u.strip() for u in urls.split(",")))
        if extra:
            data.update(extra)
        return data

    def scoring_options(self):
        from harness.scoring.metrics import ScoringOptions

        return ScoringOptions(
            judge=self.judge,
            bleurt_checkpoint=self.bleurt_checkpoint,
            cache_path=self.cache_path,
            cluster_by=self.cluster_by,
            strip_reasoning=self.strip_reasoning,
            metric_options=self.metric_options,
            max_answer_chars=self.max_answer_chars,
            metric_timeout=self.metric_timeout,
            confidence=self.confidence,
            citations=self.citations,
        )

    def config_hash(self, extra: dict[str, Any] | None = None) -> str:
        """``extra`` adds resolved facts (dataset version and sha256, prompt sha256)."""
        canonical = json.dumps(self.identity(extra), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()


def _model_facts(model: str):
    """The facts table's entry for ``--model`` (None: unknown, or a spec the backend will refuse)."""
    from harness.models.facts import facts_for

    try:
        prefix, name = parse_model(model)
    except HarnessError:
        return None
    return facts_for(prefix, name)


SHARD_FORM = "expected I/K, shard I of K with 1 <= I <= K (e.g. --shard 2/3), or auto (from the scheduler)"


def parse_shard(value: Any) -> tuple[int, int]:
    """``"2/3"`` -> (2, 3); anything else (``0/3``, ``4/3``, ``x``) is a ValueError of one line."""
    text = str(value).strip() if isinstance(value, (str, int)) and not isinstance(value, bool) else None
    parts = text.split("/") if text else []
    if len(parts) != 2 or not all(p.strip().isascii() and p.strip().isdigit() for p in parts):
        raise ValueError(f"{value!r}: {SHARD_FORM}")
    i, k = (int(p) for p in parts)
    if not 1 <= i <= k or k > 1_000_000:
        raise ValueError(f"{value!r}: shard {i} of {k}: {SHARD_FORM}")
    return i, k


# Flat flag name -> path in RunConfig. YAML files use the same flat names.
GENERATION_KEYS = {"temperature", "top_p", "max_tokens", "seed", "reasoning_effort", "thinking_budget"}
BACKEND_KEYS = {
    "base_url",
    "context_size",
    "request_timeout",
    "max_response_bytes",
    "max_attempts",
    "retry_max_wait",
    "startup_timeout",
    "n_threads",
    "weight_repack",
    "server_args",
    "prompt_cache",
    "batch",
    "batch_window",
    "batch_poll_interval",
    "http_client",
    "tool_parser",
    "reasoning_parser",
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
    if isinstance(top.get("sample_filter"), str):  # YAML: one FIELD=VALUE
        top["sample_filter"] = [top["sample_filter"]]
    for key in ("sample_ids", "metrics"):
        if key in top:
            top[key] = name_list(top[key], "--sample-id" if key == "sample_ids" else "--metrics")
    # YAML ``agent: {name: open-book-text, max_rounds: 5}``: the name plus its knobs
    if isinstance(top.get("agent"), dict):
        section = dict(top.pop("agent"))
        if section.get("name") is not None:
            top["agent"] = section.pop("name")
        top["agent_args"] = {**section, **parse_agent_args(top.get("agent_args"))}
    elif "agent_args" in top:
        top["agent_args"] = parse_agent_args(top["agent_args"])
    if "metric_options" in top:
        from harness.scoring.metrics import validate_metric_options

        top["metric_options"] = validate_metric_options(parse_metric_options(top["metric_options"]))
    try:
        return RunConfig(**top, generation=GenerationParams(**generation), backend=BackendOptions(**backend))
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = [str(p) for p in first["loc"] if not isinstance(p, int)]
        name = loc[-1] if loc and loc[0] in ("generation", "backend") else (loc[0] if loc else "")
        option = f"--{name.replace('_', '-')}" if name in OPTION_NAMES else (".".join(loc) or "config")
        if first["type"] == "value_error":  # the validator's own sentence: it shows a URL without its credential
            raise ConfigError(f"{option}: {first['ctx']['error']}") from None
        got = first.get("input")
        shown = f" (got {got!r})" if isinstance(got, (int, float, str)) and len(repr(got)) < 80 else ""
        raise ConfigError(f"{option}: {first['msg'].lower()}{shown}") from None
    except TypeError as exc:
        raise ConfigError(f"invalid configuration: {exc}") from None


def name_list(value: Any, option: str) -> Any:
    """``"a,b"`` -> ["a", "b"]; a value that names nothing (``","``, ``""``, ``[]``) is refused: it
    would otherwise select everything (every sample, the default metrics) without a word."""
    names = [s.strip() for s in value.split(",") if s.strip()] if isinstance(value, str) else value
    if isinstance(names, list) and not names:
        raise ConfigError(f"{option} {value!r}: names nothing (expected comma-separated names)")
    return names


def parse_agent_args(value: Any) -> dict[str, Any]:
    """``["max_rounds=5", "retriever=dense"]`` (repeated --agent-arg) or a mapping -> {knob: value}.
    A CLI value is read as JSON when it is JSON (``5``, ``0.5``, ``true``, ``null``, ``[1, 2]``), else
    kept as text; the strategy's pydantic knobs then check and convert it."""
    if value is None:
        return {}
    if isinstance(value, dict):
        return dict(value)
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        raise ConfigError(f"--agent-arg: expected KEY=VALUE strings or a mapping, got {type(value).__name__}")
    out: dict[str, Any] = {}
    for item in value:
        if isinstance(item, dict):
            out.update(item)
            continue
        key, sep, text = str(item).partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key.isidentifier():
            raise ConfigError(f"--agent-arg {item!r}: expected KEY=VALUE, e.g. --agent-arg max_rounds=5")
        out[key] = _agent_value(text.strip())
    return out


def parse_metric_options(value: Any) -> dict[str, dict[str, Any]]:
    """``["quest.light=true", "set-f1.clean_items=true"]`` (repeated --metric-option) and/or mappings
    (YAML ``metric_options: {quest: {light: true}}``) -> {metric: {option: value}}, later ones over
    earlier ones. A CLI value is read as JSON when it is JSON, else kept as text (as --agent-arg)."""
    if value is None:
        return {}
    items = value if isinstance(value, list) else [value]
    out: dict[str, dict[str, Any]] = {}
    for item in items:
        if isinstance(item, dict):
            for metric, values in item.items():
                if not isinstance(values, dict):
                    raise ConfigError(f"metric_options.{metric}: expected a mapping of option names to values")
                out.setdefault(str(metric), {}).update(values)
            continue
        if not isinstance(item, str):
            raise ConfigError(
                f"--metric-option: expected NAME.KEY=VALUE strings or a mapping, got {type(item).__name__}"
            )
        target, sep, text = item.partition("=")
        metric, dot, key = target.strip().rpartition(".")
        key = key.strip()
        if not sep or not dot or not metric.strip() or not key.isidentifier():
            raise ConfigError(
                f"--metric-option {item!r}: expected NAME.KEY=VALUE, e.g. --metric-option quest.light=true"
            )
        out.setdefault(metric.strip(), {})[key] = _agent_value(text.strip())
    return out


def _agent_value(text: str) -> Any:
    if text.lower() in ("none", "null"):
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


def load_yaml(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    from harness.records import MAX_SMALL_BYTES, read_input_text

    text = read_input_text(path, "--config", ConfigError, MAX_SMALL_BYTES)
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"--config {path}: not valid YAML ({str(exc).splitlines()[0]})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"--config {path}: expected a mapping of option names to values")
    return data


# --------------------------------------------------------------------------- what changed between two run keys
# resolved facts of a run key (config.json next to ``config``) that say a file's content, and the
# config field that names the file
_CONTENT_FACTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "agent_identity.plugin.sha256": ("the strategy file", ("agent",)),
    "backend_plugin.sha256": ("the backend file", ("model",)),
    "dataset_plugin.sha256": ("the dataset loader file", ("dataset",)),
    "script.sha256": ("the script file", ("model",)),
    "dataset_sha256": ("the dataset file", ("data_path", "dataset_resolved")),
    "agent_identity.prompt_sha256": ("the prompt template", ("agent_identity.prompt_template",)),
    "snapshot_content_hash": ("the snapshot", ()),
}


def flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    """``{"generation": {"seed": 0}}`` -> ``{"generation.seed": 0}``; an empty mapping stays a value
    (``agent_args: {}``), lists stay values."""
    if isinstance(data, dict) and data:
        out: dict[str, Any] = {}
        for key, value in data.items():
            out.update(flatten(value, f"{prefix}{key}."))
        return out
    return {prefix.rstrip("."): data}


_ABSENT = object()


def _shown(value: Any) -> str:
    text = "(not set)" if value is _ABSENT else json.dumps(value, default=str)
    return text if len(text) <= 80 else text[:77] + "..."


def _file_named(key: str, value: str) -> str:
    """The file a reference names: ``p.py:Name`` -> ``p.py``, ``scripted/s.py:fn`` -> ``s.py``,
    ``p.py:Loader:dev@v1`` -> ``p.py``; anything else as it is."""
    from harness.registry import split_reference

    if key == "script.sha256":
        return value.partition("/")[2].rpartition(":")[0] or value
    ref = split_reference(value)
    return ref[0].rpartition(":")[0] if ref else value


def identity_changes(old: dict[str, Any], new: dict[str, Any], names: dict[str, Any] | None = None) -> list[str]:
    """Each field in which two run keys (``RunConfig.identity`` with its resolved facts) differ,
    ``field old -> new``; a file's content (a plugin, the dataset, the prompt) as ``... changed``,
    named by ``names`` (the new configuration's fields: ``agent``, ``model``, ``data_path``, ...)."""
    before, after = flatten(old), flatten(new)
    named_by = {**before, **after, **{k: v for k, v in (names or {}).items() if v}}
    skip: set[str] = set()
    if before.get("dataset") != after.get("dataset"):  # another dataset: its file differs with it
        skip |= {"dataset_resolved", "dataset_sha256", "dataset_plugin.sha256"}
    if before.get("agent_identity.name") != after.get("agent_identity.name"):  # another strategy: its own knobs, prompt
        skip |= {k for k in [*before, *after] if k.startswith("agent_identity.") and k != "agent_identity.name"}
    if before.get("model") != after.get("model"):
        skip |= {"backend_plugin.sha256", "script.sha256"}
    changes: list[str] = []
    for key in dict.fromkeys([*before, *after]):
        old_value, new_value = before.get(key, _ABSENT), after.get(key, _ABSENT)
        if old_value == new_value or key in skip:
            continue
        content = _CONTENT_FACTS.get(key)
        if content is not None and old_value is not _ABSENT and new_value is not _ABSENT:
            what, fields = content
            named = next((named_by[f] for f in fields if isinstance(named_by.get(f), str) and named_by[f]), None)
            where = f" {_file_named(key, named)}" if named else ""
            changes.append(f"{what}{where}: its content changed (sha256 {str(old_value)[:12]} -> {str(new_value)[:12]})")
            continue
        label = key
        if key == "agent_identity.name":
            label = "strategy"
        elif key.startswith("agent_identity.knobs."):
            label = f"knob {key.removeprefix('agent_identity.knobs.')}"
        changes.append(f"{label} {_shown(old_value)} -> {_shown(new_value)}")
    return changes
