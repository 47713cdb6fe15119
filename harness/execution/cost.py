"""Cost: an editable price table (``harness/prices.yaml`` or ``--price-table FILE``), the price of
a model, and the ``--max-cost`` budget that holds a request back while it could overrun.

Two figures are kept apart on purpose: the list-price cost of the tokens a sample used (cache hits
included: what reproducing the run would cost) and the money actually spent (requests sent; a cache
hit costs nothing). The budget counts the money spent, over every invocation of the run.
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


class Price(BaseModel):
    model_config = ConfigDict(extra="forbid")

    input: float = Field(ge=0, description="USD per 1M prompt tokens")
    output: float = Field(ge=0, description="USD per 1M completion tokens")


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
    batch_discount: float | None = None  # --batch: the share taken off the table's prices (already applied)

    @property
    def priced(self) -> bool:
        return self.input_per_mtok is not None

    @property
    def free(self) -> bool:
        return self.input_per_mtok == 0 and self.output_per_mtok == 0

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float | None:
        if not self.priced:
            return None
        return (prompt_tokens * self.input_per_mtok + completion_tokens * self.output_per_mtok) / 1_000_000

    def usage_cost(self, usage: Any) -> float | None:
        """Cost of a Usage model or a {"prompt_tokens", "completion_tokens"} dict."""
        if usage is None:
            return None
        if isinstance(usage, dict):
            return self.cost(usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0))
        return self.cost(usage.prompt_tokens, usage.completion_tokens)

    def describe(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "priced": self.priced,
            "input_usd_per_mtok": self.input_per_mtok,
            "output_usd_per_mtok": self.output_per_mtok,
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
        if not batch or (price.input == 0 and price.output == 0):
            return Pricing(model, price.input, price.output, entry=key)
        discount = table.batch_discount.get(prefix)
        if discount is None:
            raise ConfigError(
                f"--batch: the price table {table.path} has no batch discount for {prefix}/ models: add "
                f"'batch_discount: {{{prefix}: 0.5}}' (the share taken off), or drop --batch"
            )
        keep = 1.0 - discount
        return Pricing(model, price.input * keep, price.output * keep, entry=key, batch_discount=discount)
    if prefix not in API_PREFIXES:
        return Pricing(model, 0.0, 0.0, note=LOCAL_NOTE)
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
    """``--max-cost``: before each request, its worst case (prompt tokens at the input price plus
    max_tokens at the output price) is reserved, and the request is sent only while the money spent
    so far (this and earlier invocations), the reservations in flight and it fit in the budget: the
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
        worst = self.pricing.cost(prompt, params.max_tokens)
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
def spent_in_records(records: Iterable[dict[str, Any]]) -> float:
    """Money spent by every attempt recorded (samples.jsonl and failures.jsonl lines)."""
    return sum(r.get("spent_usd") or 0.0 for r in records)


def judge_cost(scores: dict[str, Any] | None, table: PriceTable) -> dict[str, Any] | None:
    """The LLM judge's cost (its own requests, apart from the model under test)."""
    info = ((scores or {}).get("meta") or {}).get("metric_info", {}).get("llm-judge")
    if not info or not info.get("judge"):
        return None
    pricing = pricing_for(info["judge"], table)
    prompt, completion = info.get("judge_prompt_tokens", 0), info.get("judge_completion_tokens", 0)
    return {
        "model": info["judge"],
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "usd": pricing.cost(prompt, completion),
        "price": pricing.describe(),
    }


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
    attempts: list[dict[str, Any]],
    scores: dict[str, Any] | None,
    budget: Budget | None,
    max_cost: float | None,
) -> dict[str, Any]:
    """results.json ``cost``: list-price cost of the finished samples' tokens, money spent, judge."""
    prompt = sum(r["usage"]["prompt_tokens"] for r in finished)
    completion = sum(r["usage"]["completion_tokens"] for r in finished)
    model_usd = pricing.cost(prompt, completion)
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
            "model_usd": "list price of the finished samples' tokens (cache hits included)",
            "spent_usd": "requests actually sent, every invocation, failed attempts included (cache hits free)",
        },
    }
    if budget is not None:
        out["budget"] = budget.describe()
    return out
