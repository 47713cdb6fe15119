"""Retrieval metrics of QUEST and QAMPARI, as plain per-question functions (average them yourself).

* ``recall_at_k``: QUEST ``eval/analyze_retriever.py``: |set(top-K) & gold| / |gold|.
* ``mrecall_at_k``: MRecall@K. By default QUEST's code (``analyze_retriever.py``): 1 when the gold
  set is a subset of the top-K, so a query with more than K gold documents always scores 0.
  ``cap=True`` is the QAMPARI/QUEST papers' wording instead: 1 also when |gold| > K and the top-K
  are all gold (at least min(K, |gold|) distinct gold items in the top-K).
* ``answer_recall_at_k`` (ARecall@K): the share of gold answers of which some alias occurs in one of
  the top-K passages, after QAMPARI's ``normalize_answer`` on both sides, as whole tokens.
* ``evidence_recall_at_k`` (ERecall@K): the share of gold proof passages retrieved in the top-K, as
  QAMPARI's ``models/evaluation/retriever_metric.py`` matches them: same title (case-insensitive),
  and the longest common substring of the lower-cased texts longer than 0.7 x the shorter raw
  text; each retrieved passage matches the first unmatched proof it can, each proof at most once.
  (The official script's final averaging lines do not run as written; we average per question.)
  ``by_answer=True`` instead gives the share of answers with at least one of their proofs retrieved.
* ``ndcg_at_k``: trec_eval's ``ndcg_cut.K`` (the gain of the document at rank i divided by
  log2(i + 1), summed over the top K, over the same sum for the gold documents sorted by gain);
  BrowseComp-Plus's retriever leaderboard reports it at K = 10 (``trec_eval -c -m recall.5,100,1000
  -m ndcg_cut.10``, texttron/BrowseComp-Plus@97c637ce README.md) over qrels whose every grade is 1
  (``topics-qrels/qrel_evidence.txt``, ``qrel_golds.txt``): binary gain, as here.

  The official ``longest_common_substring`` skips some alignments: it only starts runs at (i, j)
  (i in the retrieved text x, j in the proof y) with i - j <= len(x) - len(y), or with
  i - j <= len(y) - len(x) and j < len(x); so it returns 1, not 5, for ("world", "hello world!").
  ``lcs="official"`` (the default, what published numbers used) reproduces it; ``lcs="exact"``
  is the true longest common substring. Record ``metric_info(...)`` beside the values.

Unlike upstream (ZeroDivisionError), an empty retrieved or proof text never matches.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from difflib import SequenceMatcher
from typing import Any, Literal

from pydantic import Field, ValidationError

from harness.scoring.kinds import Kind, mean, share
from harness.scoring.list_metrics import answer_aliases, normalize_answer
from harness.scoring.metrics import MetricOptions, _option_error

LCS_KINDS = ("official", "exact")


class MRecallOptions(MetricOptions):
    """MRecall@K (QUEST): the official subset test by default."""

    cap: bool = Field(False, description="the papers' wording: 1 when min(K, |gold|) gold items are in the top K")


class ERecallOptions(MetricOptions):
    """ERecall@K (QAMPARI): the official longest common substring by default."""

    lcs: Literal["official", "exact"] = Field("official", description="official (QAMPARI's, quirks included) or exact")


# harness retrieval-eval's metrics with options (--metric-option NAME.KEY=VALUE); defaults official
RETRIEVAL_OPTIONS: dict[str, type[MetricOptions]] = {"mrecall": MRecallOptions, "evidence_recall": ERecallOptions}


def retrieval_options(given: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Every retrieval metric's options, ``given`` over the defaults; unknown names or values: one line."""
    from harness.errors import ConfigError

    unknown = [name for name in given if name not in RETRIEVAL_OPTIONS]
    if unknown:
        raise ConfigError(
            f"--metric-option {unknown[0]}: retrieval-eval has no metric with options named {unknown[0]!r} "
            f"(those with options: {', '.join(RETRIEVAL_OPTIONS)})"
        )
    out = {}
    for name, model in RETRIEVAL_OPTIONS.items():
        try:
            out[name] = model.model_validate(given.get(name) or {}).model_dump()
        except ValidationError as exc:
            raise _option_error(name, exc, model) from None
    return out


# What each retrieval-eval number is, per question (``harness.scoring.kinds``): its interval follows
# from this declaration (a share of 0/1 values: Wilson; a mean in [0, 1]: normal, clipped), never
# from the values it takes.
RETRIEVAL_KINDS: dict[str, Kind] = {
    "page_recall": mean(),  # share of a question's gold pages in the top K
    "all_pages": share(),  # 1 when every gold page is
    "recall": mean(),
    "mrecall": share(),  # 0 or 1, capped or not
    "answer_recall": mean(),
    "evidence_recall": mean(),
    "page_hit": share(),
    "answer_hit": share(),
    "ndcg": mean(),  # in [0, 1]
}
NDCG_K = 10  # BrowseComp-Plus's nDCG cutoff (ndcg_cut.10)


def metric_info(*, lcs: str = "official", cap: bool = False, ndcg_k: int = NDCG_K) -> dict[str, Any]:
    """What to record beside ERecall / MRecall / nDCG values: the definitions and option values used."""
    _check_lcs(lcs)
    return {
        "ndcg": {
            "reference": "trec_eval ndcg_cut (texttron/BrowseComp-Plus@97c637ce README.md: -m ndcg_cut.10)",
            "k": ndcg_k,
            "gain": "binary",
            "definition": "over the distinct pages in rank order (a page at its best passage's rank), gain 1 "
            "for a gold page in the snapshot, 0 otherwise; ideal: every gold page first",
        },
        "evidence_recall": {
            "reference": "samsam3232/qampari@dd9fe313 models/evaluation/retriever_metric.py",
            "lcs": lcs,
        },
        "mrecall": {
            "reference": "google-research/language@cd31d413 language/quest/eval/analyze_retriever.py",
            "cap": cap,
            "definition": "min(K, |gold|) gold items in the top K (papers' wording)"
            if cap
            else "gold set within the top K (official)",
        },
    }


def recall_at_k(retrieved_ids: Sequence[Any], gold_ids: Iterable[Any], k: int) -> float:
    gold = set(gold_ids)
    if not gold:
        raise ValueError("recall@k needs at least one gold item")
    return len(set(retrieved_ids[:k]) & gold) / len(gold)


def mrecall_at_k(retrieved: Sequence[Any], gold: Iterable[Any], k: int, cap: bool = False) -> float:
    gold_set = set(gold)
    if not gold_set:
        raise ValueError("MRecall@k needs at least one gold item")
    found = len(set(retrieved[:k]) & gold_set)
    need = min(k, len(gold_set)) if cap else len(gold_set)
    return 1.0 if found >= need else 0.0


def answer_recall_at_k(passages_texts: Sequence[str], answers_with_aliases: Sequence[Any], k: int) -> float:
    """``answers_with_aliases``: QAMPARI answers ({"answer_text", "aliases"}), alias lists or strings."""
    if not answers_with_aliases:
        raise ValueError("ARecall@k needs at least one gold answer")
    texts = [f" {normalize_answer(t)} " for t in passages_texts[:k]]
    hit = 0
    for ans in answers_with_aliases:
        if isinstance(ans, (list, tuple)):
            aliases = list(ans)
        else:
            text, aliases = answer_aliases(ans)
            aliases = aliases or [text]
        norms = [n for n in (normalize_answer(a) for a in aliases) if n]
        if any(f" {n} " in t for n in norms for t in texts):
            hit += 1
    return hit / len(answers_with_aliases)


def exact_lcs_length(x: str, y: str) -> int:
    """Length of the longest common substring of ``x`` and ``y``."""
    return SequenceMatcher(None, x, y, autojunk=False).find_longest_match(0, len(x), 0, len(y)).size


def official_lcs_length(x: str, y: str) -> int:
    """What QAMPARI's ``longest_common_substring(x, y)[0]`` returns, without its recursion (which
    fails past ~1,000 equal characters): the longest run of equal characters starting at a pair
    (i, j) its two diagonal sweeps visit (see the module docstring)."""
    lx, ly = len(x), len(y)
    if not lx or not ly:
        return 0

    def visited(i: int, j: int) -> bool:
        d = i - j
        return d <= lx - ly or (d <= ly - lx and j < lx)

    # Fast path: if one true longest block starts at a visited pair, the official value is exact.
    m = SequenceMatcher(None, x, y, autojunk=False).find_longest_match(0, lx, 0, ly)
    if m.size == 0 or visited(m.a, m.b):
        return m.size
    # Visited starts form a prefix of each diagonal (the bound on d is fixed, j only grows), so walk
    # each diagonal backwards keeping the run length, and keep the best run among visited starts.
    best = 0
    for d in range(1 - ly, lx):
        i_lo, i_hi = max(0, d), min(lx - 1, ly - 1 + d)
        if d <= lx - ly:
            last = i_hi
        elif d <= ly - lx:
            last = min(i_hi, lx - 1 + d)  # j = i - d < lx
        else:
            continue
        if i_hi - i_lo + 1 <= best:  # this diagonal is too short to beat best
            continue
        run = 0
        for i in range(i_hi, i_lo - 1, -1):
            run = run + 1 if x[i] == y[i - d] else 0
            if i <= last and run > best:
                best = run
    return best


def _check_lcs(lcs: str) -> None:
    if lcs not in LCS_KINDS:
        raise ValueError(f"unknown lcs {lcs!r} (one of: {', '.join(LCS_KINDS)})")


def _title(p: dict[str, Any]) -> str:
    title = p.get("title")
    if title is None and p.get("found_in_url"):
        title = p["found_in_url"].rsplit("/wiki/", 1)[-1].replace("_", " ")
    return (title or "").lower()


def _text(p: dict[str, Any]) -> str:
    return p.get("text") if p.get("text") is not None else p.get("proof_text") or ""


def passages_match(
    retrieved: dict[str, Any], proof: dict[str, Any], threshold: float = 0.7, lcs: str = "official"
) -> bool:
    _check_lcs(lcs)
    if _title(retrieved) != _title(proof):
        return False
    a, b = _text(retrieved), _text(proof)
    if not a or not b:
        return False
    length = (official_lcs_length if lcs == "official" else exact_lcs_length)(a.lower(), b.lower())
    # upstream divides by the raw lengths (lower() can lengthen a text, e.g. "İ")
    return length / min(len(a), len(b)) > threshold


def evidence_recall_at_k(
    retrieved_passages: Sequence[dict[str, Any]],
    proofs: Sequence[Any],
    k: int,
    by_answer: bool = False,
    lcs: str = "official",
) -> float:
    """``retrieved_passages``: [{"title", "text"}] in rank order. ``proofs``: [{"title" or
    "found_in_url", "text" or "proof_text"}]; with ``by_answer``, one such list per answer.
    ``lcs``: "official" (QAMPARI's longest_common_substring) or "exact"."""
    _check_lcs(lcs)
    groups = [list(g) for g in proofs] if by_answer else [[p] for p in proofs]
    flat = [(gi, p) for gi, g in enumerate(groups) for p in g]
    if not groups:
        raise ValueError("ERecall@k needs at least one gold proof")
    matched: set[int] = set()
    for ctx in retrieved_passages[:k]:
        for i, (_, proof) in enumerate(flat):
            if i in matched:
                continue
            if passages_match(ctx, proof, lcs=lcs):
                matched.add(i)
                break
    if by_answer:
        return len({flat[i][0] for i in matched}) / len(groups)
    return len(matched) / len(flat)


def ndcg_at_k(ranked: Sequence[Any], gains: dict[Any, float], k: int) -> float:
    """trec_eval's ``ndcg_cut.k`` for one query: ``ranked`` distinct document ids, best first;
    ``gains`` each judged document's grade (binary: 1 for every gold document). Documents not in
    ``gains`` gain 0; the ideal ranking is every judged document sorted by grade."""
    if k < 1:
        raise ValueError("nDCG@k needs k >= 1")
    ideal = sorted((g for g in gains.values() if g > 0), reverse=True)[:k]
    if not ideal:
        raise ValueError("nDCG@k needs at least one gold item with a positive grade")
    if len(set(ranked[:k])) != len(ranked[:k]):
        raise ValueError("nDCG@k ranks distinct documents (a document once, at its best rank)")
    dcg = sum(gains.get(doc, 0.0) / math.log2(rank + 2) for rank, doc in enumerate(ranked[:k]))
    return dcg / sum(g / math.log2(rank + 2) for rank, g in enumerate(ideal))
