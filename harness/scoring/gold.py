"""How every metric reads a gold answer (and an answer) that is not plain text. What a gold answer
is on each dataset, and the answer types metrics declare they can score
(``harness.scoring.metrics.declare``), is ``harness.datasets.answers``.

One reading, FanOutQA's (``str_answer`` in ``fanoutqa/eval/utils.py`` of fanoutqa 1.1.1, zhudotexe/fanoutqa
at commit 5e19c279), restated: a boolean reads "yes" or "no", None reads "", any other scalar its
``str()``; a list is its items' readings, one per line; a dict is one ``KEY - VALUE`` line per entry,
the value read the same way (a value that is itself a list or dict spreads over several lines). A
QAMPARI entity (``{"answer_text", "aliases"}``) reads as its answer text.
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


def _read(value: Any, entities: bool) -> str:
    """The text of ``value`` by the rules above; ``entities``: a QAMPARI entity reads as its answer text."""
    if entities and is_entity(value):
        return scalar_text(value["answer_text"])
    if isinstance(value, list):
        lines = [_read(item, entities) for item in value]
    elif isinstance(value, dict):
        lines = [f"{key} - {_read(item, entities)}" for key, item in value.items()]
    else:
        return scalar_text(value)
    return "\n".join(lines)


def str_answer(ans: Any) -> str:
    """FanOutQA's text of an answer (for ROUGE, BLEURT and the judge), byte for byte."""
    return _read(ans, entities=False)


def gold_text(ans: Any) -> str:
    """``str_answer``, except that a QAMPARI entity reads as its ``answer_text``."""
    return _read(ans, entities=True)


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
