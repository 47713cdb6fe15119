"""react (ReAct, Yao et al. 2023) driven through the real HotpotQA snapshot: scripted models that speak
the Thought / Action / Observation protocol exactly (and badly), then SmolLM2-135M end to end."""

from __future__ import annotations

import json

import pytest
from conftest import assert_ran, run_harness

from harness.agents.react import correction, parse_step
from harness.cli import main
from harness.models.scripted import register_script, unregister_script

QUESTION = "Were Scott Derrickson and Ed Wood of the same nationality?"  # hotpotqa:dev sample 0


@pytest.fixture
def scripted():
    """scripted(name, replies): a model answering its n-th reply of a sample with replies[n] (the
    last one again past the end)."""
    names = []

    def add(name, replies):
        def fn(messages, tools, tool_choice, params):
            turn = sum(1 for m in messages if m["role"] == "assistant")
            return replies[min(turn, len(replies) - 1)]

        names.append(name)
        script = register_script(name, fn)
        return f"scripted/{name}", script

    yield add
    for name in names:
        unregister_script(name)


def _run(model, snapshot, out, *extra, rc=0):
    argv = ["run", "--model", model, "--agent", "react", "--dataset", "hotpotqa:dev", "--snapshot", str(snapshot), "--search-space", "evidence-only", 
            "--limit", "1", "--no-cache", "--out", str(out), *extra]  # fmt: skip
    assert main(argv) == rc
    sample = json.loads((out / "samples.jsonl").read_text())
    return sample, json.loads((out / "results.json").read_text())


def test_parse_step():
    step = parse_step("Thought 2: Now Ed Wood.\nAction 2: Search[Ed Wood]")
    assert (step.thought, step.action, step.argument, step.error, step.cut) == (
        "Now Ed Wood.",
        "search",
        "Ed Wood",
        None,
        False,
    )
    # numbers and the Action label are optional; the verb's case is free
    assert parse_step("Thought: ok\nAction: finish[yes]").argument == "yes"
    assert (parse_step("search[Ed Wood]").action, parse_step("Finish[no]").action) == ("search", "finish")
    # the model writing on past its action: only the first action, the rest cut from the kept reply
    step = parse_step("Thought 1: x\nAction 1: Search[A]\nObservation 1: made up\nThought 2: y\nAction 2: Finish[B]")
    assert (step.action, step.argument, step.kept, step.cut) == (
        "search",
        "A",
        "Thought 1: x\nAction 1: Search[A]",
        True,
    )
    # an answer may hold brackets and span lines (a list), but never runs into another step
    assert parse_step("Action 3: Finish[Hamlet [play]]").argument == "Hamlet [play]"
    assert parse_step("Action 3: Finish[A\nB\nC]").argument == "A\nB\nC"
    step = parse_step("Action 3: Finish[yes] because both are American.\nThought 4: x\nAction 4: Search[Z]")
    assert (step.action, step.argument, step.kept) == ("finish", "yes", "Action 3: Finish[yes]")
    for text, error in [
        ("They are both American.", "no Action line"),
        ("Thought 1: x\nAction 1: search for Ed Wood", "the Action is not Search[...] or Finish[...]"),
        ("Action 1: Lookup[born]", "unknown action Lookup[...]"),
        ("Action 1: Search[]", "Search[...] needs a query on one line"),
        ("Action 1: Finish[ ]", "Finish[...] needs the answer"),
        ("Action 1: Search[Ed Wood", "Search[ has no closing ]"),
        ("I would Search[Ed Wood] now.", "no Action line"),  # an action opens its line
        ("", "no Action line"),
    ]:
        step = parse_step(text)
        assert step.action is None and step.error.startswith(error) and step.kept == text, text
    # without a readable action, a thought only where the reply labels one
    assert parse_step("Thought 1: x\nAction 1: search for Ed Wood").thought == "x"
    assert parse_step("They are both American.").thought == ""
    assert correction(2, "no Action line") == (
        "Observation 2: Invalid step (no Action line). Reply with Thought 3: ... then "
        "Action 3: Search[query] or Action 3: Finish[answer]."
    )


def test_search_search_finish(scripted, hotpot_snapshot, tmp_path):
    replies = [
        "Thought 1: I need both nationalities. First Scott Derrickson.\nAction 1: Search[Scott Derrickson]",
        "Thought 2: He is American. Now Ed Wood.\nAction 2: Search[Ed Wood]",
        "Thought 3: Both are American.\nAction 3: Finish[yes]",
    ]
    model, script = scripted("react-full", replies)
    sample, results = _run(model, hotpot_snapshot, tmp_path / "run")
    extra = sample["extra"]
    assert sample["answer"] == "yes" and sample["outcome"] == "answered"
    assert extra["steps"] == 3 and extra["malformed_steps"] == 0
    assert extra["trace"] == [
        {"step": 1, "thought": "I need both nationalities. First Scott Derrickson.", "action": "search",
         "query": "Scott Derrickson", "observation_titles": ["Scott Derrickson"]},
        {"step": 2, "thought": "He is American. Now Ed Wood.", "action": "search", "query": "Ed Wood",
         "observation_titles": ["Ed Wood"]},
        {"step": 3, "thought": "Both are American.", "action": "finish", "answer": "yes"},
    ]  # fmt: skip
    assert [s["query"] for s in extra["searches"]] == ["Scott Derrickson", "Ed Wood"]
    assert [s["found_title"] for s in extra["searches"]] == ["Scott Derrickson", "Ed Wood"]
    assert extra["evidence_recall"]["recall"] == 1.0
    msgs = sample["messages"]
    assert [m["role"] for m in msgs] == ["user", "assistant", "user", "assistant", "user", "assistant"]
    prompt = msgs[0]["content"]
    assert prompt.endswith(f"Question: {QUESTION}") and "Action 1: Search[Turandot]" in prompt
    assert [msgs[i]["content"] for i in (1, 3, 5)] == replies
    # each observation is the search tool's result for that step's query: the page's text
    from harness.wiki_snapshot.store import Snapshot

    with Snapshot.open(hotpot_snapshot) as snap:
        for i, title in ((2, "Scott Derrickson"), (4, "Ed Wood")):
            assert msgs[i]["content"].startswith(f"Observation {i // 2}: ")
            assert snap.resolve_title(title).text[:200] in msgs[i]["content"]
    # the model saw each observation before its next step
    assert [r["messages"][-1]["content"][:14] for r in script.requests] == [
        prompt[:14],
        "Observation 1:",
        "Observation 2:",
    ]
    agent = results["agent"]
    assert agent["name"] == "react" and agent["protocol"] == "text" and results["setting"] == "open-book"
    assert agent["records"] == ["searches", "evidence_recall", "trace"] and agent["prompt_template"] == "prompts/react.txt"
    assert agent["knobs"]["max_steps"] == 7 and agent["max_steps_default"]["value"] == 7
    assert "range(1, 8)" in agent["max_steps_default"]["source"]
    retrieval = results["retrieval"]
    assert retrieval["evidence_recall_mean"] == 1.0 and retrieval["searches_mean"] == 2
    assert retrieval["steps_mean"] == 3 and retrieval["malformed_steps"] == 0


def test_finish_on_step_one_without_step_numbers(scripted, hotpot_snapshot, tmp_path):
    model, _ = scripted("react-finish-first", ["Thought: I know this one.\nAction: Finish[yes]"])
    sample, _ = _run(model, hotpot_snapshot, tmp_path / "run")
    extra = sample["extra"]
    assert sample["answer"] == "yes" and sample["outcome"] == "answered" and extra["steps"] == 1
    assert extra["trace"] == [{"step": 1, "thought": "I know this one.", "action": "finish", "answer": "yes"}]
    assert extra["searches"] == [] and extra["evidence_recall"]["recall"] == 0.0
    assert len(sample["messages"]) == 2


def test_bare_actions_and_text_past_the_action(scripted, hotpot_snapshot, tmp_path):
    """No numbers, no Action label, a made-up observation and further steps after the action: only
    the first action runs, the rest is cut from the kept reply, and the real observation follows."""
    first = "Thought: Ed Wood first.\nSearch[Ed Wood]\nObservation: Ed Wood was French.\nThought: So no.\nFinish[no]"
    model, _ = scripted("react-bare", [first, "Finish[yes]"])
    sample, _ = _run(model, hotpot_snapshot, tmp_path / "run")
    extra = sample["extra"]
    assert sample["answer"] == "yes" and extra["steps"] == 2 and extra["malformed_steps"] == 0
    assert [s["query"] for s in extra["searches"]] == ["Ed Wood"]
    assert extra["trace"][0]["dropped_after_action"] is True and extra["trace"][0]["thought"] == "Ed Wood first."
    assert sample["messages"][1] == {"role": "assistant", "content": "Thought: Ed Wood first.\nSearch[Ed Wood]"}
    assert (
        sample["messages"][2]["content"].startswith("Observation 1: ")
        and "French" not in sample["messages"][2]["content"]
    )
    assert extra["trace"][1] == {"step": 2, "thought": "", "action": "finish", "answer": "yes"}


def test_malformed_steps_are_counted_corrected_and_never_the_answer(scripted, hotpot_snapshot, tmp_path):
    replies = [
        "They are both American, so yes.",
        "Thought 2: I should look it up.\nAction 2: Lookup[nationality]",
        "Thought 3: Search.\nAction 3: Search[]",
        "Thought 4: Fine.\nAction 4: Finish[yes]",
    ]
    model, _ = scripted("react-malformed", replies)
    sample, results = _run(model, hotpot_snapshot, tmp_path / "run")
    extra = sample["extra"]
    assert sample["answer"] == "yes" and sample["outcome"] == "answered"
    assert extra["steps"] == 4 and extra["malformed_steps"] == 3 and extra["searches"] == []
    errors = [t.get("error", "") for t in extra["trace"]]
    assert errors[0] == "no Action line" and errors[1].startswith("unknown action Lookup")
    assert errors[2] == "Search[...] needs a query on one line" and errors[3] == ""
    assert [t["reply"] for t in extra["trace"][:3]] == replies[:3] and extra["trace"][0]["action"] is None
    msgs = sample["messages"]
    for k in (1, 2, 3):  # the reply as written, then a one-line correction as its observation
        assert msgs[2 * k - 1] == {"role": "assistant", "content": replies[k - 1]}
        correction_text = msgs[2 * k]["content"]
        assert correction_text == correction(k, errors[k - 1]) and "\n" not in correction_text
    assert results["retrieval"]["malformed_steps"] == 3


@pytest.mark.parametrize(
    "reply, knobs, steps, searches, malformed",
    [
        ("Thought: more.\nAction: Search[Ed Wood]", [], 7, 7, 0),  # the default: 7 steps
        ("Thought: more.\nAction: Search[Ed Wood]", ["--agent-arg", "max_steps=3"], 3, 3, 0),
        ("I am not sure yet.", ["--agent-arg", "max_steps=2"], 2, 0, 2),
    ],
)
def test_max_steps_without_finish_is_unanswered(scripted, hotpot_snapshot, tmp_path, reply, knobs, steps, searches, malformed):  # fmt: skip
    model, script = scripted(f"react-max-{steps}-{malformed}", [reply])
    sample, results = _run(model, hotpot_snapshot, tmp_path / "run", *knobs, rc=4)  # no sample produced an answer
    extra = sample["extra"]
    assert sample["answer"] is None and sample["outcome"] == "max_steps"
    assert extra["steps"] == len(extra["trace"]) == len(script.requests) == steps
    assert len(extra["searches"]) == searches and extra["malformed_steps"] == malformed
    assert results["outcomes"]["max_steps"] == 1


def test_a_list_answer_keeps_one_item_a_line(scripted, hotpot_snapshot, tmp_path):
    model, _ = scripted("react-list", ["Thought 1: Two names.\nAction 1: Finish[Scott Derrickson\nEd Wood]"])
    sample, _ = _run(model, hotpot_snapshot, tmp_path / "run")
    assert sample["answer"] == "Scott Derrickson\nEd Wood"


def test_a_full_context_ends_the_sample(scripted, hotpot_snapshot, tmp_path):
    """The prompt fits, the first observation (up to half the context) does not leave room for the
    next reply: the sample ends as context_full, never cut silently."""
    model, _ = scripted("react-full-context", ["Thought 1: x\nAction 1: Search[Scott Derrickson]"])
    sample, _ = _run(model, hotpot_snapshot, tmp_path / "run", "--context-size", "850", "--max-tokens", "300", rc=4)
    assert sample["outcome"] == "context_full" and sample["answer"] is None
    assert sample["extra"]["steps"] == 1 and len(sample["extra"]["searches"]) == 1


HOSTILE = '</script><img src=x onerror="window.__xss=1"> & "q" <!--'


def test_report_draws_the_trace_as_numbered_steps(scripted, hotpot_snapshot, tmp_path):
    from html_tree import parse

    replies = [
        f"Thought 1: First Scott Derrickson. {HOSTILE}\nAction 1: Search[Scott Derrickson]",
        "I think they are both American.",  # no action: corrected
        "Thought 3: Now Ed Wood.\nAction 3: Search[Edd Woood the director]",  # no such page
        "Thought 4: Both are American.\nAction 4: Finish[yes]",
    ]
    model, _ = scripted("react-report", replies)
    sample, _ = _run(model, hotpot_snapshot, tmp_path / "run")
    trace = sample["extra"]["trace"]
    assert main(["report", str(tmp_path / "run")]) == 0
    page = parse((tmp_path / "run" / "report.html").read_text())
    assert not page.find_all("img") and len(page.find_all("script")) == 2  # the hostile thought stayed text
    table = page.find("details", id="t-1").find("table", "react-trace")
    assert [th.text() for th in table.find_all("th")] == ["#", "Thought", "Action", "Observation"]
    rows = table.find_all("tr", "step")
    assert [r.attrs["data-step"] for r in rows] == ["1", "2", "3", "4"]

    def cell(row, cls):
        return rows[row].find("td", cls).text()

    assert cell(0, "thought") == trace[0]["thought"] == f"First Scott Derrickson. {HOSTILE}"
    assert cell(0, "action") == "Search[Scott Derrickson]" and cell(0, "observation") == "page Scott Derrickson"
    assert cell(1, "action").startswith("invalid step: no Action line") and replies[1] in cell(1, "action")
    assert cell(2, "action") == "Search[Edd Woood the director]"
    assert cell(2, "observation").startswith("no such page; similar: ") and trace[2]["similar_titles"]
    assert cell(3, "thought") == "Both are American." and cell(3, "action") == "Finish[yes]"
    # drawn, not dumped among the other records
    assert all('"trace"' not in d.text() for d in page.find_all("details") if d.find_all("summary")
               and d.find("summary").text() == "other records")  # fmt: skip


# ------------------------------------------------------------------ the real local model
@pytest.mark.slow
def test_react_smollm2_two_questions(hotpot_snapshot, tmp_path):
    """SmolLM2-135M over two HotpotQA questions: whatever it writes, every reply is a step of the
    trace, read or counted malformed, searches run as the trace says, and the records are kept."""
    out = tmp_path / "react"
    proc = run_harness(
        "run", "--agent", "react", "--model", "local/smollm2", "--dataset", "hotpotqa:dev", "--snapshot",
        str(hotpot_snapshot), "--search-space", "evidence-only", "--limit", "2", "--max-tokens", "48", "--n-threads", "2", "--agent-arg", "max_steps=3",
        "--no-cache", "--out", str(out),
    )  # fmt: skip
    assert_ran(proc, out)  # 0, or 4 where the tiny model never called Finish
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == 2
    for s in samples:
        extra, trace, msgs = s["extra"], s["extra"]["trace"], s["messages"]
        assert s["outcome"] in ("answered", "max_steps", "context_full")
        assert 1 <= extra["steps"] == len(trace) <= 3
        assert extra["malformed_steps"] == sum(1 for t in trace if "error" in t)
        assert [t["query"] for t in trace if t["action"] == "search"] == [x["query"] for x in extra["searches"]]
        assert msgs[0]["content"].endswith(f"Question: {s['question']}")
        for k, t in enumerate(trace, start=1):
            assert msgs[2 * k - 1]["role"] == "assistant"
            if t["action"] != "finish" and len(msgs) > 2 * k:
                assert msgs[2 * k]["role"] == "user" and msgs[2 * k]["content"].startswith(f"Observation {k}: ")
        if s["outcome"] == "answered":
            assert trace[-1]["action"] == "finish" and s["answer"] == trace[-1]["answer"]
        else:
            assert s["answer"] is None
        assert set(extra["evidence_recall"]) == {"needed", "found", "recall", "returned", "relevant"}
    results = json.loads((out / "results.json").read_text())
    assert results["agent"]["name"] == "react" and results["agent"]["records"] == ["searches", "evidence_recall", "trace"]
    assert results["retrieval"]["evidence_recall_n"] == 2 and "steps_mean" in results["retrieval"]
