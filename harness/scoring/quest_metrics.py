"""``quest``: QUEST's end-to-end set metric (google-research/language, ``language/quest/eval/
run_eval.py``): per query, with P = the predicted title set and G = the gold ``docs`` set,
tp = |P & G|; precision = tp / |P|, recall = tp / |G|, F1 = harmonic mean, all 0 when tp = 0;
averaged over queries (``eval_utils.print_avg``). The per-template averages the official script
prints come from ``Sample.groups`` (template and domain) in ``score_answers(...)["breakdown"]``.

The official script compares exact title strings (its predictions are document titles from the
corpus). An agent writes free text, so we extract one title per line and normalize lightly before
the exact comparison, on both sides: strip bullets ("- ", "* ", "• "), numbering ("1.", "1)"),
wrapping quotes / ``**`` / ``[[...]]``, and surrounding whitespace; collapse internal whitespace;
and upper-case the first character (Wikipedia titles are case-insensitive in their first letter
only). Otherwise matching stays case- and punctuation-sensitive, as titles are.
"""

from __future__ import annotations

import re
from typing import Any

from harness.scoring.metrics import METRICS, ScoringOptions

_BULLET = re.compile(r"^\s*(?:[-*•]\s+|\(?\d+[.)]\s+)")


def normalize_title(title: str) -> str:
    t = " ".join(str(title).split())
    prev = None
    while prev != t:
        prev = t
        t = _BULLET.sub("", t).strip()
        if t.startswith("**") and t.endswith("**") and len(t) > 4:
            t = t[2:-2].strip()
        if t.startswith("[[") and t.endswith("]]"):
            t = t[2:-2].strip()
        if len(t) > 1 and t[0] == t[-1] and t[0] in "\"'`":
            t = t[1:-1].strip()
    return t[:1].upper() + t[1:]


def titles_from(answer: Any) -> list[str]:
    if answer is None:
        return []
    lines = answer if isinstance(answer, list) else str(answer).splitlines()
    return [t for t in (normalize_title(x) for x in lines) if t]


def score_sets(predicted: list[str], gold: list[str]) -> dict[str, float]:
    pred_set = {normalize_title(t) for t in predicted} - {""}
    gold_set = {normalize_title(t) for t in gold}
    tp = len(gold_set & pred_set)
    if tp:
        precision = tp / len(pred_set)
        recall = tp / len(gold_set)
        f1 = 2 * precision * recall / (precision + recall)
    else:
        precision = recall = f1 = 0.0
    return {"precision": precision, "recall": recall, "f1": f1, "n_predicted": len(pred_set), "n_correct": tp}


@METRICS.register("quest")
def quest(
    questions: list, answers: list[dict[str, Any]], only_answered: bool, options: ScoringOptions | None = None
) -> dict[str, Any]:
    by_id = {a["id"]: a.get("answer") for a in answers}
    pool = [q for q in questions if q.id in by_id] if only_answered else questions
    raw = {q.id: score_sets(titles_from(by_id.get(q.id)), list(q.answer or [])) for q in pool}
    n = len(pool)
    agg = {k: (sum(r[k] for r in raw.values()) / n if n else 0.0) for k in ("precision", "recall", "f1")}
    info = {
        "reference": "google-research/language language/quest/eval/run_eval.py",
        "title_normalization": "one per line; bullets/numbering/quotes stripped; first letter upper-cased",
    }
    return {"aggregate": agg, "raw": raw, "info": info}
