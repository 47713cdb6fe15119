"""Retrieval metrics of QUEST and QAMPARI, as plain per-question functions (average them yourself).

* ``recall_at_k``: QUEST ``eval/analyze_retriever.py``: |set(top-K) & gold| / |gold|.
* ``mrecall_at_k``: MRecall@K. QUEST's code counts 1 when the gold set is a subset of the top-K
  (``cap=False``). The QAMPARI/QUEST papers' definition, the default here (``cap=True``), also
  counts 1 when |gold| > K and the top-K are all gold (at least K distinct gold items in the top-K).
  With QUEST's K values (20, 50, 100, 1000) and at most 20 gold documents the two agree for K >= 20.
* ``answer_recall_at_k`` (ARecall@K): the share of gold answers of which some alias occurs in one of
  the top-K passages, after QAMPARI's ``normalize_answer`` on both sides, as whole tokens.
* ``evidence_recall_at_k`` (ERecall@K): the share of gold proof passages retrieved in the top-K, as
  QAMPARI's ``models/evaluation/retriever_metric.py`` matches them: same title (case-insensitive)
  and a longest common substring (lower-cased) longer than 0.7 x the shorter text; each proof and
  each retrieved passage is matched at most once. (The official script's final averaging lines do
  not run as written; we average per question.) ``by_answer=True`` instead gives the share of
  answers with at least one of their proofs retrieved.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from difflib import SequenceMatcher
from typing import Any

from harness.scoring.list_metrics import answer_aliases, normalize_answer


def recall_at_k(retrieved_ids: Sequence[Any], gold_ids: Iterable[Any], k: int) -> float:
    gold = set(gold_ids)
    if not gold:
        raise ValueError("recall@k needs at least one gold item")
    return len(set(retrieved_ids[:k]) & gold) / len(gold)


def mrecall_at_k(retrieved: Sequence[Any], gold: Iterable[Any], k: int, cap: bool = True) -> float:
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


def _title(p: dict[str, Any]) -> str:
    title = p.get("title")
    if title is None and p.get("found_in_url"):
        title = p["found_in_url"].rsplit("/wiki/", 1)[-1].replace("_", " ")
    return (title or "").lower()


def _text(p: dict[str, Any]) -> str:
    return (p.get("text") if p.get("text") is not None else p.get("proof_text") or "").lower()


def passages_match(retrieved: dict[str, Any], proof: dict[str, Any], threshold: float = 0.7) -> bool:
    if _title(retrieved) != _title(proof):
        return False
    a, b = _text(retrieved), _text(proof)
    if not a or not b:
        return False
    m = SequenceMatcher(None, a, b, autojunk=False).find_longest_match(0, len(a), 0, len(b))
    return m.size / min(len(a), len(b)) > threshold


def evidence_recall_at_k(
    retrieved_passages: Sequence[dict[str, Any]], proofs: Sequence[Any], k: int, by_answer: bool = False
) -> float:
    """``retrieved_passages``: [{"title", "text"}] in rank order. ``proofs``: [{"title" or
    "found_in_url", "text" or "proof_text"}]; with ``by_answer``, one such list per answer."""
    groups = [list(g) for g in proofs] if by_answer else [[p] for p in proofs]
    flat = [(gi, p) for gi, g in enumerate(groups) for p in g]
    if not groups:
        raise ValueError("ERecall@k needs at least one gold proof")
    matched: set[int] = set()
    for ctx in retrieved_passages[:k]:
        for i, (_, proof) in enumerate(flat):
            if i in matched:
                continue
            if passages_match(ctx, proof):
                matched.add(i)
                break
    if by_answer:
        return len({flat[i][0] for i in matched}) / len(groups)
    return len(matched) / len(flat)
