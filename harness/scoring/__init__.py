"""Scoring: FanOutQA string metrics equal to the official fanoutqa 1.1.1 scorer, the metric
registry and ``score_answers`` (``harness.scoring.metrics``), the scoring of a run directory
(``harness.execution.scoring.score_run``) and the readers of a scores dict in results format 1
or 2 (``harness.scoring.results``). Import normalization from ``harness.scoring.normalize``."""

from harness.scoring.fanoutqa_metrics import answer_in_text, score_fanoutqa, str_answer

__all__ = ["answer_in_text", "score_fanoutqa", "str_answer"]
