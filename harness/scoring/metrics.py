"""Metric registry. A metric is one function registered by name that scores saved answers
against a dataset's references with no model call, and returns keys to merge into the official
score shape: aggregates at the top level, per-question values under ``raw``."""

from __future__ import annotations

import importlib
from typing import Any, Callable

from pydantic import BaseModel, Field

from harness.datasets.base import Dataset, Sample
from harness.errors import HarnessError
from harness.registry import Registry


class ScoringOptions(BaseModel):
    """Options of the metrics that need them; recorded with the scores. No judge runs unless named."""

    judge: str | None = Field(None, description="model for the LLM judge, e.g. openai/gpt-4o-2024-11-20")
    judge_max_connections: int = 8
    bleurt_checkpoint: str | None = Field(None, description="directory of a BLEURT checkpoint")
    cache_path: str | None = None


# fn(questions, answers, only_score_answered, options=ScoringOptions)
#   -> {"aggregate": {...}, "raw": {qid: {...}}, "info": {...}}
MetricFn = Callable[..., dict[str, Any]]
METRICS: Registry[MetricFn] = Registry("metric")

# metric name -> module that registers it, for metrics that live in their own file
METRIC_MODULES = {
    "llm-judge": "harness.scoring.llm_judge",
    "bleurt": "harness.scoring.bleurt",
    "set-f1": "harness.scoring.list_metrics",
    "quest": "harness.scoring.quest_metrics",
    "topiocqa": "harness.scoring.topiocqa_metrics",
}


def get_metric(name: str) -> MetricFn:
    if name in METRIC_MODULES:
        importlib.import_module(METRIC_MODULES[name])
    if name not in METRICS:
        known = sorted(set(METRICS.names()) | set(METRIC_MODULES))
        raise HarnessError(f"unknown metric {name!r} (known: {', '.join(known)})")
    return METRICS.get(name)


@METRICS.register("fanoutqa-string")
def fanoutqa_string(
    questions: list[Sample], answers: list[dict[str, Any]], only_answered: bool, options: ScoringOptions | None = None
) -> dict[str, Any]:
    """FanOutQA loose/strict string accuracy and ROUGE-1/2/L, equal to fanoutqa 1.1.1."""
    import rouge_score

    from harness.scoring.fanoutqa_metrics import score_fanoutqa
    from harness.scoring.normalize import normalizer_info

    refs = [{"id": q.id, "answer": q.answer} for q in questions]
    scores = score_fanoutqa(refs, answers, only_score_answered=only_answered)
    raw = {r["question_id"]: {k: v for k, v in r.items() if k != "question_id"} for r in scores["raw"]}
    info = {
        "normalizer": normalizer_info(),
        "rouge_score": getattr(rouge_score, "__version__", None) or _dist_version("rouge-score"),
        "rouge_stemmer": True,
        "reference": "fanoutqa==1.1.1 eval.scorer (acc, rouge)",
    }
    return {"aggregate": {"acc": scores["acc"], "rouge": scores["rouge"]}, "raw": raw, "info": info}


@METRICS.register("em-f1")
def em_f1(
    questions: list[Sample], answers: list[dict[str, Any]], only_answered: bool, options: ScoringOptions | None = None
) -> dict[str, Any]:
    """HotpotQA's official answer EM / F1 / precision / recall; unanswered questions count 0."""
    from harness.scoring.hotpotqa_metrics import exact_match_score, f1_score

    by_id = {a["id"]: a["answer"] for a in answers}
    pool = [q for q in questions if q.id in by_id] if only_answered else questions
    raw: dict[str, dict[str, Any]] = {}
    for q in pool:
        if q.id in by_id and by_id[q.id] is not None:
            f1, precision, recall = f1_score(str(by_id[q.id]), str(q.answer))
            em = float(exact_match_score(str(by_id[q.id]), str(q.answer)))
        else:
            em = f1 = precision = recall = 0.0
        raw[q.id] = {"em": em, "f1": f1, "f1_precision": precision, "f1_recall": recall}
    n = len(pool) or 1
    aggregate = {k: sum(r[k] for r in raw.values()) / n for k in ("em", "f1", "f1_precision", "f1_recall")}
    return {"aggregate": aggregate, "raw": raw, "info": {"reference": "hotpot_evaluate_v1.py (answer metrics)"}}


def _dist_version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


def score_answers(
    dataset: Dataset,
    questions: list[Sample],
    answers: list[dict[str, Any]],
    metrics: list[str] | None = None,
    only_answered: bool = False,
    options: ScoringOptions | None = None,
) -> dict[str, Any]:
    """Score ``answers`` ({"id", "answer"}) on ``questions``; unanswered questions count 0
    unless ``only_answered`` (mirrors the official Scorer's ``only_score_answered``)."""
    if not dataset.info.has_answers:
        raise HarnessError(f"{dataset.info.spec()} has no reference answers; it cannot be scored here")
    names = metrics or dataset.metrics
    out: dict[str, Any] = {}
    raw: dict[str, dict[str, Any]] = {}
    info: dict[str, Any] = {}
    for name in names:
        result = get_metric(name)(questions, answers, only_answered, options=options or ScoringOptions())
        out.update(result["aggregate"])
        for qid, values in result["raw"].items():
            raw.setdefault(qid, {}).update(values)
        info[name] = result.get("info", {})
    if only_answered:  # the official scorer walks the answers in their order
        known = {q.id for q in questions}
        order = [a["id"] for a in answers if a["id"] in known]
    else:
        order = [q.id for q in questions]
    out["raw"] = [{"question_id": qid, **raw.get(qid, {})} for qid in order]
    breakdown = _breakdown(questions, out["raw"])
    if breakdown:
        out["breakdown"] = breakdown
    out["meta"] = {
        "metrics": names,
        "n_questions": len(order),
        "n_answered": sum(1 for a in answers if a.get("answer") is not None),
        "only_score_answered": only_answered,
        "dataset": dataset.info.spec(),
        "dataset_sha256": dataset.info.sha256,
        "metric_info": info,
        "options": (options or ScoringOptions()).model_dump(),
    }
    return out


def _numeric_leaves(values: dict[str, Any], prefix: str = "") -> dict[str, float]:
    out: dict[str, float] = {}
    for key, value in values.items():
        name = f"{prefix}{key}"
        if isinstance(value, bool):
            out[name] = float(value)
        elif isinstance(value, (int, float)):
            out[name] = float(value)
        elif isinstance(value, dict):
            out.update(_numeric_leaves(value, name + "."))
    return out


def _breakdown(questions: list[Sample], raw: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-group means of every per-question number (FanOutQA categories, QUEST templates, ...)."""
    by_id = {r["question_id"]: _numeric_leaves({k: v for k, v in r.items() if k != "question_id"}) for r in raw}
    groups: dict[str, dict[str, list[dict[str, float]]]] = {}
    for q in questions:
        if q.id not in by_id:
            continue
        for group, values in (q.groups or {}).items():
            for value in values:
                groups.setdefault(group, {}).setdefault(value, []).append(by_id[q.id])
    out: dict[str, Any] = {}
    for group, members in groups.items():
        out[group] = {}
        for value, rows in sorted(members.items()):
            keys = sorted({k for row in rows for k in row})
            out[group][value] = {"n": len(rows), **{k: sum(r.get(k, 0.0) for r in rows) / len(rows) for k in keys}}
    return out
