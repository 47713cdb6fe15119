"""``METRICS``: the metric registry (built-ins by reference, loaded when looked up; plugins by
reference, entry point or ``METRICS.register``). A module of its own, re-exported by
``harness.scoring.metrics``, so that what reads a metric's declared kinds and display
(``harness.scoring.display``, and through it the typed ``Scores``) does not import the scoring
that makes ``Scores``."""

from __future__ import annotations

from harness.registry import Registry
from harness.scoring.metric import Metric, as_metric

METRICS: Registry[Metric] = Registry(
    "metric",
    builtins={
        "fanoutqa-string": "harness.scoring.metrics:fanoutqa_string",
        "em-f1": "harness.scoring.metrics:em_f1",
        "set-f1": "harness.scoring.list_metrics:set_f1",
        "quest": "harness.scoring.quest_metrics:quest",
        "topiocqa": "harness.scoring.topiocqa_metrics:topiocqa",
        "bleurt": "harness.scoring.bleurt:bleurt",
        "llm-judge": "harness.scoring.llm_judge:llm_judge",
        "agent": "harness.scoring.agent_metrics:agent",
        "outcomes": "harness.scoring.outcome_metrics:outcomes",
        "per-correct": "harness.scoring.per_correct:per_correct",
        "calibration": "harness.scoring.calibration:calibration",
        "citations": "harness.scoring.citations:citations",
    },
    coerce=as_metric,
)
