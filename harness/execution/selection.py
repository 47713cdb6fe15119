"""Which samples a run selects: ``--sample-id``, then ``--sample-filter``, then ``--shuffle`` /
``--stratify-by``, then ``--limit``, then ``--shard I/K`` (the part of those questions shard I holds). Every step is deterministic (a shuffle is seeded), so the same
options select the same samples in the same order (with ``--shuffle``, a larger ``--limit`` selects
a superset: the first N of the same seeded order).

None of these options is hashed into the run key: they pick samples of the same run.
"""

from __future__ import annotations

import hashlib
import random
from typing import Any

from harness.datasets.base import Dataset, Sample
from harness.errors import ConfigError
from harness.text import hash_bytes

NO_VALUE = "(none)"  # the stratum of a sample without the --stratify-by field
SHOWN = 20  # values listed in an error line


def field_name(text: str) -> str:
    """``turn type``, ``turn-type`` and ``Turn_Type`` all name the group field ``turn_type``."""
    return "_".join(text.strip().replace("-", " ").replace("_", " ").split()).casefold()


def group_fields(samples: list[Sample]) -> dict[str, list[str]]:
    """{field: its values in order of first appearance} over ``samples``."""
    fields: dict[str, dict[str, None]] = {}
    for sample in samples:
        for name, values in sample.groups.items():
            bucket = fields.setdefault(name, {})
            for value in values:
                bucket.setdefault(str(value), None)
    return {name: list(values) for name, values in fields.items()}


def _listing(items: list[str]) -> str:
    shown = ", ".join(items[:SHOWN])
    return shown + (f" and {len(items) - SHOWN} more" if len(items) > SHOWN else "")


def _resolve_field(option: str, given: str, fields: dict[str, list[str]], where: str) -> str:
    if not fields:
        raise ConfigError(f"{option}: {where} has no group fields to select on")
    by_name = {field_name(name): name for name in fields}
    name = by_name.get(field_name(given))
    if name is None:
        raise ConfigError(f"{option}: {where} has no field {given!r} (its fields: {', '.join(fields)})")
    return name


def parse_filters(items: list[str], fields: dict[str, list[str]], where: str) -> dict[str, set[str]]:
    """``["category=Sports", "category=Art"]`` -> {"category": {"sports", "art"}} (values casefolded),
    checked against the dataset's fields and values: one line naming the known ones otherwise."""
    wanted: dict[str, set[str]] = {}
    for item in items:
        given, sep, value = str(item).partition("=")
        if not sep or not given.strip() or not value.strip():
            raise ConfigError(f"--sample-filter {item!r}: expected FIELD=VALUE, e.g. --sample-filter category=Sports")
        name = _resolve_field("--sample-filter", given, fields, where)
        known = {v.casefold(): v for v in fields[name]}
        if value.strip().casefold() not in known:
            raise ConfigError(
                f"--sample-filter {name}={value.strip()}: no sample of {where} has that value "
                f"(its values: {_listing(sorted(fields[name]))})"
            )
        wanted.setdefault(name, set()).add(value.strip().casefold())
    return wanted


def _matches(sample: Sample, wanted: dict[str, set[str]]) -> bool:
    """Every field given matches (one of its values given is among the sample's)."""
    return all(any(str(v).casefold() in values for v in sample.groups.get(name, [])) for name, values in wanted.items())


def allocate(sizes: list[int], n: int) -> list[int]:
    """Largest-remainder (Hamilton) allocation of ``n`` among strata of ``sizes``: each gets the floor
    of its exact share, the rest go one each to the largest remainders (ties: the larger stratum,
    then the earlier one). Never more than a stratum holds; sums to min(n, sum(sizes))."""
    total = sum(sizes)
    if n >= total:
        return list(sizes)
    quotas = [size * n / total for size in sizes]
    counts = [int(q) for q in quotas]
    order = sorted(range(len(sizes)), key=lambda i: (-(quotas[i] - counts[i]), -sizes[i], i))
    for i in order[: n - sum(counts)]:
        counts[i] += 1
    return counts


def stratified(samples: list[Sample], name: str, n: int) -> list[Sample]:
    """``n`` samples, each stratum (the sample's first value of ``name``) represented in proportion;
    within a stratum the first ones in ``samples``' order; the result keeps that order."""
    strata: dict[str, list[int]] = {}
    for i, sample in enumerate(samples):
        values = sample.groups.get(name) or [NO_VALUE]
        strata.setdefault(str(values[0]), []).append(i)
    counts = allocate([len(members) for members in strata.values()], n)
    keep = {i for members, k in zip(strata.values(), counts) for i in members[:k]}
    return [s for i, s in enumerate(samples) if i in keep]


def shard_of(sample_id: str, k: int) -> int:
    """The shard (1..K) that holds a question, with all its epochs: a stable hash of its id, so it
    depends on nothing else (not the selection, its order, --limit or --epochs: a shard extended later
    stays disjoint from the others). Shards are balanced in expectation, not exactly."""
    digest = hashlib.sha256(hash_bytes(sample_id)).digest()
    return int.from_bytes(digest[:8], "big") % k + 1


def in_shard(samples: list[Sample], shard: str | None) -> list[Sample]:
    """The selected questions of shard ``I/K`` (all of them without one), in the selection's order."""
    if not shard:
        return samples
    from harness.execution.config import parse_shard

    i, k = parse_shard(shard)
    return [s for s in samples if shard_of(s.id, k) == i]


def shuffle_seed(config: Any) -> int:
    """--shuffle-seed, else --seed (0 where neither is set)."""
    if getattr(config, "shuffle_seed", None) is not None:
        return config.shuffle_seed
    generation = getattr(config, "generation", None)
    return getattr(generation, "seed", None) or 0


class _Selection:
    """The selection options of a RunConfig or of a partial stand-in (an older run's recorded config)."""

    def __init__(self, config: Any):
        self.config = config
        for name in ("sample_ids", "sample_filter", "shuffle_seed", "stratify_by", "limit", "shard"):
            setattr(self, name, getattr(config, name, None))
        self.shuffle = bool(getattr(config, "shuffle", False))


def select_samples(dataset: Dataset, config: Any) -> list[Sample]:
    """sample ids -> filters -> shuffle / stratify -> limit -> shard. ``config``: a RunConfig, or
    anything with its selection attributes (those missing are unset)."""
    config = _Selection(config)
    return in_shard(_select(dataset, config), config.shard)


def _select(dataset: Dataset, config: _Selection) -> list[Sample]:
    where = dataset.info.spec()
    samples = dataset.samples
    if config.sample_ids:
        by_id = dataset.by_id()
        unknown = [i for i in config.sample_ids if i not in by_id]
        if unknown:
            raise ConfigError(f"unknown sample id(s) in {where}: {', '.join(unknown[:5])}")
        samples = [by_id[i] for i in dict.fromkeys(config.sample_ids)]
    fields = group_fields(dataset.samples) if (config.sample_filter or config.stratify_by) else {}
    if config.sample_filter:
        wanted = parse_filters(config.sample_filter, fields, where)
        samples = [s for s in samples if _matches(s, wanted)]
        if not samples:
            shown = " ".join(f"--sample-filter {f}" for f in config.sample_filter)
            raise ConfigError(f"{shown}: no selected sample of {where} matches")
    if config.shuffle_seed is not None and not config.shuffle:
        raise ConfigError("--shuffle-seed: has no effect without --shuffle")
    if config.shuffle:
        samples = list(samples)
        random.Random(shuffle_seed(config.config)).shuffle(samples)
    if config.stratify_by:
        name = _resolve_field("--stratify-by", config.stratify_by, fields, where)
        if not config.limit:
            raise ConfigError(f"--stratify-by {name}: needs --limit N (the size of the proportional subset)")
        return stratified(samples, name, config.limit)
    if config.limit:
        samples = samples[: config.limit]
    return samples
