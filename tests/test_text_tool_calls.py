"""Tool calls a model writes as text (issue 14): read as the calls they are, or counted malformed and
the model asked again, in both open-book loops and the conversational one; never the answer. With a
scripted model (every format, deterministic), then with Qwen2.5-Coder-0.5B, which writes such calls,
in process and behind llama.cpp's OpenAI-compatible server."""

from __future__ import annotations

import asyncio
import json

import pytest
from conftest import assert_ran, packaged_llama_server, run_harness

from harness.agents._text_calls import read_text_tool_calls
from harness.cli import main
from harness.models.scripted import register_script, unregister_script

CALL = {"name": "search", "arguments": {"query": "Scott Derrickson"}}
FORMATS = {
    "bare-json": json.dumps(CALL),
    "arguments-as-text": json.dumps({"name": "search", "arguments": json.dumps({"query": "Scott Derrickson"})}),
    "json-fence": "```json\n" + json.dumps(CALL, indent=2) + "\n```",
    "qwen-tags": "<tool_call>\n" + json.dumps(CALL) + "\n</tool_call>",
    "openai-shape": json.dumps([{"type": "function", "function": {"name": "search", "arguments": '{"query": "Scott Derrickson"}'}}]),
    "parameters": "I will search.\n" + json.dumps({"name": "search", "parameters": {"query": "Scott Derrickson"}}),
}  # fmt: skip
UNREADABLE = {
    "not-json-in-tags": "<tool_call>search(Scott Derrickson)</tool_call>",
    "cut-off": '{"name": "search", "arguments": {"query": "Scott Der',
}
ANSWER = "Scott Derrickson is American."


def test_reader_finds_calls_and_leaves_answers_alone():
    for text in FORMATS.values():
        found = read_text_tool_calls(text)
        assert found is not None and found.unreadable == 0
        assert [(n, json.loads(a)) for n, a in found.calls] == [("search", {"query": "Scott Derrickson"})]
    for text in UNREADABLE.values():
        found = read_text_tool_calls(text)
        assert found is not None and found.calls == [] and found.unreadable == 1
    # what Qwen2.5-Coder-0.5B wrote: one call per line, the last cut by max_tokens
    lines = "\n".join(json.dumps({"name": "search", "arguments": json.dumps({"query": q})}) for q in ("A", "B"))
    found = read_text_tool_calls(lines + '\n{"name": "search", "arguments": "{\\"query\\": \\"C')
    assert [json.loads(a)["query"] for _, a in found.calls] == ["A", "B"] and found.unreadable == 1
    # answers, FanOutQA's dict answers written as JSON among them, are answers
    for answer in ("Paris", '{"Pat Burrell": "Right", "Mark Mulder": "Left"}', "[1] see {x}", "", None):
        assert read_text_tool_calls(answer) is None


@pytest.fixture
def scripted():
    names = []

    def add(name, first_reply):
        def fn(messages, tools, tool_choice, params):
            replied = sum(1 for m in messages if m["role"] == "assistant")
            return first_reply if replied == 0 else ANSWER

        names.append(name)
        register_script(name, fn)
        return f"scripted/{name}"

    yield add
    for name in names:
        unregister_script(name)


AGENTS = {
    "open-book-native": "hotpotqa:dev",
    "open-book-text": "hotpotqa:dev",
    "conversational-open-book": "topiocqa:dev",
}


def _run(model, agent, snapshot, out, *extra, rc=0):
    argv = ["run", "--model", model, "--setting", "open-book", "--agent", agent, "--dataset", AGENTS[agent],
            "--snapshot", str(snapshot), "--search-space", "evidence-only", "--limit", "1", "--no-cache", "--out", str(out),
            *extra]  # fmt: skip
    assert main(argv) == rc  # 4: no sample produced an answer
    sample = json.loads((out / "samples.jsonl").read_text())
    return sample, json.loads((out / "results.json").read_text())


@pytest.mark.parametrize("agent", AGENTS)
@pytest.mark.parametrize("form", FORMATS)
def test_text_call_is_run_as_a_call_not_answered(scripted, hotpot_snapshot, tmp_path, agent, form):
    model = scripted(f"text-call-{agent}-{form}", FORMATS[form])
    sample, results = _run(model, agent, hotpot_snapshot, tmp_path / "run")
    extra = sample["extra"]
    assert sample["answer"] == ANSWER and sample["outcome"] == "answered" and extra["rounds"] == 2
    assert extra["text_tool_calls"] == 1 and extra["malformed_tool_calls"] == 0
    assert extra["text_tool_call_replies"] == [FORMATS[form]]
    assert [s["query"] for s in extra["searches"]] == ["Scott Derrickson"]
    reply, result = sample["messages"][1], sample["messages"][2]
    if agent == "open-book-text":  # the reply as written, the result as the protocol's user turn
        assert reply == {"role": "assistant", "content": FORMATS[form]} and result["role"] == "user"
    else:  # kept as the native call it stands for, answered by a tool message
        call = reply["tool_calls"][0]
        assert reply["content"] == "" and call["function"]["name"] == "search"
        assert result == {"role": "tool", "tool_call_id": call["id"], "content": result["content"]}
    assert results["retrieval"]["text_tool_calls"] == 1 and results["retrieval"]["malformed_tool_calls"] == 0


@pytest.mark.parametrize("agent", AGENTS)
@pytest.mark.parametrize("form", UNREADABLE)
def test_unreadable_text_call_is_malformed_and_asked_again(scripted, hotpot_snapshot, tmp_path, agent, form):
    model = scripted(f"bad-call-{agent}-{form}", UNREADABLE[form])
    sample, results = _run(model, agent, hotpot_snapshot, tmp_path / "run")
    extra = sample["extra"]
    assert sample["answer"] == ANSWER and extra["rounds"] == 2 and extra["searches"] == []
    assert extra["malformed_tool_calls"] == 1 and extra["text_tool_calls"] == 0
    assert sample["messages"][1] == {"role": "assistant", "content": UNREADABLE[form]}
    again = sample["messages"][2]
    assert again["role"] == "user" and "could not be read" in again["content"]
    assert results["retrieval"]["malformed_tool_calls"] == 1


def test_a_model_that_only_writes_calls_ends_at_max_rounds_unanswered(scripted, hotpot_snapshot, tmp_path):
    register_script("always-calls", lambda *a: FORMATS["qwen-tags"])
    try:
        sample, _ = _run("scripted/always-calls", "open-book-native", hotpot_snapshot, tmp_path / "run",
                         "--agent-arg", "max_rounds=3", rc=4)  # fmt: skip
    finally:
        unregister_script("always-calls")
    assert sample["answer"] is None and sample["outcome"] == "max_rounds"
    assert sample["extra"]["text_tool_calls"] == 3


# ------------------------------------------------------------------ real models
def _check_qwen_run(out):
    """Qwen2.5-Coder-0.5B writes its calls as JSON text: they were searched, none is the answer."""
    sample = json.loads((out / "samples.jsonl").read_text())
    extra = sample["extra"]
    assert sample["answer"] is None or read_text_tool_calls(sample["answer"]) is None, sample["answer"]
    assert extra["text_tool_calls"] >= 1, extra
    assert len(extra["searches"]) >= 1
    assert json.loads((out / "results.json").read_text())["retrieval"]["text_tool_calls"] == extra["text_tool_calls"]


@pytest.mark.slow
def test_qwen_text_calls_in_process(hotpot_snapshot, tmp_path):
    out = tmp_path / "local"
    proc = run_harness(
        "run", "--setting", "open-book", "--model", "local/qwen2.5-coder-0.5b", "--dataset", "hotpotqa:dev",
        "--snapshot", str(hotpot_snapshot), "--search-space", "evidence-only", "--limit", "1", "--max-tokens", "40", "--context-size", "4096", "--n-threads", "2",
        "--agent-arg", "max_rounds=2", "--no-cache", "--out", str(out),
    )  # fmt: skip
    assert_ran(proc, out)  # 0, or 4 where the tiny model never answered
    _check_qwen_run(out)


def qwen_server(log_dir, n_ctx: int = 4096):
    return packaged_llama_server("qwen2.5-coder-0.5b", log_dir, n_ctx=n_ctx, n_threads=2)


@pytest.mark.slow
def test_qwen_text_calls_through_llamacpp_server_openai_backend(hotpot_snapshot, tmp_path):
    out = tmp_path / "server"
    with qwen_server(tmp_path / "logs") as server:
        asyncio.run(server.start())
        proc = run_harness(
            "run", "--setting", "open-book", "--model", "openai/qwen", "--base-url", server.base_url,
            "--context-size", "4096", "--dataset", "hotpotqa:dev", "--snapshot", str(hotpot_snapshot), "--search-space", "evidence-only", 
            "--limit", "1", "--max-tokens", "40", "--agent-arg", "max_rounds=2", "--no-cache", "--out", str(out),
        )  # fmt: skip
    assert_ran(proc, out)  # 0, or 4 where the tiny model never answered
    _check_qwen_run(out)
