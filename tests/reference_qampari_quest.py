"""Reference definitions of the QAMPARI and QUEST metrics, for the differential tests
(tests/test_qampari_quest_parity.py, tests/test_qampari_quest.py).

Our own code, written from the metrics' definitions: it restates what the official scoring code
computes (its semantics, quirks included), it is not a copy of that code. Each function says what it
restates:

* samsam3232/qampari at commit dd9fe313b07df83844984f76e8912079d469df72 (licence CC0 1.0, per the
  repository's README / GitHub): ``models/evaluation/reader_metrics.py`` (``normalize_answer``,
  ``compute_metrics_qampari``) and ``models/evaluation/retriever_metric.py``
  (``longest_common_substring``, the matching loop of ``main``).
* google-research/language at commit cd31d413e05ff7736d60003abfa0293d60f52c6d (licence Apache 2.0):
  ``language/quest/eval/run_eval.py`` and ``language/quest/eval/analyze_retriever.py`` (``main``:
  the per-query values they pass to ``eval_utils.print_avg``, which averages as sum / len).

During development (before the copies of the official files left this repository) each function
here was run against the official files themselves, unchanged, on cases from the parity test's
generators, with identical outputs on every case: 12,000 strings (normalization); 12,000 questions
(per-question scores; 1,612 of them divide by zero in both); 12,000 batches of 1-8 questions
(aggregates; 892 divide by zero in both); 38,815 text pairs (longest common substring); 12,000
samples with 62,506 retrieved passages (ERecall matching; empty texts raise in both); 12,000 QUEST
queries (P/R/F1) and the same 12,000 at 8 K values (Recall@K, MRecall@K).
"""

from __future__ import annotations

import string
from typing import Any

import numpy as np
import regex  # the third-party module, as upstream: its \b differs from `re`'s next to "²", accents

_PUNCTUATION = frozenset(string.punctuation)
_ARTICLE = regex.compile(r"\b(a|an|the)\b")


# ---------------------------------------------------------------- QAMPARI reader_metrics.py


def qampari_normalize(text: str) -> str:
    """``normalize_answer``: lower-case, drop ASCII punctuation, each article -> " ", then split on
    whitespace and join with single spaces."""
    kept = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLE.sub(" ", kept).split())


def _qampari_prf(answer_list: list[dict[str, Any]], predictions: list[str]) -> tuple[float, float, float]:
    """One question of ``compute_metrics_qampari``. Aliases only are keys (an answer_text that is not
    among its own aliases never matches); answers are keyed by answer_text, so a repeated answer_text
    keeps its first position and its last alias list; an alias shared by answers belongs to the last
    one and keeps its first position. Each distinct raw prediction takes the first alias, in that
    order, equal after normalization; each credited answer counts once. Precision divides by the
    distinct raw predictions, recall by len(answer_list): both raise ZeroDivisionError on empty."""
    aliases_of = {answer["answer_text"]: answer["aliases"] for answer in answer_list}
    owner: dict[str, str] = {}
    for answer_text, aliases in aliases_of.items():
        for alias in aliases:
            owner[alias] = answer_text
    keyed = [(qampari_normalize(alias), answer_text) for alias, answer_text in owner.items()]
    distinct = set(predictions)
    credited = set()
    for prediction in distinct:
        norm = qampari_normalize(prediction)
        credited.update([answer_text for alias_norm, answer_text in keyed if alias_norm == norm][:1])
    precision = len(credited) / len(distinct)
    recall = len(credited) / len(answer_list)
    f1 = 0 if precision == 0 or recall == 0 else (2 * recall * precision) / (recall + precision)
    return precision, recall, f1


def qampari_aggregate(records: list[dict[str, Any]]) -> dict[str, float]:
    """``compute_metrics_qampari`` on [{"answer_list", "predictions"}]: numpy means of the per-question
    values, and the shares of questions with F1 >= 0.5 and with recall >= 0.8."""
    scores = np.array([_qampari_prf(r["answer_list"], r["predictions"]) for r in records], float).reshape(-1, 3)
    precision, recall, f1 = scores[:, 0], scores[:, 1], scores[:, 2]
    return {
        "f1": float(np.mean(f1)),
        "recall": float(np.mean(recall)),
        "precision": float(np.mean(precision)),
        "f1_above": float(np.sum(f1 >= 0.5) / float(len(f1))),
        "rec_above": float(np.sum(recall >= 0.8) / float(len(f1))),
    }


def qampari_question_scores(answer_list: list[dict[str, Any]], predictions: list[str]) -> dict[str, float] | None:
    """``qampari_aggregate`` of one question (its means are its own values, the shares its 0/1
    flags); None where the official code divides by zero (no predictions, or no answers)."""
    try:
        return qampari_aggregate([{"answer_list": answer_list, "predictions": predictions}])
    except ZeroDivisionError:
        return None


# ---------------------------------------------------------------- QAMPARI retriever_metric.py


def qampari_lcs_length(x: str, y: str) -> int:
    """The length ``longest_common_substring(x, y)`` returns. It takes the longest run of equal
    characters (x[i], y[j]), (x[i+1], y[j+1]), ... over the starts (i, j) of two sweeps only: for
    each k < len(x) the diagonal from (k, len(y) - 1) back towards index 0, then for each k < len(y)
    the diagonal from (k, len(x) - 1) back (j indexes y but starts from len(x) - 1; pairs out of
    range count 0). Starts neither sweep reaches are skipped: 1, not 5, for ("world", "hello
    world!"). Iterative; the run at each start is 1 + the run at the next pair on its diagonal."""

    def equal(i: int, j: int) -> bool:
        return 0 <= i < len(x) and 0 <= j < len(y) and x[i] == y[j]

    def best_on_diagonal(i: int, j: int) -> int:
        run = 0
        while equal(i + run, j + run):  # the run at the sweep's first pair, read forwards
            run += 1
        best = run
        while i > 0 and j > 0:
            i, j = i - 1, j - 1
            run = run + 1 if equal(i, j) else 0
            best = max(best, run)
        return best

    sweeps = [(k, len(y) - 1) for k in range(len(x))] + [(k, len(x) - 1) for k in range(len(y))]
    return max((best_on_diagonal(i, j) for i, j in sweeps), default=0)


def qampari_retriever_matches(samples: list[dict[str, Any]]) -> list[list[int]]:
    """The matching loop of ``main``, per sample ({"ctxs", "positive_ctxs"}: [{"title", "text"}]): for
    each ctx in rank order, 1 if it matches a positive not matched yet (first such in list order,
    each positive at most once), else 0; so ERecall@k = sum(matches[:k]) / len(positive_ctxs). A
    match: titles equal lower-cased, and LCS of the lower-cased texts / the shorter raw text > 0.7
    (ZeroDivisionError where titles agree and a text is empty, as upstream)."""
    out = []
    for sample in samples:
        taken: set[int] = set()
        matches = []
        for ctx in sample["ctxs"]:
            hit = 0
            for i, pos in enumerate(sample["positive_ctxs"]):
                if i in taken or ctx["title"].lower() != pos["title"].lower():
                    continue
                shorter = min(len(ctx["text"]), len(pos["text"]))
                if qampari_lcs_length(ctx["text"].lower(), pos["text"].lower()) / shorter > 0.7:
                    taken.add(i)
                    hit = 1
                    break
            matches.append(hit)
        out.append(matches)
    return out


# ---------------------------------------------------------------- QUEST run_eval.py, analyze_retriever.py


def _gold_and_predicted(gold: list[dict[str, Any]], pred: list[dict[str, Any]]):
    """(gold docs, predicted docs) per gold query, in gold order. Predictions are looked up by query
    (the last one of a repeated query wins; KeyError if none); a gold query with no docs raises."""
    by_query = {p["query"]: p["docs"] for p in pred}
    for g in gold:
        if not g["docs"]:
            raise ValueError("Example has 0 docs.")
        yield list(g["docs"]), list(by_query[g["query"]])


def quest_set_scores(gold: list[dict[str, Any]], pred: list[dict[str, Any]]) -> dict[str, list[float]]:
    """``run_eval.py``: per query, precision / recall / F1 of the predicted title set against the gold
    title set (exact strings); all 0.0 when no title is correct."""
    out: dict[str, list[float]] = {"precision": [], "recall": [], "f1": []}
    for gold_docs, pred_docs in _gold_and_predicted(gold, pred):
        truth, guess = set(gold_docs), set(pred_docs)
        correct = len(truth & guess)
        p = r = f = 0.0
        if correct:
            p, r = correct / len(guess), correct / len(truth)
            f = 2 * p * r / (p + r)
        out["precision"].append(p)
        out["recall"].append(r)
        out["f1"].append(f)
    return out


def quest_retrieval_scores(
    gold: list[dict[str, Any]], pred: list[dict[str, Any]], ks: list[int]
) -> dict[int, dict[str, list[float]]]:
    """``analyze_retriever.py`` (upstream K: 20, 50, 100, 1000): per K and query, MRecall@K = 1.0 if
    the gold set is a subset of the first K predicted docs (uncapped: more than K gold docs give 0),
    and Recall@K = |gold & top K| / |gold|."""
    out: dict[int, dict[str, list[float]]] = {k: {"mrecall": [], "recall": []} for k in ks}
    for gold_docs, pred_docs in _gold_and_predicted(gold, pred):
        truth = set(gold_docs)
        for k in ks:
            top = set(pred_docs[:k])
            out[k]["mrecall"].append(1.0 if truth <= top else 0.0)
            out[k]["recall"].append(len(truth & top) / len(truth))
    return out
