"""ircot (IRCoT, Trivedi et al. 2023) over a BM25 words100 index of the real HotpotQA snapshot: scripted
models that write one chain-of-thought sentence a step (and an answer with text after it, repeats,
nothing), then SmolLM2-135M end to end."""

from __future__ import annotations

import json
import shutil
from collections import Counter

import pytest
from conftest import assert_ran, run_harness

from harness.agents.ircot import answer_in, next_sentence
from harness.cli import main
from harness.models.scripted import register_script, unregister_script

Q0 = "Were Scott Derrickson and Ed Wood of the same nationality?"  # hotpotqa:dev sample 0
EXEMPLAR_TITLES = 6  # "Wikipedia Title:" blocks of the exemplars in prompts/ircot.txt


@pytest.fixture(scope="module")
def indexed(hotpot_snapshot, tmp_path_factory):
    """A copy of the HotpotQA snapshot with a BM25 words100 passage index beside it (the shared
    snapshot stays without one)."""
    path = tmp_path_factory.mktemp("ircot") / "hotpot.db"
    shutil.copyfile(hotpot_snapshot, path)
    assert main(["index", "build", str(path), "--kind", "bm25", "--workers", "1", "--quiet"]) == 0
    return path


@pytest.fixture
def scripted():
    """scripted(name, replies): a model answering the n-th request of a question with replies[n]
    (the last one again past the end); the question is read from the prompt's last ``Q:`` line."""
    names = []

    def add(name, replies):
        seen = Counter()

        def fn(messages, tools, tool_choice, params):
            question = messages[-1]["content"].rsplit("\nQ: ", 1)[1].split("\n", 1)[0]
            seen[question] += 1
            return replies[min(seen[question], len(replies)) - 1]

        names.append(name)
        return f"scripted/{name}", register_script(name, fn)

    yield add
    for name in names:
        unregister_script(name)


def _run(model, snapshot, out, *extra, sample_id="hotpot-dev-000", rc=0):
    argv = ["run", "--model", model, "--agent", "ircot", "--dataset", "hotpotqa:dev", "--snapshot", str(snapshot), "--search-space", "evidence-only", 
            "--sample-id", sample_id, "--no-cache", "--out", str(out), *extra]  # fmt: skip
    assert main(argv) == rc  # 4: no sample produced an answer
    sample = json.loads((out / "samples.jsonl").read_text())
    return sample, json.loads((out / "results.json").read_text())


def test_sentence_and_answer_reading():
    # one sentence a step; what follows it (more sentences, a new example the model made up) is dropped
    assert next_sentence("So the answer is: Chief of Protocol. She served 1976-77.\n\nQ: Who?\nA: x", []) == (
        "So the answer is: Chief of Protocol.", 0)  # fmt: skip
    assert next_sentence("A: Ed Wood was American.", []) == ("Ed Wood was American.", 0)
    # a chat model repeating the chain it was shown: the first new sentence is the step
    assert next_sentence("Scott Derrickson is American. Ed Wood is American.", ["Scott Derrickson is American."]) == (
        "Ed Wood is American.", 1)  # fmt: skip
    assert next_sentence("\n\nQ: a question of its own", []) == (None, 0)
    assert next_sentence("", []) == (None, 0)
    assert answer_in("So the answer is: Chief of Protocol.") == "Chief of Protocol"
    assert answer_in("Thus, the answer is yes") == "yes"
    assert answer_in("So the answer is Washington, D.C.") == "Washington, D.C"  # one final full stop, as the reference
    assert answer_in("So the answer is:") is None and answer_in("The answer isn't known.") is None
    assert answer_in("Scott Derrickson is American.") is None


def test_interleaves_sentences_and_retrieval(scripted, indexed, tmp_path):
    replies = [
        "Scott Derrickson is an American director.",
        "Ed Wood was an American filmmaker.",
        "So the answer is: yes.",
    ]
    model, script = scripted("ircot-full", replies)
    sample, results = _run(model, indexed, tmp_path / "run")
    extra, trace = sample["extra"], sample["extra"]["trace"]
    assert sample["answer"] == "yes" and sample["outcome"] == "answered"
    assert extra["steps"] == 3 and extra["chain"] == replies
    assert [t["step"] for t in trace] == [0, 1, 2, 3]
    # step 0 retrieves with the question, each sentence but the answer with itself
    assert [t.get("query") for t in trace] == [Q0, replies[0], replies[1], None]
    assert [t["sentence"] for t in trace] == [None, *replies] and trace[3]["answer"] == "yes"
    assert all(t["retrieved"] == 6 for t in trace[:3])  # K = 6 per step
    # only new passages are added, never twice, at most 15
    held = [h["passage_id"] for h in extra["retrieval"]["hits"]]
    assert held == [p for t in trace[:3] for p in t["new_passages"]] and len(set(held)) == len(held)
    assert len(trace[0]["new_passages"]) == 6 and extra["passages_held"] == len(held) <= 15
    assert [h["title"] for h in extra["retrieval"]["hits"]] == [x for t in trace[:3] for x in t["new_titles"]]
    # each step's prompt: every passage held so far, the question, the chain so far after "A:"
    prompts = [r["messages"][0]["content"] for r in script.requests]
    assert len(prompts) == 3 and all(len(r["messages"]) == 1 for r in script.requests)
    assert prompts[0].endswith(f"Q: {Q0}\nA: ")
    assert prompts[1].endswith(f"Q: {Q0}\nA: {replies[0]}")
    assert prompts[2].endswith(f"Q: {Q0}\nA: {replies[0]} {replies[1]}")
    held_before = [len(trace[0]["new_passages"])]
    held_before += [held_before[-1] + len(trace[1]["new_passages"]), len(held)]
    for prompt, n, t in zip(prompts, held_before, trace[1:]):
        assert prompt.count("Wikipedia Title: ") == EXEMPLAR_TITLES + n and t["passages_shown"] == n
    for title in trace[1]["new_titles"]:
        assert f"Wikipedia Title: {title}\n" in prompts[1]
    # the transcript: each step's request and reply
    assert [m["role"] for m in sample["messages"]] == ["user", "assistant"] * 3
    assert [m["content"] for m in sample["messages"][1::2]] == replies
    titles = {h["title"].casefold() for h in extra["retrieval"]["hits"]}
    recall = extra["evidence_recall"]
    assert recall["needed"] == ["Scott Derrickson", "Ed Wood"] and recall["found"] == [
        t for t in recall["needed"] if t.casefold() in titles
    ]
    agent = results["agent"]
    assert (
        agent["name"] == "ircot" and results["setting"] == "retrieve-read" and agent["records"] == ["evidence_recall", "trace"]
    )
    assert {k: agent["knobs"][k] for k in ("retrieval_k", "max_passages", "max_steps", "max_passage_words", "passage_kind")} == {
        "retrieval_k": 6, "max_passages": 15, "max_steps": 10, "max_passage_words": 350, "passage_kind": "words100"}  # fmt: skip
    assert agent["prompt_template"] == "prompts/ircot.txt" and agent["retrieval_k_default"]["value"] == 6
    assert results["retrieval"]["steps_mean"] == 3 and results["retrieval"]["evidence_recall_n"] == 1


def test_answer_on_the_first_step_with_trailing_text(scripted, indexed, tmp_path):
    reply = "So the answer is: Chief of Protocol. She was also an ambassador.\n\nQ: Who directed Kiss and Tell?\nA: x"
    model, script = scripted("ircot-first", [reply])
    sample, _ = _run(model, indexed, tmp_path / "run", sample_id="hotpot-dev-001")
    extra = sample["extra"]
    assert sample["answer"] == "Chief of Protocol" and sample["outcome"] == "answered"
    assert len(script.requests) == 1 and extra["steps"] == 1
    assert extra["chain"] == ["So the answer is: Chief of Protocol."]
    assert len(extra["trace"]) == 2 and "query" not in extra["trace"][1]  # nothing retrieved after the answer


def test_max_steps_without_an_answer(scripted, indexed, tmp_path):
    replies = ["Scott Derrickson is an American director.", "Ed Wood was an American filmmaker."]
    model, script = scripted("ircot-max", replies)
    sample, results = _run(model, indexed, tmp_path / "run", "--agent-arg", "max_steps=2", rc=4)
    extra = sample["extra"]
    assert sample["answer"] is None and sample["outcome"] == "max_steps" and results["outcomes"]["max_steps"] == 1
    assert len(script.requests) == extra["steps"] == 2 and extra["chain"] == replies
    assert "query" in extra["trace"][1] and "query" not in extra["trace"][2]  # the last sentence retrieves nothing


def test_duplicates_skipped_and_total_capped(scripted, indexed, tmp_path):
    # the first sentence is the question again: the same passages come back, none is new
    replies = [Q0, "Ed Wood was an American filmmaker and actor.", "Tyler Bates composed music for Scott Derrickson."]
    model, _ = scripted("ircot-cap", replies)
    sample, _ = _run(model, indexed, tmp_path / "run", "--agent-arg", "retrieval_k=3", "--agent-arg", "max_passages=4",
                     "--agent-arg", "max_steps=3", rc=4)  # fmt: skip
    extra, trace = sample["extra"], sample["extra"]["trace"]
    assert trace[1]["query"] == Q0 and trace[1]["retrieved"] == 3
    assert trace[1]["new_passages"] == [] and trace[1]["over_cap"] == 0
    assert extra["passages_held"] == 4 == len({h["passage_id"] for h in extra["retrieval"]["hits"]})
    assert sum(t["over_cap"] for t in trace[:3]) >= 1  # new passages left out once 4 were held
    assert all(t["retrieved"] == 3 for t in trace[:3])


def test_repeated_chain_and_empty_reply(scripted, indexed, tmp_path):
    first = "Scott Derrickson is an American director."
    model, _ = scripted("ircot-repeat", [first, f"{first} Ed Wood was an American filmmaker.", "   "])
    sample, _ = _run(model, indexed, tmp_path / "run", rc=4)
    extra, trace = sample["extra"], sample["extra"]["trace"]
    assert extra["chain"] == [first, "Ed Wood was an American filmmaker."]
    assert trace[2]["repeated_sentences_skipped"] == 1
    # a reply with no new sentence ends the sample: nothing to reason with or retrieve by
    assert sample["outcome"] == "no_sentence" and sample["answer"] is None and trace[3]["sentence"] is None
    assert trace[3]["reply"] == "   " and extra["steps"] == 3


def test_passages_that_do_not_fit_are_left_out_and_recorded(scripted, indexed, tmp_path):
    model, script = scripted("ircot-small", ["Ed Wood was an American filmmaker.", "So the answer is: yes."])
    sample, _ = _run(model, indexed, tmp_path / "run", "--context-size", "900", "--max-tokens", "40")
    trace = sample["extra"]["trace"]
    assert sample["answer"] == "yes"
    for request, t in zip(script.requests, trace[1:]):
        prompt = request["messages"][0]["content"]
        assert len(prompt.split()) <= 900 - 40 - 8  # the scripted model counts words
        assert prompt.count("Wikipedia Title: ") == EXEMPLAR_TITLES + t["passages_shown"]
    assert (
        trace[2].get("cut", 0) >= 1 and trace[2]["passages_shown"] + trace[2]["cut"] == sample["extra"]["passages_held"]
    )
    # not even one passage fits: the sample fails, it is never answered blind
    out = tmp_path / "tiny"
    assert main(["run", "--model", model, "--agent", "ircot", "--dataset", "hotpotqa:dev", "--snapshot", str(indexed), "--search-space", "evidence-only", 
                 "--sample-id", "hotpot-dev-000", "--no-cache", "--out", str(out), "--context-size", "340",
                 "--max-tokens", "40"]) != 0  # fmt: skip
    failure = json.loads((out / "failures.jsonl").read_text().splitlines()[-1])
    assert failure["error_type"] == "no_evidence_packed" and "fits the IRCoT prompt" in failure["error"]


HOSTILE = '</script><img src=x onerror="window.__xss=1"> & "q" <!--'


def test_report_draws_the_steps(scripted, indexed, tmp_path):
    from html_tree import parse

    replies = [f"Scott Derrickson is an American director {HOSTILE}", "Ed Wood was an American filmmaker.",
               "So the answer is: yes."]  # fmt: skip
    model, _ = scripted("ircot-report", replies)
    sample, _ = _run(model, indexed, tmp_path / "run")
    trace = sample["extra"]["trace"]
    assert main(["report", str(tmp_path / "run")]) == 0
    page = parse((tmp_path / "run" / "report.html").read_text())
    assert not page.find_all("img") and len(page.find_all("script")) == 2  # the hostile sentence stayed text
    table = page.find("details", id="t-1").find("table", "ircot-trace")
    assert [th.text() for th in table.find_all("th")] == ["#", "sentence", "query", "new passages", "notes"]
    rows = table.find_all("tr", "step")
    assert [r.attrs["data-step"] for r in rows] == ["0", "1", "2", "3"]

    def cell(row, cls):
        return rows[row].find("td", cls).text()

    assert cell(0, "sentence") == "(the question retrieves)" and cell(0, "query") == Q0
    assert trace[1]["sentence"].startswith("Scott Derrickson is an American director </script><img")
    for i, t in enumerate(trace[:3]):
        assert cell(i, "new-titles") == f"{len(t['new_titles'])}: {', '.join(t['new_titles'])}"
        if i:
            assert cell(i, "sentence") == cell(i, "query") == t["sentence"]  # a sentence retrieves with itself
    assert cell(3, "sentence") == "So the answer is: yes." and cell(3, "query") == ""
    assert "answer: yes" in rows[3].text()


# ------------------------------------------------------------------ the real local model
@pytest.mark.slow
def test_ircot_smollm2_two_questions(indexed, tmp_path):
    """SmolLM2-135M over two HotpotQA questions: each step is one sentence of its reply, retrieving
    more passages until an answer or max_steps; the trace, the held passages and the records agree."""
    out = tmp_path / "ircot"
    proc = run_harness(
        "run", "--agent", "ircot", "--model", "local/smollm2", "--dataset", "hotpotqa:dev", "--snapshot", str(indexed), "--search-space", "evidence-only", 
        "--limit", "2", "--max-tokens", "32", "--n-threads", "2", "--agent-arg", "max_steps=3",
        "--agent-arg", "retrieval_k=3", "--no-cache", "--out", str(out),
    )  # fmt: skip
    assert_ran(proc, out)  # 0, or 4 where the tiny model never answered
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == 2
    for s in samples:
        extra, trace = s["extra"], s["extra"]["trace"]
        assert s["outcome"] in ("answered", "max_steps", "no_sentence", "context_full")
        assert trace[0]["query"] == s["question"] and 1 <= extra["steps"] <= 3
        assert len(trace) == extra["steps"] + 1 and len(s["messages"]) == 2 * extra["steps"]
        assert extra["chain"] == [t["sentence"] for t in trace[1:] if t["sentence"] is not None]
        held = [h["passage_id"] for h in extra["retrieval"]["hits"]]
        assert held == [p for t in trace for p in t.get("new_passages", [])] and len(set(held)) == len(held) <= 15
        for t in trace[1:]:
            if "query" in t:
                assert t["query"] == t["sentence"] and t["retrieved"] <= 3
        for request, t in zip(s["messages"][::2], trace[1:]):
            assert request["content"].count("Wikipedia Title: ") == EXEMPLAR_TITLES + t["passages_shown"]
        if s["outcome"] == "answered":
            assert s["answer"] == trace[-1]["answer"]
        else:
            assert s["answer"] is None
        assert set(extra["evidence_recall"]) == {"needed", "found", "recall", "returned", "relevant"}
    results = json.loads((out / "results.json").read_text())
    assert results["agent"]["name"] == "ircot" and results["agent"]["records"] == ["evidence_recall", "trace"]
    assert results["retrieval"]["evidence_recall_n"] == 2 and "steps_mean" in results["retrieval"]
