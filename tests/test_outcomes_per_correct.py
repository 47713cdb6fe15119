"""Issue 42: ``outcomes`` (DeepSearchQA's outcome categories of a list answer, WebDetective's evidence
use) and ``per-correct`` (cost, tokens, model calls and searches per correct answer), on the real
QAMPARI, QUEST, FanOutQA and HotpotQA questions shipped with the harness; a scripted open-book run
for the path through run, re-scoring, compare, leaderboard and report."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import math
import random

import pytest

import harness
from harness.analysis.compare import compare_runs, load_run
from harness.analysis.leaderboard import build_leaderboard
from harness.analysis.report import write_report
from harness.datasets import load_dataset
from harness.errors import ConfigError
from harness.execution.config import build_config
from harness.execution.record import results_dict
from harness.execution.runner import Run
from harness.models.scripted import register_script, unregister_script
from harness.scoring.gold import gold_text
from harness.scoring.metrics import ScoringOptions, check_metrics, score_answers
from harness.scoring.outcome_metrics import list_outcome

QAMPARI = load_dataset("qampari")
QUEST = load_dataset("quest:train-sample")
FANOUT = load_dataset("fanoutqa:dev")
HOTPOT = load_dataset("hotpotqa:dev")


def dsqa_official(correctness_details: list[bool], excessive_answers: list[str]) -> str:
    """DeepSearchQA's starter-code ``calculate_metrics`` (howard-yen/simple-evals@fa4969cf
    deepsearchqa_eval.py), restated: its three flags, and partially correct as what none of them is."""
    num_correct = sum(correctness_details)
    has_expected = bool(correctness_details)
    all_expected_correct = has_expected and num_correct == len(correctness_details)
    fully_incorrect = has_expected and num_correct == 0
    has_excessive = bool(excessive_answers)
    correct_with_excessive = has_excessive and (all_expected_correct or not has_expected)
    all_correct = (all_expected_correct or not has_expected) and not has_excessive
    flags = [all_correct, correct_with_excessive, fully_incorrect]
    assert sum(flags) <= 1  # disjoint, as the paper's four categories
    if all_correct:
        return "fully_correct"
    if correct_with_excessive:
        return "correct_with_extraneous"
    return "incorrect" if fully_incorrect else "partially_correct"


def test_categories_equal_the_starter_code_on_every_small_case():
    for n_gold, n_extra in itertools.product(range(5), range(3)):
        for n_found in range(n_gold + 1):
            details = [True] * n_found + [False] * (n_gold - n_found)
            assert list_outcome(n_gold, n_found, n_extra) == dsqa_official(details, ["x"] * n_extra), (n_gold, n_found, n_extra)


def names(q):
    return [a["answer_text"] for a in q.answer]


def test_qampari_answers_fall_in_each_category_with_wilson_intervals():
    qs = QAMPARI.samples[:6]
    answers = [
        {"id": qs[0].id, "answer": "\n".join(names(qs[0]))},  # every item
        {"id": qs[1].id, "answer": "\n".join([*names(qs[1]), "Zzyzx Nothing"])},  # padded
        {"id": qs[2].id, "answer": names(qs[2])[0]},  # stopped early
        {"id": qs[3].id, "answer": "Zzyzx Nothing"},  # nothing right
        {"id": qs[4].id, "answer": "\n".join([names(qs[4])[0], "Zzyzx", names(qs[4])[0].upper()])},  # some, and extra
    ]  # qs[5]: unanswered
    s = score_answers(QAMPARI, qs, answers, ["set-f1", "outcomes"])
    raw = {r["question_id"]: r["outcomes"] for r in s["raw"]}
    assert [raw[q.id]["category"] for q in qs] == [
        "fully_correct", "correct_with_extraneous", "partially_correct", "incorrect", "partially_correct", "incorrect",
    ]  # fmt: skip
    # a gold item named twice (case apart) is one item found, not an extraneous one
    assert (raw[qs[4].id]["n_found"], raw[qs[4].id]["n_extraneous"]) == (1, 1)
    assert s["outcomes"] == {"fully_correct": 1 / 6, "partially_correct": 2 / 6, "correct_with_extraneous": 1 / 6,
                             "incorrect": 2 / 6}  # fmt: skip
    # fully correct and padded are both recall 1 for set-f1: the categories tell them apart
    assert [r["set-f1"]["recall"] for r in s["raw"][:2]] == [1.0, 1.0]
    interval = s["uncertainty"]["outcomes.fully_correct"]
    assert interval["method"] == "wilson" and interval["kind"] == "share" and interval["ci95"][0] < 1 / 6 < interval["ci95"][1]
    info = s["meta"]["metric_info"]["outcomes"]
    assert info["matcher"] == "set-f1 item matching" and info["correct"] == "set-f1:f1>=0.5"  # QAMPARI's own (auto)
    assert info["correct_scored"] == "read from this scoring's set-f1"  # not scored a second time


def test_quest_titles_with_its_own_matcher_and_its_options():
    q = next(s for s in QUEST.samples if len(s.answer) >= 3)
    gold = list(q.answer)
    answer = "\n".join([f"- {gold[0]}", gold[1], "Not A Real Title"])
    exact = score_answers(QUEST, [q], [{"id": q.id, "answer": answer}], ["outcomes"],
                          options=ScoringOptions(metric_options={"outcomes": {"matcher": "quest"}}))  # fmt: skip
    row = exact["raw"][0]["outcomes"]
    # QUEST's exact titles: "- X" is no title, so one found and two extraneous
    assert (row["n_gold"], row["n_found"], row["n_extraneous"]) == (len(set(gold)), 1, 2)
    light = score_answers(QUEST, [q], [{"id": q.id, "answer": answer}], ["quest", "outcomes"],
                          options=ScoringOptions(metric_options={"outcomes": {"matcher": "quest"}, "quest": {"light": True}}))  # fmt: skip
    row = light["raw"][0]["outcomes"]
    assert (row["n_found"], row["n_extraneous"], row["category"]) == (2, 1, "partially_correct")
    assert "light" in light["meta"]["metric_info"]["outcomes"]["matcher"]


def test_fanoutqa_dict_answers_are_items_as_set_f1_reads_them():
    q = next(s for s in FANOUT.samples if isinstance(s.answer, dict) and len(s.answer) >= 2)
    lines = [f"{k}: {v}" for k, v in q.answer.items()]
    s = score_answers(FANOUT, [q] * 1, [{"id": q.id, "answer": "\n".join(lines)}], ["set-f1", "outcomes"])
    row = s["raw"][0]
    assert row["set-f1"]["recall"] == 1.0 and row["outcomes"]["category"] == "fully_correct"


def hotpot_row(q, found_all: bool, outcome: str = "answered", answer: str | None = None, **fields):
    needed = list(q.needed_titles)
    found = needed if found_all else needed[:1]
    evidence = {"needed": needed, "found": found, "recall": len(found) / len(needed), "returned": found, "relevant": found}
    return {"id": q.id, "status": "ok", "answer": answer, "outcome": outcome, "extra": {"evidence_recall": evidence}, **fields}


def test_evidence_use_from_rows_refusal_first_then_found_and_correct():
    qs = HOTPOT.samples[:6]
    rows = {
        qs[0].id: hotpot_row(qs[0], True, answer=qs[0].answer),  # found, used
        qs[1].id: hotpot_row(qs[1], True, answer="Zzyzx"),  # found, not used
        qs[2].id: hotpot_row(qs[2], True, outcome="max_rounds"),  # found, ended without an answer
        qs[3].id: hotpot_row(qs[3], False, answer=qs[3].answer),  # not found (a right answer all the same)
        qs[4].id: hotpot_row(qs[4], True, outcome="refused", answer="I can't help with that."),
        qs[5].id: hotpot_row(qs[5], False, answer="Zzyzx"),
    }
    answers = [{"id": k, "answer": r["answer"]} for k, r in rows.items() if r["answer"] is not None]
    s = score_answers(HOTPOT, qs, answers, ["em-f1", "outcomes"], sample_rows=rows)
    used = {r["question_id"]: r["outcomes"]["evidence_use"] for r in s["raw"]}
    category = {qid: next(k for k, v in u.items() if v == 1.0) for qid, u in used.items()}
    assert [category[q.id] for q in qs] == ["found_used", "found_not_used", "found_not_used", "not_found", "refused",
                                            "not_found"]  # fmt: skip
    agg = s["outcomes"]["evidence_use"]
    assert agg == {"found_used": 1 / 6, "found_not_used": 2 / 6, "not_found": 2 / 6, "refused": 1 / 6,
                   "utilisation": 1 / 3}  # fmt: skip
    errors = s["uncertainty"]
    assert errors["outcomes.evidence_use.refused"]["method"] == "wilson"
    assert errors["outcomes.evidence_use.utilisation"]["method"].startswith("bootstrap")
    # bare generations: no rows, no evidence use; the list categories still
    bare = score_answers(HOTPOT, qs, answers, ["outcomes"])
    assert "evidence_use" not in bare["outcomes"] and "fully_correct" in bare["outcomes"]


def spend_row(q, correct: bool, tokens: int, calls: int, cost: float | None, searches: int | None):
    extra = {} if searches is None else {"searches": [{"query": "q"}] * searches}
    return {"id": q.id, "status": "ok", "answer": q.answer if correct else "Zzyzx", "model_calls": calls,
            "usage": {"prompt_tokens": tokens - 10, "completion_tokens": 10}, "cost_usd": cost, "extra": extra}  # fmt: skip


def test_per_correct_is_a_ratio_of_sums_with_a_bootstrap_interval():
    qs = HOTPOT.samples[:8]
    plan = [(True, 100, 1, 0.01, 2), (False, 300, 3, 0.03, 6), (True, 200, 2, 0.02, 4), (False, 100, 1, 0.01, 0),
            (True, 100, 1, 0.01, 2), (False, 50, 1, 0.005, 1), (True, 150, 2, 0.015, 3)]  # fmt: skip
    rows = {q.id: spend_row(q, *p) for q, p in zip(qs, plan)}  # qs[7]: failed, no row
    answers = [{"id": k, "answer": r["answer"]} for k, r in rows.items()]
    options = ScoringOptions(metric_options={"per-correct": {"correct": "em-f1:em==1"}})
    s = score_answers(HOTPOT, qs, answers, ["em-f1", "per-correct"], options=options, sample_rows=rows)
    agg = s["per-correct"]
    assert agg["n_correct"] == 4 and agg["correct"] == pytest.approx(4 / 7)
    assert agg["tokens"] == pytest.approx(1000 / 4) and agg["model_calls"] == pytest.approx(11 / 4)
    assert agg["cost"] == pytest.approx(0.1 / 4) and agg["searches"] == pytest.approx(18 / 4)
    cost = s["uncertainty"]["per-correct.cost"]
    assert cost["method"] == "bootstrap-percentile" and cost["ci95"][0] < 0.1 / 4 < cost["ci95"][1]
    assert s["uncertainty"]["per-correct.correct"]["method"] == "wilson"
    assert "per-correct.n_correct" not in s["uncertainty"]  # a number of things: no interval
    info = s["meta"]["metric_info"]["per-correct"]
    assert info["correct"] == "em-f1:em==1" and s["meta"]["options"]["metric_options"]["per-correct"]["correct"] == "em-f1:em==1"
    # an unpriced row: no cost per correct answer, never a guess; the rest still
    rows[qs[0].id]["cost_usd"] = None
    s = score_answers(HOTPOT, qs, answers, ["per-correct"], options=options, sample_rows=rows)
    assert s["per-correct"]["cost"] is None and s["per-correct"]["tokens"] == pytest.approx(250)
    # no correct answer: null, never infinity
    wrong = [{"id": a["id"], "answer": "Zzyzx"} for a in answers]
    s = score_answers(HOTPOT, qs, wrong, ["per-correct"], options=options, sample_rows=rows)
    assert s["per-correct"]["tokens"] is None and s["per-correct"]["n_correct"] == 0


def test_the_chosen_rule_is_checked_before_any_model_call():
    qs = HOTPOT.samples[:2]

    def check(rule, metric="per-correct"):
        check_metrics(HOTPOT, qs, [metric], ScoringOptions(metric_options={metric: {"correct": rule}}))

    for rule in ("fanoutqa-string:acc==1", "fanoutqa-string:acc.strict", "set-f1:f1>=0.5", "em-f1:em", "auto"):
        check(rule)
    for rule, said in (("llm-judge:llm_judge", "needs --judge"), ("nope:x", "unknown metric 'nope'"),
                       ("outcomes:fully_correct", "cannot say which answers are correct"),
                       ("agent:searches", "cannot say which answers are correct"),
                       ("set-f1:f1", "no 0/1 per question"), ("fanoutqa-string:acc.loose", "no 0/1 per question"),
                       ("set-f1:f2>=0.5", "no per-question number 'f2>=0.5'"),
                       ("em-f1", "expected auto or metric:leaf")):  # fmt: skip
        with pytest.raises(ConfigError, match=said):
            check(rule)
    with pytest.raises(ConfigError, match="calibration.correct=set-f1:f1: set-f1's f1 is no 0/1"):
        check_metrics(HOTPOT, qs, ["calibration"], ScoringOptions(confidence=True, metric_options={"calibration": {"correct": "set-f1:f1"}}))
    # a dataset without a rule of its own: auto is refused, a named rule is not
    ruleless = dataclasses.replace(HOTPOT, correct=None)
    with pytest.raises(ConfigError, match="declares no rule of its own"):
        check_metrics(ruleless, qs, ["outcomes"], ScoringOptions())
    check_metrics(ruleless, qs, ["outcomes"], ScoringOptions(metric_options={"outcomes": {"correct": "em-f1:em"}}))


def test_auto_is_each_datasets_own_rule_read_from_the_same_scoring():
    """auto on each shipped dataset: the share correct equals the dataset's own number where the
    scoring has it (FanOutQA's strict accuracy, QAMPARI's f1_ge_0.5, HotpotQA's EM), and the rule's
    metric is read, not scored again; without it there, it is scored for the verdicts alike."""
    rng = random.Random(5)
    for dataset, metric, leaf, rule in ((FANOUT, "fanoutqa-string", "acc.strict", "fanoutqa-string:acc==1"),
                                        (QAMPARI, "set-f1", "f1_ge_0.5", "set-f1:f1>=0.5"),
                                        (HOTPOT, "em-f1", "em", "em-f1:em")):  # fmt: skip
        qs = dataset.samples[:40]
        answers = [{"id": q.id, "answer": gold_text(q.answer) if rng.random() < 0.5 else "Zzyzx"} for q in qs]
        rows = {q.id: spend_row(q, True, 10, 1, None, 1) | {"answer": a["answer"]} for q, a in zip(qs, answers)}
        both = score_answers(dataset, qs, answers, ["per-correct", metric], sample_rows=rows)
        assert 0 < both["per-correct"]["correct"] < 1
        assert both["per-correct"]["correct"] == pytest.approx(leaf_of(both[metric], leaf)), dataset.info.name
        info = both["meta"]["metric_info"]["per-correct"]
        assert (info["correct"], info["correct_scored"]) == (rule, f"read from this scoring's {metric}")
        assert info["correct_rule"].startswith("auto: ")
        alone = score_answers(dataset, qs, answers, ["per-correct"], sample_rows=rows)
        assert alone["per-correct"] == both["per-correct"]
        assert alone["meta"]["metric_info"]["per-correct"]["correct_scored"] == f"{metric} scored for it"
    # QUEST: F1 >= 0.5 on its exact titles (every title right; one title of many wrong); TopiOCQA: its EM
    quest = [q for q in QUEST.samples if len(set(q.answer)) >= 3][:2]
    topiocqa = load_dataset("topiocqa:dev")
    turns = topiocqa.samples[:2]
    for dataset, qs, given, rule in ((QUEST, quest, ["\n".join(quest[0].answer), quest[1].answer[0]], "quest:f1>=0.5"),
                                     (topiocqa, turns, [turns[0].answer, "Zzyzx"], "topiocqa:em>=0.5")):  # fmt: skip
        rows = {q.id: spend_row(q, True, 10, 1, None, 1) | {"answer": a} for q, a in zip(qs, given)}
        s = score_answers(dataset, qs, [{"id": q.id, "answer": a} for q, a in zip(qs, given)], ["per-correct"], sample_rows=rows)
        assert [r["per-correct"]["correct"] for r in s["raw"]] == [1.0, 0.0]
        assert s["meta"]["metric_info"]["per-correct"]["correct"] == rule


def test_every_shipped_datasets_rule_is_in_the_docs_table():
    from pathlib import Path

    from harness.datasets import DATASETS

    rows = [line for line in (Path(__file__).parents[1] / "docs" / "metrics.md").read_text().splitlines()
            if line.startswith("| ") and "`auto`" not in line]  # fmt: skip
    for name in DATASETS.names():
        rule = DATASETS.get(name).correct
        assert rule, name  # every shipped dataset has its own
        assert any(line.lower().startswith(f"| {name} | `{rule}` |") for line in rows), (name, rule)


def leaf_of(aggregate, path):
    for part in path.split(".") if path != "f1_ge_0.5" else [path]:
        aggregate = aggregate[part]
    return aggregate


# a scripted open-book run over the real snapshot ----------------------------------------------------

GOLD = {s.question: (i, s) for i, s in enumerate(HOTPOT.samples)}


def _script(shift: int):
    """Question i searches both gold pages and answers right, searches one and answers wrong, or
    searches none and answers right (by (i + shift) % 3)."""

    def script(messages, tools, tool_choice, params):
        i, sample = next(v for q, v in GOLD.items() if q in messages[0]["content"])
        kind = (i + shift) % 3
        plan = list(sample.needed_titles) if kind == 0 else [sample.needed_titles[0]] if kind == 1 else []
        done = sum(1 for m in messages if m["role"] == "assistant")
        if done < len(plan):
            return {"content": "", "tool_calls": [{"name": "search", "arguments": {"query": plan[done]}}]}
        return "Zzyzx" if kind == 1 else sample.answer

    return script


def test_open_book_runs_record_rescore_compare_and_show_both_metrics(hotpot_snapshot, tmp_path):
    metrics = ["em-f1", "agent", "outcomes", "per-correct"]
    out = {}
    for name, shift in (("o42-a", 0), ("o42-b", 1)):
        register_script(name, _script(shift))
        try:
            options = {"model": f"scripted/{name}", "dataset": "hotpotqa:dev", "setting": "open-book", "limit": 6,
                       "out": str(tmp_path / name), "cache": False, "snapshot": str(hotpot_snapshot),
                       "search_space": "evidence-only", "metrics": metrics,
                       "metric_options": {"per-correct": {"correct": "em-f1:em==1"}}}  # fmt: skip
            out[name] = results_dict(asyncio.run(Run(build_config(options), show_progress=False).execute()))
        finally:
            unregister_script(name)
    scores = out["o42-a"]["scores"]
    assert scores["outcomes"]["evidence_use"]["found_used"] == pytest.approx(2 / 6)
    assert scores["outcomes"]["evidence_use"]["not_found"] == pytest.approx(4 / 6)
    assert scores["per-correct"]["n_correct"] == 4
    assert scores["per-correct"]["searches"] == pytest.approx(scores["agent"]["searches"] * 6 / 4)
    assert scores["per-correct"]["tokens"] == pytest.approx(scores["agent"]["tokens"] * 6 / 4)
    # harness score RUN_DIR: the same numbers from samples.jsonl, no model call
    assert harness.score(str(tmp_path / "o42-a"), save=False).as_dict() == scores
    compared = compare_runs([load_run(tmp_path / "o42-a"), load_run(tmp_path / "o42-b")])
    tokens = compared["metrics"]["per-correct.tokens"]
    assert tokens["kind"] == "aggregate" and tokens["diffs"][0]["ci95"] is not None
    assert compared["metrics"]["outcomes.evidence_use.found_used"]["kind"] == "mean"
    board = build_leaderboard(tmp_path)
    assert {"per-correct.tokens", "outcomes.fully_correct", "outcomes.evidence_use.not_found"} <= set(board.metrics)
    from harness.analysis.table import build_table, table_grid

    table = table_grid(build_table([tmp_path / "o42-a", tmp_path / "o42-b"], ["per-correct", "outcomes"]))
    assert "Tokens per correct" in str(table) and "Fully correct" in str(table)
    html = write_report(tmp_path / "o42-a").read_text()
    assert "per-correct.tokens" in html and "outcomes.evidence_use.found_used" in html
    assert not math.isnan(scores["per-correct"]["tokens"])
