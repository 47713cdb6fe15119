"""Which answers count as correct, for the metrics that need a yes or no per question
(``per-correct``: cost per correct answer; ``outcomes``: WebDetective's evidence use): a chosen
metric's per-question value at or above a threshold.

The chosen metric is scored here, on the same answers, with the options this scoring gives it
(``--metric-option METRIC.KEY=VALUE``), so the verdicts do not depend on that metric being scored
beside it; one that needs a judge or a checkpoint (a model call, money) or reads sample rows is
refused before any model call. The default is QAMPARI's official "F1 >= 0.5" (``set-f1``'s ``f1``,
its ``f1_above`` share: samsam3232/qampari@dd9fe313 ``models/evaluation/reader_metrics.py``), which
reads FanOutQA's, QAMPARI's and QUEST's answers alike; FanOutQA's own is
``metric=fanoutqa-string leaf=acc threshold=1`` (its strict accuracy).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from harness.errors import ConfigError, HarnessError
from harness.scoring.kinds import key_path
from harness.scoring.metrics import MetricOptions, ScoringOptions, option_values, resolve_metrics

# the metrics that ask this module: a verdict from one of them would be circular
ASKING = ("per-correct", "outcomes")


class CorrectOptions(MetricOptions):
    """What a correct answer is: ``metric``'s per-question ``leaf`` >= ``threshold``."""

    metric: str = Field("set-f1", description="the metric whose per-question value decides correct")
    leaf: str = Field("f1", description="its per-question value (a key path: f1, acc, em)")
    threshold: float = Field(0.5, description="correct: the value is at least this")


def check_correct(name: str, options: ScoringOptions) -> None:
    """The chosen metric can give verdicts here: known, neither a judge nor a checkpoint, reading no
    sample rows, not one of the metrics that ask (checked before any model call)."""
    given = CorrectOptions.model_validate((options.metric_options or {}).get(name) or {})
    chosen = given.metric
    try:
        entries = resolve_metrics([chosen])
    except HarnessError as exc:
        raise ConfigError(f"--metric-option {name}.metric={chosen}: {exc}") from None
    (key, entry), = entries.items()
    fn = entry.obj
    if key in ASKING:
        raise ConfigError(f"--metric-option {name}.metric={chosen}: it asks for verdicts itself; name a metric of answers")
    if fn.declaration.needs:
        needs = ", ".join(fn.declaration.needs)
        raise ConfigError(
            f"--metric-option {name}.metric={chosen}: it needs {needs} (a model call or a checkpoint); "
            "name a metric scored from the answers alone (set-f1, fanoutqa-string, quest, em-f1)"
        )
    if fn.reads_rows:
        raise ConfigError(f"--metric-option {name}.metric={chosen}: it reads sample rows, not answers")
    option_values(key, fn, options)  # its own options as given here, checked now


def correct_values(
    questions: list[Any], answers: list[dict[str, Any]], options: ScoringOptions | None, chosen: CorrectOptions
) -> dict[str, float]:
    """{question id: 1.0 correct, 0.0 not} for every question: the chosen metric scored on
    ``answers`` (a question without one is unanswered: not correct)."""
    options = options or ScoringOptions()
    (key, entry), = resolve_metrics([chosen.metric]).items()
    fn = entry.obj
    plain = [{"id": a["id"], "answer": a.get("answer")} for a in answers]
    result = fn(questions, plain, False, options=options, **option_values(key, fn, options))
    raw = result.get("raw") or {}
    path = key_path(chosen.leaf)
    out: dict[str, float] = {}
    for q in questions:
        value: Any = raw.get(q.id)
        for part in path:
            value = value.get(part) if isinstance(value, dict) else None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            known = ", ".join(_leaves(raw.get(q.id))) or "none"
            raise HarnessError(
                f"metric {key} gives question {q.id} no number {chosen.leaf!r} (its per-question values: {known}); "
                f"choose one with --metric-option ...leaf="
            )
        out[q.id] = 1.0 if float(value) >= chosen.threshold else 0.0
    return out


def correct_info(chosen: CorrectOptions) -> dict[str, Any]:
    """What ``info`` records of the verdicts."""
    return {
        "correct": f"{chosen.metric} per-question {chosen.leaf} >= {chosen.threshold:g}",
        "correct_metric": chosen.metric,
        "correct_leaf": chosen.leaf,
        "threshold": chosen.threshold,
    }


def _leaves(values: Any, prefix: str = "") -> list[str]:
    if not isinstance(values, dict):
        return []
    out = []
    for k, v in values.items():
        if isinstance(v, dict):
            out += _leaves(v, f"{prefix}{k}.")
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            out.append(prefix + k)
    return out
