"""Conversation history of a sample (``Sample.history``: previous turns ``[q1, a1, q2, a2, ...]``)
rendered as a question representation, and the one-line answer rule of conversational strategies.

Representations (TopiOCQA, Adlakha et al. 2022, section 5.1.2): ``original`` is the current question
alone; ``all-history`` is every previous question and gold answer followed by the current question.
Styles: ``sep`` is the retriever / DPR-reader query ``q1 [SEP] a1 [SEP] ... [SEP] qn`` of the
McGill-NLP/topiocqa README; ``fid`` the FiD reader's ``question 1: q1 answer 1: a1 ... question n: qn``
(``FiD/src/data.py::format_conversational_example``); ``prompt`` one ``Q1: ...`` / ``A1: ...`` line per
part, for prompts. The paper's third representation, ``Rewrites``, needs a trained rewriter and is
not here (retrieve-read strategies rewrite with the model under test instead).
"""

from __future__ import annotations

from typing import Any

REPRESENTATIONS = ("original", "all-history")
STYLES = ("sep", "fid", "prompt")


def format_history(sample: Any, representation: str, *, style: str = "sep", include_question: bool = True) -> str:
    """The question representation ``representation`` of ``sample`` as one string, in ``style``;
    ``include_question=False`` leaves the current question out (the history block alone, ``""``
    for ``original``)."""
    if representation not in REPRESENTATIONS:
        raise ValueError(
            f"unknown history representation {representation!r} (known: {', '.join(REPRESENTATIONS)};"
            " 'rewritten' needs a question-rewriting model and is not supported)"
        )
    if style not in STYLES:
        raise ValueError(f"unknown history style {style!r} (known: {', '.join(STYLES)})")
    parts = [str(p) for p in sample.history] if representation == "all-history" else []
    if include_question:
        parts = parts + [sample.question]
    if not parts:
        return ""
    if style == "sep":
        return " [SEP] ".join(p.strip() for p in parts)
    # even positions are questions, odd are answers, numbered from 1 per turn
    labelled = []
    for i, part in enumerate(parts):
        if style == "fid":
            kind = "question" if i % 2 == 0 else "answer"
            labelled.append(f"{kind} {i // 2 + 1}: {part.strip()}")
        else:
            kind = "Q" if i % 2 == 0 else "A"
            labelled.append(f"{kind}{i // 2 + 1}: {part.strip()}")
    return (" " if style == "fid" else "\n").join(labelled)


def first_line(text: str | None) -> str:
    """The first non-empty line, stripped: a conversational turn's answer is one line."""
    for line in (text or "").splitlines():
        if line.strip():
            return line.strip()
    return ""
