"""How every metric reads a gold answer (and an answer) that is not plain text. What a gold answer
is on each dataset, and the answer types metrics declare they can score
(``harness.scoring.metrics.declare``), is ``harness.datasets.answers``.

One reading, FanOutQA's (``fanoutqa.eval.utils.str_answer``): booleans are "yes"/"no", numbers their
``str()``, None is "", a list is its items one per line, a dict its ``key - value`` lines. A QAMPARI
entity (``{"answer_text", "aliases"}``) reads as its answer text.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from harness.datasets.answers import ANSWER_TYPES  # noqa: F401  (the answer-type names, kept importable here)


def scalar_text(value: Any) -> str:
    """A boolean as "yes"/"no", None as "", anything else ``str()``: as fanoutqa-string reads golds."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if value is None:
        return ""
    return value if isinstance(value, str) else str(value)


def is_entity(value: Any) -> bool:
    return isinstance(value, dict) and "answer_text" in value


def str_answer(ans: Any) -> str:
    """FanOutQA's ``str_answer`` (text for ROUGE and the judge), byte for byte."""
    if isinstance(ans, list):
        return "\n".join(map(str_answer, ans))
    if isinstance(ans, dict):
        return "\n".join(f"{k} - {str_answer(v)}" for k, v in ans.items())
    return scalar_text(ans)


def gold_text(ans: Any) -> str:
    """``str_answer``, except that a QAMPARI entity reads as its ``answer_text``."""
    if is_entity(ans):
        return scalar_text(ans["answer_text"])
    if isinstance(ans, list):
        return "\n".join(map(gold_text, ans))
    if isinstance(ans, dict):
        return "\n".join(f"{k} - {gold_text(v)}" for k, v in ans.items())
    return scalar_text(ans)


def answer_type(value: Any, declared: tuple[str, ...] | None = None) -> str | None:
    """The answer type of a value (None for None). A list of strings is ``references`` where the
    dataset declares its lists as such (``declared`` holds "references", not "list_of_str")."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "str"
    if isinstance(value, dict):
        return "dict"
    if isinstance(value, (list, tuple)):
        if value and all(is_entity(v) for v in value):
            return "entity_list"
        if all(isinstance(v, str) for v in value):
            if declared and "references" in declared and "list_of_str" not in declared:
                return "references"
            return "list_of_str"
        return "list"
    return type(value).__name__


class GoldMatch(NamedTuple):
    """One gold item of a question as a list metric read it: matched or missed, and the part of the
    answer that matched it (the metric's own matching rule: ``gold_matches`` of fanoutqa_metrics,
    list_metrics and quest_metrics)."""

    item: str
    matched: bool
    matched_text: str | None = None
