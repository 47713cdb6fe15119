"""The ``citations`` metric: the pages an answer cites (``--citations``; read by
``harness.scoring.statements``) against the gold evidence pages and against the pages the agent
actually retrieved, as BrowseComp-Plus scores citations (texttron/BrowseComp-Plus at commit
97c637cebfd93965b28f93199e27abfd1dcc5de6, ``scripts_evaluation/evaluate_run.py``:
``compute_citation_metrics`` per response and its citation summary), with Wikipedia titles for its
docids.

Per question, with C the distinct pages cited:

* ``cited``: 1 when the answer cites at least one page, else 0 (an unanswered question: 0);
* where it cites: ``n_cited`` = |C|; ``gold.precision`` = |C ∩ G| / |C| and ``gold.recall`` =
  |C ∩ G| / |G| against the question's gold evidence pages G (``Sample.needed_titles``: FanOutQA's
  decomposition evidence, HotpotQA's supporting pages; left out where a question has none); and
  ``retrieved.precision`` = |C ∩ R| / |C| (the share of citations the agent could have read: a cited
  page it never retrieved is made up) and ``retrieved.recall`` = |C ∩ R| / |R| against the pages R
  its row records it retrieved (``extra.evidence_recall.returned``: the pages its searches or its
  retriever returned; else ``extra.evidence.packed_titles``: the pages packed into its prompt; left
  out where the row records none, and ``retrieved.recall`` where R is empty).

Titles are compared by ``statements.title_key`` (underscores as spaces, case folded). A cited page
counts as gold when its title is a gold title or a page the run matched to one when it ran (the
row's ``evidence_recall.relevant``: redirects resolved against the snapshot); no snapshot is opened
here. Aggregate, as BrowseComp-Plus averages: ``cited`` over every question scored (its "responses
with citations" share), every other number over the questions that cite (and have the pages it
needs): a question that cites nothing has no precision, rather than 0 (BrowseComp-Plus's per-response
0.0 is left out of its averages the same way). Intervals: ``cited`` is a share (Wilson), the rest
percentile-bootstrapped over questions through this aggregate (the analytic interval of a mean where
every question has the number).
"""

from __future__ import annotations

from typing import Any

from harness.datasets.base import Sample
from harness.scoring.kinds import count, mean, share
from harness.scoring.metrics import ScoringOptions, aggregates, declare, reads
from harness.scoring.statements import title_key

REFERENCE = (
    "texttron/BrowseComp-Plus scripts_evaluation/evaluate_run.py at commit 97c637cebfd93965b28f93199e27abfd1dcc5de6 "
    "(compute_citation_metrics; the citation summary's averages over responses with citations)"
)
LEAVES = ("gold.precision", "gold.recall", "retrieved.precision", "retrieved.recall")


def retrieved_pages(row: dict[str, Any] | None) -> list[str] | None:
    """The pages the row records its agent retrieved (see the module); None where it records none."""
    extra = row.get("extra") if isinstance(row, dict) and isinstance(row.get("extra"), dict) else {}
    evidence = extra.get("evidence_recall")
    if isinstance(evidence, dict) and isinstance(evidence.get("returned"), list):
        return [str(t) for t in evidence["returned"]]
    packed = extra.get("evidence")
    if isinstance(packed, dict) and isinstance(packed.get("packed_titles"), list):
        return [str(t) for t in packed["packed_titles"]]
    return None


def citation_values(question: Sample, pages: list[str] | None, row: dict[str, Any] | None) -> dict[str, Any]:
    """One question's values (see the module) from the pages its answer cites."""
    cited = {title_key(t): t for t in pages or []}
    out: dict[str, Any] = {"cited": int(bool(cited))}
    if not cited:
        return out
    out["n_cited"] = len(cited)
    details: dict[str, Any] = {"cited": list(cited.values())}
    gold_titles = [str(t) for t in question.needed_titles]
    if gold_titles:
        extra = row.get("extra") if isinstance(row, dict) and isinstance(row.get("extra"), dict) else {}
        evidence = extra.get("evidence_recall") if isinstance(extra.get("evidence_recall"), dict) else {}
        gold = {title_key(t) for t in gold_titles}
        # a gold page's other spelling the run matched to it (a redirect's target): counts as that page
        matched = {title_key(t) for t in evidence.get("relevant") or []} - gold
        hits = [k for k in cited if k in gold or k in matched]
        out["gold"] = {"precision": len(hits) / len(cited), "recall": min(len(hits), len(gold)) / len(gold)}
        details["gold"] = [cited[k] for k in hits]
    retrieved = retrieved_pages(row)
    if retrieved is not None:
        seen = {title_key(t) for t in retrieved}
        grounded = [k for k in cited if k in seen]
        out["retrieved"] = {"precision": len(grounded) / len(cited)}
        if seen:
            out["retrieved"]["recall"] = len(grounded) / len(seen)
        details["retrieved"] = [cited[k] for k in grounded]
    out["pages"] = details
    return out


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def aggregate_citations(rows: list[dict[str, Any]], n: float) -> dict[str, Any]:
    """The aggregate of per-question rows (the metric's, a group's, a bootstrap draw's): ``cited``
    over all, the rest over the questions that have them."""
    out: dict[str, Any] = {
        "cited": _mean([float(r.get("cited", 0)) for r in rows]),
        "n_cited": _mean([float(r["n_cited"]) for r in rows if "n_cited" in r]),
    }
    for leaf in LEAVES:
        part, name = leaf.split(".")
        values = [float(r[part][name]) for r in rows if isinstance(r.get(part), dict) and name in r[part]]
        out.setdefault(part, {})[name] = _mean(values)
    return out


@declare(
    needs=("citations",),
    headline=("gold.precision", "gold.recall", "retrieved.precision"),
    labels={
        "cited": "Answers citing",
        "n_cited": "Pages cited",
        "gold.precision": "Citation precision (gold)",
        "gold.recall": "Citation recall (gold)",
        "retrieved.precision": "Citations retrieved",
        "retrieved.recall": "Retrieved pages cited",
    },
    kind=mean(),
    kinds={"cited": share(), "n_cited": count("pages")},
)
@aggregates(aggregate_citations)
@reads("row")
def citations(
    questions: list[Sample], answers: list[dict[str, Any]], only_answered: bool, options: ScoringOptions | None = None
) -> dict[str, Any]:
    """Citation precision and recall (see the module); answers carry ``citations`` (``stated``) and ``row``."""
    by_id = {a["id"]: a for a in answers}
    pool = [q for q in questions if q.id in by_id] if only_answered else questions
    raw: dict[str, dict[str, Any]] = {}
    for q in pool:
        record = by_id.get(q.id) or {}
        stated = record.get("citations") or {}
        raw[q.id] = citation_values(q, stated.get("pages"), record.get("row"))
    aggregate = aggregate_citations([raw[q.id] for q in pool], len(pool))
    info = {
        "reference": REFERENCE,
        "titles": "compared with underscores as spaces, case folded; a gold page also by the spelling the run matched "
        "to it (row extra.evidence_recall.relevant)",
        "retrieved": "row extra.evidence_recall.returned, else extra.evidence.packed_titles",
        "averaged": "cited over every question; the rest over the questions that cite (and have gold or retrieved pages)",
        "n_citing": sum(1 for r in raw.values() if r["cited"]),
    }
    return {"aggregate": aggregate, "raw": raw, "info": info}
