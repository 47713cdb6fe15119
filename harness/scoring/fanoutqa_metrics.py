"""FanOutQA string metrics (accuracy loose/strict, ROUGE-1/2/L), equal to fanoutqa 1.1.1.

Mirrors ``fanoutqa.eval.string.answer_in_text``, ``fanoutqa.eval.utils.str_answer`` and
``Scorer.score_accuracy`` / ``Scorer.score_rouge`` value for value, including int/float types and
summation order, so averages are bit-identical. Speed comes from normalizing each candidate once
(the official code re-normalizes it for every reference item) and from batched, memoized
normalization (harness.scoring.normalize).
"""

from __future__ import annotations

import itertools
import re
from collections import namedtuple
from functools import lru_cache
from typing import Any, Iterable, Iterator

from harness.errors import HarnessError
from harness.scoring.gold import scalar_text, str_answer
from harness.scoring.normalize import normalize, normalize_many

__all__ = ["answer_in_text", "score_fanoutqa", "str_answer"]  # str_answer: FanOutQA's, in harness.scoring.gold

ROUGE_TYPES = ("rouge1", "rouge2", "rougeL")
AccuracyResult = namedtuple("AccuracyResult", "found score missing")

_rouge = None


def answer_in_text(reference: Any, candidate: Any) -> AccuracyResult:
    """(found, score, missing): the share of reference strings found in the candidate.

    Lists score per item, dicts per key and per value (n = 2 * len), bools as "yes"/"no",
    primitives by a word-bounded search of the normalized reference in the normalized candidate.
    """
    return _answer_in(reference, normalize(candidate))


def _answer_in(reference: Any, norm_cand: str) -> AccuracyResult:
    if isinstance(reference, list):
        missing = []
        for a in reference:
            missing.extend(_answer_in(a, norm_cand).missing)
        n_found = len(reference) - len(missing)
        return AccuracyResult(found=n_found == len(reference), score=n_found / len(reference), missing=missing)
    if isinstance(reference, dict):
        missing = []
        for a in itertools.chain(reference.keys(), reference.values()):
            missing.extend(_answer_in(a, norm_cand).missing)
        n_ref = len(reference) * 2
        n_found = n_ref - len(missing)  # nested lists can make this differ from the item count; as official
        return AccuracyResult(found=n_found == n_ref, score=n_found / n_ref, missing=missing)
    if isinstance(reference, bool):
        reference = scalar_text(reference)
    norm_ans = normalize(reference)
    if not _bounded(norm_ans).search(norm_cand):
        return AccuracyResult(found=False, score=0, missing=[norm_ans])
    return AccuracyResult(found=True, score=1, missing=[])


@lru_cache(maxsize=8192)
def _bounded(norm_ans: str) -> re.Pattern:
    # Same pattern as the official re.search; compiled once instead of thrashing re's 512-entry cache.
    return re.compile(rf"\b{re.escape(norm_ans)}\b")


def _primitives(reference: Any) -> Iterator[Any]:
    """The strings _answer_in will normalize for this reference, in order."""
    if isinstance(reference, list):
        for a in reference:
            yield from _primitives(a)
    elif isinstance(reference, dict):
        for a in itertools.chain(reference.keys(), reference.values()):
            yield from _primitives(a)
    elif isinstance(reference, bool):
        yield scalar_text(reference)
    else:
        yield reference


def _field(obj: Any, name: str) -> Any:
    return obj[name] if isinstance(obj, dict) else getattr(obj, name)


def _rouge_scorer():
    global _rouge
    if _rouge is None:
        from harness.scoring.lean_import import NLTK_OPTIONAL, hidden

        with hidden(NLTK_OPTIONAL):  # nltk's optional scikit-learn/scipy imports: the stemmer needs neither
            from rouge_score.rouge_scorer import RougeScorer

        _rouge = RougeScorer(list(ROUGE_TYPES), use_stemmer=True)
    return _rouge


def score_fanoutqa(questions: Iterable[Any], answers: Iterable[dict], only_score_answered: bool = False) -> dict:
    """Official FanOutQA accuracy and ROUGE for ``answers`` (``{"id", "answer"}`` dicts).

    ``questions`` are dicts or objects with ``id`` and ``answer`` (the reference). Unanswered
    questions score 0 unless ``only_score_answered``, which scores exactly the given answers
    (as the official Scorer). Returns ``{"acc": {"loose", "strict"}, "rouge": {type: {"precision",
    "recall", "fscore"}}, "raw": [{"question_id", "acc", "rouge"}]}`` with raw in scoring order.
    """
    questions, answers = list(questions), list(answers)
    if only_score_answered:
        refs = {_field(q, "id"): _field(q, "answer") for q in questions}
        pairs = []
        for a in answers:
            if a["id"] not in refs:
                raise HarnessError(f"answer for unknown question id {a['id']!r}")
            pairs.append((a["id"], refs[a["id"]], a))
        eval_len = len(answers)
    else:
        by_id = {a["id"]: a for a in answers}  # a repeated id: the last one wins, as official
        pairs = [(_field(q, "id"), _field(q, "answer"), by_id.get(_field(q, "id"))) for q in questions]
        eval_len = len(questions)
    if not pairs:
        raise HarnessError("no questions to score")
    if len({qid for qid, _, _ in pairs}) != len(pairs):
        raise HarnessError("each question id must be scored once (duplicate question or answer ids)")

    # Warm the memo in one nlp.pipe batch; the loops below then only hit the cache.
    normalize_many(
        itertools.chain.from_iterable(
            itertools.chain(_primitives(ref), [a["answer"]]) for _, ref, a in pairs if a is not None
        )
    )

    rouge = _rouge_scorer()
    raw = []
    for qid, ref, a in pairs:
        if a is None:
            acc, parts = 0, {k: (0, 0, 0) for k in ROUGE_TYPES}
        else:
            acc = answer_in_text(ref, a["answer"]).score  # int 0/1 for primitives, float for containers
            scores = rouge.score(str_answer(ref), str_answer(a["answer"]))
            parts = {k: (s.precision, s.recall, s.fmeasure) for k, s in scores.items()}
        raw.append(
            {
                "question_id": qid,
                "acc": float(acc),
                "rouge": {
                    k: {"precision": float(p), "recall": float(r), "fscore": float(f)} for k, (p, r, f) in parts.items()
                },
            }
        )
    return {**aggregate_fanoutqa(raw, eval_len), "raw": raw}


def aggregate_fanoutqa(raw: list[dict], eval_len: int) -> dict:
    """The official aggregates from per-question rows in scoring order: the same left-to-right sums
    over the same values as the official code (an int 0/1 and its float add up identically), so a
    run scored question by question as it goes ends with the batch scorer's exact numbers. Strict
    counts the fully found answers: ``found`` is exactly ``score == 1`` in ``answer_in_text``."""
    return {
        "acc": {
            "loose": sum(r["acc"] for r in raw) / eval_len,
            "strict": sum(1 for r in raw if r["acc"] == 1.0) / eval_len,
        },
        "rouge": {
            k: {name: sum(r["rouge"][k][name] for r in raw) / eval_len for name in ("precision", "recall", "fscore")}
            for k in ROUGE_TYPES
        },
    }


from harness.scoring.gold import GoldMatch  # noqa: E402  (kept with the function that uses it)


def gold_matches(reference: Any, candidate: Any) -> list[GoldMatch]:
    """Each reference string of one question as ``answer_in_text`` scores it (one per string, a
    dict's keys then its values, repeats kept: the found share is the question's loose accuracy),
    found or missing, with the part of the answer it was found in: the smallest comma- or
    semicolon-separated part, else the line, whose own normalized text holds it; else the
    normalized words around it (the match may span lines)."""
    items = list(_primitives(reference))
    text = "" if candidate is None else str(candidate)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    parts = [p.strip() for line in lines for p in re.split(r"[,;]", line) if p.strip()]
    norm_cand, *_ = normalize_many([candidate, *items, *parts, *lines])
    out = []
    for item in items:
        pattern = _bounded(normalize(item))  # the test _answer_in makes, on the same normalized answer
        if not pattern.search(norm_cand):
            out.append(GoldMatch(str(item), False, None))
            continue
        where = next((p for p in [*parts, *lines] if pattern.search(normalize(p))), None)
        out.append(GoldMatch(str(item), True, where or _around(pattern, norm_cand)))
    return out


def _around(pattern: re.Pattern, norm_cand: str, words: int = 4) -> str:
    """The normalized match with a few normalized words either side."""
    match = pattern.search(norm_cand)
    before = norm_cand[: match.start()].split()[-words:]
    after = norm_cand[match.end() :].split()[:words]
    return " ".join(["…", *before, match.group(0), *after, "…"])
