"""FanOutQA string metrics (accuracy loose/strict, ROUGE-1/2/L), equal to fanoutqa 1.1.1.

The values of ``answer_in_text`` (``fanoutqa/eval/string.py``) and ``Scorer.score_accuracy`` /
``Scorer.score_rouge`` (``fanoutqa/eval/scorer.py``) of fanoutqa 1.1.1 (zhudotexe/fanoutqa at commit
5e19c279, MIT), restated here from their definition, int/float types and summation order included,
so averages are bit-identical:

- a reference is a tree: lists and dicts hold further answers, anything else is a leaf (a boolean
  reads "yes"/"no"). Its leaves are visited depth first, a list in order, a dict keys first and
  then values. A leaf is found when its normalized text occurs in the normalized candidate between
  word boundaries (``\\b`` on both sides); the unfound leaves, normalized, in visiting order, are
  the result's ``missing``;
- a leaf reference scores int 1 or 0. A list scores (len(list) - len(missing)) / len(list) and a
  dict (2 * len(dict) - len(missing)) / (2 * len(dict)), ``missing`` counting every unfound leaf
  beneath (so nested containers can score below 0); every container works out its score, so an
  empty one, however deeply nested, divides by zero, as upstream;
  ``found`` is that score's numerator equal to its denominator;
- ROUGE compares ``str_answer`` of both sides (``harness.scoring.gold``) with rouge-score's scorer
  and the Porter stemmer.

Speed comes from normalizing each candidate once (the official code re-normalizes it for every
reference item) and from batched, memoized normalization (harness.scoring.normalize).
"""

from __future__ import annotations

import itertools
import re
from collections import namedtuple
from functools import lru_cache
from typing import Any, Iterable, Iterator

from harness.errors import HarnessError
from harness.scoring.gold import GoldMatch, scalar_text, str_answer
from harness.scoring.normalize import normalize, normalize_many

__all__ = ["answer_in_text", "score_fanoutqa", "str_answer"]  # str_answer: FanOutQA's, in harness.scoring.gold

ROUGE_TYPES = ("rouge1", "rouge2", "rougeL")
AccuracyResult = namedtuple("AccuracyResult", "found score missing")

_rouge = None


def answer_in_text(reference: Any, candidate: Any) -> AccuracyResult:
    """(found, score, missing): the share of reference strings found in the candidate (see above)."""
    return _answer_in(reference, normalize(candidate))


def _answer_in(reference: Any, norm_cand: str) -> AccuracyResult:
    children = _children(reference)
    if children is None:  # a leaf
        target = normalize(scalar_text(reference) if isinstance(reference, bool) else reference)
        hit = _bounded(target).search(norm_cand) is not None
        return AccuracyResult(found=hit, score=1 if hit else 0, missing=[] if hit else [target])
    # every container works out its own score, so an empty one raises wherever it is nested
    missing = [leaf for child in children for leaf in _answer_in(child, norm_cand).missing]
    slots = len(reference) * (2 if isinstance(reference, dict) else 1)  # a dict: its keys and its values
    hits = slots - len(missing)
    return AccuracyResult(found=hits == slots, score=hits / slots, missing=missing)


@lru_cache(maxsize=8192)
def _bounded(norm_ans: str) -> re.Pattern:
    # compiled once per answer instead of thrashing re's 512-entry pattern cache
    return re.compile(r"\b" + re.escape(norm_ans) + r"\b")


def _children(reference: Any) -> Iterable[Any] | None:
    """A container's answers in visiting order (a dict: keys, then values); None for a leaf."""
    if isinstance(reference, list):
        return reference
    if isinstance(reference, dict):
        return itertools.chain(reference.keys(), reference.values())
    return None


def _leaves(reference: Any) -> Iterator[Any]:
    """The leaf answers of a reference in visiting order, booleans as yes/no: what gets normalized."""
    children = _children(reference)
    if children is None:
        yield scalar_text(reference) if isinstance(reference, bool) else reference
        return
    for child in children:
        yield from _leaves(child)


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
            itertools.chain(_leaves(ref), [a["answer"]]) for _, ref, a in pairs if a is not None
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


def gold_matches(reference: Any, candidate: Any) -> list[GoldMatch]:
    """Each reference string of one question as ``answer_in_text`` scores it (one per string, a
    dict's keys then its values, repeats kept: the found share is the question's loose accuracy),
    found or missing, with the part of the answer it was found in: the smallest comma- or
    semicolon-separated part, else the line, whose own normalized text holds it; else the
    normalized words around it (the match may span lines)."""
    items = list(_leaves(reference))
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
