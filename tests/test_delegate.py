"""The delegate strategy (recursive delegation, ReDel): scripted models speaking the native tool
protocol drive the tree over the real HotpotQA snapshot: concurrent siblings, the depth limit,
malformed calls, a --max-cost stop mid-tree, the tree's tokens and cost adding up to the row's; then
one run with a real local model."""

from __future__ import annotations

import asyncio
import json

import pytest
from conftest import assert_ran, run_harness

from harness.agents.delegate import BAD_ARGUMENTS, REFUSED, Delegate
from harness.cli import main
from harness.errors import ConfigError
from harness.models.scripted import register_script, unregister_script
from harness.strategy import parse_knobs

QUESTION = "Were Scott Derrickson and Ed Wood of the same nationality?"  # hotpotqa:dev sample 1


@pytest.fixture
def script():
    names = []

    def add(name, fn):
        register_script(name, fn)
        names.append(name)
        return f"scripted/{name}"

    yield add
    for name in names:
        unregister_script(name)


def run(model, snapshot, out, *extra, code=0):
    argv = ["run", "--model", model, "--agent", "delegate", "--dataset", "hotpotqa:dev", "--snapshot", str(snapshot), "--search-space", "evidence-only", 
            "--limit", "1", "--no-cache", "--out", str(out), *extra]  # fmt: skip
    assert main(argv) == code
    rows = out / ("samples.jsonl" if code == 0 else "failures.jsonl")
    return json.loads(rows.read_text().splitlines()[0]), json.loads((out / "results.json").read_text())


def is_root(messages):
    return messages[0]["content"].rstrip().endswith(f"[Question]: {QUESTION}")


def turn(messages):
    return sum(1 for m in messages if m["role"] == "assistant")


def tool_names(tools):
    return [t["function"]["name"] for t in tools or []]


def delegate(instructions):
    return {"name": "delegate", "arguments": {"instructions": instructions}}


def search(query):
    return {"name": "search", "arguments": {"query": query}}


def person(messages):
    return "Scott Derrickson" if "Scott Derrickson" in messages[0]["content"] else "Ed Wood"


class Barrier:
    """Both sub-agents' first requests must be in flight at once: each waits here for the other."""

    def __init__(self, parties=2):
        self.parties, self.arrived, self.log, self.event = parties, 0, [], None

    async def wait(self, who):
        self.event = self.event or asyncio.Event()
        self.log.append(("arrive", who))
        self.arrived += 1
        if self.arrived == self.parties:
            self.event.set()
        await asyncio.wait_for(self.event.wait(), 10)  # siblings run one after another: this times out
        self.log.append(("leave", who))


def test_root_delegates_two_subquestions_concurrently(script, hotpot_snapshot, tmp_path):
    barrier = Barrier()
    seen = []

    async def fn(messages, tools, tool_choice, params):
        seen.append((is_root(messages), turn(messages), tool_names(tools)))
        if is_root(messages):
            if turn(messages) == 0:
                return {"tool_calls": [delegate("Find the nationality of Scott Derrickson."),
                                       delegate("Find the nationality of Ed Wood.")]}  # fmt: skip
            return "yes"
        if turn(messages) == 0:
            await barrier.wait(person(messages))
            return {"tool_calls": [search(person(messages))]}
        assert messages[-1]["role"] == "tool" and messages[-1]["content"].startswith("<document>")
        return "American"

    prices = tmp_path / "prices.yaml"
    prices.write_text("models:\n  scripted/delegate-two: {input: 3.0, output: 7.0}\n")
    sample, results = run(script("delegate-two", fn), hotpot_snapshot, tmp_path / "run", "--price-table", str(prices))

    # the siblings overlapped: both arrived before either went on
    assert [e for e, _ in barrier.log] == ["arrive", "arrive", "leave", "leave"]
    # the root delegates only (ReDel's "full" system); sub-agents search and may delegate (depth 1 < 8)
    assert {tuple(names) for root, _, names in seen if root} == {("delegate",)}
    assert {tuple(names) for root, _, names in seen if not root} == {("search", "delegate")}
    assert sample["answer"] == "yes" and sample["outcome"] == "answered"

    extra = sample["extra"]
    tree = extra["delegation"]
    nodes = tree["nodes"]
    assert [(n["id"], n["parent"], n["depth"]) for n in nodes] == [("0", None, 0), ("0.1", "0", 1), ("0.2", "0", 1)]
    assert [n["instructions"] for n in nodes] == [
        QUESTION,
        "Find the nationality of Scott Derrickson.",
        "Find the nationality of Ed Wood.",
    ]
    assert [n["answer"] for n in nodes] == ["yes", "American", "American"]
    assert all(n["outcome"] == "answered" for n in nodes) and tree["subagents"] == 2 and tree["depth"] == 1
    assert nodes[0]["tools"] == ["delegate"] and nodes[1]["tools"] == ["search", "delegate"]
    # the sub-agents' answers are the root's tool results; its transcript is the row's
    msgs = sample["messages"]
    assert nodes[0]["messages"] == msgs
    calls = msgs[1]["tool_calls"]
    assert [c["function"]["name"] for c in calls] == ["delegate", "delegate"]
    assert msgs[2:4] == [{"role": "tool", "tool_call_id": c["id"], "content": "American"} for c in calls]
    sub = nodes[1]["messages"]
    assert sub[0]["content"].endswith("[Instructions]: Find the nationality of Scott Derrickson.")
    assert QUESTION not in sub[0]["content"]  # a helper sees only its instructions
    assert sub[-1] == {"role": "assistant", "content": "American"}

    # searches of every node, flattened with the node that made them; recall over the whole tree
    assert sorted((s["node"], s["query"], s["found_title"]) for s in extra["searches"]) == [
        ("0.1", "Scott Derrickson", "Scott Derrickson"), ("0.2", "Ed Wood", "Ed Wood")
    ]  # fmt: skip
    assert [n["searches"] for n in nodes] == [0, 1, 1]
    assert extra["evidence_recall"]["recall"] == 1.0
    assert extra["malformed_tool_calls"] == 0 and extra["rounds"] == 2

    # usage and cost: the tree's sum is the row's
    assert sample["model_calls"] == 6 == sum(n["requests"] for n in nodes)
    for key in ("prompt_tokens", "completion_tokens"):
        assert sample["usage"][key] == sum(n["tokens"][key] for n in nodes) > 0
    for n in nodes:
        assert n["cost"] == pytest.approx(
            (3.0 * n["tokens"]["prompt_tokens"] + 7.0 * n["tokens"]["completion_tokens"]) / 1e6
        )
    assert sample["cost_usd"] == pytest.approx(sum(n["cost"] for n in nodes)) and sample["cost_usd"] > 0
    assert results["cost"]["model_usd"] == pytest.approx(sample["cost_usd"])

    assert results["agent"]["name"] == "delegate" and results["agent"]["protocol"] == "native"
    assert results["agent"]["records"] == ["searches", "evidence_recall", "delegation"]
    assert results["agent"]["sub_prompt_template"] == "prompts/delegate_sub.txt"
    assert results["agent"]["knobs"]["max_depth"] == 8 and results["agent"]["knobs"]["root_search"] is False
    r = results["retrieval"]
    assert r["evidence_recall_mean"] == 1.0 and r["subagents_mean"] == 2 and r["delegation_depth_max"] == 1


def test_depth_limit_and_a_call_written_as_text(script, hotpot_snapshot, tmp_path):
    """max_depth=2: root -> 0.1 -> 0.1.1, which has no delegate tool and is told so when it calls it."""
    seen = {}

    def fn(messages, tools, tool_choice, params):
        first = messages[0]["content"]
        depth = 0 if is_root(messages) else (1 if "Scott Derrickson's nationality" in first else 2)
        seen.setdefault(depth, []).append(tool_names(tools))
        n = turn(messages)
        if depth == 0:  # writes its call as text, as small models do: run as the call it is
            return json.dumps(delegate("Work out Scott Derrickson's nationality.")) if n == 0 else "yes"
        if depth == 1:
            return {"tool_calls": [delegate("Search for the page Scott Derrickson.")]} if n == 0 else "American"
        if n == 0:
            return {"tool_calls": [delegate("Search for the page Scott Derrickson, please.")]}
        if n == 1:
            assert "delegation depth limit (2)" in messages[-1]["content"]
            return {"tool_calls": [search("Scott Derrickson")]}
        return "He is American."

    sample, _ = run(script("delegate-depth", fn), hotpot_snapshot, tmp_path / "run", "--agent-arg", "max_depth=2")
    assert seen[0] == [["delegate"]] * 2
    assert seen[1] == [["search", "delegate"]] * 2
    assert seen[2] == [["search"]] * 3  # at max depth: no delegate tool
    nodes = sample["extra"]["delegation"]["nodes"]
    assert [(n["id"], n["depth"], n["tools"]) for n in nodes] == [
        ("0", 0, ["delegate"]), ("0.1", 1, ["search", "delegate"]), ("0.1.1", 2, ["search"])
    ]  # fmt: skip
    leaf = nodes[2]["messages"]
    call = leaf[1]["tool_calls"][0]
    assert call["function"]["name"] == "delegate"
    assert leaf[2] == {
        "role": "tool",
        "tool_call_id": call["id"],
        "content": "Error: you are at the delegation depth limit (2), so you cannot delegate; your tools: 'search'.",
    }
    assert nodes[2]["malformed_tool_calls"] == 1 and nodes[2]["answer"] == "He is American."
    assert nodes[1]["messages"][-2]["content"] == "He is American."  # 0.1.1's answer is 0.1's tool result
    root = sample["messages"]
    assert root[1]["content"] == "" and root[1]["tool_calls"][0]["function"]["name"] == "delegate"
    assert root[2]["content"] == "American"
    extra = sample["extra"]
    assert extra["text_tool_calls"] == 1 and extra["malformed_tool_calls"] == 1
    assert extra["text_tool_call_replies"] == [json.dumps(delegate("Work out Scott Derrickson's nationality."))]
    assert [s["node"] for s in extra["searches"]] == ["0.1.1"]
    assert sample["answer"] == "yes" and extra["delegation"]["depth"] == 2


def test_malformed_and_refused_calls_are_answered_with_errors(script, hotpot_snapshot, tmp_path):
    def fn(messages, tools, tool_choice, params):
        if turn(messages) == 0:
            return {"tool_calls": [
                {"name": "delegate", "arguments": "not json"},
                {"name": "delegate", "arguments": {"task": "Find Ed Wood's nationality."}},
                delegate("   "),
                search("Ed Wood"),  # the root has no search tool
                delegate(QUESTION.replace("?", ".")),  # the whole task: refused (ReDel)
            ]}  # fmt: skip
        return "I could not find out."

    sample, results = run(script("delegate-bad", fn), hotpot_snapshot, tmp_path / "run")
    results_msgs = [m["content"] for m in sample["messages"][2:7]]
    assert results_msgs[:3] == [BAD_ARGUMENTS] * 3
    assert results_msgs[3] == "Error: there is no tool named 'search' here; your tools: 'delegate'."
    assert results_msgs[4] == REFUSED
    extra = sample["extra"]
    assert extra["malformed_tool_calls"] == 4 and extra["delegation"]["refused_delegations"] == 1
    assert extra["delegation"]["subagents"] == 0 and extra["searches"] == []
    assert sample["outcome"] == "answered" and extra["evidence_recall"]["recall"] == 0.0
    assert results["retrieval"]["malformed_tool_calls"] == 4 and results["retrieval"]["refused_delegations"] == 1


def test_sub_agent_answers_on_a_last_turn_without_tools(script, hotpot_snapshot, tmp_path):
    """sub_max_rounds=1: one turn with tools, then one without (kani after max_function_rounds)."""
    sub_tools = []

    def fn(messages, tools, tool_choice, params):
        if is_root(messages):
            return {"tool_calls": [delegate("Find the nationality of Ed Wood.")]} if turn(messages) == 0 else "yes"
        sub_tools.append((tool_names(tools), tool_choice))
        return {"tool_calls": [search("Ed Wood")]} if tools else "American"

    sample, _ = run(script("delegate-last", fn), hotpot_snapshot, tmp_path / "run", "--agent-arg", "sub_max_rounds=1")
    assert sub_tools == [(["search", "delegate"], "auto"), ([], None)]
    sub = sample["extra"]["delegation"]["nodes"][1]
    assert sub["rounds"] == 2 and sub["outcome"] == "answered" and sub["answer"] == "American"


def test_a_sub_agent_that_never_answers_is_reported_to_its_parent(script, hotpot_snapshot, tmp_path):
    def fn(messages, tools, tool_choice, params):
        if is_root(messages):
            return {"tool_calls": [delegate("Find the nationality of Ed Wood.")]} if turn(messages) == 0 else "no"
        return {"tool_calls": [search("Ed Wood")]}  # even on its last turn, offered no tools

    sample, _ = run(script("delegate-stuck", fn), hotpot_snapshot, tmp_path / "run", "--agent-arg", "sub_max_rounds=2")
    sub = sample["extra"]["delegation"]["nodes"][1]
    assert sub["outcome"] == "max_rounds" and sub["answer"] is None and sub["rounds"] == 3
    assert sub["messages"][-1]["content"].startswith("Error: no tools are available now")
    assert sample["messages"][2]["content"] == "Error: the helper used all its turns without giving an answer."
    assert sample["outcome"] == "answered" and sub["searches"] == 2


def test_budget_stops_mid_tree_and_the_tree_holds_what_was_spent(script, hotpot_snapshot, tmp_path):
    """$1 per completion token, each reply one token, max_tokens 10 (a $10 reservation), --max-cost 12:
    the root's first request fits; the first sub-agent's too; the second sub-agent's waits for it to
    settle ($2 spent) and then fits; the root's next request ($3 + $10) cannot, with nothing in flight:
    the run stops there, never past its budget, and the tree holds the $3 spent."""

    async def fn(messages, tools, tool_choice, params):
        one = {"prompt_tokens": 0, "completion_tokens": 1}
        if is_root(messages):
            return {"tool_calls": [delegate("Find the nationality of Scott Derrickson."),
                                   delegate("Find the nationality of Ed Wood.")], "usage": one}  # fmt: skip
        await asyncio.sleep(0.05)  # both siblings are started before either settles
        return {"content": "American", "usage": one}

    prices = tmp_path / "prices.yaml"
    prices.write_text("models:\n  scripted/delegate-budget: {input: 0.0, output: 1000000.0}\n")
    row, results = run(script("delegate-budget", fn), hotpot_snapshot, tmp_path / "run", "--price-table", str(prices),
                       "--max-cost", "12", "--max-tokens", "10", code=4)  # fmt: skip
    assert row["error_type"] == "budget_exhausted"
    nodes = row["extra"]["delegation"]["nodes"]
    assert [n["id"] for n in nodes] == ["0", "0.1", "0.2"]
    assert [n["outcome"] for n in nodes] == ["budget_exhausted", "answered", "answered"]
    assert row["model_calls"] == 3  # the root's first request and one per sub-agent
    assert row["usage"] == {"prompt_tokens": 0, "completion_tokens": 3, "cache_read_tokens": 0, "cache_write_tokens": 0, "reasoning_tokens": 0}
    assert sum(n["tokens"]["completion_tokens"] for n in nodes) == 3
    assert row["spent_usd"] == pytest.approx(3.0) == sum(n["cost"] for n in nodes)
    assert results["status"] == "budget_exhausted" and results["cost"]["budget"]["spent_usd"] == pytest.approx(3.0)
    assert results["cost"]["budget"]["refused_request"]["worst_usd"] == pytest.approx(10.0)


@pytest.mark.parametrize("connections", [1, 2])
def test_siblings_stay_within_max_connections(script, hotpot_snapshot, tmp_path, connections):
    flight = {"now": 0, "max": 0}

    async def fn(messages, tools, tool_choice, params):
        flight["now"] += 1
        flight["max"] = max(flight["max"], flight["now"])
        await asyncio.sleep(0.05)
        flight["now"] -= 1
        if is_root(messages):
            if turn(messages) == 0:
                return {"tool_calls": [delegate(f"Find fact number {i} about Ed Wood.") for i in range(3)]}
            return "yes"
        return "American"

    sample, _ = run(script(f"delegate-conn-{connections}", fn), hotpot_snapshot, tmp_path / "run",
                    "--max-connections", str(connections))  # fmt: skip
    assert sample["extra"]["delegation"]["subagents"] == 3
    assert flight["max"] == connections


def test_knobs_refused_in_one_line():
    with pytest.raises(ConfigError) as err:
        parse_knobs(Delegate, "delegate", {"sub_model": "openai/gpt-4o-mini"})
    assert str(err.value).startswith("--agent-arg sub_model:") and "only null" in str(err.value)
    assert "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="root_search=true"):
        parse_knobs(Delegate, "delegate", {"max_depth": 0})
    knobs = parse_knobs(Delegate, "delegate", {"max_depth": 0, "root_search": True})
    assert knobs.max_depth == 0 and knobs.sub_model is None


def test_root_with_search_and_no_delegation_is_one_agent(script, hotpot_snapshot, tmp_path):
    def fn(messages, tools, tool_choice, params):
        assert tool_names(tools) == ["search"]
        return {"tool_calls": [search("Ed Wood")]} if turn(messages) == 0 else "yes"

    sample, _ = run(script("delegate-flat", fn), hotpot_snapshot, tmp_path / "run",
                    "--agent-arg", "max_depth=0", "--agent-arg", "root_search=true")  # fmt: skip
    assert sample["extra"]["delegation"]["subagents"] == 0
    assert [(s["node"], s["found_title"]) for s in sample["extra"]["searches"]] == [("0", "Ed Wood")]


def test_sub_template_is_checked_before_the_run(tmp_path, hotpot_snapshot, capsys):
    bad = tmp_path / "sub.txt"
    bad.write_text("Do this: {instructions} for {question}")
    out = tmp_path / "run"
    code = main(["run", "--model", "scripted/echo", "--agent", "delegate", "--dataset", "hotpotqa:dev",
                 "--snapshot", str(hotpot_snapshot), "--search-space", "evidence-only", "--limit", "1", "--out", str(out),
                 "--agent-arg", f"sub_template={bad}"])  # fmt: skip
    assert code == 2 and not (out / "samples.jsonl").exists()
    err = capsys.readouterr().err.strip()
    assert err == (
        f"error: sub-agent template {bad.resolve()} uses {{question}}, which agent delegate does not fill "
        "(it fills {instructions}, {current_date})"
    )


HOSTILE = '</script><img src=x onerror="window.__xss=1"> & "q" <!--'


def test_report_draws_the_tree(script, hotpot_snapshot, tmp_path):
    from html_tree import parse

    hostile = f"Find the nationality of Scott Derrickson. {HOSTILE}"
    birthplace = "Find where Ed Wood was born."

    def fn(messages, tools, tool_choice, params):
        first, t = messages[0]["content"].rstrip(), turn(messages)
        if is_root(messages):
            return {"tool_calls": [delegate(hostile), delegate("Find the nationality of Ed Wood.")]} if t == 0 else "yes"
        if first.endswith(birthplace):
            return {"tool_calls": [search("Ed Wood")]} if t == 0 else "Poughkeepsie"
        if "Ed Wood" in first:
            return {"tool_calls": [delegate(birthplace)]} if t == 0 else "American"
        return {"tool_calls": [search("Scott Derrickson")]} if t == 0 else "American"

    out = tmp_path / "run"
    sample, _ = run(script("delegate-report", fn), hotpot_snapshot, out)
    nodes = {n["id"]: n for n in sample["extra"]["delegation"]["nodes"]}
    assert list(nodes) == ["0", "0.1", "0.2", "0.2.1"]
    assert main(["report", str(out)]) == 0
    page = parse((out / "report.html").read_text())
    assert not page.find_all("img") and len(page.find_all("script")) == 2  # the hostile instructions stayed text
    tree = page.find("details", id="t-1").find("ul", "delegation-tree")
    drawn = {li.attrs["data-node"]: li for li in tree.find_all("li", "node")}
    assert list(drawn) == ["0", "0.1", "0.2", "0.2.1"]

    def parent_node(li):
        return next((a.attrs["data-node"] for a in li.ancestors() if "node" in a.classes), None)

    # nested lists: each node inside its parent's
    assert {k: parent_node(li) for k, li in drawn.items()} == {"0": None, "0.1": "0", "0.2": "0", "0.2.1": "0.2"}
    for key, li in drawn.items():
        n = nodes[key]
        own = li.children  # the node's own part; its children's are in the nested list
        head = next(e for e in own if "node-head" in e.classes).text()
        assert head.startswith(f"{key} · depth {n['depth']} · {n['outcome']} · ")
        assert f"tokens {n['tokens']['prompt_tokens']} / {n['tokens']['completion_tokens']}" in head
        assert f"searches {n['searches']}" in head and "cost USD" in head
        assert next(e for e in own if "instructions" in e.classes).find("pre").text() == n["instructions"]
        assert next(e for e in own if "node-answer" in e.classes).find("pre").text() == n["answer"]
        messages = next(e for e in own if "node-messages" in e.classes)
        assert messages.tag == "details" and messages.find("summary").text() == f"messages ({len(n['messages'])})"
        assert len(messages.find_all("div", "msg")) == len(n["messages"])
    assert nodes["0.1"]["instructions"] == hostile and nodes["0.2.1"]["answer"] == "Poughkeepsie"
    assert page.find("details", id="t-1").find("div", "delegation").find("b").text() == "Delegation tree"
    assert "subagents 3, depth 2, refused delegations 0" in tree.parent.text()


# ------------------------------------------------------------------ a real model
@pytest.mark.slow
def test_delegate_real_local_model(hotpot_snapshot, tmp_path):
    """SmolLM2 through llama.cpp (no "auto" tool calls: the root's first turn names delegate, a
    sub-agent's names search): the loop runs and the records hold, whatever the answers. SmolLM2
    hands its whole question on, which ReDel's refusal would stop: max_similarity=1 lets it through."""
    out = tmp_path / "local"
    proc = run_harness(
        "run", "--agent", "delegate", "--model", "local/smollm2", "--dataset", "hotpotqa:dev",
        "--snapshot", str(hotpot_snapshot), "--search-space", "evidence-only", "--limit", "2", "--max-tokens", "48", "--n-threads", "2",
        "--context-size", "2048", "--agent-arg", "max_rounds=2", "--agent-arg", "sub_max_rounds=1",
        "--agent-arg", "max_depth=1", "--agent-arg", "max_similarity=1", "--no-cache", "--out", str(out),
    )  # fmt: skip
    assert_ran(proc, out)  # 0, or 4 where the tiny model never answered
    rows = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert len(rows) == 2
    for row in rows:
        extra = row["extra"]
        nodes = extra["delegation"]["nodes"]
        root = nodes[0]
        assert extra["tool_choice_policy"] == "first-forced" and root["id"] == "0"
        assert row["messages"][1]["tool_calls"][0]["function"]["name"] == "delegate"
        delegated = sum(c["function"]["name"] == "delegate" for m in row["messages"] for c in m.get("tool_calls") or [])
        # each delegate call started a sub-agent or was answered with an error
        assert extra["delegation"]["subagents"] == len(nodes) - 1
        assert delegated == len(nodes) - 1 + root["malformed_tool_calls"]
        for sub in nodes[1:]:
            assert sub["parent"] == "0" and sub["depth"] == 1 and sub["tools"] == ["search"] and sub["instructions"]
            assert sub["messages"][1]["tool_calls"][0]["function"]["name"] == "search"
            # the forced first call searched, or was malformed and answered with an error the model reads
            # (SmolLM2 cut at 48 tokens writes unfinished JSON on some CPUs: greedy output differs by CPU)
            assert sub["searches"] + sub["malformed_tool_calls"] >= 1
            assert sub["outcome"] in ("answered", "max_rounds", "context_full") and sub["rounds"] <= 2
        assert len(extra["searches"]) == sum(n["searches"] for n in nodes)
        assert {s["node"] for s in extra["searches"]} <= {n["id"] for n in nodes[1:]}
        assert extra["evidence_recall"]["needed"]
        for key in ("prompt_tokens", "completion_tokens"):
            assert row["usage"][key] == sum(n["tokens"][key] for n in nodes) > 0
        assert row["model_calls"] == sum(n["requests"] for n in nodes)
        assert row["outcome"] in ("answered", "max_rounds", "context_full")
    assert sum(row["extra"]["delegation"]["subagents"] for row in rows) >= 1
    r = json.loads((out / "results.json").read_text())
    assert r["retrieval"]["evidence_recall_n"] == 2 and r["retrieval"]["delegation_depth_max"] <= 1
