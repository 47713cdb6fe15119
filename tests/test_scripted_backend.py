"""The scripted backend (``scripted/NAME``): built-in and registered scripts, replies of every shape,
exact whitespace-token usage, max_tokens and context limits, errors, request recording, and a run
through the CLI that records the model as scripted."""

import asyncio
import json
import re

import pytest
from conftest import run_harness

from harness.errors import ContextOverflowError, ModelError, TransientModelError
from harness.models import create_backend
from harness.models.base import BackendOptions, GenerationParams, ModelResponse, Usage
from harness.models.scripted import ScriptedBackend, register_script, unregister_script

PARAMS = GenerationParams()


def generate(backend, messages, params=PARAMS, tools=None, tool_choice=None):
    return asyncio.run(backend.generate(messages, params, tools, tool_choice))


def user(text):
    return [{"role": "system", "content": "Be brief."}, {"role": "user", "content": text}]


@pytest.fixture
def registered():
    """Registers scripts for one test and removes them after."""
    names = []

    def add(name, fn):
        names.append(name)
        return register_script(name, fn)

    yield add
    for name in names:
        unregister_script(name)


def test_builtin_scripts():
    echo = create_backend("scripted/echo")
    assert isinstance(echo, ScriptedBackend)
    response = generate(echo, user("Who won?\n\n  Pat Burrell \n\n"))
    assert response.content == "Pat Burrell" and response.finish_reason == "stop"
    # prompt: 2 + 4 words; completion: 2
    assert response.usage == Usage(prompt_tokens=6, completion_tokens=2)
    assert generate(echo, [{"role": "system", "content": "no user turn"}]).content == ""

    fixed = create_backend("scripted/answer=Paris, France")
    assert generate(fixed, user("Capital?")).content == "Paris, France"
    assert generate(create_backend("scripted/answer="), user("x")).content == ""


def test_describe_says_scripted_and_options_apply():
    backend = create_backend("scripted/echo")
    info = backend.describe()
    assert info["backend"] == "scripted" and info["model"] == "echo" and info["scripted"] is True
    assert info["script"] == {"name": "echo", "source": "builtin", "identity": "builtin:echo"}
    assert "not a language model" in info["note"]
    assert info["tokenizer"] == "whitespace" and info["context_size"] == 4096
    assert create_backend("scripted/echo", BackendOptions(context_size=50)).context_size() == 50
    assert backend.count_tokens("  one two\nthree ") == 3
    # answers of different scripts never share a cache entry
    assert backend.cache_identity() != create_backend("scripted/answer=x").cache_identity()


def test_unknown_and_clashing_names(registered):
    with pytest.raises(ModelError, match=r"unknown script 'nope'.*echo, answer=TEXT"):
        create_backend("scripted/nope")
    for name in ("echo", "answer=x", "", " padded"):
        with pytest.raises(ValueError, match="built in"):
            register_script(name, lambda *a: "x")
    first = registered("clash", lambda *a: "a")
    assert register_script("clash", first.fn) is first  # the same function again is harmless
    with pytest.raises(ValueError, match="registered twice"):
        register_script("clash", lambda *a: "b")


SCRIPT = """
def reply(messages, tools, tool_choice, params):
    if tools and messages[-1]["role"] == "user":
        return {"tool_calls": [{"name": tools[0]["function"]["name"], "arguments": {"query": "Ed Wood"}}]}
    return "ANSWER"

NOT_A_FUNCTION = 3
"""


def test_a_script_from_a_file(tmp_path, monkeypatch):
    """``scripted/FILE.py:FUNCTION``: the register_script contract from a file, identified by its content."""
    import hashlib

    monkeypatch.chdir(tmp_path)
    (tmp_path / "replies.py").write_text(SCRIPT, encoding="utf-8")
    sha = hashlib.sha256(SCRIPT.encode()).hexdigest()
    backend = create_backend("scripted/replies.py:reply")
    tools = [{"type": "function", "function": {"name": "search", "parameters": {}}}]
    call = generate(backend, user("Who?"), tools=tools)
    assert call.tool_calls[0].name == "search" and json.loads(call.tool_calls[0].arguments) == {"query": "Ed Wood"}
    assert generate(backend, user("Who?")).content == "ANSWER" and len(backend.requests) == 2
    assert backend.describe()["script"] == {
        "name": "replies.py:reply", "source": "file", "identity": f"file:reply@{sha}", "file": "replies.py", "sha256": sha,
    }  # fmt: skip
    assert backend.identity_facts() == {"script": {"sha256": sha}}  # in the run key
    # an edited file is other code: another identity, run key and cache key
    (tmp_path / "replies.py").write_text(SCRIPT.replace("ANSWER", "OTHER"), encoding="utf-8")
    edited = create_backend("scripted/replies.py:reply")
    assert generate(edited, user("Who?")).content == "OTHER"
    assert edited.identity_facts() != backend.identity_facts()
    assert edited.cache_identity() != backend.cache_identity()
    for spec, needle in (
        ("scripted/replies.py:missing", "script replies.py:missing: replies.py defines no 'missing'"),
        ("scripted/none.py:reply", "script none.py:reply: none.py not found"),
        ("scripted/replies.py:NOT_A_FUNCTION", "int is not a function fn(messages, tools, tool_choice, params)"),
    ):
        with pytest.raises(ModelError, match=re.escape(needle)):
            create_backend(spec)


def test_registered_script_sees_the_request_and_records_it(registered):
    seen = {}

    def fn(messages, tools, tool_choice, params):
        seen.update(tools=tools, tool_choice=tool_choice, params=params)
        return "the reply is " + messages[-1]["content"]

    script = registered("records", fn)
    backend = create_backend("scripted/records")
    messages = user("one two three")
    tools = [{"type": "function", "function": {"name": "search", "parameters": {}}}]
    params = GenerationParams(max_tokens=64, seed=7)
    response = generate(backend, messages, params, tools, "auto")
    assert response.content == "the reply is one two three"
    assert response.usage == Usage(prompt_tokens=5, completion_tokens=6)
    assert seen == {"tools": tools, "tool_choice": "auto", "params": params}
    messages.append({"role": "assistant", "content": "later"})  # an agent's transcript grows after the call
    assert backend.requests == script.requests
    assert script.requests == [
        {"messages": user("one two three"), "tools": tools, "tool_choice": "auto", "params": params}
    ]
    # the records are per script, across backends the harness makes
    generate(create_backend("scripted/records"), user("again"))
    assert len(script.requests) == 2 and len(backend.requests) == 1


def test_reply_shapes_and_explicit_usage(registered):
    replies = iter(
        [
            {"content": "graded B", "usage": {"prompt_tokens": 100, "completion_tokens": 5}},
            ModelResponse(content="as is", finish_reason="stop"),
            ModelResponse(content="own usage", usage=Usage(prompt_tokens=1, completion_tokens=1)),
            {"content": "forced", "finish_reason": "content_filter"},
        ]
    )
    registered("shapes", lambda *a: next(replies))
    backend = create_backend("scripted/shapes")
    first = generate(backend, user("a b"))
    assert first.content == "graded B" and first.usage == Usage(prompt_tokens=100, completion_tokens=5)
    second = generate(backend, user("a b"))
    assert second.content == "as is" and second.usage == Usage(prompt_tokens=4, completion_tokens=2)
    assert generate(backend, user("a b")).usage == Usage(prompt_tokens=1, completion_tokens=1)
    assert generate(backend, user("a b")).finish_reason == "content_filter"

    registered("bad", lambda *a: 42)
    with pytest.raises(TypeError, match="expected a str"):
        generate(create_backend("scripted/bad"), user("x"))
    registered("typo", lambda *a: {"contents": "x"})
    with pytest.raises(TypeError, match="expected a str"):
        generate(create_backend("scripted/typo"), user("x"))


def test_tool_calls_script_an_open_book_loop(registered):
    def search_then_answer(messages, tools, tool_choice, params):
        if messages[-1]["role"] == "tool":
            return f"Found: {messages[-1]['content']}"
        return {"tool_calls": [{"name": "search", "arguments": {"query": "Pat Burrell"}}]}

    registered("searcher", search_then_answer)
    backend = create_backend("scripted/searcher")
    tools = [{"type": "function", "function": {"name": "search", "parameters": {}}}]
    messages = user("Who?")
    first = generate(backend, messages, tools=tools)
    assert first.finish_reason == "tool_calls" and first.content is None
    (call,) = first.tool_calls
    assert call.name == "search" and json.loads(call.arguments) == {"query": "Pat Burrell"} and call.id
    assert first.usage.completion_tokens == 4  # search {"query": "Pat Burrell"}
    messages += [first.as_message(), {"role": "tool", "tool_call_id": call.id, "content": "an outfielder"}]
    second = generate(backend, messages, tools=tools)
    assert second.content == "Found: an outfielder" and not second.tool_calls
    # the tool call sent back counts in the prompt: 2 + 1 + 4 + 2
    assert second.usage.prompt_tokens == 9


def test_max_tokens_and_context_limits():
    backend = create_backend("scripted/answer=one two\n\nthree four", BackendOptions(context_size=10))
    cut = generate(backend, user("q"), GenerationParams(max_tokens=3))
    assert cut.content == "one two\n\nthree" and cut.finish_reason == "length"
    assert cut.usage.completion_tokens == 3
    whole = generate(backend, user("q"), GenerationParams(max_tokens=4))
    assert whole.content == "one two\n\nthree four" and whole.finish_reason == "stop"
    generate(backend, user("eight words " * 4))  # 2 + 8 = 10 tokens: fits exactly
    with pytest.raises(ContextOverflowError, match=r"(?s)11 tokens exceeds the context .* \(10\)"):
        generate(backend, user("nine words " * 4 + "more"))
    assert len(backend.requests) == 4  # the refused request was still sent


def test_errors_raise_and_transient_ones_are_retried(registered):
    attempts = []

    async def flaky(messages, tools, tool_choice, params):
        attempts.append(1)
        await asyncio.sleep(0)
        if len(attempts) == 1:
            raise TransientModelError("503 overloaded")
        if len(attempts) == 2:
            return "recovered"
        raise KeyError("malformed response")

    registered("flaky", flaky)
    backend = create_backend("scripted/flaky", BackendOptions(retry_max_wait=0))
    response = generate(backend, user("x"))
    assert response.content == "recovered" and response.attempts == 2
    with pytest.raises(KeyError, match="malformed"):
        generate(backend, user("x"))
    assert len(backend.requests) == 3


@pytest.mark.slow
def test_cli_run_records_a_scripted_model(tmp_path):
    out = tmp_path / "run"
    argv = ["run", "--model", "scripted/answer=Pat Burrell", "--dataset", "fanoutqa:dev", "--limit", "2"]
    proc = run_harness(*argv, "--no-cache", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    results = json.loads((out / "results.json").read_text())
    assert results["status"] == "complete"
    model = results["model"]
    assert model["backend"] == "scripted" and model["scripted"] is True and model["model"] == "answer=Pat Burrell"
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == 2 and all("Pat Burrell" in json.dumps(s) for s in samples)
