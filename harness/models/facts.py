"""Facts about models the harness does not run itself: data with a source and a date, never a regex.

One table, ``harness/models/model_facts.yaml``, says per model (or open-weights family): whether it
reasons before it answers, whether it thinks always / optionally / never, which sampling parameters
it takes, the name of its output-token parameter, its context window and largest input, which API
the ``openai/`` backend sends it to, whether chat completions takes function tools while it reasons,
the shortest prompt its provider caches, the answer budget to default to, and (open families) the
vLLM tool-call and reasoning parsers. Every entry carries ``source`` and ``retrieved``.

Lookup (``facts_for``):

* API models (``openai/``, ``anthropic/``): the exact name, or the name with a snapshot date or
  ``-latest`` after it (``claude-opus-4-5-20251101``, ``gpt-5-2025-08-07``). Nothing else: an
  unlisted ``gpt-5.7`` or ``claude-opus-4-9`` is *unknown*, and the backend probes it at pre-flight
  (one tiny request before any sample) rather than inheriting a neighbour's facts.
* Open-weights families (keys ``hf/FAMILY``, for ``vllm/``, ``llamacpp-server/`` and ``openai/``
  behind ``--base-url``): the last path component of the model name (``Qwen/Qwen3-8B`` -> ``Qwen3-8B``)
  starting with the family name and then ``-`` or its end, case-insensitive, longest family first.

A file of the same layout given by ``HARNESS_MODEL_FACTS`` (or ``load_facts(path)``) replaces the
table; what a run used is recorded (``ModelFacts.describe``: the entry, its source and date).
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from harness.errors import ConfigError

DEFAULT_FACTS_PATH = Path(__file__).resolve().with_name("model_facts.yaml")
FACTS_ENV = "HARNESS_MODEL_FACTS"
SAMPLING_PARAMS = ("temperature", "top_p", "top_k")
_SNAPSHOT_SUFFIX = re.compile(r"-(\d{4}-\d{2}-\d{2}|\d{8}|latest)$")


class ModelFacts(BaseModel):
    """What one table entry says; ``None`` where the table says nothing (the backend's default)."""

    model_config = ConfigDict(extra="forbid")

    entry: str = ""  # the table key matched (set by the lookup)
    # reasons (hidden reasoning tokens, billed as output) before answering
    reasoning: bool = False
    # Anthropic extended thinking / an open model's <think>: never, optional (a budget turns it on), always
    thinking: Literal["never", "optional", "always"] = "never"
    # openai/ only: the endpoint it is sent to (responses: /v1/responses, chat: /v1/chat/completions)
    api: Literal["chat", "responses", "messages"] | None = None
    # the sampling parameters it accepts; the others are never sent
    sampling: list[Literal["temperature", "top_p", "top_k"]] = Field(default_factory=lambda: list(SAMPLING_PARAMS))
    # the answer-length field on its chat endpoint (the Responses API always takes max_output_tokens)
    output_tokens_param: Literal["max_tokens", "max_completion_tokens", "max_output_tokens"] = "max_tokens"
    context_window: int | None = Field(None, ge=1)
    # the largest prompt: below the window where output shares it (gpt-5: 400k window, 272k input)
    max_input_tokens: int | None = Field(None, ge=1)
    max_output_tokens: int | None = Field(None, ge=1)
    # chat completions accepts function tools while the model reasons (gpt-5.6+: only at effort none)
    tools_with_reasoning_on_chat: bool = True
    # the reasoning efforts it accepts, and the one the provider uses when none is sent
    reasoning_efforts: list[str] | None = None
    default_reasoning_effort: str | None = None
    # the shortest prompt prefix the provider caches (tokens)
    cache_min_tokens: int | None = Field(None, ge=1)
    # the default answer budget (--max-tokens) where reasoning or thinking shares it, and why that number
    default_max_tokens: int | None = Field(None, ge=1)
    default_max_tokens_source: str | None = None
    # Anthropic: the smallest thinking budget, and the default budget where thinking is optional and asked
    min_thinking_budget: int | None = Field(None, ge=1)
    # vLLM: --tool-call-parser and --reasoning-parser for this family
    tool_parser: str | None = None
    reasoning_parser: str | None = None
    source: str
    retrieved: str

    @property
    def input_limit(self) -> int | None:
        """The most prompt tokens a request may hold: the input cap, else the window."""
        return self.max_input_tokens or self.context_window

    def takes(self, param: str) -> bool:
        return param in self.sampling

    def describe(self) -> dict[str, Any]:
        return self.model_dump(exclude_defaults=False)


class FactsTable(BaseModel):
    model_config = ConfigDict(extra="forbid")

    models: dict[str, ModelFacts]
    path: str = ""
    sha256: str = ""

    def lookup(self, prefix: str, name: str) -> ModelFacts | None:
        """The entry for ``prefix/name`` (see the module docstring), or None where it is unknown."""
        if prefix in ("openai", "anthropic"):
            for candidate in (name, _SNAPSHOT_SUFFIX.sub("", name)):
                hit = self.models.get(f"{prefix}/{candidate}")
                if hit is not None:
                    return hit.model_copy(update={"entry": f"{prefix}/{candidate}"})
        family = self.family(name)
        if family is not None:
            return family
        return None

    def family(self, name: str) -> ModelFacts | None:
        """The open-weights family (``hf/...``) whose name the model's last path component starts with."""
        base = name.rstrip("/").rsplit("/", 1)[-1].lower()
        best: tuple[int, str] | None = None
        for key in self.models:
            if not key.startswith("hf/"):
                continue
            stem = key[3:].lower()
            if base == stem or base.startswith(stem + "-"):
                if best is None or len(stem) > best[0]:
                    best = (len(stem), key)
        if best is None:
            return None
        return self.models[best[1]].model_copy(update={"entry": best[1]})

    def describe(self) -> dict[str, Any]:
        return {"path": self.path, "sha256": self.sha256}


def load_facts(path: str | Path | None = None) -> FactsTable:
    """The facts table at ``path`` (default: ``$HARNESS_MODEL_FACTS`` or the shipped one)."""
    path = Path(path or os.environ.get(FACTS_ENV) or DEFAULT_FACTS_PATH)
    from harness.records import read_yaml_table

    option = f"model facts ({FACTS_ENV})"
    raw, data = read_yaml_table(path, option, ConfigError, "PREFIX/NAME: {...}")
    models = {k: v for k, v in data["models"].items() if not str(k).startswith(".")}  # .anchors: templates
    try:
        table = FactsTable(models=models)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ConfigError(f"{option} {path}: {where}: {first['msg']}") from None
    table.path, table.sha256 = str(path), hashlib.sha256(raw).hexdigest()
    return table


@functools.lru_cache(maxsize=4)
def _cached(path: str) -> FactsTable:
    return load_facts(path)


def default_table() -> FactsTable:
    return _cached(str(os.environ.get(FACTS_ENV) or DEFAULT_FACTS_PATH))


def facts_for(prefix: str, name: str) -> ModelFacts | None:
    """The facts of ``prefix/name`` from the table in force, or None where it does not know the model."""
    return default_table().lookup(prefix, name)


__all__ = ["DEFAULT_FACTS_PATH", "FACTS_ENV", "FactsTable", "ModelFacts", "default_table", "facts_for", "load_facts"]
