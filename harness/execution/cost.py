"""Cost: an editable price table (``harness/prices.yaml`` or ``--price-table FILE``), the price of
a model, and the ``--max-cost`` budget that holds a request back while it could overrun.

Two figures are kept apart on purpose: the list-price cost of the tokens a sample used (cache hits
included: what reproducing the run would cost) and the money actually spent (requests sent; a cache
hit costs nothing). The budget counts the money spent, over every invocation of the run.

Prompt tokens served from the provider's prompt cache, and those written to it (Anthropic), are
priced at their own rates (``cached_input``, ``cache_write_input`` in the table; provider defaults
where it gives none): both figures use the counts each reply reported.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from harness.errors import ConfigError
from harness.models.base import WAIT_CLOCK

DEFAULT_PRICE_TABLE = Path(__file__).resolve().parents[1] / "prices.yaml"
# Backends that bill per token; every other prefix runs on the user's hardware.
API_PREFIXES = frozenset({"openai", "anthropic"})
LOCAL_NOTE = "runs on your own hardware: compute is not priced (cost 0)"
PER_MESSAGE_OVERHEAD = 8  # role and separator tokens of chat templates (as agents._search.ContextGuard)
_SNAPSHOT_SUFFIX = re.compile(r"-(\d{4}-\d{2}-\d{2}|\d{8}|latest)$")
# Prompt-cache rates where an entry gives none, as fractions of its input price (read, write):
# OpenAI bills cache hits at half (or less: its per-model figures are in prices.yaml) and writes at
# the input price; Anthropic bills hits at 10% and 5-minute cache writes at 125%. Other prefixes:
# no discount known, the input price.
CACHE_DEFAULTS = {"openai": (0.5, 1.0), "anthropic": (0.1, 1.25)}


class Price(BaseModel):
    model_config = ConfigDict(extra="forbid")

    input: float = Field(ge=0, description="USD per 1M prompt tokens")
    output: float = Field(ge=0, description="USD per 1M completion tokens")
    cached_input: float | None = Field(None, ge=0, description="USD per 1M prompt tokens read from the prompt cache")
    cache_write_input: float | None = Field(
        None, ge=0, description="USD per 1M prompt tokens written to the prompt cache (Anthropic)"
    )


class PriceTable(BaseModel):
    model_config = ConfigDict(extra="allow")

    models: dict[str, Price]
    # --batch: the share taken off each provider's prices for its batch interface (0.5: half price)
    batch_discount: dict[str, float] = Field(default_factory=dict)
    source: Any = None
    retrieved: Any = None
    currency: str = "USD"
    path: str = ""
    sha256: str = ""

    @field_validator("batch_discount")
    @classmethod
    def _shares(cls, value: dict[str, float]) -> dict[str, float]:
        for provider, share in value.items():
            if not 0 <= share < 1:  # NaN fails too
                raise ValueError(f"{provider}: the share taken off, at least 0 and below 1 (0.5: half price)")
        return value

    def lookup(self, model: str) -> tuple[str, Price] | None:
        """Exact name first, then the name without a snapshot date or ``-latest``."""
        if model in self.models:
            return model, self.models[model]
        base = _SNAPSHOT_SUFFIX.sub("", model)
        if base != model and base in self.models:
            return base, self.models[base]
        return None

    def describe(self) -> dict[str, Any]:
        out = {"path": self.path, "sha256": self.sha256, "source": self.source, "retrieved": self.retrieved}
        return out | ({"batch_discount": self.batch_discount} if self.batch_discount else {})


def load_price_table(path: str | Path | None = None) -> PriceTable:
    path = Path(path) if path else DEFAULT_PRICE_TABLE
    from harness.records import MAX_SMALL_BYTES, read_input

    raw = read_input(path, "--price-table", ConfigError, MAX_SMALL_BYTES)
    try:
        data = yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(data, dict) or not isinstance(data.get("models"), dict):
        raise ConfigError(f"{path}: expected a mapping with 'models: {{NAME: {{input: USD, output: USD}}}}'")
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

    @property
    def priced(self) -> bool:
        return self.input_per_mtok is not None

    @property
    def free(self) -> bool:
        return self.input_per_mtok == 0 and self.output_per_mtok == 0

    def _rate(self, rate: float | None) -> float:
        return self.input_per_mtok if rate is None else rate

    def cost(
        self, prompt_tokens: int, completion_tokens: int, cache_read: int = 0, cache_write: int = 0
    ) -> float | None:
        """``cache_read`` and ``cache_write`` are parts of ``prompt_tokens``, at their own rates."""
        if not self.priced:
            return None
        uncached = max(prompt_tokens - cache_read - cache_write, 0)
        return (
            uncached * self.input_per_mtok
            + cache_read * self._rate(self.cached_input_per_mtok)
            + cache_write * self._rate(self.cache_write_per_mtok)
            + completion_tokens * self.output_per_mtok
        ) / 1_000_000

    def worst_cost(self, prompt_tokens: int, completion_tokens: int) -> float | None:
        """A request's most: every prompt token at the dearest input rate (a cache write costs more
        than the input price), every completion token sent."""
        if not self.priced:
            return None
        rate = max(self.input_per_mtok, self._rate(self.cached_input_per_mtok), self._rate(self.cache_write_per_mtok))
        return (prompt_tokens * rate + completion_tokens * self.output_per_mtok) / 1_000_000

    def usage_cost(self, usage: Any) -> float | None:
        """Cost of a Usage model or a {"prompt_tokens", "completion_tokens", "cache_*_tokens"} dict."""
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

    def describe(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "priced": self.priced,
            "input_usd_per_mtok": self.input_per_mtok,
            "output_usd_per_mtok": self.output_per_mtok,
            "cached_input_usd_per_mtok": self.cached_input_per_mtok if self.priced else None,
            "cache_write_input_usd_per_mtok": self.cache_write_per_mtok if self.priced else None,
            "cache_rates": self.cache_rates,
            "entry": self.entry,
            "note": self.note,
            "reason": self.reason,
            **({"batch_discount": self.batch_discount} if self.batch_discount is not None else {}),
        }


def pricing_for(model: str, table: PriceTable, batch: bool = False) -> Pricing:
    """The price of ``model``; with ``batch``, its provider's batch price (``batch_discount`` off the
    table's prices: a priced API model whose provider has none is refused, never billed at list price)."""
    prefix = model.split("/", 1)[0]
    found = table.lookup(model)
    if found:
        key, price = found
        provider = prefix if prefix in CACHE_DEFAULTS else "no discount known"
        rates = {}
        for name, share in zip(("cached_input", "cache_write_input"), CACHE_DEFAULTS.get(prefix, (1.0, 1.0))):
            given = getattr(price, name)
            if given is not None:
                rates[name] = (given, "price table")
            else:
                rates[name] = (price.input * share, f"default: {share:g} x input ({provider})")
        keep, discount = 1.0, None
        if batch and not (price.input == 0 and price.output == 0):
            discount = table.batch_discount.get(prefix)
            if discount is None:
                raise ConfigError(
                    f"--batch: the price table {table.path} has no batch discount for {prefix}/ models: add "
                    f"'batch_discount: {{{prefix}: 0.5}}' (the share taken off), or drop --batch"
                )
            keep = 1.0 - discount  # off every rate: input, output and the prompt-cache rates alike
        return Pricing(
            model,
            price.input * keep,
            price.output * keep,
            entry=key,
            cached_input_per_mtok=rates["cached_input"][0] * keep,
            cache_write_per_mtok=rates["cache_write_input"][0] * keep,
            cache_rates={name: source for name, (_, source) in rates.items()},
            batch_discount=discount,
        )
    if prefix not in API_PREFIXES:
        return Pricing(model, 0.0, 0.0, note=LOCAL_NOTE, cached_input_per_mtok=0.0, cache_write_per_mtok=0.0)
    return Pricing(
        model, None, None, reason=f"{model} is not in the price table {table.path}: add it there or pass --price-table"
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
            self.spent += self.pricing.usage_cost(usage) or 0.0
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


def judge_cost(scores: dict[str, Any] | None, table: PriceTable) -> dict[str, Any] | None:
    """The LLM judge's cost (its own requests, apart from the model under test). Several judges:
    each priced on its own (``by_judge``), the tokens and USD their sums (USD None if any is unpriced)."""
    info = ((scores or {}).get("meta") or {}).get("metric_info", {}).get("llm-judge")
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
    return {"model": info["judge"], **usage, "usd": pricing.usage_cost(usage), "price": pricing.describe()}


def refresh_judge_cost(cost: dict[str, Any], price_table: str | None, scores: dict[str, Any] | None) -> dict[str, Any]:
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
    """results.json ``cost``: list-price cost of the finished samples' tokens, money spent, judge."""
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
            "prompt-cache reads and writes at their own rates)",
            "spent_usd": "requests actually sent, every invocation, failed attempts included "
            "(response-cache hits free)",
        },
    }
    if budget is not None:
        out["budget"] = budget.describe()
    return out
