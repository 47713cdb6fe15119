"""Scoring: FanOutQA string metrics equal to the official fanoutqa 1.1.1 scorer."""

from harness.scoring.fanoutqa_metrics import answer_in_text, score_fanoutqa, str_answer
from harness.scoring.normalize import normalize, normalize_many, normalizer_info

__all__ = ["answer_in_text", "normalize", "normalize_many", "normalizer_info", "score_fanoutqa", "str_answer"]
