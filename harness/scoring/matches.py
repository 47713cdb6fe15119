"""Which gold items an answer matched, for the list and set metrics: each metric's own
``gold_matches`` (FanOutQA's string accuracy, QAMPARI's set F1, QUEST's set metric), given the answer
as every metric reads it (``prepare_answers``: reasoning removed, capped) and the metric's options
as the run scored with them. The report draws these; the matched items are the metric's own count.
"""

from __future__ import annotations

from typing import Any

from harness.scoring.gold import GoldMatch
from harness.scoring.metrics import ScoringOptions, prepare_answers

MATCHED_METRICS = ("fanoutqa-string", "set-f1", "quest")


def _fanoutqa(answer: Any, gold: Any, options: dict[str, Any]) -> list[GoldMatch]:
    from harness.scoring.fanoutqa_metrics import gold_matches

    return gold_matches(gold, answer)


def _set_f1(answer: Any, gold: Any, options: dict[str, Any]) -> list[GoldMatch]:
    from harness.scoring.list_metrics import gold_matches

    return gold_matches(
        answer, gold, clean_items=bool(options.get("clean_items")), alias_fallback=bool(options.get("alias_fallback"))
    )


def _quest(answer: Any, gold: Any, options: dict[str, Any]) -> list[GoldMatch]:
    from harness.scoring.quest_metrics import gold_matches

    light = options.get("light") or options.get("title_normalization") == "light"
    return gold_matches(answer, list(gold or []), "light" if light else "none")


MATCHERS = {"fanoutqa-string": _fanoutqa, "set-f1": _set_f1, "quest": _quest}


def answer_matches(
    metrics: list[str], gold: Any, answer: Any, options: ScoringOptions | None = None
) -> dict[str, list[GoldMatch]]:
    """{metric: its gold items, matched or missed} for each of ``metrics`` that matches items."""
    options = options or ScoringOptions()
    (prepared,), _, _ = prepare_answers([{"id": "", "answer": answer}], options)
    given = options.metric_options
    return {
        name: MATCHERS[name](prepared["answer"], gold, dict(given.get(name) or {}))
        for name in metrics
        if name in MATCHERS
    }
