"""Prices from the ``genai-prices`` package (pydantic/genai-prices, MIT): the default price source
for ``openai/`` and ``anthropic/`` models when no ``--price-table`` is given.

Only the data bundled with the installed version is read (never its network auto-update), so a
version number names the prices exactly; ``results.json`` records it. Each model's price is the one
in force on the day the table is loaded (the package keeps dated price changes), with its
cached-input and cache-write rates, its prompt-size tiers and, where the provider has one, its batch
price. What the package lacks falls through to ``harness/prices.yaml`` (``cost.load_price_table``).

Facts about the package's data this relies on (genai-prices 0.2.3, ``genai_prices/types.py``):
``TieredPrices`` is a cliff: above a tier's ``start`` input tokens (cache reads and writes
included) every token of the request is billed at the tier's rate; ``ModelInfo.get_prices(date,
{"processing": "batch"})`` gives the batch price where a batch variant exists.
"""

from __future__ import annotations

from datetime import datetime, timezone
from decimal import Decimal
from typing import Any

# harness model prefix -> the package's provider id (the providers whose prices the harness bills)
PROVIDERS = {"openai": "openai", "anthropic": "anthropic"}
# our rate names -> the package's ModelPrice fields (5-minute cache writes: what the backends ask for)
RATE_FIELDS = {
    "input": "input_mtok",
    "cached_input": "cache_read_mtok",
    "cache_write_input": "cache_write_mtok",
    "output": "output_mtok",
}
BATCH = {"processing": "batch"}


def load_genai_prices(at: datetime | None = None) -> GenaiPrices | str:
    """The installed package's prices, or why there are none (a line for the record)."""
    try:
        import genai_prices
        from genai_prices import data
    except ImportError:
        return "genai-prices is not installed"
    except Exception as exc:  # noqa: BLE001 - a broken install must not stop a run: the table is the fallback
        return f"genai-prices could not be imported ({type(exc).__name__}: {exc})"
    return GenaiPrices(genai_prices.__version__, data.providers, at or datetime.now(timezone.utc))


class GenaiPrices:
    def __init__(self, version: str, providers: list[Any], at: datetime):
        self.version = version
        self.at = at
        self.providers = {p.id: p for p in providers if p.id in PROVIDERS.values()}

    @property
    def label(self) -> str:
        return f"genai-prices {self.version}"

    def describe(self) -> dict[str, Any]:
        return {
            "package": "genai-prices",
            "version": self.version,
            "prices_in_force_on": self.at.date().isoformat(),
            "data": "bundled with the package (no network update)",
        }

    def lookup(self, model: str) -> tuple[str, dict[str, Any], dict[str, Any] | None, str] | None:
        """(entry, price, batch price or None, source) as ``cost.Price`` fields, or None if unknown."""
        prefix, _, name = model.partition("/")
        provider = self.providers.get(PROVIDERS.get(prefix, ""))
        if provider is None or not name:
            return None
        info = provider.find_model(name)  # this provider only: no fallback to another provider's model
        if info is None:
            return None
        price = _price(info.get_prices(self.at))
        if price is None:  # listed without token prices (an audio or image model)
            return None
        batch = None
        if any(v.when == BATCH and (v.constraint is None or v.constraint.active(self.at)) for v in info.price_variants or ()):
            batch = _price(info.get_prices(self.at, BATCH))
        refs = [w.rstrip(".,") for w in (info.price_comments or "").split() if w.startswith("https://")]
        source = f"{self.label} model {info.id}" + (f" (its refs: {', '.join(dict.fromkeys(refs))})" if refs else "")
        return f"{prefix}/{info.id}", price, batch, source


def _price(model_price: Any) -> dict[str, Any] | None:
    """A ModelPrice as ``cost.Price`` fields: the base rates and one tier per distinct threshold."""
    values = {ours: getattr(model_price, theirs, None) for ours, theirs in RATE_FIELDS.items()}
    if values["input"] is None or values["output"] is None:
        return None
    starts = sorted({t.start for v in values.values() if hasattr(v, "tiers") for t in v.tiers})
    out: dict[str, Any] = {k: _at(v, None) for k, v in values.items() if v is not None}
    if starts:
        out["tiers"] = [{"above": s, **{k: _at(v, s) for k, v in values.items() if v is not None}} for s in starts]
    return out


def _at(value: Any, prompt_above: int | None) -> float:
    """The rate of a Decimal or TieredPrices for prompts above ``prompt_above`` (None: the base)."""
    if not hasattr(value, "tiers"):
        return float(value)
    rate: Decimal = value.base
    for tier in value.tiers:  # ascending
        if prompt_above is not None and tier.start <= prompt_above:
            rate = tier.price
    return float(rate)
