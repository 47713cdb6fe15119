"""Cost: the price of a model, and the ``--max-cost`` budget that holds a request back while it
could overrun.

Where prices come from (``load_price_table``): ``--price-table FILE`` when given, that file alone;
otherwise the ``genai-prices`` package's bundled data for ``openai/`` and ``anthropic/`` models
(``harness.execution.genai_source``: maintained monthly, with cached-input rates, prompt-size tiers
and batch prices), and ``harness/prices.yaml`` for every model it lacks, or for all of them where
the package is not installed. ``results.json`` ``cost.price.price_source`` names what priced the run.

Two figures are kept apart on purpose: the list-price cost of the tokens a sample used (cache hits
included: what reproducing the run would cost) and the money actually spent (requests sent; a cache
hit costs nothing). The budget counts the money spent, over every invocation of the run.

Prompt tokens served from the provider's prompt cache, and those written to it, are priced at their
own rates (``cached_input``, ``cache_write_input``: per entry, or the table's ``cache_defaults`` for
the provider, each with its source; without either, the input price). A price with prompt-size
tiers (``tiers``: every token of a request whose prompt is above N tokens at other rates) is priced
one request at a time, when its reply is recorded: summed usage cannot be priced under tiers, and is
left unpriced (None, with the reason) rather than priced wrong.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator, model_validator

from harness.errors import ConfigError, HarnessError
from harness.models.base import WAIT_CLOCK
from harness.scoring.scores import Scores

DEFAULT_PRICE_TABLE = Path(__file__).resolve().parents[1] / "prices.yaml"
LOCAL_NOTE = "runs on your own hardware: compute is not priced (cost 0)"
TIERED_NOTE = (
    "its price changes with the prompt size of each request: priced per request as replies are "
    "recorded; summed usage cannot be priced"
)
PER_MESSAGE_OVERHEAD = 8  # role and separator tokens of chat templates (as harness.agents._search.ContextGuard)
_SNAPSHOT_SUFFIX = re.compile(r"-(\d{4}-\d{2}-\d{2}|\d{8}|latest)$")
CACHE_RATES = ("cached_input", "cache_write_input")


class Tier(BaseModel):
    """Rates for every token of a request whose prompt (cache reads and writes included) is above
    ``above`` tokens: the providers bill the whole request at the higher rate, not the excess."""

    model_config = ConfigDict(extra="forbid")

    above: int = Field(ge=0, description="prompt tokens of one request")
    input: float = Field(ge=0)
    output: float = Field(ge=0)
    cached_input: float | None = Field(None, ge=0)
    cache_write_input: float | None = Field(None, ge=0)


class Price(BaseModel):
    model_config = ConfigDict(extra="forbid")

    input: float = Field(ge=0, description="USD per 1M prompt tokens")
    output: float = Field(ge=0, description="USD per 1M completion tokens")
    cached_input: float | None = Field(None, ge=0, description="USD per 1M prompt tokens read from the prompt cache")
    cache_write_input: float | None = Field(
        None, ge=0, description="USD per 1M prompt tokens written to the prompt cache"
    )
    tiers: list[Tier] = Field(default_factory=list, description="higher rates for requests with larger prompts")
    source: str | None = None  # where this entry's figures were read (URL or package, and date)

    @field_validator("tiers")
    @classmethod
    def _ascending(cls, value: list[Tier]) -> list[Tier]:
        starts = [t.above for t in value]
        if starts != sorted(set(starts)):
            raise ValueError("tiers must be listed by 'above', smallest first, each threshold once")
        return value


class CacheDefault(BaseModel):
    """A provider's prompt-cache rule, as shares of each entry's input price, with its source."""

    model_config = ConfigDict(extra="forbid")

    cached_input: float | None = Field(None, ge=0)
    cache_write_input: float | None = Field(None, ge=0)
    source: str

    @model_validator(mode="after")
    def _some(self) -> CacheDefault:
        if self.cached_input is None and self.cache_write_input is None:
            raise ValueError("give cached_input and/or cache_write_input (shares of the input price)")
        return self


@dataclass
class PriceHit:
    key: str  # the entry used
    price: Price
    batch: Price | None  # the provider's batch price from the source itself (genai-prices), if any
    source: str  # what priced it
    from_table: bool  # a price-table entry (its batch price follows the table's batch_discount)


class PriceTable(BaseModel):
    model_config = ConfigDict(extra="allow")

    models: dict[str, Price]
    # --batch: the share taken off each provider's prices for its batch interface (0.5: half price)
    batch_discount: dict[str, float] = Field(default_factory=dict)
    # prefix -> the provider's cache rule, where an entry names no cache rate of its own
    cache_defaults: dict[str, CacheDefault] = Field(default_factory=dict)
    source: Any = None
    retrieved: Any = None
    currency: str = "USD"
    path: str = ""
    sha256: str = ""
    # the default source before this table (genai-prices), or why there is none
    _primary: Any = PrivateAttr(default=None)
    _primary_note: str | None = PrivateAttr(default=None)

    @field_validator("batch_discount")
    @classmethod
    def _shares(cls, value: dict[str, float]) -> dict[str, float]:
        for provider, share in value.items():
            if not 0 <= share < 1:  # NaN fails too
                raise ValueError(f"{provider}: the share taken off, at least 0 and below 1 (0.5: half price)")
        return value

    @property
    def label(self) -> str:
        return f"price table {self.path} sha256:{self.sha256[:12]}"

    def lookup(self, model: str) -> PriceHit | None:
        """The default source first (genai-prices), then this table: the exact name, then the name
        without a snapshot date or ``-latest``."""
        if self._primary is not None:
            hit = self._primary.lookup(model)
            if hit is not None:
                key, price, batch, source = hit
                return PriceHit(key, Price(**price), Price(**batch) if batch else None, source, from_table=False)
        for key in (model, _SNAPSHOT_SUFFIX.sub("", model)):
            if key in self.models:
                return PriceHit(key, self.models[key], None, self.label, from_table=True)
        return None

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "path": self.path,
            "sha256": self.sha256,
            "source": self.source,
            "retrieved": self.retrieved,
        }
        if self._primary is not None:
            out["default_source"] = self._primary.describe()
            out["role"] = f"fallback for models {self._primary.label} does not price"
        elif self._primary_note:
            out["default_source"] = None
            out["role"] = f"the price source ({self._primary_note})"
        return out | ({"batch_discount": self.batch_discount} if self.batch_discount else {})


def load_price_table(path: str | Path | None = None) -> PriceTable:
    """``--price-table FILE``: that file alone. None: genai-prices (when installed) before the
    shipped ``harness/prices.yaml``."""
    table = _read_table(Path(path) if path else DEFAULT_PRICE_TABLE)
    if path is None:
        from harness.execution.genai_source import load_genai_prices

        primary = load_genai_prices()
        if isinstance(primary, str):
            table._primary_note = primary
        else:
            table._primary = primary
    return table


def _read_table(path: Path) -> PriceTable:
    from harness.records import read_yaml_table

    raw, data = read_yaml_table(path, "--price-table", ConfigError, "NAME: {input: USD, output: USD}")
    if data.get("currency", "USD") != "USD":
        raise ConfigError(f"{path}: only USD prices are supported")
    try:
        table = PriceTable(**data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ConfigError(f"{path}: {where}: {first['msg']} (prices are USD per 1M tokens)") from None
    table.path = str(path)
    table.sha256 = hashlib.sha256(raw).hexdigest()
    return table


@dataclass(frozen=True)
class Rates:
    """One tier's USD per 1M tokens, cache rates resolved."""

    above: int  # prompt tokens above which these apply (0: the base rates)
    input: float
    output: float
    cached_input: float
    cache_write_input: float

    @property
    def dearest_input(self) -> float:
        return max(self.input, self.cached_input, self.cache_write_input)

    def scaled(self, keep: float) -> Rates:
        return Rates(self.above, *(r * keep for r in (self.input, self.output, self.cached_input, self.cache_write_input)))


@dataclass
class Pricing:
    """The price of one model, or why it has none (then every cost is None, never 0)."""

    model: str
    input_per_mtok: float | None
    output_per_mtok: float | None
    entry: str | None = None  # the price-table key used
    note: str | None = None
    reason: str | None = None  # why it is unpriced
    # prompt-cache rates (None: the input price) and where they came from
    cached_input_per_mtok: float | None = None
    cache_write_per_mtok: float | None = None
    cache_rates: dict[str, str] | None = None
    batch_discount: float | None = None  # --batch: the share taken off the table's prices (already applied)
    tiers: list[Rates] = field(default_factory=list)  # above the base rates, smallest threshold first
    price_source: str | None = None  # what priced it: "genai-prices 0.2.3 model ...", "price table PATH sha256:..."

    @property
    def priced(self) -> bool:
        return self.input_per_mtok is not None

    @property
    def free(self) -> bool:
        return self.input_per_mtok == 0 and self.output_per_mtok == 0 and not self.tiers

    @property
    def tiered(self) -> bool:
        return bool(self.tiers)

    def _rate(self, rate: float | None) -> float:
        return self.input_per_mtok if rate is None else rate

    @property
    def base(self) -> Rates:
        return Rates(
            0,
            self.input_per_mtok,
            self.output_per_mtok,
            self._rate(self.cached_input_per_mtok),
            self._rate(self.cache_write_per_mtok),
        )

    def rates_for(self, prompt_tokens: int) -> Rates:
        """The rates one request is billed at: the highest tier its prompt is above."""
        chosen = self.base
        for tier in self.tiers:
            if prompt_tokens > tier.above:
                chosen = tier
        return chosen

    def cost(
        self, prompt_tokens: int, completion_tokens: int, cache_read: int = 0, cache_write: int = 0
    ) -> float | None:
        """One request's cost. ``cache_read`` and ``cache_write`` are parts of ``prompt_tokens``, at
        their own rates; the tier is chosen by ``prompt_tokens``."""
        if not self.priced:
            return None
        r = self.rates_for(prompt_tokens)
        uncached = max(prompt_tokens - cache_read - cache_write, 0)
        return (
            uncached * r.input
            + cache_read * r.cached_input
            + cache_write * r.cache_write_input
            + completion_tokens * r.output
        ) / 1_000_000

    def worst_cost(self, prompt_tokens: int, completion_tokens: int) -> float | None:
        """A request's most: every prompt token at the dearest input rate (a cache write costs more
        than the input price), every completion token sent, at the dearest tier (the prompt count is
        an estimate, so it does not pick the tier)."""
        if not self.priced:
            return None
        tiers = [self.base, *self.tiers]
        return max(prompt_tokens * r.dearest_input + completion_tokens * r.output for r in tiers) / 1_000_000

    def request_cost(self, usage: Any) -> float | None:
        """The cost of one reply's usage (a Usage model or its dict)."""
        if usage is None:
            return None
        if not isinstance(usage, dict):
            usage = usage.model_dump()
        return self.cost(
            usage.get("prompt_tokens", 0),
            usage.get("completion_tokens", 0),
            usage.get("cache_read_tokens", 0),
            usage.get("cache_write_tokens", 0),
        )

    def usage_cost(self, usage: Any) -> float | None:
        """The cost of usage summed over requests; None under prompt-size tiers (the prompt size of
        each request is gone from a sum: see ``request_cost``)."""
        if self.tiered:
            return None
        return self.request_cost(usage)

    def describe(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "priced": self.priced,
            "price_source": self.price_source,
            "input_usd_per_mtok": self.input_per_mtok,
            "output_usd_per_mtok": self.output_per_mtok,
            "cached_input_usd_per_mtok": self.cached_input_per_mtok if self.priced else None,
            "cache_write_input_usd_per_mtok": self.cache_write_per_mtok if self.priced else None,
            "cache_rates": self.cache_rates,
            **({"tiers": [t.__dict__ for t in self.tiers], "tiered_note": TIERED_NOTE} if self.tiers else {}),
            "entry": self.entry,
            "note": self.note,
            "reason": self.reason,
            **({"batch_discount": self.batch_discount} if self.batch_discount is not None else {}),
        }


def bills_per_token(model: str, backend: Any = None) -> bool:
    """Whether the model's backend bills per token (``ModelBackend.bills_per_token``): an unpriced
    model of such a backend costs None, never 0. ``backend``: its class or instance; without one it
    is resolved from the model's prefix, and a backend that cannot be resolved is taken to bill."""
    if backend is None:
        from harness.models import resolve_backend

        try:
            backend = resolve_backend(model)[0].obj
        except HarnessError:
            return True
    return bool(getattr(backend, "bills_per_token", True))


def _resolve_rates(prefix: str, price: Price, table: PriceTable, from_table: bool, source: str):
    """(base Rates, tier Rates, where each cache rate came from) for one entry."""
    default = table.cache_defaults.get(prefix) if from_table else None
    origins: dict[str, str] = {}

    def resolve(rates: Tier | Price) -> dict[str, float]:
        out = {}
        for name in CACHE_RATES:
            given = getattr(rates, name)
            share = getattr(default, name) if default is not None else None
            if given is not None:
                out[name], origins[name] = given, "price table" if from_table else source
            elif share is not None:
                out[name] = rates.input * share
                origins[name] = f"{share:g} x input ({prefix} cache_defaults: {default.source})"
            else:
                out[name], origins[name] = rates.input, "none given: the input price"
        return out

    base = resolve(price)
    tiers = []
    for t in price.tiers:
        cache = resolve(t)
        tiers.append(Rates(t.above, t.input, t.output, cache["cached_input"], cache["cache_write_input"]))
    return base, tiers, origins


def pricing_for(model: str, table: PriceTable, batch: bool = False, backend: Any = None) -> Pricing:
    """The price of ``model``; with ``batch``, its provider's batch price (a priced API model with
    none is refused, never billed at list price). ``backend`` (its class or instance) says whether an
    unpriced model is free (its own hardware) or unknown (cost None): see ``bills_per_token``."""
    prefix = model.split("/", 1)[0]
    hit = table.lookup(model)
    if hit is not None:
        price, keep, discount = hit.price, 1.0, None
        if batch and not (price.input == 0 and price.output == 0):
            if hit.from_table:
                discount = table.batch_discount.get(prefix)
                if discount is None:
                    raise ConfigError(
                        f"--batch: the price table {table.path} has no batch discount for {prefix}/ models: add "
                        f"'batch_discount: {{{prefix}: 0.5}}' (the share taken off), or drop --batch"
                    )
                keep = 1.0 - discount  # off every rate: input, output and the prompt-cache rates alike
            elif hit.batch is None:
                raise ConfigError(
                    f"--batch: {table._primary.label} has no batch price for {model}: pass "
                    f"--price-table {DEFAULT_PRICE_TABLE} (its batch_discount applies) or drop --batch"
                )
            else:
                price = hit.batch
        base, tiers, origins = _resolve_rates(prefix, price, table, hit.from_table, hit.source)
        return Pricing(
            model,
            price.input * keep,
            price.output * keep,
            entry=hit.key,
            cached_input_per_mtok=base["cached_input"] * keep,
            cache_write_per_mtok=base["cache_write_input"] * keep,
            cache_rates=origins,
            batch_discount=discount,
            tiers=[t.scaled(keep) for t in tiers],
            price_source=hit.source + (" (its batch price)" if batch and hit.batch is not None and not hit.from_table else ""),
        )
    if not bills_per_token(model, backend):
        return Pricing(
            model, 0.0, 0.0, note=LOCAL_NOTE, cached_input_per_mtok=0.0, cache_write_per_mtok=0.0,
            price_source="not priced: its backend does not bill per token",
        )  # fmt: skip
    also = f" (nor in {table._primary.label})" if table._primary is not None else ""
    return Pricing(
        model, None, None, reason=f"{model} is not in the price table {table.path}{also}: add it there or pass --price-table"
    )


# --------------------------------------------------------------------------- the budget
class BudgetExhausted(Exception):
    """A request was refused: it could take the run past --max-cost. Recorded per sample."""


def _text(content: Any) -> str:
    if isinstance(content, list):  # content parts
        return " ".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content or ""


def estimate_prompt_tokens(backend: Any, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> int:
    """The request's prompt tokens by the model's own counter, plus chat-template overhead."""
    total = 3
    for m in messages:
        total += backend.count_tokens(_text(m.get("content"))) + PER_MESSAGE_OVERHEAD
        for call in m.get("tool_calls") or []:
            fn = call.get("function") or {}
            total += backend.count_tokens(f"{fn.get('name', '')} {fn.get('arguments', '')}")
    if tools:
        total += backend.count_tokens(json.dumps(tools))
    return total


class Budget:
    """``--max-cost``: before each request, its worst case (prompt tokens at the dearest input rate,
    the full input price or a cache write's, plus max_tokens at the output price) is reserved, and
    the request is sent only while the money spent so far (this and earlier invocations), the
    reservations in flight and it fit in the budget: the
    budget is never passed. A request that does not fit waits for the requests in flight to settle
    (each gives back its worst case and keeps only what it cost), since refusing it at once would
    stop a run with many connections far short of its budget (64 connections stopped at 15%). Only
    when nothing is in flight and it still does not fit is it refused, and so is every later one:
    the run stops, less than one worst case short of the budget, and a rerun with a higher budget
    resumes."""

    def __init__(self, max_usd: float, pricing: Pricing, spent_before: float = 0.0):
        if not pricing.priced:
            raise ConfigError(f"--max-cost needs a price for {pricing.model}: {pricing.reason}")
        self.max_usd = max_usd
        self.pricing = pricing
        self.spent_before = spent_before
        self.spent = 0.0  # this invocation, requests completed
        self.reserved = 0.0  # requests in flight, at their worst case
        self.in_flight = 0
        self.exhausted = False
        self.refused: dict[str, Any] | None = None  # the first refused request
        self._settled = asyncio.Event()  # set (and replaced) whenever a request settles

    @property
    def spent_total(self) -> float:
        return self.spent_before + self.spent

    def _stopped(self) -> BudgetExhausted:
        return BudgetExhausted(f"the run stopped at its budget of ${self.max_usd:g}")

    async def reserve(
        self, backend: Any, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, params
    ) -> float:
        """The request's reservation (its worst case), once it fits; BudgetExhausted if it never can."""
        if self.exhausted:
            raise self._stopped()
        if self.pricing.free:
            return 0.0
        prompt = estimate_prompt_tokens(backend, messages, tools)
        worst = self.pricing.worst_cost(prompt, params.max_tokens)
        while self.spent_total + self.reserved + worst > self.max_usd:
            if self.exhausted:  # another request was refused while this one waited
                raise self._stopped()
            if not self.in_flight:  # nothing will give money back: it can never fit
                self.exhausted = True
                self.refused = {"prompt_tokens_estimate": prompt, "max_tokens": params.max_tokens, "worst_usd": worst}
                self._wake()
                raise BudgetExhausted(
                    f"request not sent: spent ${self.spent_total:.6f} + this request's worst case ${worst:.6f} "
                    f"would exceed --max-cost ${self.max_usd:g}"
                )
            await self._wait()
        self.reserved += worst
        self.in_flight += 1
        return worst

    async def _wait(self) -> None:
        """Until a request settles; not on the sample's clock (as a request queued for a slot)."""
        settled = self._settled
        clock = WAIT_CLOCK.get()
        if clock is not None:
            clock.queue()
        try:
            await settled.wait()
        finally:
            if clock is not None:
                clock.unqueue()

    def _wake(self) -> None:
        self._settled.set()
        self._settled = asyncio.Event()

    def settle(self, worst: float, usage: Any | None) -> None:
        """A request ended: its reservation is replaced by what it actually cost (0 if it failed)."""
        if not self.pricing.free:  # a free model reserves nothing
            self.in_flight -= 1
            self.reserved = self.reserved - worst if self.in_flight else 0.0  # no rounding drift left
        if usage is not None:
            self.spent += self.pricing.request_cost(usage) or 0.0  # one reply: its own tier
        self._wake()

    def describe(self) -> dict[str, Any]:
        return {
            "max_cost_usd": self.max_usd,
            "spent_usd": self.spent_total,
            "stopped": self.exhausted,
            "refused_request": self.refused,
        }


# --------------------------------------------------------------------------- run totals
USAGE_KEYS = ("prompt_tokens", "completion_tokens", "cache_read_tokens", "cache_write_tokens", "reasoning_tokens")


def usage_totals(rows: Iterable[dict[str, Any]]) -> dict[str, int]:
    """The rows' ``usage`` summed (rows written before the cache counts existed count 0 there)."""
    totals = dict.fromkeys(USAGE_KEYS, 0)
    for row in rows:
        for key in USAGE_KEYS:
            totals[key] += (row.get("usage") or {}).get(key, 0)
    return totals


def spent_in_records(records: Iterable[dict[str, Any]]) -> float:
    """Money spent by every attempt recorded (samples.jsonl and failures.jsonl lines)."""
    return sum(r.get("spent_usd") or 0.0 for r in records)


def judge_cost(scores: Scores | dict[str, Any] | None, table: PriceTable) -> dict[str, Any] | None:
    """The LLM judge's cost (its own requests, apart from the model under test). Several judges:
    each priced on its own (``by_judge``), the tokens and USD their sums (USD None if any is unpriced)."""
    info = Scores.of(scores).meta.metric_info.get("llm-judge")
    if not info:
        return None
    if info.get("by_judge"):
        each = {name: _one_judge_cost(judge, table) for name, judge in info["by_judge"].items()}
        usd = [c["usd"] for c in each.values()]
        return {
            "model": list(each),
            "prompt_tokens": sum(c["prompt_tokens"] for c in each.values()),
            "completion_tokens": sum(c["completion_tokens"] for c in each.values()),
            "usd": None if any(u is None for u in usd) else sum(usd),
            "by_judge": each,
        }
    if not info.get("judge"):
        return None
    return _one_judge_cost(info, table)


def _one_judge_cost(info: dict[str, Any], table: PriceTable) -> dict[str, Any]:
    pricing = pricing_for(info["judge"], table)
    usage = {key: info.get(f"judge_{key}", 0) for key in USAGE_KEYS}
    out = {"model": info["judge"], **usage, "usd": pricing.usage_cost(usage), "price": pricing.describe()}
    if pricing.tiered:  # the judge's tokens are kept summed: its requests' prompt sizes are gone
        out["note"] = f"not priced: {pricing.model} {TIERED_NOTE}"
    return out


def refresh_judge_cost(cost: dict[str, Any], price_table: str | None, scores: Scores | dict[str, Any] | None) -> dict[str, Any]:
    """After ``harness score RUN_DIR`` re-scored a run: the judge's cost and the total follow."""
    cost = dict(cost)
    table = load_price_table(price_table)
    cost["judge"] = judge_cost(scores, table)
    cost["judge_usd"] = cost["judge"]["usd"] if cost["judge"] else None
    judge_usd = cost["judge_usd"] if cost["judge"] else 0.0
    model_usd = cost.get("model_usd")
    cost["total_usd"] = None if model_usd is None or judge_usd is None else model_usd + judge_usd
    return cost


def run_cost(
    pricing: Pricing,
    table: PriceTable,
    finished: list[dict[str, Any]],
    attempts: Iterable[dict[str, Any]],
    scores: dict[str, Any] | None,
    budget: Budget | None,
    max_cost: float | None,
) -> dict[str, Any]:
    """results.json ``cost``: list-price cost of the finished samples' tokens, money spent, judge.
    Under prompt-size tiers the samples' own ``cost_usd`` (each priced per request as it was
    recorded) are summed; otherwise the summed tokens are priced at the price in force now."""
    if pricing.tiered:
        each = [row.get("cost_usd") for row in finished]
        model_usd = None if any(c is None for c in each) else float(sum(each))
    else:
        model_usd = pricing.usage_cost(usage_totals(finished))
    judge = judge_cost(scores, table)
    judge_usd = judge["usd"] if judge else 0.0
    spent = spent_in_records(attempts) if pricing.priced else None
    out = {
        "currency": "USD",
        "price": pricing.describe(),
        "model_usd": model_usd,
        "per_sample_usd": (model_usd / len(finished)) if model_usd is not None and finished else None,
        "spent_usd": spent,
        "judge": judge,
        "judge_usd": judge["usd"] if judge else None,
        "total_usd": None if model_usd is None or judge_usd is None else model_usd + judge_usd,
        "max_cost_usd": max_cost,
        "price_table": table.describe(),
        "definitions": {
            "model_usd": "list price of the finished samples' tokens (response-cache hits included; "
            "prompt-cache reads and writes at their own rates; under prompt-size tiers, the sum of the "
            "samples' cost_usd, each request priced at its own tier)",
            "spent_usd": "requests actually sent, every invocation, failed attempts included "
            "(response-cache hits free; --batch: answers billed that no sample took included)",
        },
    }
    if budget is not None:
        out["budget"] = budget.describe()
    return out
