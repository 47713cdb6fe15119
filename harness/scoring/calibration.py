"""The ``calibration`` metric: how well the confidence an answer states (``--confidence``; read by
``harness.scoring.statements``) matches whether the answer is right, as BrowseComp-Plus reports it.

Per question: ``parsed`` (1 when its answer stated a readable confidence, else 0: a missing or
unreadable one is counted, never guessed), ``correct`` (0/1: option ``correct``, the one rule of
``harness.scoring.correct``; default the dataset's own), and, where parsed, ``confidence`` (0..1)
and ``brier`` ((confidence - correct)²).

Aggregate, over the questions with a parsed confidence:

* ``ece``: the calibration error of BrowseComp-Plus (texttron/BrowseComp-Plus at commit
  97c637cebfd93965b28f93199e27abfd1dcc5de6, ``scripts_evaluation/evaluate_run.py``:
  ``calculate_calibration_error`` and ``calib_err``, which it takes from hendrycks/outlier-exposure
  ``utils/calibration_tools.py``), restated: the answers sorted by confidence (numpy's default
  ``argsort``, as the reference: ties fall into bins as there), cut into bins of ``bin_size``
  (``beta`` = 100) answers, the last bin taking the remainder; each bin's gap is |mean confidence -
  share correct|; ``norm`` 2 (the reference's ``p="2"``): the square root of the bins' gaps squared,
  each weighted by its answers over all answers (an RMS calibration error); ``norm`` 1: the weighted
  mean gap (the classic ECE). **The reference's loop skips the last bin** (``range(len(bins) - 1)``):
  the highest-confidence answers (100 to 199 of them) are in no bin, while every weight still
  divides by all answers; ``last_bin`` ``skipped`` (the default) reproduces that, ``counted`` counts
  it. On 0-1 (the reference prints it x100, "Calibration Error (%)"). Where no bin is counted (fewer
  than ``bin_size`` parsed answers, or fewer than twice it with the last bin skipped) it has no value
  (None, the reason in ``info``): the reference raises (``calib_err``) or reports 0.0 below 100
  (``evaluate_run.py``);
* ``brier``: the mean of ``brier`` (Brier 1950), lower is better;
* ``parsed``: the share of the questions scored whose answer stated a readable confidence.

Intervals: ``parsed`` is a share (Wilson); ``ece`` and ``brier`` are percentile-bootstrapped over
questions (whole clusters when clustered) through this metric's own aggregate (``brier`` gets the
analytic interval of a mean where every question has a parsed confidence).
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import Field

from harness.datasets.base import Sample
from harness.scoring.correct import AUTO, CorrectOptions, asks, verdict_of
from harness.scoring.kinds import mean, share
from harness.scoring.metrics import ScoringOptions, aggregates, declare
from harness.scoring.statements import CONFIDENCE_STATUSES

REFERENCE = (
    "texttron/BrowseComp-Plus scripts_evaluation/evaluate_run.py at commit 97c637cebfd93965b28f93199e27abfd1dcc5de6 "
    "(calculate_calibration_error, calib_err from hendrycks/outlier-exposure utils/calibration_tools.py)"
)


class CalibrationOptions(CorrectOptions):
    """calibration's options: BrowseComp-Plus's bins by default; ``correct`` as every metric that asks."""

    bin_size: int = Field(100, ge=1, le=1_000_000, description="answers per bin (BrowseComp-Plus's beta: 100)")
    norm: Literal[1, 2] = Field(2, description="2: root mean squared gap (BrowseComp-Plus's p='2'); 1: mean gap (ECE)")
    last_bin: Literal["skipped", "counted"] = Field(
        "skipped", description="the last bin (the highest confidences): skipped as the reference's loop does, or counted"
    )


def calibration_error(
    confidences: list[float], correct: list[float], bin_size: int = 100, norm: int = 2, last_bin: str = "skipped"
) -> float | None:
    """The calibration error of BrowseComp-Plus's bins (see the module); None where no bin is counted."""
    import numpy as np

    n = len(confidences)
    bins = n // bin_size
    counted = bins if last_bin == "counted" else bins - 1
    if counted < 1:
        return None
    conf = np.asarray(confidences, dtype=float)
    right = np.asarray(correct, dtype=float)
    order = np.argsort(conf)  # numpy's default sort, the reference's: equal confidences split across bins alike
    conf, right = conf[order], right[order]
    total = 0.0
    for i in range(counted):
        start = i * bin_size
        stop = n if i == bins - 1 else start + bin_size  # the last bin takes the remainder
        gap = abs(float(np.mean(conf[start:stop])) - float(np.mean(right[start:stop])))
        total += (stop - start) / n * (gap * gap if norm == 2 else gap)
    return math.sqrt(total) if norm == 2 else total


def binning_text(bin_size: int, norm: int, last_bin: str) -> str:
    """The bins as each per-question row records them: text, so that no table takes it for a score."""
    return f"bin_size={bin_size} norm={norm} last_bin={last_bin}"


def read_binning(text: Any) -> tuple[int, int, str]:
    """(bin_size, norm, last_bin) of ``binning_text``; the defaults where a row has none."""
    found = dict(part.split("=", 1) for part in text.split()) if isinstance(text, str) else {}
    return int(found.get("bin_size", 100)), int(found.get("norm", 2)), found.get("last_bin", "skipped")


def aggregate_calibration(rows: list[dict[str, Any]], n: float) -> dict[str, Any]:
    """ece, brier and parsed of per-question rows (the metric's, a group's, a bootstrap draw's); the
    bins as each row records them (``binning``: the options it was scored with)."""
    bin_size, norm, last_bin = read_binning(next((r.get("binning") for r in rows if r.get("binning")), None))
    stated = [r for r in rows if isinstance(r.get("confidence"), (int, float))]
    ece = calibration_error(
        [float(r["confidence"]) for r in stated], [float(r["correct"]) for r in stated], bin_size, norm, last_bin
    )
    brier = sum(float(r["brier"]) for r in stated) / len(stated) if stated else None
    parsed = sum(float(r.get("parsed", 0)) for r in rows) / len(rows) if rows else None
    return {"ece": ece, "brier": brier, "parsed": parsed}


@declare(
    needs=("confidence",),
    options=CalibrationOptions,
    headline=("ece", "brier"),
    labels={"ece": "Calibration error", "brier": "Brier score", "parsed": "Confidence stated"},
    lower_is_better=("ece", "brier"),
    kind=mean(),
    kinds={"parsed": share()},
)
@aggregates(aggregate_calibration)
@asks
def calibration(
    questions: list[Sample],
    answers: list[dict[str, Any]],
    only_answered: bool,
    options: ScoringOptions | None = None,
    correct: str = AUTO,
    bin_size: int = 100,
    norm: int = 2,
    last_bin: str = "skipped",
) -> dict[str, Any]:
    """Calibration of the stated confidences (see the module); answers carry ``confidence`` (``stated``)
    and ``correct`` (``harness.scoring.correct``: the rule, ``correct``, applied by score_answers)."""
    by_id = {a["id"]: a for a in answers}
    pool = [q for q in questions if q.id in by_id] if only_answered else questions
    binning = binning_text(bin_size, norm, last_bin)
    raw: dict[str, dict[str, Any]] = {}
    counts = {status: 0 for status in CONFIDENCE_STATUSES}
    for q in pool:
        record = by_id.get(q.id) or {}
        stated = record.get("confidence") or {"status": "unanswered" if record.get("answer") is None else "missing"}
        status = stated["status"]
        counts[status] += 1
        row: dict[str, Any] = {"parsed": int(status == "parsed"), "correct": verdict_of(record), "status": status}
        if status == "parsed":
            row["confidence"] = stated["value"]
            row["brier"] = (stated["value"] - row["correct"]) ** 2
        if stated.get("text") is not None:
            row["stated"] = stated["text"]
        row["binning"] = binning
        raw[q.id] = row
    aggregate = aggregate_calibration([raw[q.id] for q in pool], len(pool))
    info: dict[str, Any] = {
        "reference": REFERENCE,
        "bins": f"{bin_size} answers each by confidence, norm {norm}, last bin {last_bin}",
        **{f"n_{status}": n for status, n in counts.items()},
    }
    if aggregate["ece"] is None:
        info["ece"] = (
            f"no value: {counts['parsed']} parsed confidence(s) fill no counted bin of {bin_size}"
            + (" (the last bin is skipped, as the reference's loop does)" if last_bin == "skipped" else "")
        )
    return {"aggregate": aggregate, "raw": raw, "info": info}
