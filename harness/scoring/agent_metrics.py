"""The ``agent`` metrics: how an agent worked, per question, from its sample row (``samples.jsonl``),
scored, averaged and given intervals like any metric.

Per question (a value the row cannot give is left out of that question, and so of the mean):

* ``evidence_recall``: the row's ``extra.evidence_recall.recall``, the share of the question's gold
  pages (FanOutQA's decomposition evidence, HotpotQA's supporting titles) that its searches or its
  retriever returned, as the strategy matched them against the snapshot (redirects resolved);
* ``evidence_precision``: of the distinct pages returned, the share that are gold pages; 0 when no
  page was returned (as sklearn's ``zero_division=0``; its recall is 0 too), so it is a mean over
  every question with gold pages, with analytic intervals and paired tests like recall. Rows
  written before strategies recorded the pages returned have none;
* ``searches``: calls to the search tool (strategies that record ``searches``);
* ``rounds``: model calls made (sent or answered by the response cache);
* ``tokens``: prompt + completion tokens of the row (a strategy that delegates sums its whole tree
  into the row's usage);
* ``cost``: the row's list-price cost in USD (left out when the model is unpriced);
* FanOutQA dev (a decomposition): ``hops_retrieved``, the share of its hops (sub-questions with an
  evidence page) whose page was returned, ``hops_answered``, the share whose answer is in the final
  answer (``answer_in_text`` of fanoutqa-string: the same normalization), and ``hops``, each hop's
  detail ``{id, evidence, retrieved, answered}``.

A question without a row (failed, pending) has no agent values, and the means are over the questions
that have them. Scoring bare generations (no rows), only ``hops_answered`` can be computed.
"""

from __future__ import annotations

from typing import Any

from harness.datasets.base import Sample
from harness.scoring.kinds import count, mean, money
from harness.scoring.metrics import ScoringOptions, declare, reads


# any gold answer (it reads the rows and the gold evidence pages, never the answer's type); needs nothing.
# Recall, precision and the hops are means of per-question shares (0..1); the rest counts and money.
@declare(
    headline=("evidence_recall",),
    labels={
        "evidence_recall": "Evidence recall",
        "evidence_precision": "Evidence precision",
        "searches": "Searches",
        "rounds": "Model rounds",
        "tokens": "Tokens",
        "cost": "Cost (USD)",
        "hops_retrieved": "Hops retrieved",
        "hops_answered": "Hops answered",
    },
    lower_is_better=("cost", "tokens", "rounds"),
    detail=("evidence_precision", "rounds", "tokens", "cost"),  # tables show recall, searches and hops
    kind=mean(),
    kinds={
        "searches": count("searches"),
        "rounds": count("model calls"),
        "tokens": count("tokens"),
        "cost": money("USD"),
    },
)
@reads("row")
def agent(
    questions: list[Sample], answers: list[dict[str, Any]], only_answered: bool, options: ScoringOptions | None = None
) -> dict[str, Any]:
    """How the agent worked (see the module docstring); answers carry their sample's ``row``."""
    by_id = {a["id"]: a for a in answers}
    raw = {q.id: agent_values(q, by_id[q.id].get("answer"), by_id[q.id].get("row")) for q in questions if q.id in by_id}
    info = {
        "reference": "the sample rows' own records (harness.scoring.agent_metrics)",
        "evidence_precision": "0 where no page was returned",
        "left_out": "a question without a row (failed) and a value its row cannot give are not in the means",
    }
    return {"raw": raw, "info": info}


def agent_values(question: Sample, answer: Any, row: dict[str, Any] | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    evidence = None
    if isinstance(row, dict):
        extra = row.get("extra") if isinstance(row.get("extra"), dict) else {}
        evidence = extra.get("evidence_recall") if isinstance(extra.get("evidence_recall"), dict) else None
        if evidence is not None:
            if evidence.get("recall") is not None:
                out["evidence_recall"] = float(evidence["recall"])
            returned = evidence.get("returned")
            if evidence.get("needed") and isinstance(returned, list):
                out["evidence_precision"] = len(evidence.get("relevant") or []) / len(returned) if returned else 0.0
        if isinstance(extra.get("searches"), list):
            out["searches"] = len(extra["searches"])
        out["rounds"] = int(row.get("model_calls") or 0) + int(row.get("cache_hits") or 0)
        usage = row.get("usage") if isinstance(row.get("usage"), dict) else {}
        out["tokens"] = int(usage.get("prompt_tokens") or 0) + int(usage.get("completion_tokens") or 0)
        if row.get("cost_usd") is not None:
            out["cost"] = float(row["cost_usd"])
    out.update(hop_values(question, answer, evidence))
    return out


def hop_values(question: Sample, answer: Any, evidence: dict[str, Any] | None) -> dict[str, Any]:
    """FanOutQA's per-hop diagnostics of one question ({} without a decomposition)."""
    from harness.datasets.fanoutqa import fanoutqa_hops
    from harness.scoring.fanoutqa_metrics import answer_in_text

    hops = fanoutqa_hops(question.raw or {})
    if not hops:
        return {}
    found = set(evidence.get("found") or []) if evidence is not None and evidence.get("needed") else None
    detail = []
    for hop in hops:
        title = hop["evidence"].get("title")
        answered = answer is not None and answer_in_text(hop.get("answer"), answer).found
        detail.append(
            {"id": hop.get("id"), "evidence": title, "retrieved": None if found is None else title in found, "answered": answered}
        )
    out: dict[str, Any] = {}
    if found is not None:
        out["hops_retrieved"] = sum(h["retrieved"] for h in detail) / len(detail)
    out["hops_answered"] = sum(h["answered"] for h in detail) / len(detail)
    out["hops"] = detail
    return out
