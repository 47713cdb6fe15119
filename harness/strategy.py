"""The strategy interface: what an agent strategy is, what it may use per sample, and its knobs.

A strategy is one class: the settings it implements, its knobs (a small pydantic model), an
optional prompt template, and ``solve(sample, ctx)``. It calls the model only through
``ctx.generate`` (which counts calls and tokens, goes through the response cache and the budget).
Built-in strategies live in ``agents/``; others come from a ``FILE.py:NAME``, a
``package.module:NAME`` or an installed package's ``harness.agents`` entry point.

The run key hashes a strategy's identity (name, plugin identity, knobs by value); a knob added
later with ``knob(..., neutral=...)`` stays out of the key while it holds the value that reproduces
the behaviour from before it existed, so existing run directories still resume.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from harness.models.cache import ResponseCache, cache_key, is_cacheable
from harness.datasets.base import Sample
from harness.errors import ConfigError
from harness.models.base import GenerationParams, ModelBackend, ModelResponse, Usage
from harness.registry import Entry, Registry, type_text

# setting -> the strategy it runs unless --agent names another
SETTINGS: dict[str, str] = {
    "closed-book": "closed-book",
    "open-book": "open-book-native",
    "evidence-provided": "evidence-provided",
    "retrieve-read": "retrieve-read-joint",
}

# the settings whose strategies search Wikipedia (a strategy may say otherwise: Agent.searches_wiki)
SEARCH_SETTINGS = frozenset({"open-book", "retrieve-read"})

_UNSET: Any = object()

# Records a strategy may keep in a sample's ``extra`` under a shared name, with a shape every reader
# (the report, a strategy's summary) can rely on; a strategy declares which it writes (``Agent.records``,
# recorded in results.json). Anything else in ``extra`` is the strategy's own.
RECORD_KINDS: dict[str, str] = {
    "searches": "the searches made, in order: [{query, found_title, whole_page, fragments, truncated, tokens, "
    "similar_titles}]",
    "evidence_recall": "share of the question's needed pages the strategy saw: {recall, found, needed, returned, "
    "relevant} (returned: the distinct pages it saw; relevant: those of them needed)",
    "evidence": "the evidence packed into the prompt: {chunks_packed, chunks_total, prompt_tokens, cut, packed_titles}",
    "trace": "the steps of a multi-step strategy, in order: [{step, ...}]; a ReAct step: {thought, action "
    "(search|finish|null), query, observation_titles, similar_titles, answer, error, reply}; an IRCoT step: "
    "{sentence (null at step 0, where the question retrieves), query, new_titles, retrieved, passages_shown, cut, "
    "answer, reply}",
    "delegation": "a tree of agents: {subagents, depth, refused_delegations, nodes: [{id (0, 0.1, 0.1.2, ...), "
    "parent, depth, instructions, tools, messages, answer, outcome, rounds, requests, tokens: {prompt_tokens, "
    "completion_tokens}, cost, searches}]}",
}


# Opt-in instructions a run adds to the prompt whose reply is the answer: (RunConfig field, the text under
# prompts/; scored by the citations and calibration metrics). Order: the confidence line comes last.
ANSWER_INSTRUCTIONS: tuple[tuple[str, str], ...] = (
    ("citations", "instructions/citations.txt"),
    ("confidence", "instructions/confidence.txt"),
)


# the built-in strategies that take them (Agent.takes_answer_instructions), named in the refusal
ANSWER_INSTRUCTION_AGENTS = (
    "closed-book", "entity-set", "open-book-native", "open-book-text", "evidence-provided", "oracle-evidence",
    "retrieve-read-joint",
)  # fmt: skip


def answer_instructions(config: Any) -> list[dict[str, str]]:
    """The instructions ``config`` turns on (``--citations``, ``--confidence``), in prompt order:
    [{"option", "source", "sha256", "text"}] (the text rendered: ``{{ }}`` are literal braces)."""
    import hashlib

    from harness.templates import packaged_text

    out = []
    for option, path in ANSWER_INSTRUCTIONS:
        if getattr(config, option, False):
            raw = packaged_text(path)
            out.append(
                {
                    "option": option,
                    "source": f"prompts/{path}",
                    "sha256": hashlib.sha256(raw.encode("utf-8")).hexdigest(),
                    "text": raw.format(),
                }
            )
    return out


def budget_tokens(context_size: int | None, reserve: int) -> int:
    """The prompt budget of every packing strategy: the context minus the tokens kept for the answer."""
    return (context_size or 0) - reserve


def knob(default: Any = ..., description: str | None = None, *, neutral: Any = _UNSET, **constraints: Any) -> Any:
    """A knob field. ``neutral``: for a knob added after runs exist, the value that reproduces the
    old behaviour; the run key leaves the knob out while it has that value (defaults are hashed by
    value otherwise, so changing a default starts new runs)."""
    extra = {"neutral": neutral} if neutral is not _UNSET else None
    return Field(default, description=description, json_schema_extra=extra, **constraints)


class Knobs(BaseModel):
    """Base of every strategy's knobs: unknown names and NaN/inf are refused."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, protected_namespaces=())


def keyed_values(model: BaseModel, dumped: dict[str, Any] | None = None) -> dict[str, Any]:
    """``model`` as JSON values for the run key: fields at their declared neutral value left out.
    Values are the serialized ones (a field serializer that strips a password applies)."""
    dumped = model.model_dump(mode="json") if dumped is None else dumped
    out: dict[str, Any] = {}
    for name, info in type(model).model_fields.items():
        if name not in dumped:  # left out by the model's own serializer (an unset knob)
            continue
        value = getattr(model, name)
        extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
        if "neutral" in extra and dumped[name] == _json(extra["neutral"]):
            continue
        out[name] = keyed_values(value, dumped[name]) if isinstance(value, BaseModel) else dumped[name]
    return out


def _json(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    return json.loads(json.dumps(value, default=str))


@dataclass
class SampleResult:
    answer: str | None
    messages: list[dict[str, Any]]
    extra: dict[str, Any] = field(default_factory=dict)  # what the strategy records; see Agent.summarize
    # how it ended (max_rounds, context_full, all_abstained, ...): row ``outcome``; any but "answered" is a
    # sample without an answer (scored as wrong, counted apart); the harness records "refused" for an
    # "answered" whose answer is the model declining
    outcome: str = "answered"


class AgentContext:
    """What a strategy may use for one sample; tallies what it spent."""

    def __init__(
        self,
        model: ModelBackend,
        params: GenerationParams,
        cache: ResponseCache | None,
        budget: Any = None,
        pricing: Any = None,
    ):
        self.model = model
        self.params = params
        self.cache = cache
        self.budget = budget  # harness.execution.cost.Budget (--max-cost): may hold a request back, or refuse it
        self.model_calls = 0  # requests actually sent to the model (cache hits excluded)
        self.cache_hits = 0
        self.usage = Usage()
        self.sent_usage = Usage()  # tokens of the requests actually sent: what is billed
        # harness.execution.cost.Pricing: each reply priced as it is recorded (a price may change with
        # the prompt size of each request); None where unpriced
        self.pricing = pricing
        self.cost_usd: float | None = 0.0 if pricing is not None and pricing.priced else None
        self.spent_usd: float | None = self.cost_usd
        self.finish_reasons: list[str | None] = []
        self.servers: dict[str, int] = {}  # requests sent to each of several servers
        # What a failed sample leaves behind (failures.jsonl): the last request's messages and the
        # reply it got, and whatever the strategy records as it goes (``partial``: its searches).
        self.last_request: list[dict[str, Any]] = []
        self.last_reply: dict[str, Any] | None = None
        self.partial: dict[str, Any] = {}

    @property
    def transcript(self) -> list[dict[str, Any]]:
        """The conversation so far: the last request's messages, then its reply if one came."""
        return [*self.last_request, *([self.last_reply] if self.last_reply is not None else [])]

    async def generate(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        tool_choice: Any = None,
        params: GenerationParams | None = None,
    ) -> ModelResponse:
        params = params or self.params
        self.last_request, self.last_reply = list(messages), None  # a copy: strategies append to theirs
        key = None
        if self.cache is not None and is_cacheable(params):
            key = cache_key(self.model.cache_identity(), messages, params, tools, tool_choice)
            hit = self.cache.get(key)
            if hit is not None:
                self.cache_hits += 1
                self._tally(hit)
                return hit
        hold = await self.budget.reserve(self.model, messages, tools, params) if self.budget is not None else None
        self.model_calls += 1
        response = None
        try:
            response = await self.model.generate(messages, params, tools, tool_choice)
        finally:
            if hold is not None:
                self.budget.settle(hold, response.usage if response is not None else None)
        self.sent_usage.add(response.usage)
        if self.spent_usd is not None:
            self.spent_usd += self.pricing.request_cost(response.usage)
        if response.server is not None:
            self.servers[response.server] = self.servers.get(response.server, 0) + 1
        if key is not None:
            self.cache.put(key, response)
        self._tally(response)
        return response

    def _tally(self, response: ModelResponse) -> None:
        self.last_reply = response.as_message()
        self.usage.add(response.usage)
        if self.cost_usd is not None:
            self.cost_usd += self.pricing.request_cost(response.usage)
        self.finish_reasons.append(response.finish_reason)


class Agent(ABC):
    """Subclass, set the class attributes, implement ``solve``."""

    name: ClassVar[str] = ""  # set from the registry name (or the reference) when loaded
    settings: ClassVar[tuple[str, ...]] = ()  # the settings it implements (keys of SETTINGS)
    Knobs: ClassVar[type[Knobs]] = Knobs  # its knobs; --agent-arg KEY=VALUE / the YAML agent: section
    default_template: ClassVar[str | None] = None  # a template in prompts/; --prompt-template overrides
    # fields the strategy fills besides {question} and {current_date}; checked before the run
    template_fields: ClassVar[tuple[str, ...]] = ()
    needs_snapshot: ClassVar[bool] = False
    # it searches the snapshot (open-book tools, retrieve-read indexes): a space made of a dataset's evidence
    # is refused unless --search-space evidence-only says it is meant. None: as its setting does (SEARCH_SETTINGS)
    searches_wiki: ClassVar[bool | None] = None
    needs_context_size: ClassVar[bool] = False  # packs pages by token budget: refused without one
    records: ClassVar[tuple[str, ...]] = ()  # the RECORD_KINDS it writes in ``extra``
    protocol: ClassVar[str | None] = None  # tool-using strategies: "native" (the API's tool calls) or "text"
    # The reply to its template's prompt is the answer, kept whole: the opt-in answer instructions
    # (--confidence, --citations) are added to that prompt. A strategy that assembles its answer from
    # several replies, or cuts the reply, refuses them.
    takes_answer_instructions: ClassVar[bool] = False
    chosen_by: str | None = None  # "agent option" (--agent), "dataset default" or "setting default"

    def __init__(self, config: Any, knobs: Knobs | None = None):
        self.config = config  # harness.execution.config.RunConfig: the core options
        self.knobs = knobs if knobs is not None else self.Knobs()
        self.plugin: dict[str, Any] = {}  # where it came from (registry entry record)
        self.template = self.template_source = self.template_sha256 = None
        template = getattr(config, "prompt_template", None) or self.default_template
        if template:
            from harness.templates import load_template

            self.template, self.template_source, self.template_sha256 = load_template(template)
        self.answer_instructions = answer_instructions(config)
        if self.answer_instructions and not self.takes_answer_instructions:
            flags = " and ".join(f"--{i['option']}" for i in self.answer_instructions)
            raise ConfigError(
                f"agent {self.name or type(self).__name__} does not answer in one reply kept whole, so {flags} cannot "
                f"be asked of it (built-in strategies that can: {', '.join(ANSWER_INSTRUCTION_AGENTS)})"
            )

    @property
    def searches(self) -> bool:
        """Whether this run of the strategy searches the snapshot (``searches_wiki``, else its setting's)."""
        if self.searches_wiki is not None:
            return self.searches_wiki
        return getattr(self.config, "setting", None) in SEARCH_SETTINGS

    def prepare(self, model: ModelBackend, snapshot: Any | None) -> None:
        """Called once the model is started (context size known) and the snapshot opened."""
        self.model = model
        self.snapshot = snapshot

    def check_dataset(self, dataset: Any, samples: list[Sample]) -> None:
        """Called before the run with the dataset (harness.datasets.base.Dataset) and the selected
        samples: raise ConfigError for data this strategy cannot run on (nothing started yet)."""

    def check_backend(self, model: ModelBackend) -> None:
        """Called before the run with the started backend (its context size known): raise
        ConfigError for a configuration this strategy cannot run (nothing sent yet)."""

    def prompt(self, question: str, **fields: Any) -> str:
        text = self.template.format(question=question, current_date=self.config.current_date, **fields)
        for instruction in getattr(self, "answer_instructions", ()):  # after the template's own text
            text += "\n\n" + instruction["text"]
        return text

    def check_template(self, samples: list[Sample]) -> None:
        """Render the template for every sample (other fields blank), so a template that names a
        field this strategy does not fill fails before the first request, not on sample 1."""
        if not self.template:
            return
        blanks = {name: "" for name in self.template_fields}
        fills = ("question", "current_date", *self.template_fields)
        for sample in samples:
            self.check_renders(
                lambda: self.prompt(sample.question, **blanks),
                f"prompt template {self.template_source}",
                fills,
                f" for sample {sample.id}",
            )

    def check_renders(self, render: Any, what: str, fills: tuple[str, ...], where: str = "") -> None:
        """``render()`` a template with blank fields; a field this strategy does not fill or a stray
        brace is one line naming the template (``what``), never a KeyError on the first sample."""
        try:
            render()
        except KeyError as exc:
            known = ", ".join("{" + f + "}" for f in fills)
            raise ConfigError(
                f"{what} uses {{{exc.args[0]}}}, which agent {self.name} does not fill (it fills {known})"
            ) from None
        except (IndexError, ValueError, AttributeError) as exc:
            raise ConfigError(f"{what} does not render{where}: {exc} (literal braces must be doubled: {{{{ }}}})") from None

    def identity(self) -> dict[str, Any]:
        """What changes the prompts or the answers: hashed into the run key. Subclasses add facts
        (an index's identity); knobs go in by value, neutral ones left out (see ``knob``)."""
        out: dict[str, Any] = {"name": self.name, "knobs": keyed_values(self.knobs)}
        plugin = {k: v for k, v in self.plugin.items() if k in ("package", "version", "sha256")}
        if plugin:
            out["plugin"] = plugin
        if self.template:
            out["prompt_template"] = self.template_source
            out["prompt_sha256"] = self.template_sha256
        if getattr(self, "answer_instructions", None):
            out["answer_instructions"] = {i["source"]: i["sha256"] for i in self.answer_instructions}
        return out

    def describe(self) -> dict[str, Any]:
        """Recorded in results.json under ``agent``: name, where it came from, every knob."""
        out: dict[str, Any] = {
            "name": self.name,
            "settings": list(self.settings),
            "knobs": self.knobs.model_dump(mode="json"),
        }
        if self.plugin and self.plugin.get("source") != "builtin":
            out["plugin"] = self.plugin
        if self.template:
            out["prompt_template"] = self.template_source
            out["prompt_sha256"] = self.template_sha256
        if getattr(self, "answer_instructions", None):
            out["answer_instructions"] = {i["source"]: i["sha256"] for i in self.answer_instructions}
        if self.protocol is not None:
            out["protocol"] = self.protocol
        if self.records:
            out["records"] = list(self.records)
        if self.chosen_by:
            out["chosen_by"] = self.chosen_by
        return out

    def summarize(self, extras: list[dict[str, Any]]) -> dict[str, Any] | None:
        """The run-level summary of what this strategy records in each answered sample's ``extra``
        (results.json ``retrieval``): only the strategy knows its records' shape. None: nothing to say."""
        return None

    @abstractmethod
    async def solve(self, sample: Sample, ctx: AgentContext) -> SampleResult: ...


def _check_agent(obj: Any, ref: str) -> None:
    if not (isinstance(obj, type) and issubclass(obj, Agent)):
        raise ConfigError(f"agent {ref}: not a strategy (a subclass of harness.strategy.Agent)")
    unknown = [s for s in obj.settings if s not in SETTINGS]
    if not obj.settings or unknown:
        raise ConfigError(
            f"agent {ref}: settings must name at least one of {', '.join(SETTINGS)}"
            + (f" (got {', '.join(map(repr, unknown))})" if unknown else "")
        )
    unknown_records = [r for r in obj.records if r not in RECORD_KINDS]
    if unknown_records:
        raise ConfigError(
            f"agent {ref}: records must name shared record kinds ({', '.join(RECORD_KINDS)}), not "
            f"{', '.join(map(repr, unknown_records))}; keep a record of your own in extra under any other name"
        )
    if not (isinstance(obj.Knobs, type) and issubclass(obj.Knobs, BaseModel)):
        raise ConfigError(f"agent {ref}: Knobs must be a pydantic model (subclass harness.strategy.Knobs)")


AGENTS: Registry[type[Agent]] = Registry(
    "agent",
    builtins={
        "closed-book": "harness.agents.single_prompt:ClosedBook",
        "entity-set": "harness.agents.single_prompt:EntitySet",
        "open-book-native": "harness.agents.open_book_native:OpenBookNative",
        "open-book-text": "harness.agents.open_book_text:OpenBookText",
        "evidence-provided": "harness.agents.evidence_provided:EvidenceProvided",
        "oracle-evidence": "harness.agents.oracle_evidence:OracleEvidence",
        "conversational": "harness.agents.conversational:Conversational",
        "conversational-open-book": "harness.agents.conversational_open_book:ConversationalOpenBook",
        "retrieve-read-joint": "harness.agents.retrieve_read_joint:RetrieveReadJoint",
        "retrieve-read-each": "harness.agents.retrieve_read_each:RetrieveReadEach",
        "retrieve-classify": "harness.agents.retrieve_classify:RetrieveClassify",
        "react": "harness.agents.react:React",
        "ircot": "harness.agents.ircot:IRCoT",
        "delegate": "harness.agents.delegate:Delegate",
    },
    validate=_check_agent,
    name_attribute="name",
)

# Register a strategy class in-process (notebooks, tests); files and packages need not.
register_agent = AGENTS.register


def dataset_default_agent(dataset: str | None, setting: str) -> str | None:
    """The strategy dataset ``dataset`` (a spec) runs in ``setting`` unless --agent names one
    (``DatasetLoader.default_agents``: TopiOCQA's conversational strategies); None: the setting's own."""
    if not dataset:
        return None
    from harness.datasets.base import DATASETS, parse_spec
    from harness.errors import HarnessError

    try:
        loader = DATASETS.get(parse_spec(dataset)[0])
    except HarnessError:  # said when the dataset is loaded
        return None
    return (getattr(loader, "default_agents", None) or {}).get(setting)


def resolve_agent(
    agent: str | None, setting: str | None, dataset: str | None = None
) -> tuple[Entry[type[Agent]], str]:
    """(the strategy's registry entry, the setting it runs in). Without --agent: the dataset's
    strategy for the setting (closed-book without --setting), else the setting's own. Without
    --setting, a strategy runs in the first setting it declares; never in one it does not implement."""
    if setting is not None and setting not in SETTINGS:
        raise ConfigError(f"unknown setting {setting!r} (known: {', '.join(SETTINGS)})")
    if agent is None:
        agent = dataset_default_agent(dataset, setting or "closed-book") or SETTINGS[setting or "closed-book"]
    entry = AGENTS.resolve(agent)
    cls = entry.obj
    setting = setting or cls.settings[0]
    if setting not in cls.settings:
        raise ConfigError(
            f"agent {entry.name} does not implement --setting {setting} (it implements: {', '.join(cls.settings)})"
        )
    return entry, setting


def parse_knobs(cls: type[Agent], name: str, args: dict[str, Any]) -> Knobs:
    """Validate ``--agent-arg``/YAML values against the strategy's knobs; errors are one line."""
    try:
        return cls.Knobs.model_validate(args)
    except ValidationError as exc:
        first = exc.errors()[0]
        key = ".".join(str(p) for p in first["loc"]) or "agent"
        if first["type"] == "extra_forbidden":
            known = ", ".join(cls.Knobs.model_fields) or "none"
            raise ConfigError(f"--agent-arg {key}: agent {name} has no such knob (its knobs: {known})") from None
        got = first.get("input")
        shown = f" (got {got!r})" if isinstance(got, (int, float, str)) and len(repr(got)) < 80 else ""
        raise ConfigError(f"--agent-arg {key}: {first['msg'].lower()}{shown}") from None


def create_agent(config: Any) -> Agent:
    """The strategy of ``config`` (RunConfig) with its knobs validated; nothing is started."""
    dataset = getattr(config, "dataset", None)
    entry, setting = resolve_agent(config.agent, config.setting, dataset)
    cls = entry.obj
    cls.name = entry.name
    agent = cls(config, parse_knobs(cls, entry.name, dict(config.agent_args)))
    agent.plugin = entry.record()
    if config.agent:
        agent.chosen_by = "agent option"
    elif dataset_default_agent(dataset, setting) == entry.name:
        agent.chosen_by = "dataset default"  # DatasetLoader.default_agents
    else:
        agent.chosen_by = "setting default"  # SETTINGS
    return agent


def knob_help(cls: type[Agent]) -> list[str]:
    """One line per knob: name, type, default, help (``harness list agents -v``)."""
    lines = []
    for name, info in cls.Knobs.model_fields.items():
        default = info.get_default(call_default_factory=True)
        kind = type_text(info.annotation)
        lines.append(f"{name} ({kind}, default {default!r}){': ' + info.description if info.description else ''}")
    return lines
