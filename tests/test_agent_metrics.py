"""How an agent worked, as metrics (issue 24): the ``agent`` namespace from sample rows (evidence
recall/precision, searches, rounds, tokens, cost, FanOutQA's hops), on by default for strategies that
search or retrieve and re-scored identically by ``harness score RUN_DIR``; reasoning removed before
scoring (``strip_reasoning``)."""

from __future__ import annotations

import asyncio
import json

import pytest

import harness
from harness.cli import main
from harness.analysis.compare import compare_runs, load_run
from harness.analysis.leaderboard import build_leaderboard, format_markdown
from harness.analysis.report import write_report
from harness.datasets import load_dataset
from harness.execution.config import build_config
from harness.execution.runner import Run
from harness.models.base import ModelResponse
from harness.models.openai_compat import clean_messages, response_from_completion
from harness.models.scripted import register_script, unregister_script
from harness.scoring.agent_metrics import agent_values
from harness.scoring.fanoutqa_metrics import answer_in_text
from harness.scoring.metrics import ScoringOptions, score_answers
from harness.scoring.reasoning import strip_reasoning
from harness.execution.record import results_dict

HOTPOT = load_dataset("hotpotqa:dev")
FANOUT = load_dataset("fanoutqa:dev")


def row(qid, answer="x", recall=None, needed=(), found=(), returned=None, relevant=(), searches=None, **fields):
    extra = {}
    if recall is not None or needed:
        extra["evidence_recall"] = {"needed": list(needed), "found": list(found), "recall": recall}
        if returned is not None:
            extra["evidence_recall"].update(returned=list(returned), relevant=list(relevant))
    if searches is not None:
        extra["searches"] = [{"query": q, "found_title": q} for q in searches]
    return {"id": qid, "status": "ok", "answer": answer, "extra": extra, **fields}


# reasoning -------------------------------------------------------------------------------------------


def test_strip_reasoning_blocks_orphans_and_unclosed():
    assert strip_reasoning("<think>it is not no</think>yes") == ("yes", "stripped")
    assert strip_reasoning("<THINK>a</THINK>\n<reasoning>b</reasoning>  Paris ") == ("Paris", "stripped")
    assert strip_reasoning("the template opened it</think>\nyes") == ("yes", "stripped")
    assert strip_reasoning("<think>cut by max_tokens while thinking") == ("", "unclosed")
    assert strip_reasoning("yes <think>and then") == ("yes", "unclosed")
    for untouched in ("yes", "x < y and <b>bold</b>", "", None, 3):
        assert strip_reasoning(untouched) == (untouched, None)


def test_think_block_scores_like_the_bare_answer_and_as_written_with_the_knob_off():
    q = HOTPOT.samples[0]  # gold "yes"
    assert q.answer == "yes"
    thought = "<think>perhaps no, perhaps not: no</think>yes"
    metrics = ["fanoutqa-string", "em-f1"]

    def scored(answer, **options):
        s = score_answers(HOTPOT, [q], [{"id": q.id, "answer": answer}], metrics, options=ScoringOptions(**options))
        return {m: s[m] for m in metrics}, s["meta"]

    bare, _ = scored("yes")
    stripped, meta = scored(thought)
    assert stripped == bare and bare["em-f1"]["em"] == 1.0
    assert meta["options"]["strip_reasoning"] is True and meta["reasoning_removed"] == {"n_answers": 1, "unclosed": []}
    # knob off: the text as written, as before the knob (em 0, a lower ROUGE)
    as_written, meta = scored(thought, strip_reasoning=False)
    assert as_written["em-f1"]["em"] == 0.0 and meta["options"]["strip_reasoning"] is False
    assert as_written["fanoutqa-string"]["rouge"]["rougeL"]["fscore"] < bare["fanoutqa-string"]["rouge"]["rougeL"]["fscore"]
    assert meta["reasoning_removed"] == {"n_answers": 0, "unclosed": []}
    # an unclosed block: all reasoning, the empty answer (answered, wrong), and said so
    unclosed, meta = scored("<think>yes, I think")
    assert unclosed["em-f1"]["em"] == 0.0 and meta["reasoning_removed"]["unclosed"] == [q.id]


def test_streamed_values_strip_reasoning_too():
    from harness.scoring.metrics import score_one

    q = HOTPOT.samples[0]
    one = score_one(q, "<think>no</think>yes", ["em-f1"], ScoringOptions())
    assert one["em-f1"]["raw"]["em"] == 1.0
    assert score_one(q, "<think>no</think>yes", ["em-f1"], ScoringOptions(strip_reasoning=False))["em-f1"]["raw"]["em"] == 0.0


def test_reasoning_content_is_kept_in_the_transcript_never_in_the_answer_or_sent_back():
    reply = {
        "choices": [{"message": {"content": "yes", "reasoning_content": "both are American"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 4},
    }
    response = response_from_completion(reply)
    assert response.content == "yes" and response.reasoning == "both are American"
    message = response.as_message()
    assert message == {"role": "assistant", "content": "yes", "reasoning_content": "both are American"}
    assert clean_messages([message]) == [{"role": "assistant", "content": "yes"}]
    assert ModelResponse(content="yes").as_message() == {"role": "assistant", "content": "yes"}
    # a shape of it this parser does not know is no fault
    reply["choices"][0]["message"] = {"content": "yes", "reasoning": {"effort": "high"}}
    assert response_from_completion(reply).reasoning is None


# per-question values on crafted rows --------------------------------------------------------------


def test_agent_values_of_crafted_rows():
    q = HOTPOT.samples[0]
    gold = ["Scott Derrickson", "Ed Wood"]
    worked = row(
        q.id, recall=0.5, needed=gold, found=["Ed Wood"], returned=["Ed Wood", "Shirley Temple", "Animorphs"],
        relevant=["Ed Wood"], searches=["Ed Wood", "Shirley Temple", "Animorphs", "Ed Wood"],
        model_calls=4, cache_hits=1, usage={"prompt_tokens": 100, "completion_tokens": 20}, cost_usd=0.003,
    )  # fmt: skip
    assert agent_values(q, "yes", worked) == {
        "evidence_recall": 0.5,
        "evidence_precision": 1 / 3,  # of the 3 distinct pages returned, 1 is gold
        "searches": 4,
        "rounds": 5,  # sent + answered from the cache
        "tokens": 120,
        "cost": 0.003,
    }
    # no page returned: recall 0 and precision 0 (not left out); an unpriced model has no cost
    idle = row(q.id, recall=0.0, needed=gold, returned=[], searches=[], model_calls=1, usage={"prompt_tokens": 9})
    expected = {"evidence_recall": 0.0, "evidence_precision": 0.0, "searches": 0, "rounds": 1, "tokens": 9}
    assert agent_values(q, "yes", idle) == expected
    # no gold pages: neither recall nor precision; a strategy that records no searches: no searches
    assert agent_values(q, "yes", row(q.id, model_calls=1)) == {"rounds": 1, "tokens": 0}
    # an older row (no pages returned recorded): recall only
    old = row(q.id, recall=1.0, needed=gold, found=gold)
    assert agent_values(q, "yes", old) == {"evidence_recall": 1.0, "rounds": 0, "tokens": 0}
    assert agent_values(q, "yes", None) == {}  # bare generations: nothing about the work


def test_agent_scores_means_intervals_and_questions_without_a_row():
    qs = HOTPOT.samples[:4]
    gold = lambda q: q.needed_titles  # noqa: E731
    rows = {
        qs[0].id: row(qs[0].id, recall=1.0, needed=gold(qs[0]), found=gold(qs[0]), returned=gold(qs[0]),
                      relevant=gold(qs[0]), searches=gold(qs[0]), model_calls=3, usage={"prompt_tokens": 30}),
        qs[1].id: row(qs[1].id, recall=0.5, needed=gold(qs[1]), found=gold(qs[1])[:1], returned=[gold(qs[1])[0], "X"],
                      relevant=gold(qs[1])[:1], searches=[gold(qs[1])[0], "X"], model_calls=3, usage={"prompt_tokens": 50}),
        # finished unanswered (max_rounds): its work still counts
        qs[2].id: row(qs[2].id, answer=None, recall=0.0, needed=gold(qs[2]), returned=[], searches=[], model_calls=1,
                      usage={"prompt_tokens": 10}),
    }  # fmt: skip  (qs[3]: failed, no row)
    answers = [{"id": k, "answer": r["answer"]} for k, r in rows.items() if r["answer"] is not None]
    scores = score_answers(HOTPOT, qs, answers, ["em-f1", "agent"], sample_rows=rows)
    agent = scores["agent"]
    assert agent["evidence_recall"] == pytest.approx(0.5)  # (1 + 0.5 + 0) / 3: the question without a row left out
    assert agent["evidence_precision"] == pytest.approx(0.5)  # (1 + 0.5 + 0) / 3: no page returned is 0
    assert agent["searches"] == pytest.approx(4 / 3) and agent["rounds"] == pytest.approx(7 / 3)
    assert agent["tokens"] == pytest.approx(30.0)
    by_q = {r["question_id"]: r for r in scores["raw"]}
    assert "agent" not in by_q[qs[3].id] and by_q[qs[3].id]["em-f1"]["em"] == 0.0
    errors = scores["uncertainty"]
    recall = errors["agent.evidence_recall"]
    assert recall["method"].startswith("analytic") and recall["n"] == 3 and recall["ci95"][0] < 0.5 < recall["ci95"][1]
    assert errors["agent.tokens"]["method"] == "analytic" and errors["agent.tokens"]["stderr"] > 1  # not a share
    assert errors["agent.evidence_precision"]["method"] == "analytic-clipped"  # bounded in [0, 1], not a share
    # without rows (bare generations) the agent metric has nothing to say on HotpotQA
    bare = score_answers(HOTPOT, qs, answers, ["agent"])
    assert bare["agent"] == {} and all("agent" not in r or r["agent"] == {} for r in bare["raw"])


def test_fanoutqa_hops_retrieved_and_answered():
    q = FANOUT.samples[0]  # the 1998 MLB draft: 6 hops (the picks' page, then each pick's)
    hops = q.raw["decomposition"]
    answer = "Pat Burrell: Right; Mark Mulder: Left"
    found = ["1998 Major League Baseball draft", "Pat Burrell"]
    r = row(q.id, recall=2 / len(q.needed_titles), needed=q.needed_titles, found=found, returned=found, relevant=found)
    values = agent_values(q, answer, r)
    detail = values["hops"]
    assert [h["id"] for h in detail] == [h["id"] for h in hops]
    assert [h["retrieved"] for h in detail] == [True, True, False, False, False, False]
    assert values["hops_retrieved"] == pytest.approx(2 / 6)
    # answered: each hop's answer in the final answer, fanoutqa-string's normalized containment
    expected = [answer_in_text(h["answer"], answer).found for h in hops]
    assert [h["answered"] for h in detail] == expected
    assert expected[0] is False and expected[1] is True  # not all five picks named; "Right" is there
    assert values["hops_answered"] == pytest.approx(sum(expected) / 6)
    # finished without an answer: no hop answered; no evidence record: retrieval unknown
    unanswered = agent_values(q, None, row(q.id, answer=None))
    assert unanswered["hops_answered"] == 0.0 and "hops_retrieved" not in unanswered
    assert {h["retrieved"] for h in unanswered["hops"]} == {None}
    # scored from generations alone: the hops answered still are
    scores = score_answers(FANOUT, [q], [{"id": q.id, "answer": answer}], ["agent"])
    assert scores["agent"]["hops_answered"] == pytest.approx(sum(expected) / 6)


def test_default_metrics_add_agent_only_for_strategies_that_search_or_retrieve():
    from harness.execution.scoring import run_metrics

    assert run_metrics(None, HOTPOT, ("searches", "evidence_recall")) == ["fanoutqa-string", "em-f1", "agent"]
    assert run_metrics(None, HOTPOT, ("evidence_recall", "evidence")) == ["fanoutqa-string", "em-f1", "agent"]
    assert run_metrics(None, HOTPOT, ("evidence",)) is None  # evidence-provided: the dataset's
    assert run_metrics(None, HOTPOT, ()) is None  # closed-book
    assert run_metrics(["em-f1"], HOTPOT, ("searches",)) == ["em-f1"]  # --metrics as given


# a scripted open-book run over the real snapshot ----------------------------------------------------

GOLD = {s.question: (i, s) for i, s in enumerate(HOTPOT.samples)}


def _searcher(shift: int):
    """Question i searches none, one gold page and one other, or both gold pages (by (i + shift) % 3),
    then answers the gold answer after a <think> block."""

    def script(messages, tools, tool_choice, params):
        i, sample = next(v for q, v in GOLD.items() if q in messages[0]["content"])
        kind = (i + shift) % 3
        plan = [] if kind == 0 else [sample.needed_titles[0], "Terry Richardson"] if kind == 1 else sample.needed_titles
        done = sum(1 for m in messages if m["role"] == "assistant")
        if done < len(plan):
            return {"content": "", "tool_calls": [{"name": "search", "arguments": {"query": plan[done]}}]}
        return f"<think>I searched {done} times</think>{sample.answer}"

    return script


@pytest.fixture
def searchers():
    for name, shift in (("agent-a", 0), ("agent-b", 1)):
        register_script(name, _searcher(shift))
    yield
    for name in ("agent-a", "agent-b"):
        unregister_script(name)


def open_book_run(out, script, snapshot, setting="open-book", **extra):
    options = {"model": f"scripted/{script}", "dataset": "hotpotqa:dev", "setting": setting, "limit": 6,
               "out": str(out), "cache": False, "snapshot": str(snapshot), "search_space": "evidence-only",
               **extra}  # fmt: skip
    return results_dict(asyncio.run(Run(build_config(options), show_progress=False).execute()))  # the JSON written


def test_open_book_run_scores_agent_metrics_and_rescores_them_identically(searchers, hotpot_snapshot, tmp_path):
    results = open_book_run(tmp_path / "a", "agent-a", hotpot_snapshot)
    scores = results["scores"]
    assert results["config"]["metrics"] == ["fanoutqa-string", "em-f1", "agent"]  # recorded for re-scoring
    assert scores["meta"]["metrics"] == ["fanoutqa-string", "em-f1", "agent"]
    rows = [json.loads(line) for line in (tmp_path / "a" / "samples.jsonl").read_text().splitlines()]
    by_id = {r["id"]: r for r in rows}
    raw = {r["question_id"]: r["agent"] for r in scores["raw"]}
    for i, sample in enumerate(HOTPOT.samples[:6]):
        expected_recall = [0.0, 0.5, 1.0][i % 3]
        assert raw[sample.id]["evidence_recall"] == expected_recall
        assert raw[sample.id]["searches"] == [0, 2, 2][i % 3]
        assert raw[sample.id]["rounds"] == by_id[sample.id]["model_calls"] == [1, 3, 3][i % 3]
        usage = by_id[sample.id]["usage"]
        assert raw[sample.id]["tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
        assert raw[sample.id]["evidence_precision"] == [0.0, 0.5, 1.0][i % 3]  # nothing returned: 0
        assert by_id[sample.id]["answer"].startswith("<think>")  # kept as written in the row
    assert scores["agent"]["evidence_recall"] == pytest.approx(0.5)
    assert scores["em-f1"]["em"] == 1.0  # every answer right once its <think> block is removed
    recall = scores["uncertainty"]["agent.evidence_recall"]
    assert recall["method"] == "analytic" and recall["n"] == 6 and recall["ci95"][0] < 0.5 < recall["ci95"][1]
    # harness score RUN_DIR: the same numbers from samples.jsonl
    assert harness.score(str(tmp_path / "a"), save=False).as_dict() == scores

    # a second run: compare lists the agent leaves; leaderboard and report show them
    open_book_run(tmp_path / "b", "agent-b", hotpot_snapshot)
    compared = compare_runs([load_run(tmp_path / "a"), load_run(tmp_path / "b")])
    leaves = {k for k in compared["metrics"] if k.startswith("agent.")}
    assert {"agent.evidence_recall", "agent.searches", "agent.rounds", "agent.tokens"} <= leaves
    assert compared["metrics"]["agent.evidence_recall"]["kind"] == "mean"
    assert compared["metrics"]["agent.evidence_precision"]["kind"] == "mean"
    board = build_leaderboard(tmp_path)
    assert {"agent.evidence_recall", "agent.tokens"} <= set(board.metrics) and board.scales["agent.tokens"] == "tokens"
    table = format_markdown(board)
    assert "Evidence recall (0-1)" in table and "Tokens (tokens)" not in table  # run totals have their own column
    html = write_report(tmp_path / "a").read_text()
    assert "agent.evidence_recall (0-1)" in html and "agent.searches (searches)" in html


def test_closed_book_runs_get_no_agent_metrics_and_the_knob_is_recorded(hotpot_snapshot, tmp_path):
    register_script("think-yes", lambda *a: "<think>no</think>yes")
    try:
        closed = open_book_run(tmp_path / "c", "think-yes", hotpot_snapshot, setting="closed-book")
        raw = open_book_run(tmp_path / "r", "think-yes", hotpot_snapshot, setting="closed-book", strip_reasoning=False)
    finally:
        unregister_script("think-yes")
    assert closed["config"]["metrics"] is None and "agent" not in closed["scores"]
    assert closed["config"]["strip_reasoning"] is True and raw["config"]["strip_reasoning"] is False
    assert raw["scores"]["meta"]["options"]["strip_reasoning"] is False
    assert closed["scores"]["em-f1"]["em"] == pytest.approx(1 / 6)  # hotpot-dev-000's gold is "yes"
    assert raw["scores"]["em-f1"]["em"] == 0.0
    # the run directory's own knob is what `harness score RUN_DIR` uses; the flag overrides it
    assert harness.score(str(tmp_path / "r"), save=False).as_dict() == raw["scores"]
    stripped = harness.score(str(tmp_path / "r"), save=False, strip_reasoning=True)
    assert stripped.aggregate("em-f1") == closed["scores"]["em-f1"]
    assert main(["score", str(tmp_path / "c"), "--no-strip-reasoning", "--out", str(tmp_path / "s.json")]) == 0
    rescored = json.loads((tmp_path / "s.json").read_text())
    assert rescored["em-f1"] == raw["scores"]["em-f1"] and rescored["meta"]["options"]["strip_reasoning"] is False


def test_epochs_score_each_epochs_rows():
    from harness.execution.scoring import score_records

    q = HOTPOT.samples[0]
    records = [
        {**row(q.id, "yes", recall=r, needed=q.needed_titles, returned=[], model_calls=calls), "epoch": e}
        for e, r, calls in ((1, 0.0, 1), (2, 1.0, 3))
    ]
    scores = score_records(HOTPOT, [q], records, ["agent"], epochs=2)
    assert scores["agent"]["evidence_recall"] == 0.5 and scores["agent"]["rounds"] == 2.0
    assert [e["agent.rounds"] for e in scores["epochs"]["per_epoch"]] == [1.0, 3.0]
