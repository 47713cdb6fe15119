"""How a metric's numbers are named, scaled and chosen as headline in tables, figures and
reports: one place, so a paper's table, its figure and the report say the same thing.

A metric's leaf is named by its dotted key, ``METRIC.LEAF`` (``fanoutqa-string.acc.loose``). Every
metric, built-in or plugin, declares its own (``declare(headline=..., labels=..., detail=...,
kinds=...)``: the ``Metric``'s ``display`` and ``kinds``). A metric registered by name is read from
the registry; a plugin given as a reference (``FILE.py:NAME``, ``package.module:NAME``) is known by
what the scores of its run record of its declaration (``meta.metric_info.NAME.plugin.declared``,
learnt when the scores are read: ``learn_declared``), so a table reads it without loading the
plugin; a metric known neither way gets readable generic names, no scale, and every number a column.
A dataset's headline is what a paper reports for it (``DatasetLoader.headline``; else the headline
of its first default metric).
"""

from __future__ import annotations

import logging
from typing import Any

from harness.errors import HarnessError
from harness.scoring.kinds import UNBOUNDED, Kind, Kinds
from harness.scoring.metric import Display, Metric

log = logging.getLogger(__name__)

# metric name -> (its declaration as a run's scores record it, a Metric holding it): the plugins
# given by reference whose runs were read in this process
_RECORDED: dict[str, tuple[dict[str, Any], Metric]] = {}


def _split(key: str) -> tuple[str, str]:
    metric, _, leaf = key.partition(".")
    return metric, leaf


def declared_record(metric: Metric) -> dict[str, Any]:
    """What a run's scores record of a plugin metric's declaration (its display and kinds)."""
    return {**metric.display.record(), **metric.kinds.record()}


def _not_loaded(*args: Any, **kwargs: Any) -> Any:
    raise HarnessError("this metric is known by its recorded declaration only; its code is not loaded")


def learn_declared(metric_info: dict[str, Any]) -> None:
    """Note the declarations that ``metric_info`` (a run's ``scores.meta.metric_info``) records of
    its plugin metrics. Two runs recording different declarations under one name: the first read
    is kept, and a warning names the metric."""
    for name, info in (metric_info or {}).items():
        record = (info.get("plugin") or {}).get("declared") if isinstance(info, dict) else None
        if not isinstance(record, dict):
            continue
        if name in _RECORDED:
            if _RECORDED[name][0] != record:
                log.warning("metric %s: runs record different declarations of it; tables show the first read", name)
            continue
        try:
            display = Display(
                tuple(record.get("headline") or ()), dict(record.get("labels") or {}),
                tuple(record.get("lower_is_better") or ()), tuple(record.get("detail") or ()),
            )  # fmt: skip
            metric = Metric(_not_loaded, display=display, kinds=Kinds.from_record(record))
        except (TypeError, ValueError, AttributeError) as exc:
            raise HarnessError(f"scores.meta.metric_info.{name}.plugin.declared: not a declaration ({exc})") from None
        _RECORDED[name] = (record, metric)


def metric_of(metric: str) -> Any:
    """The ``Metric`` registered under ``metric`` (its declared display and kinds), else the one a
    run read in this process recorded (``learn_declared``), else None (a plugin gone, scores from
    before declarations were recorded): the generic names below serve, and its numbers are unbounded."""
    from harness.scoring.metric_registry import METRICS

    if metric not in METRICS:  # a key's metric is never loaded as a file here: its run's record serves
        recorded = _RECORDED.get(metric)
        return recorded[1] if recorded is not None else None
    try:
        return METRICS.get(metric)
    except Exception:  # noqa: BLE001 - a broken plugin: the generic names below serve
        return None


def kind_of(key: str) -> Kind:
    """The declared kind of ``METRIC.LEAF`` (``harness.scoring.kinds``); unbounded where the metric
    declares none or cannot be resolved."""
    metric, leaf = _split(key)
    found = metric_of(metric)
    return found.kind_of(leaf) if found is not None else UNBOUNDED


def metric_headline(metric: str) -> list[str]:
    """The metric's headline keys (``["fanoutqa-string.acc.loose"]``)."""
    found = metric_of(metric)
    leaves = found.display.headline if found is not None else ()
    return [f"{metric}.{leaf}" for leaf in leaves]


def dataset_headline(dataset: str | None, metrics: list[str]) -> list[str]:
    """The headline keys of a dataset's runs: the loader's ``headline`` where it names one, else
    the headline of the first metric that has one."""
    if dataset:
        from harness.datasets import DATASETS

        try:
            loader = DATASETS.get(dataset)
        except Exception:  # a plugin dataset no longer importable: fall back to its metrics
            loader = None
        headline = tuple(getattr(loader, "headline", ()) or ())
        if headline:
            return list(headline)
    for metric in metrics:
        keys = metric_headline(metric)
        if keys:
            return keys
    return []


def display_name(key: str) -> str:
    """``fanoutqa-string.acc.loose`` -> ``Accuracy (loose)``; an unknown leaf gets a readable
    form of its key (``my-metric.hit_rate`` -> ``my-metric hit rate``)."""
    metric, leaf = _split(key)
    found = metric_of(metric)
    labels = found.display.labels if found is not None else {}
    if leaf in labels:
        return labels[leaf]
    return f"{metric} {leaf.replace('_', ' ').replace('.', ' ')}".strip()


def scale_of(key: str) -> float | None:
    """The value of a perfect score (1.0 or 100.0) of a share or a bounded mean; None for a count,
    money or an unbounded number (its declared kind)."""
    return kind_of(key).perfect


def is_column(key: str) -> bool:
    """Whether ``METRIC.LEAF`` is a column of tables, leaderboards and the report's summary: not a
    leaf its metric declares ``detail`` (the parts of an F-score, a run's cost); every number of a
    metric known neither by registry nor by record."""
    metric, leaf = _split(key)
    found = metric_of(metric)
    return found is None or found.display.is_column(leaf)


def lower_is_better(key: str) -> bool:
    """Whether the best value of ``key`` is the lowest (the agent's cost, tokens, rounds; a plugin
    declares its own: ``declare(lower_is_better=...)``)."""
    metric, leaf = _split(key)
    found = metric_of(metric)
    return found is not None and leaf in found.display.lower_is_better


def chosen_keys(requested: list[str], available: list[str]) -> list[str]:
    """``--metric`` names as keys of ``available``: a full key (``fanoutqa-string.acc.strict``), a
    metric's name (its headline keys, or all of its keys when it declares none) or a key's end
    (``acc.strict``); each key once, in the order asked. An unknown name is a one-line error
    listing what there is. Tables, figures and their commands read ``--metric`` through this."""
    keys: list[str] = []
    for wanted in requested:
        if wanted in available:
            found = [wanted]
        else:
            leaves = [k for k in available if k.startswith(wanted + ".")]
            found = [k for k in metric_headline(wanted) if k in leaves] or leaves
            found = found or [k for k in available if k.endswith("." + wanted)]
        if not found:
            listing = ", ".join(available) if available else "none"
            raise HarnessError(f"--metric {wanted}: not a metric of these runs (available: {listing})")
        keys += [k for k in found if k not in keys]
    return keys
