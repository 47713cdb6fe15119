"""How a metric's numbers are named, scaled and chosen as headline in tables, figures and
reports: one place, so a paper's table, its figure and the report say the same thing.

A metric's leaf is named by its dotted key, ``METRIC.LEAF`` (``fanoutqa-string.acc.loose``). A
metric may declare its own (``declare(headline=..., labels=..., scale=...)``); the built-ins'
are here. A dataset's headline is what a paper reports for it (``DatasetLoader.headline``; else
the headline of its first default metric).
"""

from __future__ import annotations

from typing import Any

from harness.errors import HarnessError

# Built-in metrics: (headline leaves, {leaf: display name}, {leaf: scale}); scale is the value of a
# perfect score (1 or 100), None for an unbounded number (counts, BLEURT, cost).
_ROUGE = {
    f"rouge.{r}.{part}": f"ROUGE-{r[5:]} {short}"
    for r in ("rouge1", "rouge2", "rougeL")
    for part, short in (("fscore", "F1"), ("precision", "P"), ("recall", "R"))
}
BUILTIN: dict[str, tuple[tuple[str, ...], dict[str, str], dict[str, float | None]]] = {
    "fanoutqa-string": (
        ("acc.loose",),
        {"acc.loose": "Accuracy (loose)", "acc.strict": "Accuracy (strict)", **_ROUGE},
        {},
    ),
    "em-f1": (("f1",), {"em": "EM", "f1": "F1", "f1_precision": "F1 precision", "f1_recall": "F1 recall"}, {}),
    "set-f1": (
        ("f1",),
        {
            "precision": "Set precision",
            "recall": "Set recall",
            "f1": "Set F1",
            "f1_ge_0.5": "Share F1 ≥ 0.5",
            "recall_ge_0.8": "Share recall ≥ 0.8",
        },
        {},
    ),
    "quest": (("f1",), {"precision": "QUEST precision", "recall": "QUEST recall", "f1": "QUEST F1"}, {}),
    "topiocqa": (
        ("f1",),
        {"em": "EM", "f1": "F1", "bleu": "BLEU (sentence)", "bleu_corpus": "BLEU (corpus)", "turns": "Turns"},
        {"em": 100.0, "f1": 100.0, "bleu": 100.0, "bleu_corpus": 100.0, "turns": None},
    ),
    "bleurt": (("bleurt",), {"bleurt": "BLEURT"}, {"bleurt": None}),
    "llm-judge": (("llm_judge",), {"llm_judge": "LLM judge"}, {}),
    "agent": (
        ("evidence_recall",),
        {
            "evidence_recall": "Evidence recall",
            "evidence_precision": "Evidence precision",
            "searches": "Searches",
            "rounds": "Model rounds",
            "tokens": "Tokens",
            "cost": "Cost (USD)",
            "hops_retrieved": "Hops retrieved",
            "hops_answered": "Hops answered",
        },
        {"searches": None, "rounds": None, "tokens": None, "cost": None},
    ),
}


# Numbers where less is better (the best in a table's column is the lowest): the agent's spending.
LOWER_IS_BETTER = {"agent": ("cost", "tokens", "rounds")}


def _split(key: str) -> tuple[str, str]:
    metric, _, leaf = key.partition(".")
    return metric, leaf


def _declared(metric: str) -> Any:
    """The metric's declaration (a plugin's own names), or None when it cannot be resolved."""
    from harness.scoring.metrics import METRICS, declaration_of

    try:
        return declaration_of(METRICS.get(metric))
    except Exception:  # an unknown or broken plugin: the generic names below serve
        return None


def metric_headline(metric: str) -> list[str]:
    """The metric's headline keys (``["fanoutqa-string.acc.loose"]``)."""
    if metric in BUILTIN:
        leaves = BUILTIN[metric][0]
    else:
        declared = _declared(metric)
        leaves = tuple(getattr(declared, "headline", ()) or ())
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
    labels = BUILTIN[metric][1] if metric in BUILTIN else dict(getattr(_declared(metric), "labels", None) or {})
    if leaf in labels:
        return labels[leaf]
    return f"{metric} {leaf.replace('_', ' ').replace('.', ' ')}".strip()


def scale_of(key: str) -> float | None:
    """The value of a perfect score (1.0 or 100.0), None for an unbounded number."""
    metric, leaf = _split(key)
    if metric in BUILTIN:
        return BUILTIN[metric][2].get(leaf, 1.0)
    declared = _declared(metric)
    scales = dict(getattr(declared, "scales", None) or {})
    return scales.get(leaf, getattr(declared, "scale", 1.0) if declared is not None else 1.0)


def lower_is_better(key: str) -> bool:
    """Whether the best value of ``key`` is the lowest (cost, tokens, rounds); a plugin may declare
    such leaves as ``lower_is_better``."""
    metric, leaf = _split(key)
    if metric in BUILTIN:
        return leaf in LOWER_IS_BETTER.get(metric, ())
    return leaf in tuple(getattr(_declared(metric), "lower_is_better", ()) or ())


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
