"""What a gold answer (``Sample.answer``) is, for a metric's author: its Python type on each built-in
dataset, and the answer-type names a dataset declares for its golds (``DatasetLoader.answer_types``)
and a metric for what it scores (``harness.scoring.metrics.declare(accepts=...)``). How every metric
reads a gold that is not text (booleans as yes/no, a dict as ``key - value`` lines, ...) is
``harness.scoring.gold``. docs/datasets.md's table of gold answers is generated from here and from
the loaders (``python docs/gen.py``), and a test checks every shipped gold against its dataset's type.
"""

from __future__ import annotations

from typing import Any, Union

from typing_extensions import TypedDict  # pydantic validates it (the tests) before Python 3.12

# One value: a text, a number, a yes/no (a bool reads "yes"/"no").
Scalar = Union[str, int, float, bool]


class QampariEntity(TypedDict):
    """One QAMPARI answer: its text and the other names it may be given by (any one matches)."""

    answer_text: str
    aliases: list[str]


# FanOutQA: a text, a number or a yes/no; a list of values, every one needed; or a mapping
# ({"Pat Burrell": "Right", ...}, {"Avatar": 237, ...}): every key and its value needed.
FanOutQAAnswer = Union[Scalar, list[Scalar], dict[str, Scalar]]
# HotpotQA: one short text ("yes"/"no" for comparison questions).
HotpotQAAnswer = str
# QAMPARI: every entity that answers the question, each with its aliases.
QampariAnswer = list[QampariEntity]
# QUEST: the Wikipedia titles of every entity that answers the query.
QuestAnswer = list[str]
# TopiOCQA: the turn's answer, or [original, *Additional_answers]: alternatives, any one right.
TopiOCQAAnswer = Union[str, list[str]]

# ``Sample.answer``: one of the shapes above; ``list[Any]``/``dict[str, Any]`` for a plugin dataset's
# other lists and mappings; None on a split without answers (FanOutQA's test split).
GoldAnswer = Union[FanOutQAAnswer, QampariAnswer, TopiOCQAAnswer, list[Any], dict[str, Any], None]

# answer type -> what it is; a metric declares the ones it scores, a dataset the ones its golds have
ANSWER_TYPES: dict[str, str] = {
    "str": "one text",
    "number": "a number",
    "bool": "a boolean (read yes/no)",
    "list_of_str": "a list of strings, all of them the answer (QUEST titles, FanOutQA lists)",
    "list": "any other list (numbers, mixed, nested)",
    "dict": "a mapping, keys and values the answer (FanOutQA)",
    "entity_list": 'a list of QAMPARI entities {"answer_text", "aliases"}',
    "references": "a list of alternative references, any one of them right (TopiOCQA's Additional_answers)",
}
# answer type -> its Python type
ANSWER_SHAPES: dict[str, Any] = {
    "str": str,
    "number": Union[int, float],
    "bool": bool,
    "list_of_str": list[str],
    "list": list[Any],
    "dict": dict[str, Any],
    "entity_list": list[QampariEntity],
    "references": list[str],
}
