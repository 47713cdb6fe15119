"""``per-correct``: what one correct answer cost: USD, tokens, model calls and searches per correct
answer (the cost-normalised numbers deep-research papers compare agents of different price by, as
BrowseComp-Plus's search calls and cost beside accuracy).

Over the questions with a sample row (what was spent is in the rows: ``harness.scoring.agent_metrics``
reads them the same way), each number is a **ratio of sums**, sum of the spend / number of correct
answers (not a mean of per-question ratios: a question answered wrongly still cost what it cost):

* ``cost``: the rows' list-price cost (USD) per correct answer; no value when some row has no
  price (an unpriced model), never a guess;
* ``tokens``: prompt + completion tokens per correct answer;
* ``model_calls``: model calls (sent or answered by the response cache) per correct answer;
* ``searches``: search-tool calls per correct answer (no value where some row records no searches:
  a strategy without a search tool);
* ``correct``: the share of those questions answered correctly (Wilson's interval), and
  ``n_correct`` their number.

Correct is ``harness.scoring.correct`` (option ``correct``; default ``auto``, the dataset's own
rule: FanOutQA's strict accuracy, QAMPARI's F1 >= 0.5, ...), the rule used recorded in ``info``.
With no correct answer a ratio has no value (null, never infinity).

Intervals: the **percentile bootstrap of the ratio** (the ratio estimator's own distribution:
questions, or their clusters, resampled ``stats.RESAMPLES`` times with a fixed seed; numerator and
denominator drawn together, one matrix product per resample: ``Aggregation.sums``), not the delta
method, which is poor when few answers are correct. A resample with no correct answer has no ratio
and is left out of the percentiles, so with very few correct answers the interval is conditional on
at least one; compare bootstraps the difference of two runs' ratios on the same resamples.
"""

from __future__ import annotations

import math
from typing import Any

from harness.scoring.agent_metrics import agent_values
from harness.scoring.correct import AUTO, CorrectOptions, asks, verdict_of
from harness.scoring.kinds import count, money, share
from harness.scoring.metrics import ScoringOptions, aggregates, declare, reads

SPENT = ("cost", "tokens", "model_calls", "searches")


def vector(row: dict[str, Any]) -> list[float] | None:
    """One question's summed parts: [1, correct, cost, has cost, tokens, model calls, searches, has searches]."""
    if not isinstance(row, dict) or "correct" not in row or not isinstance(row.get("spent"), dict):
        return None
    spent = row["spent"]
    cost, searches = spent.get("cost"), spent.get("searches")
    return [
        1.0,
        float(row["correct"]),
        float(cost or 0.0),
        float(cost is not None),
        float(spent.get("tokens") or 0),
        float(spent.get("model_calls") or 0),
        float(searches or 0),
        float(searches is not None),
    ]


def finish(t: list[float]) -> dict[str, Any]:
    """The ratios from the column sums (NaN where there is none: no correct answer, a part unknown)."""
    n, correct = t[0], t[1]

    def per(total: float, known: float = math.nan) -> float:
        if correct <= 0 or (not math.isnan(known) and known < n):
            return math.nan
        return total / correct

    return {
        "cost": per(t[2], t[3]),
        "tokens": per(t[4]),
        "model_calls": per(t[5]),
        "searches": per(t[6], t[7]),
        "correct": correct / n if n else math.nan,
        "n_correct": correct,
    }


def aggregate_per_correct(rows: list[dict[str, Any]], n: float) -> dict[str, Any]:
    """The ratios over the rows given (null, never NaN or infinity, where there is none)."""
    vectors = [v for v in (vector(r) for r in rows) if v is not None]
    if not vectors:
        return {name: None for name in (*SPENT, "correct", "n_correct")}
    out = finish([sum(column) for column in zip(*vectors)])
    out = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in out.items()}
    out["n_correct"] = int(out["n_correct"])
    return out


@declare(
    options=CorrectOptions,
    headline=("cost", "tokens", "searches"),
    labels={
        "cost": "Cost per correct (USD)",
        "tokens": "Tokens per correct",
        "model_calls": "Model calls per correct",
        "searches": "Searches per correct",
        "correct": "Correct (per-correct)",
        "n_correct": "Correct answers",
    },
    lower_is_better=SPENT,
    kind=count("per correct answer"),
    kinds={
        "cost": money("USD per correct answer"),
        "tokens": count("tokens per correct answer"),
        "model_calls": count("model calls per correct answer"),
        "searches": count("searches per correct answer"),
        "correct": share(),
        "n_correct": count("correct answers", total=True),
    },
)
@aggregates(aggregate_per_correct, sums=(vector, finish))
@asks
@reads("row")
def per_correct(
    questions: list,
    answers: list[dict[str, Any]],
    only_answered: bool,
    options: ScoringOptions | None = None,
    *,
    correct: str = AUTO,
) -> dict[str, Any]:
    """Spend per correct answer over the questions with a sample row (see the module docstring);
    answers carry ``correct`` (``harness.scoring.correct``, applied by score_answers)."""
    with_row = {a["id"]: a for a in answers if isinstance(a.get("row"), dict)}
    asked = [q for q in questions if q.id in with_row]
    raw: dict[str, dict[str, Any]] = {}
    for q in asked:
        record = with_row[q.id]
        worked = agent_values(q, record.get("answer"), record["row"])
        spent = {"cost": worked.get("cost"), "tokens": worked.get("tokens", 0), "model_calls": worked.get("rounds", 0),
                 "searches": worked.get("searches")}  # fmt: skip
        raw[q.id] = {"correct": verdict_of(record), "spent": spent}
    info = {
        "estimator": "ratio of sums (total spend / correct answers) over the questions with a sample row",
        "interval": "percentile bootstrap of the ratio; resamples without a correct answer left out",
        "left_out": "questions without a sample row (bare generations, failed samples)",
    }
    return {"aggregate": aggregate_per_correct(list(raw.values()), len(asked)), "raw": raw, "info": info}
