"""A reasoning model that spends --max-tokens thinking answers nothing: an empty reply cut at the
token limit fails its sample as ``truncated`` (counted, never scored, its reasoning tokens kept),
while an answer cut at the limit is still an answer, flagged ``truncated_output``. And the answer
budget a run used is recorded with where it came from (``max_tokens_source``)."""

from __future__ import annotations

import json

from scripted_runs import scripted_run

from harness.datasets import load_dataset
from harness.models.scripted import last_user

DATASET = "hotpotqa:dev"
FAST = ("--metrics", "em-f1")  # no spaCy to load


def read(path):
    return json.loads(path.read_text())


def rows(path):
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_an_empty_reply_at_the_token_limit_fails_as_truncated(tmp_path, capsys):
    thinker, rambler, answerer, caller = load_dataset(DATASET).samples[:4]
    seen = []

    def reply(messages, tools, tool_choice, params):
        text = last_user(messages)
        seen.append(params.max_tokens)
        if thinker.question in text:  # every token went to hidden reasoning, as OpenAI reports it
            spent = params.max_tokens
            usage = {"prompt_tokens": 40, "completion_tokens": spent, "reasoning_tokens": spent}
            return {"content": "", "finish_reason": "length", "usage": usage}
        if rambler.question in text:
            return "word " * 50  # cut by the scripted model at max_tokens: finish_reason length
        if caller.question in text:  # no text, but the cut reply did say something: a (cut) tool call
            call = {"name": "search", "arguments": '{"query": "Ed Wood'}
            return {"content": "", "tool_calls": [call], "finish_reason": "length"}
        return str(answerer.answer)

    out = scripted_run(tmp_path / "run", "truncating", reply, DATASET, 4, "--max-tokens", "16", *FAST)
    assert seen == [16, 16, 16, 16]

    (failure,) = rows(out / "failures.jsonl")
    assert failure["id"] == thinker.id and failure["error_type"] == "truncated"
    assert failure["usage"]["reasoning_tokens"] == 16 and failure["usage"]["completion_tokens"] == 16
    assert "stopped at the token limit (--max-tokens 16) after 16 reasoning tokens" in failure["error"]
    assert "raise --max-tokens" in failure["error"]

    finished = {row["id"]: row for row in rows(out / "samples.jsonl")}
    # the tool-call reply answered (empty, scored as such): truncated is for a reply that showed nothing
    assert set(finished) == {rambler.id, answerer.id, caller.id} and finished[caller.id]["answer"] == ""
    cut = finished[rambler.id]
    assert cut["status"] == "ok" and cut["truncated_output"] is True and cut["finish_reason"] == "length"
    assert cut["answer"].split() == ["word"] * 16
    assert finished[answerer.id]["truncated_output"] is False

    results = read(out / "results.json")
    assert results["counts"] == {"selected": 4, "finished": 3, "failed": 1, "pending": 0, "truncated_output": 2}
    assert results["failures"][thinker.id]["type"] == "truncated"
    assert results["tokens"]["reasoning_failed"] == 16 and results["tokens"]["reasoning"] == 0
    assert results["max_tokens_source"] == "--max-tokens"
    # not scored: the question has no values, and the reason is said, never a 0
    meta = results["scores"]["meta"]
    assert meta["n_failed"] == 1
    assert meta["not_scored"].startswith("1 of 4 failed: truncated (no answer: the reply stopped at the token limit")
    assert {row["question_id"] for row in results["scores"]["raw"]} == {rambler.id, answerer.id, caller.id}
    # the console says a rerun of the same command cannot fix it, and what can
    err = capsys.readouterr().err
    assert "1 truncated (a rerun cannot fix: the reply stopped at --max-tokens before any answer" in err


def test_the_answer_budget_and_its_source_are_recorded(tmp_path, monkeypatch):
    seen = []

    def reply(messages, tools, tool_choice, params):
        seen.append(params.max_tokens)
        return "Paris"

    out = scripted_run(tmp_path / "plain", "budget-plain", reply, DATASET, 1, *FAST)
    results = read(out / "results.json")
    assert seen == [512] and results["generation"]["max_tokens"] == 512
    assert results["max_tokens_source"] == "default 512"

    # a model the facts table knows, with a default_max_tokens of its own (an open family here)
    table = tmp_path / "facts.yaml"
    table.write_text(
        "models:\n  hf/budget-thinker: {thinking: always, default_max_tokens: 3000, "
        "default_max_tokens_source: 'its model card', source: test, retrieved: '2026-01-01'}\n"
    )
    monkeypatch.setenv("HARNESS_MODEL_FACTS", str(table))
    seen.clear()
    out = scripted_run(tmp_path / "facts", "budget-thinker-8b", reply, DATASET, 1, *FAST)
    results = read(out / "results.json")
    assert seen == [3000] and results["generation"]["max_tokens"] == 3000
    assert results["max_tokens_source"] == "model facts hf/budget-thinker: its model card"
