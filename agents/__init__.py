"""Agent strategies: one file each, registered by name with ``@register_agent``.

A strategy turns one sample into an answer by calling ``ctx.generate`` (which counts calls and
tokens, and goes through the response cache) as often as it likes. Each setting names its
default strategy; ``--agent NAME`` picks another.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

from harness.cache import ResponseCache, cache_key, is_cacheable
from harness.config import RunConfig
from harness.datasets.base import Sample
from harness.errors import ConfigError
from harness.models.base import GenerationParams, ModelBackend, ModelResponse, Usage
from harness.registry import Registry


@dataclass
class SampleResult:
    answer: str | None
    messages: list[dict[str, Any]]
    extra: dict[str, Any] = field(default_factory=dict)


class AgentContext:
    """What a strategy may use for one sample; tallies what it spent."""

    def __init__(self, model: ModelBackend, params: GenerationParams, cache: ResponseCache | None, budget: Any = None):
        self.model = model
        self.params = params
        self.cache = cache
        self.budget = budget  # harness.cost.Budget (--max-cost): may refuse a request before it is sent
        self.model_calls = 0  # requests actually sent to the model (cache hits excluded)
        self.cache_hits = 0
        self.usage = Usage()
        self.sent_usage = Usage()  # tokens of the requests actually sent: what is billed
        self.finish_reasons: list[str | None] = []

    async def generate(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        tool_choice: Any = None,
        params: GenerationParams | None = None,
    ) -> ModelResponse:
        params = params or self.params
        key = None
        if self.cache is not None and is_cacheable(params):
            key = cache_key(self.model.cache_identity(), messages, params, tools, tool_choice)
            hit = self.cache.get(key)
            if hit is not None:
                self.cache_hits += 1
                self._tally(hit)
                return hit
        hold = self.budget.reserve(self.model, messages, tools, params) if self.budget is not None else None
        self.model_calls += 1
        response = None
        try:
            response = await self.model.generate(messages, params, tools, tool_choice)
        finally:
            if hold is not None:
                self.budget.settle(hold, response.usage if response is not None else None)
        self.sent_usage.prompt_tokens += response.usage.prompt_tokens
        self.sent_usage.completion_tokens += response.usage.completion_tokens
        if key is not None:
            self.cache.put(key, response)
        self._tally(response)
        return response

    def _tally(self, response: ModelResponse) -> None:
        self.usage.prompt_tokens += response.usage.prompt_tokens
        self.usage.completion_tokens += response.usage.completion_tokens
        self.finish_reasons.append(response.finish_reason)


class Agent(ABC):
    name: ClassVar[str]
    default_template: ClassVar[str | None] = None  # a template in prompts/; --prompt-template overrides
    # fields the strategy fills besides {question} and {current_date}; checked before the run
    template_fields: ClassVar[tuple[str, ...]] = ()
    needs_snapshot: ClassVar[bool] = False
    needs_context_size: ClassVar[bool] = False  # packs pages by token budget: refused without one

    def __init__(self, config: RunConfig):
        self.config = config
        self.template = self.template_source = self.template_sha256 = None
        if self.default_template:
            from prompts import load_template

            self.template, self.template_source, self.template_sha256 = load_template(
                config.prompt_template or self.default_template
            )

    def prepare(self, model: ModelBackend, snapshot: Any | None) -> None:
        """Called once the model is started (context size known) and the snapshot opened."""
        self.model = model
        self.snapshot = snapshot

    def prompt(self, question: str, **fields: Any) -> str:
        return self.template.format(question=question, current_date=self.config.current_date, **fields)

    def check_template(self, samples: list[Sample]) -> None:
        """Render the template for every sample (other fields blank), so a template that names a
        field this strategy does not fill fails before the first request, not on sample 1."""
        if not self.template:
            return
        blanks = {name: "" for name in self.template_fields}
        for sample in samples:
            try:
                self.prompt(sample.question, **blanks)
            except KeyError as exc:
                known = ", ".join("{" + f + "}" for f in ("question", "current_date", *self.template_fields))
                raise ConfigError(
                    f"prompt template {self.template_source} uses {{{exc.args[0]}}}, which agent {self.name} "
                    f"does not fill (it fills {known})"
                ) from None
            except (IndexError, ValueError, AttributeError) as exc:
                raise ConfigError(
                    f"prompt template {self.template_source} does not render for sample {sample.id}: {exc} "
                    "(literal braces must be doubled: {{ }})"
                ) from None

    def identity(self) -> dict[str, Any]:
        """Facts that change the prompts (hashed into the run directory key)."""
        if not self.template:
            return {}
        return {"prompt_template": self.template_source, "prompt_sha256": self.template_sha256}

    def describe(self) -> dict[str, Any]:
        """Knobs recorded in results.json."""
        return {"name": self.name, **self.identity()}

    @abstractmethod
    async def solve(self, sample: Sample, ctx: AgentContext) -> SampleResult: ...


AGENTS: Registry[type[Agent]] = Registry("agent")

# setting -> its default strategy
SETTINGS: dict[str, str] = {
    "closed-book": "closed-book",
    "open-book": "open-book-native",
    "evidence-provided": "evidence-provided",
    "retrieve-read": "retrieve-read-joint",
}

# strategy name -> the module that registers it (imported only when used)
AGENT_MODULES = {
    "closed-book": "agents.closed_book",
    "open-book-native": "agents.open_book_native",
    "open-book-text": "agents.open_book_text",
    "evidence-provided": "agents.evidence_provided",
    "entity-set": "agents.entity_set",
    "conversational": "agents.conversational",
    "conversational-open-book": "agents.conversational_open_book",
    "retrieve-read-joint": "agents.retrieve_read_joint",
    "retrieve-read-each": "agents.retrieve_read_each",
    "retrieve-classify": "agents.retrieve_classify",
}


def register_agent(name: str):
    def decorator(cls: type[Agent]) -> type[Agent]:
        cls.name = name
        return AGENTS.register(name)(cls)

    return decorator


def create_agent(config: RunConfig) -> Agent:
    if config.setting not in SETTINGS:
        raise ConfigError(f"unknown setting {config.setting!r} (known: {', '.join(sorted(SETTINGS))})")
    name = config.agent or SETTINGS[config.setting]
    if name in AGENT_MODULES:
        importlib.import_module(AGENT_MODULES[name])
    if name not in AGENTS:
        raise ConfigError(f"unknown agent {name!r} (known: {', '.join(AGENT_MODULES)})")
    return AGENTS.get(name)(config)
