"""What an answer states about itself when the run asked for it: a confidence (``--confidence``) and
the pages it cites (``--citations``), read and taken out of the answer before any metric reads it
(``harness.scoring.metrics.prepare_answers``); the sample's row keeps the reply as written.

**Confidence** (prompts/instructions/confidence.txt, BrowseComp's "Confidence: {your confidence
score between 0% and 100% for your answer}" line): the last ``Confidence:`` label in the answer (any
case, markdown bold around it allowed, ``Confidence score:``/``Confidence level:`` too). Its value is
read as BrowseComp-Plus's grader reads it (texttron/BrowseComp-Plus
``scripts_evaluation/evaluate_run.py``, ``parse_judge_response``: a number, ``%`` optional, taken as a
percentage): ``85%``, ``85``, ``85.5 %`` read 0.85, 0.85, 0.855; ``0.9`` reads 0.009 (a percentage,
as asked). A value that is no such number (``high``), a range (``80-90%``, ``80 to 90%``), a fraction
(``9/10``) or above 100 is **unreadable**; an answer without a label is **missing**. Neither is ever
guessed (BrowseComp-Plus's grader puts 100 for a missing one; here it is counted, ``parsed``). Every
labelled line is removed from the answer (the text before the label on its line stays: ``Paris.
Confidence: 90%`` leaves ``Paris.``).

**Citations** (prompts/instructions/citations.txt, BrowseComp-Plus's "[20]" docid citations with
Wikipedia titles for docids): each ``[Title]`` (``[[Title]]`` and the full-width ``【Title】`` too;
one title per pair of brackets; a ``[text](url)`` markdown link is left alone) is a cited page, and
is removed from the answer with the space before it (``1889 [Eiffel Tower].`` leaves ``1889.``).
Pages are kept once each, in order, compared by ``title_key`` (underscores as spaces, runs of
spaces as one, case folded).
"""

from __future__ import annotations

import re
from typing import Any

CONFIDENCE_STATUSES = ("parsed", "unreadable", "missing", "unanswered")

_LABEL = re.compile(
    r"(?:[*_]{1,2}\s*)?\bconfidence(?:[ \t]+(?:score|level))?[ \t]*(?:[*_]{1,2})?[ \t]*:[ \t]*(?:[*_]{1,2})?", re.I
)
_NUMBER = re.compile(r"(\d+(?:\.\d+)?)[ \t]*(%?)")
_RANGE = re.compile(r"^(?:[-\u2013\u2014/]|to\b)\s*\d", re.I)
_CITATION = re.compile(r"[ \t]*(?:\[\[([^\[\]\n]+)\]\]|\[([^\[\]\n]+)\](?!\()|\u3010([^\u3010\u3011\n]+)\u3011)")


def split_confidence(answer: Any) -> tuple[Any, dict[str, Any]]:
    """(the answer without its confidence lines, {"status", "value" (0..1, parsed only), "text"
    (the value as written, where a label was found)})."""
    if answer is None:
        return None, {"status": "unanswered"}
    if not isinstance(answer, str):
        return answer, {"status": "missing"}
    lines = answer.split("\n")
    found: str | None = None
    kept: list[str] = []
    for line in lines:
        labels = list(_LABEL.finditer(line))
        if not labels:
            kept.append(line)
            continue
        last = labels[-1]
        found = line[last.end() :].strip().rstrip("*_ \t.").strip()
        before = line[: labels[0].start()].rstrip()
        if before:
            kept.append(before)
    if found is None:
        return answer, {"status": "missing"}
    stripped = "\n".join(kept).strip()
    value = read_percentage(found)
    if value is None:
        return stripped, {"status": "unreadable", "text": found}
    return stripped, {"status": "parsed", "value": value, "text": found}


def read_percentage(text: str) -> float | None:
    """A confidence as written (``85%``, ``85``) as a share (0.85); None when it is no single
    number from 0 to 100."""
    match = _NUMBER.match(text)
    if match is None:
        return None
    rest = text[match.end() :].strip()
    if _RANGE.match(rest) or (rest[:1].isdigit()):
        return None
    number = float(match.group(1))
    if number > 100:
        return None
    return number / 100.0


def title_key(title: str) -> str:
    """How a cited title is compared with the pages retrieved and the gold pages."""
    return " ".join(title.replace("_", " ").split()).casefold()


def split_citations(answer: Any) -> tuple[Any, dict[str, Any]]:
    """(the answer without its citations, {"pages": the distinct titles cited, in order, "marks":
    how many citations were written}); an unanswered question has ``pages`` None."""
    if not isinstance(answer, str):
        return answer, {"pages": None if answer is None else [], "marks": 0}
    pages: dict[str, str] = {}
    marks = 0
    for match in _CITATION.finditer(answer):
        title = " ".join((match.group(1) or match.group(2) or match.group(3)).split())
        if title:
            marks += 1
            pages.setdefault(title_key(title), title)
    if not marks:
        return answer, {"pages": [], "marks": 0}
    return _CITATION.sub("", answer).strip(), {"pages": list(pages.values()), "marks": marks}
