"""Real runs of scripted models for the analysis tests (leaderboard, data frames, the report's gold
items): in-process, no network, about a second each. The partial answerer gives every other gold
item of the real dataset's question, plus one wrong item, so each list metric is strictly between 0
and 1; the failing one raises on every question, as a server answering 500 does."""

from __future__ import annotations

from pathlib import Path

from harness.cli import main
from harness.datasets import load_dataset
from harness.models.scripted import last_user, register_script, unregister_script
from harness.scoring.gold import gold_text

WRONG = "Not An Answer <b>&amp;</b>"  # also checks that the report escapes what it quotes


def partial_answerer(spec: str):
    by_question = {s.question: s.answer for s in load_dataset(spec).samples}

    def reply(messages, tools, tool_choice, params):
        text = last_user(messages)
        gold = next(a for q, a in by_question.items() if q in text)
        if isinstance(gold, dict):
            return "\n".join(f"{k}: {v}" for k, v in list(gold.items())[::2]) + f"\n{WRONG}"
        if isinstance(gold, list):
            return "\n".join(gold_text(item) for item in gold[::2]) + f"\n{WRONG}"
        return gold_text(gold)

    return reply


def failing(messages, tools, tool_choice, params):
    raise RuntimeError("server said 500")


def scripted_run(out: Path, name: str, script, dataset: str, limit: int, *extra: str) -> Path:
    """``harness run`` of ``scripted/NAME`` (``script`` registered for the call) into ``out``."""
    register_script(name, script)
    try:
        argv = ["run", "--model", f"scripted/{name}", "--dataset", dataset, "--limit", str(limit), "--no-cache"]
        main([*argv, *extra, "--out", str(out)])
    finally:
        unregister_script(name)
    return out
