"""TopiOCQA's reader metrics, EM and F1, with the values of the official evaluator
(McGill-NLP/topiocqa ``evaluate_reader.py`` at commit 49b710e9, its ``TopiOCQAEvaluator``, which its
authors adapted from CoQA's), plus BLEU-4 from sacrebleu. Written here from that definition:

- answers are read as SQuAD reads them (``harness.scoring.squad``: lower-case, ASCII punctuation
  deleted, whole-word a/an/the blanked, whitespace tokens); there is no yes/no rule (HotpotQA's);
- against one reference, EM is 1 when the token lists are equal, else 0; F1 is the token-bag F1,
  except that when either side has no token it is 1 if both have none, else 0;
- the references of a turn are ``[Answer] + [a["Answer"] for a in Additional_answers]``. One
  reference: the turn scores what it scores against it. Several: CoQA's leave-one-out rule, each
  reference left out in turn, the best score over the others taken, and those bests averaged;
- the aggregate is the mean over every gold turn, a turn without a prediction counting 0, times
  100, in the official order (``total / n * 100``: ``100 * total / n`` can differ in the last bit,
  23 of 80 giving 28.75 where the official 28.749999999999996 prints 28.7). The official script
  prints it rounded to 1 decimal; we keep the unrounded value (``round(x, 1)`` gives the printed one).

Not in the official evaluator: BLEU. We add sentence BLEU-4 (sacrebleu defaults: 13a tokenization,
exp smoothing, 0-100), taking the max over the references per turn, and a corpus BLEU over the
original answers.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from harness.datasets.base import Sample
from harness.scoring.gold import gold_text
from harness.scoring.kinds import count, mean
from harness.scoring.metrics import SCALARS, ScoringOptions, declare, streamable
from harness.scoring.squad import answer_tokens, bag_overlap


def _against(reference: str, prediction: list[str]) -> tuple[int, float]:
    """(EM, F1) of the prediction's tokens against one reference."""
    expected = answer_tokens(reference)
    same = int(expected == prediction)
    if not expected or not prediction:
        return same, float(same)
    overlap = bag_overlap(expected, prediction)
    return same, overlap[0] if overlap else 0.0


def _leave_one_out(values: list[float]) -> float:
    """One value: itself. Several: the mean, over each position, of the largest value at the other
    positions (summed in position order, as the official loop adds them)."""
    if not values:
        raise ValueError("a turn needs at least one reference answer")
    if len(values) == 1:
        return float(values[0])
    first, second = sorted(range(len(values)), key=values.__getitem__, reverse=True)[:2]
    best_without = [values[second] if position == first else values[first] for position in range(len(values))]
    return sum(best_without) / len(values)


def turn_score(gold: list[str], pred: str) -> dict[str, float]:
    """One turn's {em, f1} in 0..1 against its references (the official ``_compute_turn_score``)."""
    prediction = answer_tokens(pred)
    per_reference = [_against(reference, prediction) for reference in gold]
    return {
        "em": _leave_one_out([em for em, _ in per_reference]),
        "f1": _leave_one_out([f1 for _, f1 in per_reference]),
    }


def sentence_bleu(pred: str, gold: list[str]) -> float:
    """Max over the references of sacrebleu's sentence BLEU-4 (0-100)."""
    from sacrebleu.metrics import BLEU

    bleu = BLEU(effective_order=True)
    return max(bleu.sentence_score(pred, [g]).score for g in gold)


def gold_list(answer: Any) -> list[str]:
    """The references: a list's items (alternatives), else the one answer; booleans read yes/no."""
    if isinstance(answer, (list, tuple)):
        return [gold_text(a) for a in answer] or [""]
    return [gold_text(answer)]


@lru_cache(maxsize=1)
def _corpus_bleu():
    from sacrebleu.metrics import BLEU

    return BLEU()  # the corpus BLEU's settings: 13a, exp smoothing, 4-grams


def corpus_stats(pred: str, reference: str) -> list[int]:
    """One turn's share of the corpus BLEU: [hypothesis length, reference length, matching n-grams
    1-4, hypothesis n-grams 1-4], which sacrebleu sums over the corpus before scoring."""
    s = _corpus_bleu().corpus_score([pred], [[reference]])
    return [int(s.sys_len), int(s.ref_len), *map(int, s.counts), *map(int, s.totals)]


def _turn_stats(row: dict[str, Any]) -> list[int] | None:
    """A turn's ``bleu_corpus_stats`` when it is what ``corpus_stats`` stores (10 counts), else None
    (a run scored before they were stored, or a hand-edited file)."""
    stats = row.get("bleu_corpus_stats")
    ok = isinstance(stats, list) and len(stats) == 10
    return stats if ok and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in stats) else None


def _bleu_of_sums(sums: list[float]) -> float:
    """sacrebleu's corpus BLEU from the column sums of the turns' ``corpus_stats`` (counts: a
    bootstrap's sums come as floats)."""
    sums = [int(v) for v in sums]
    bleu = _corpus_bleu()
    return bleu.compute_bleu(
        correct=sums[2:6], total=sums[6:], sys_len=sums[0], ref_len=sums[1], smooth_method=bleu.smooth_method,
        smooth_value=bleu.smooth_value, effective_order=bleu.effective_order, max_ngram_order=bleu.max_ngram_order,
    ).score  # fmt: skip


def bleu_from_stats(rows: list[dict[str, Any]]) -> float | None:
    """The corpus BLEU of these turns' rows; None when one has no statistics."""
    stats = [_turn_stats(r) for r in rows]
    if any(s is None for s in stats):
        return None
    return _bleu_of_sums([sum(column) for column in zip(*stats)]) if stats else 0.0


def official_percent(turn_scores: list[float], n: int) -> float:
    """evaluate_reader.py ``aggregate_scores``: the turn scores added to 0.0 in turn order, then
    ``total / max(1, turns) * 100``, in that order (the last bit decides how it prints rounded)."""
    total = 0.0
    for value in turn_scores:
        total += value
    return total / max(1, n) * 100


def _aggregate_topiocqa(rows: list[dict[str, Any]], n: int) -> dict[str, Any]:
    """The aggregate from per-turn rows, as the batch call computes it: EM/F1 x100 and BLEU means over
    all ``n`` turns, corpus BLEU from the summed per-turn statistics (bit-identical to sacrebleu's
    corpus_score, which sums the same integers)."""
    return {
        "em": official_percent([r["em"] for r in rows], n),
        "f1": official_percent([r["f1"] for r in rows], n),
        "bleu": sum(r["bleu"] for r in rows) / max(1, n),
        "bleu_corpus": bleu_from_stats(rows) if n else 0.0,
        "turns": n,
    }


def _corpus_bleu_from_sums(totals: list[float]) -> dict[str, Any]:
    return {"bleu_corpus": _bleu_of_sums(totals)}


# a list gold is alternative references: a list whose items are all needed (QUEST's) is not one
# EM and F1: the official x100 means of per-turn values in 0..1 (EM too is a mean, not a share: with
# several references a turn's EM is CoQA's leave-one-out average, 0.5 where one of two matches);
# BLEU's per-turn values are 0-100 already; turns: how many were scored (no interval)
@declare(
    accepts=(*SCALARS, "references"),
    answers=SCALARS,
    headline=("f1",),
    labels={"em": "EM", "f1": "F1", "bleu": "BLEU (sentence)", "bleu_corpus": "BLEU (corpus)", "turns": "Turns"},
    kind=mean(100.0),
    kinds={
        "em": mean(100.0, per_question=1.0),
        "f1": mean(100.0, per_question=1.0),
        "turns": count("turns", total=True),
    },
)
@streamable(_aggregate_topiocqa, sums=(_turn_stats, _corpus_bleu_from_sums))
def topiocqa(
    questions: list[Sample], answers: list[dict[str, Any]], only_answered: bool, options: ScoringOptions | None = None
) -> dict[str, Any]:
    import sacrebleu
    from sacrebleu.metrics import BLEU

    by_id = {a["id"]: a["answer"] for a in answers}
    pool = [q for q in questions if q.id in by_id] if only_answered else questions
    raw: dict[str, dict[str, Any]] = {}
    hyps: list[str] = []
    refs: list[str] = []
    for q in pool:
        gold = gold_list(q.answer)
        pred = by_id.get(q.id)
        if pred is None:  # missing prediction: 0, as aggregate_scores does
            raw[q.id] = {"em": 0.0, "f1": 0.0, "bleu": 0.0}
            hyps.append("")
        else:
            pred = gold_text(pred)
            scores = turn_score(gold, pred)
            raw[q.id] = {"em": float(scores["em"]), "f1": float(scores["f1"]), "bleu": sentence_bleu(pred, gold)}
            hyps.append(pred)
        refs.append(gold[0])
        # the turn's part of the corpus BLEU: it streams, and its error bars are bootstrapped
        raw[q.id]["bleu_corpus_stats"] = corpus_stats(hyps[-1], refs[-1])
    n = len(pool)
    corpus_metric = BLEU()
    corpus = corpus_metric.corpus_score(hyps, [refs]) if n else None
    aggregate = {
        "em": official_percent([r["em"] for r in raw.values()], n),
        "f1": official_percent([r["f1"] for r in raw.values()], n),
        "bleu": sum(r["bleu"] for r in raw.values()) / max(1, n),
        "bleu_corpus": corpus.score if corpus else 0.0,
        "turns": n,
    }
    info = {
        "reference": "McGill-NLP/topiocqa evaluate_reader.py (TopiOCQAEvaluator: em, f1); BLEU is ours (sacrebleu)",
        "scale": {
            "aggregate": "em, f1, bleu, bleu_corpus in 0-100 (official em/f1 x100, printed rounded to 1 decimal)",
            "raw": "em, f1 in 0-1 (official per-turn scores); bleu in 0-100",
        },
        "multi_reference": "em/f1: official leave-one-out average of max over the other references; "
        "bleu: max over references; bleu_corpus: original answer only",
        "sacrebleu": sacrebleu.__version__,
        "bleu_sentence": "sacrebleu BLEU(effective_order=True).sentence_score per reference, max (13a, exp smoothing)",
        "bleu_corpus_signature": str(corpus_metric.get_signature()) if corpus else None,
    }
    return {"aggregate": aggregate, "raw": raw, "info": info}
