"""Scoring: FanOutQA string metrics equal to the official fanoutqa 1.1.1 scorer, and the metric
registry (``harness.scoring.metrics``). Import normalization from ``harness.scoring.normalize``."""

from harness.scoring.fanoutqa_metrics import answer_in_text, score_fanoutqa, str_answer

__all__ = ["answer_in_text", "score_fanoutqa", "str_answer"]
