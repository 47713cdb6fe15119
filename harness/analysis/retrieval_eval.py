"""``harness retrieval-eval``: a passage index scored with the seed papers' retrieval metrics, no reader.

Each question's query (TopiOCQA: the question representation) retrieves the top max(K) passages
once; every metric at every K is computed from that ranking. Gold pages are resolved in the
snapshot (titles, any case, redirects); gold pages the snapshot lacks can never be retrieved, so
they are left out of the gold set and a question with none left is skipped. How many were left
out is reported (``gold_coverage``, ``skipped``): a score over a partial snapshot says so.

Metrics per dataset (averaged over the evaluated questions):

- HotpotQA, FanOutQA (and any dataset with ``needed_titles``): ``page_recall@K`` = share of the
  question's evidence pages (HotpotQA: supporting-fact titles; FanOutQA: the decomposition's
  evidence) with at least one passage in the top K; ``all_pages@K`` = 1 if every one has.
- QUEST: documents are entities, ranked by their best passage (one per page with ``--passages
  page``, QUEST's setting); ``recall@K`` and ``mrecall@K`` over the top K documents, as
  ``harness.scoring.retrieval_metrics`` (QUEST ``analyze_retriever.py``; MRecall@K = 1 when the whole
  gold set is in the top K, so more than K gold documents score 0, as the official code; the capped
  variant of the papers' wording is ``mrecall_at_k(..., cap=True)``). The definitions and options
  used are recorded in the result (``metric_info``).
- QAMPARI: ``answer_recall@K`` (share of gold answers with an alias in a top-K passage, QAMPARI
  normalization) and ``evidence_recall@K`` (share of proof passages matched by a top-K passage:
  same title, longest common substring > 0.7 of the shorter text), over all answers and proofs.
- TopiOCQA: the paper's top-K retrieval accuracy asks whether the gold passage of its 25.7M-passage
  corpus is in the top K; that corpus and the gold passage ids are not here. Computable here:
  ``page_hit@K`` = 1 if a top-K passage comes from the turn's gold page (``Topic``: the page the
  gold passage belongs to), and ``answer_hit@K`` = 1 if a top-K passage contains the gold answer
  (normalized, whole tokens: DPR's has-answer test), over turns whose answer is not UNANSWERABLE.
- Every dataset with gold pages: ``ndcg@10``, trec_eval's ``ndcg_cut.10`` over the distinct pages
  in rank order (a page at its best passage's rank), binary gain (a gold page in the snapshot: 1),
  as BrowseComp-Plus's retriever leaderboard (its qrels are all grade 1). A ranking cut before it
  holds 10 distinct pages is searched again deeper, so the value never rests on a short list.

Each number has a 95% interval from its per-question values, by its declared kind
(``retrieval_metrics.RETRIEVAL_KINDS``: a 0/1 share gets Wilson's, a mean in [0, 1] the normal
interval clipped to it; clustered by ``cluster_by``, TopiOCQA's conversations by default):
``uncertainty["METRIC@K"]``.
"""

from __future__ import annotations

import time
from typing import Any

DEFAULT_KS = (10, 25, 50, 100, 200)
UNANSWERABLE = "unanswerable"


def query_of(sample, representation: str) -> str:
    from harness.datasets.conversation import format_history

    if representation == "all-history" and sample.history:
        return format_history(sample, "all-history", style="sep")
    return sample.question


def resolve(snapshot, titles: list[str]) -> tuple[list[str], list[str]]:
    """(page titles present in the snapshot, in order, deduplicated; titles missing)."""
    present, missing = [], []
    for t in titles:
        page = snapshot.resolve_title(t)
        if page is None:
            missing.append(t)
        elif page.title not in present:
            present.append(page.title)
    return present, missing


def unique_titles(hits) -> list[str]:
    return list(dict.fromkeys(h.title for h in hits))


def _proofs(sample) -> list[dict[str, Any]]:
    return [p for a in sample.raw.get("answer_list") or [] for p in (a.get("proof") or []) if isinstance(p, dict)]


def metric_names(dataset: str) -> list[str]:
    """The metrics at every K (``ndcg`` is at its own cutoff, apart)."""
    return {
        "quest": ["recall", "mrecall"],
        "qampari": ["answer_recall", "evidence_recall"],
        "topiocqa": ["page_hit", "answer_hit"],
    }.get(dataset, ["page_recall", "all_pages"])


def _ndcg(hits, present: list[str], ndcg_k: int) -> dict[str, float]:
    """{"K": nDCG@K} over the distinct pages of ``hits`` (binary gain: a gold page in the snapshot)."""
    from harness.scoring.retrieval_metrics import ndcg_at_k

    return {str(ndcg_k): ndcg_at_k(unique_titles(hits), {t: 1.0 for t in present}, ndcg_k)}


def score_question(
    dataset: str,
    sample,
    hits,
    ks: list[int],
    snapshot,
    options: dict[str, dict[str, Any]] | None = None,
    ndcg_k: int | None = None,
) -> dict[str, Any] | None:
    """Per-K values for one question, or a dict with ``skip`` (the reason). ``options``: the retrieval
    metrics' options (``retrieval_options``; default official); ``ndcg_k``: also nDCG at that cutoff
    (None: not computed)."""
    from harness.scoring.retrieval_metrics import (
        answer_recall_at_k,
        evidence_recall_at_k,
        mrecall_at_k,
        recall_at_k,
    )

    from harness.scoring.retrieval_metrics import retrieval_options

    options = options or retrieval_options({})
    titles = [h.title for h in hits]
    texts = [h.text for h in hits]
    values: dict[str, dict[str, float]] = {}
    info: dict[str, Any] = {}
    if dataset == "qampari":
        answers = list(sample.answer or [])
        proofs = _proofs(sample)
        if not answers:
            return {"skip": "no gold answers"}
        present, missing = resolve(snapshot, list(sample.needed_titles))
        info = {"gold_pages": len(present) + len(missing), "gold_pages_present": len(present)}
        retrieved = [{"title": h.title, "text": h.text} for h in hits]
        values["answer_recall"] = {str(k): answer_recall_at_k(texts, answers, k) for k in ks}
        if proofs:
            lcs = options["evidence_recall"]["lcs"]
            values["evidence_recall"] = {str(k): evidence_recall_at_k(retrieved, proofs, k, lcs=lcs) for k in ks}
        if ndcg_k and present:  # the proof pages
            values["ndcg"] = _ndcg(hits, present, ndcg_k)
        return {"values": values, **info}
    if dataset == "topiocqa":
        present, missing = resolve(snapshot, list(sample.needed_titles))
        if not present:
            return {"skip": "gold page not in the snapshot", "gold_pages": 1, "gold_pages_present": 0}
        values["page_hit"] = {str(k): float(present[0] in titles[:k]) for k in ks}
        answer = sample.raw.get("Answer")
        if isinstance(answer, str) and answer.strip() and answer.strip().casefold() != UNANSWERABLE:
            values["answer_hit"] = {str(k): answer_recall_at_k(texts, [answer], k) for k in ks}
        if ndcg_k:
            values["ndcg"] = _ndcg(hits, present[:1], ndcg_k)
        return {"values": values, "gold_pages": 1, "gold_pages_present": 1}
    gold = list(sample.answer or []) if dataset == "quest" else list(sample.needed_titles)
    present, missing = resolve(snapshot, gold)
    info = {"gold_pages": len(present) + len(missing), "gold_pages_present": len(present)}
    if not present:
        return {"skip": "no gold page in the snapshot", **info}
    if dataset == "quest":
        ranked = unique_titles(hits)
        values["recall"] = {str(k): recall_at_k(ranked, present, k) for k in ks}
        cap = options["mrecall"]["cap"]
        values["mrecall"] = {str(k): mrecall_at_k(ranked, present, k, cap=cap) for k in ks}
    else:
        values["page_recall"] = {str(k): recall_at_k(titles, present, k) for k in ks}
        values["all_pages"] = {str(k): mrecall_at_k(titles, present, k, cap=False) for k in ks}
    if ndcg_k:
        values["ndcg"] = _ndcg(hits, present, ndcg_k)
    return {"values": values, **info}


def evaluate(
    dataset: str,
    samples,
    snapshot,
    retriever,
    ks: list[int],
    representation: str,
    options: dict | None = None,
    ndcg_k: int | None = None,
    cluster_by: str | None = None,
) -> dict[str, Any]:
    """``options``: the retrieval metrics' options as ``retrieval_options`` gives them (default
    official); ``ndcg_k``: nDCG's cutoff (None: the default, ``NDCG_K``); ``cluster_by``: the sample
    field clustering the intervals (None: every question independent)."""
    from harness.scoring.retrieval_metrics import NDCG_K, RETRIEVAL_KINDS, metric_info, retrieval_options
    from harness.scoring.kinds import UNBOUNDED
    from harness.scoring.uncertainty import cluster_labels, leaf_interval

    options = options or retrieval_options({})
    ndcg_k = ndcg_k or NDCG_K
    depth = max(*ks, ndcg_k)
    if dataset == "quest" and retriever.meta.get("passages") != "page":
        depth *= 8  # documents ranked by their best passage: deeper, so max(K) distinct pages can be reached
    queries = [query_of(s, representation) for s in samples]
    started = time.perf_counter()
    rankings = retriever.search_many(queries, depth) if queries else []
    rankings = [_deep_enough(retriever, q, hits, depth, ndcg_k) for q, hits in zip(queries, rankings)]
    seconds = time.perf_counter() - started
    per_question = []
    skipped: dict[str, int] = {}
    columns: dict[str, dict[str, list[tuple[str, float]]]] = {}  # metric -> K -> [(question id, value)]
    gold_total = gold_present = 0
    for sample, query, hits in zip(samples, queries, rankings):
        row = score_question(dataset, sample, hits, ks, snapshot, options, ndcg_k)
        gold_total += row.get("gold_pages", 0)
        gold_present += row.get("gold_pages_present", 0)
        entry = {"id": sample.id, "query": query, "hits": [[h.passage_id, h.title, round(h.score, 6)] for h in hits]}
        if "skip" in row:
            skipped[row["skip"]] = skipped.get(row["skip"], 0) + 1
            entry["skipped"] = row["skip"]
        else:
            entry["values"] = row["values"]
            for name, by_k in row["values"].items():
                for k, v in by_k.items():
                    columns.setdefault(name, {}).setdefault(k, []).append((sample.id, v))
        per_question.append(entry)
    metrics = {name: {k: sum(v for _, v in c) / len(c) for k, c in by_k.items()} for name, by_k in columns.items()}
    counts = {name: len(next(iter(by_k.values()))) for name, by_k in columns.items() if by_k}
    uncertainty: dict[str, dict[str, Any]] = {}
    for name, by_k in columns.items():
        kind = RETRIEVAL_KINDS.get(name, UNBOUNDED)
        for k, column in by_k.items():
            ids = [qid for qid, _ in column]
            clusters = cluster_labels(samples, ids, cluster_by) if cluster_by else None
            entry = leaf_interval(kind, [v for _, v in column], clusters, kind.times)
            uncertainty[f"{name}@{k}"] = {**entry, "kind": kind.record()}
    return {
        "dataset_name": dataset,
        "retriever": retriever.kind,
        "passages": retriever.meta.get("passages"),
        "question_representation": representation,
        "ks": ks,
        "ndcg_k": ndcg_k,
        "n_questions": len(samples),
        "n_evaluated": len(samples) - sum(skipped.values()),
        "skipped": skipped,
        "gold_coverage": {"gold_pages": gold_total, "in_snapshot": gold_present},
        "metric_names": metric_names(dataset),
        "metrics": metrics,
        "metric_counts": counts,
        "uncertainty": uncertainty,
        "cluster_by": cluster_by,
        "metric_info": metric_info(lcs=options["evidence_recall"]["lcs"], cap=options["mrecall"]["cap"], ndcg_k=ndcg_k),
        "metric_options": options,
        "timing": {
            "queries": len(queries),
            "seconds": round(seconds, 4),
            "queries_per_s": round(len(queries) / seconds, 1) if seconds > 0 else None,
        },
        "per_question": per_question,
    }


def _deep_enough(retriever, query: str, hits, depth: int, need: int):
    """``hits``, or a deeper search of ``query`` when they hold fewer than ``need`` distinct pages and
    were cut at ``depth`` (not the retriever's last match): nDCG@K ranks the first K distinct pages."""
    total = len(retriever)
    while len(unique_titles(hits)) < need and len(hits) >= depth and depth < total:
        depth = min(depth * 4, total)
        hits = retriever.search(query, depth)
    return hits


def format_table(result: dict[str, Any]) -> str:
    ks = result["ks"]
    lines = [
        f"{result['retriever']} over {result['passages']} passages: {result['n_evaluated']} of "
        f"{result['n_questions']} questions evaluated"
        + (
            f" (skipped: {', '.join(f'{n} {why}' for why, n in result['skipped'].items())})"
            if result["skipped"]
            else ""
        )
        + f"; gold pages in the snapshot {result['gold_coverage']['in_snapshot']}/{result['gold_coverage']['gold_pages']}"
        + (f"; {result['timing']['queries_per_s']} queries/s" if result["timing"]["queries_per_s"] else ""),
        "",
        "| metric | n | " + " | ".join(f"@{k}" for k in ks) + " |",
        "|---|---|" + "---|" * len(ks),
    ]
    for name in result["metric_names"]:
        by_k = result["metrics"].get(name)
        if not by_k:
            lines.append(f"| {name} | 0 | " + " | ".join("—" for _ in ks) + " |")
            continue
        lines.append(
            f"| {name} | {result['metric_counts'][name]} | " + " | ".join(f"{by_k[str(k)]:.4f}" for k in ks) + " |"
        )
    ndcg_k = result.get("ndcg_k")
    if ndcg_k:
        value = (result["metrics"].get("ndcg") or {}).get(str(ndcg_k))
        error = (result.get("uncertainty") or {}).get(f"ndcg@{ndcg_k}") or {}
        if value is None:
            cell = "n/a (no question with a gold page in the snapshot)"
        else:
            low, high = error.get("ci95") or (None, None)
            cell = f"{value:.4f}" + (f" [95% {low:.4f}, {high:.4f}]" if low is not None else "")
        n = result["metric_counts"].get("ndcg", 0)
        lines += ["", f"ndcg@{ndcg_k} (binary gain, trec_eval ndcg_cut, over distinct pages): {cell}; n {n}"]
    return "\n".join(lines)
