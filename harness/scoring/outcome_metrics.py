"""``outcomes``: why a list answer is short or long, and why an answer is wrong.

**DeepSearchQA's outcome categories** (Gupta et al. 2026, arXiv 2601.20975; the rule as its
starter code computes it, ``calculate_metrics`` of the Kaggle notebook
andrewmingwang/deepsearchqa-starter-code, restated from its port in howard-yen/simple-evals@fa4969cf
``deepsearchqa_eval.py``). With G the question's gold items, M those the answer names and E the
answer's items that are no gold item ("excessive answers"):

* ``fully_correct``: every gold item found, nothing else (M = G, E empty; an empty G with E empty);
* ``correct_with_extraneous``: every gold item found, and more (M = G, E not empty): a padded list;
* ``incorrect`` (the paper's "fully incorrect"): G not empty and no gold item found (M empty),
  whatever else the answer says;
* ``partially_correct``: the rest, some but not all gold items found (with or without extra
  items): most often a list stopped early.

The four are disjoint and cover every question; each is the share of questions in it (a mean of a
0/1 indicator: Wilson's interval). DeepSearchQA has an LLM judge match items; here they are matched
by the dataset's own list metric (option ``matcher``), with the options this scoring gives it:
``set-f1`` (QAMPARI's official matching: normalized answer against each gold alias; FanOutQA's
answers flattened into items as set-f1 reads them) or ``quest`` (QUEST's exact titles,
``--metric-option quest.light=true`` cleaned). An item of the answer is extraneous when it matches
no gold item at all (after that normalization; an empty item is none, and two spellings that
normalize alike are one); a second mention of a gold item is no extra item.

**WebDetective's factorisation** (Song et al. 2025, arXiv 2510.05137: search sufficiency,
knowledge utilisation, refusal), from what a run records (``evidence_use``): for a question with
gold evidence pages and a sample row,

* ``refused``: the sample's outcome is ``refused`` (the model declined; found or not);
* ``found_used``: every gold page was retrieved (the row's evidence recall is 1) and the answer is correct;
* ``found_not_used``: every gold page was retrieved and the answer is not correct (a sample that
  ended without an answer is not correct);
* ``not_found``: some gold page was never retrieved (correct or not);

shares of the questions that have them, and ``utilisation``, found_used / (found_used +
found_not_used): how often evidence in hand became a correct answer (WebDetective's knowledge
utilisation), bootstrapped. Correct is ``harness.scoring.correct`` (option ``correct``; default
``auto``, the dataset's own rule), as ``calibration`` and ``per-correct`` read it.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from harness.scoring.correct import AUTO, CorrectOptions, asks, verdict_of
from harness.scoring.kinds import mean, share
from harness.scoring.metrics import ScoringOptions, aggregates, declare, option_values, reads, resolve_metrics

CATEGORIES = ("fully_correct", "partially_correct", "correct_with_extraneous", "incorrect")
EVIDENCE = ("found_used", "found_not_used", "not_found", "refused")


def list_outcome(n_gold: int, n_matched: int, n_extraneous: int) -> str:
    """DeepSearchQA's category of one answer (see the module docstring)."""
    all_found = n_matched >= n_gold  # an empty gold: nothing to find
    if all_found:
        return "correct_with_extraneous" if n_extraneous else "fully_correct"
    return "incorrect" if n_matched == 0 else "partially_correct"


def set_f1_counts(answer: Any, gold_answer: Any, clean_items: bool = False, alias_fallback: bool = False) -> tuple[int, int, int]:
    """(gold items, found, extraneous) of one answer as set-f1 matches items."""
    from harness.scoring.list_metrics import _read, answer_aliases, credited_answers, normalize_answer

    preds, gold = _read(answer, gold_answer, clean_items, alias_fallback)
    credited = credited_answers(preds, gold, alias_fallback)
    texts = {answer_aliases(item, alias_fallback)[0] for item in gold}  # an answer text listed twice is one item
    known = {normalize_answer(a) for item in gold for a in answer_aliases(item, alias_fallback)[1]}
    extra = {n for n in (normalize_answer(p) for p in preds) if n and n not in known}
    return len(texts), len(credited), len(extra)


def quest_counts(answer: Any, gold_answer: Any, title_normalization: str = "none") -> tuple[int, int, int]:
    """(gold titles, found, extraneous) of one answer as quest matches titles."""
    from harness.scoring.quest_metrics import _cleaned, titles_from

    gold = set(gold_answer or [])
    given = {t for t in _cleaned(titles_from(answer), gold, title_normalization) if t.strip()}
    return len(gold), len(gold & given), len(given - gold)


def evidence_use(row: dict[str, Any] | None, correct: float) -> dict[str, float] | None:
    """The question's WebDetective category as four 0/1 indicators, None without a row or gold pages."""
    if not isinstance(row, dict):
        return None
    extra = row.get("extra") if isinstance(row.get("extra"), dict) else {}
    evidence = extra.get("evidence_recall") if isinstance(extra.get("evidence_recall"), dict) else None
    if evidence is None or not evidence.get("needed") or evidence.get("recall") is None:
        return None
    outcome = row.get("outcome") or extra.get("outcome")
    if outcome == "refused":
        found = "refused"
    elif float(evidence["recall"]) >= 1.0:
        found = "found_used" if correct and outcome in (None, "answered") else "found_not_used"
    else:
        found = "not_found"
    return {name: float(name == found) for name in EVIDENCE}


def aggregate_outcomes(rows: list[dict[str, Any]], n: float) -> dict[str, Any]:
    """The shares over the rows given (each category over those that have it) and utilisation."""
    out: dict[str, Any] = {}
    scored = [r for r in rows if all(c in r for c in CATEGORIES)]
    for name in CATEGORIES:
        out[name] = sum(r[name] for r in scored) / len(scored) if scored else None
    used = [r["evidence_use"] for r in rows if isinstance(r.get("evidence_use"), dict)]
    if used:
        shares = {name: sum(u[name] for u in used) / len(used) for name in EVIDENCE}
        found = shares["found_used"] + shares["found_not_used"]
        shares["utilisation"] = shares["found_used"] / found if found else None
        out["evidence_use"] = shares
    return out


class OutcomesOptions(CorrectOptions):
    """outcomes' options: how list items are matched, and what a correct answer is (evidence use)."""

    matcher: Literal["set-f1", "quest"] = Field(
        "set-f1", description="whose item matching: set-f1 (QAMPARI's; FanOutQA's answers as items) or quest (exact titles)"
    )


def _check(options: ScoringOptions) -> None:
    given = OutcomesOptions.model_validate((options.metric_options or {}).get("outcomes") or {})
    (key, entry), = resolve_metrics([given.matcher]).items()
    option_values(key, entry.obj, options)


@declare(
    accepts=("str", "number", "bool", "list_of_str", "list", "dict", "entity_list"),
    options=OutcomesOptions,
    check=_check,
    headline=CATEGORIES,
    labels={
        "fully_correct": "Fully correct",
        "partially_correct": "Partially correct",
        "correct_with_extraneous": "Correct with extraneous",
        "incorrect": "Fully incorrect",
        "evidence_use.found_used": "Evidence found, used",
        "evidence_use.found_not_used": "Evidence found, not used",
        "evidence_use.not_found": "Evidence not found",
        "evidence_use.refused": "Refused",
        "evidence_use.utilisation": "Evidence utilisation",
    },
    kind=share(),
    kinds={"evidence_use.utilisation": mean()},  # a ratio of shares, bootstrapped
)
@aggregates(aggregate_outcomes)
@asks
@reads("row")
def outcomes(
    questions: list,
    answers: list[dict[str, Any]],
    only_answered: bool,
    options: ScoringOptions | None = None,
    *,
    correct: str = AUTO,
    matcher: str = "set-f1",
) -> dict[str, Any]:
    """DeepSearchQA's outcome categories and WebDetective's evidence use (see the module docstring)."""
    options = options or ScoringOptions()
    by_id = {a["id"]: a for a in answers}
    pool = [q for q in questions if q.id in by_id] if only_answered else questions
    (matcher_key, entry), = resolve_metrics([matcher]).items()
    matcher_options = option_values(matcher_key, entry.obj, options)
    raw: dict[str, dict[str, Any]] = {}
    for q in pool:
        record = by_id.get(q.id) or {}
        answer = record.get("answer")
        if matcher_key == "quest":
            light = matcher_options.get("light") or matcher_options.get("title_normalization") == "light"
            counts = quest_counts(answer, q.answer, "light" if light else "none")
        else:
            counts = set_f1_counts(answer, q.answer, bool(matcher_options.get("clean_items")),
                                   bool(matcher_options.get("alias_fallback")))  # fmt: skip
        category = list_outcome(*counts)
        values: dict[str, Any] = {name: float(name == category) for name in CATEGORIES}
        values.update(category=category, n_gold=counts[0], n_found=counts[1], n_extraneous=counts[2])
        used = evidence_use(record.get("row"), verdict_of(record))
        if used is not None:
            values["evidence_use"] = used
        raw[q.id] = values
    info = {
        "reference": "DeepSearchQA (arXiv 2601.20975) starter-code categories, via howard-yen/simple-evals@fa4969cf "
        "deepsearchqa_eval.py calculate_metrics; WebDetective (arXiv 2510.05137) factorisation from the sample rows",
        "matcher": f"{matcher_key} item matching" + (f" with {matcher_options}" if any(matcher_options.values()) else ""),
        "extraneous": "answer items matching no gold item (empty ones and normalized repeats not counted)",
        "evidence_use": "questions with gold pages and a sample row: refused (outcome), else found (evidence recall 1) "
        "and correct / not, else not found",
    }
    return {"aggregate": aggregate_outcomes(list(raw.values()), len(pool)), "raw": raw, "info": info}
