"""Outcomes are said where the number is: samples that finished without an answer (ReAct at
max_steps, every step unreadable; a refusal) are counted, with why, beside the scores in the console,
the leaderboard, ``harness table``, the report, the data frames and the ablation table, all read from
one typed row (``harness.analysis.row``: "answered" computed once). A run where no sample produced an
answer says so in one line and exits 4, as a run where every request failed does; its answers are
still scored as wrong (the metrics' rule), never hidden. Scripted models through the real HotpotQA
snapshot; about 3 s."""

from __future__ import annotations

import copy
import json

import pytest
from test_anthropic_recorded import REFUSAL_REPLY

from harness.analysis.ablate import _row as ablation_row, format_table
from harness.analysis.grid import render
from harness.analysis.leaderboard import build_leaderboard, format_markdown
from harness.analysis.report import _meta_section, _scores_section
from harness.analysis.row import Outcomes, RunRow
from harness.analysis.table import build_table, table_grid
from harness.cli import main
from harness.datasets import load_dataset
from harness.execution.record import read_results
from harness.models.anthropic_api import from_anthropic_message
from harness.models.scripted import register_script, unregister_script

LOST = "I am not sure yet."  # no Action line: every step unreadable, corrected, asked again
WHY = "max_steps 10; 70 of 70 steps unreadable"
NOTE = f"10 of 10 finished samples ended without an answer ({WHY}): scored as wrong, the metrics' rule for a missing answer"
HOTPOT = load_dataset("hotpotqa:dev").samples


def _index(messages) -> int:
    return next(i for i, s in enumerate(HOTPOT) if s.question in messages[0]["content"])


def half(messages, tools, tool_choice, params):
    """Finish with the gold answer on even questions, unreadable on odd ones (they end at max_steps)."""
    i = _index(messages)
    return f"Thought 1: I know.\nAction 1: Finish[{HOTPOT[i].answer}]" if i % 2 == 0 else LOST


def _react(out, snapshot, name, script, capsys, limit=10):
    register_script(name, script)
    try:
        rc = main(["run", "--model", f"scripted/{name}", "--agent", "react", "--dataset", "hotpotqa:dev", "--snapshot",
                   str(snapshot), "--search-space", "evidence-only", "--limit", str(limit), "--metrics", "em-f1", "--no-cache", "--out", str(out)])  # fmt: skip
    finally:
        unregister_script(name)
    return rc, capsys.readouterr()


def test_no_answer_at_all_is_said_and_exits_4(hotpot_snapshot, tmp_path, capsys):
    """The reproduction: every sample at max_steps, no answer, 70 of 70 steps unreadable. It printed
    ``finished 10/10, failed 0``, zero scores, exit 0."""
    rc, said = _react(tmp_path / "lost", hotpot_snapshot, "outcomes-lost", lambda *_: LOST, capsys)
    assert rc == 4
    out, err = said.out.splitlines(), said.err.splitlines()
    assert out[0] == "finished 10/10, failed 0, answered 0"
    assert err[-1] == f"no sample produced an answer: {NOTE}; exit status 4"
    results = json.loads((tmp_path / "lost" / "results.json").read_text())
    assert results["outcomes"] == {"max_steps": 10} and results["counts"]["finished"] == 10
    assert results["retrieval"]["steps"] == 70 and results["retrieval"]["malformed_steps"] == 70
    # still scored: a missing answer is wrong (0), not n/a, and the scores say they cover 10 questions
    assert results["scores"]["em-f1"]["em"] == 0.0 and results["scores"]["meta"]["n_answered"] == 10
    assert any(line.startswith("  em-f1: em 0.0000") for line in out)


def test_every_reader_says_it_beside_the_numbers(hotpot_snapshot, tmp_path, capsys):
    rc, said = _react(tmp_path / "runs" / "half", hotpot_snapshot, "outcomes-half", half, capsys)
    assert rc == 0  # some answered: the run's numbers stand, the rest said
    half_note = "5 of 10 finished samples ended without an answer (max_steps 5; 35 of 40 steps unreadable): " \
        "scored as wrong, the metrics' rule for a missing answer"  # fmt: skip
    out = said.out.splitlines()
    assert out[0] == "finished 10/10, failed 0, answered 5" and out[-1] == half_note
    _react(tmp_path / "runs" / "lost", hotpot_snapshot, "outcomes-lost", lambda *_: LOST, capsys)
    runs = {name: tmp_path / "runs" / name for name in ("half", "lost")}

    # the one row: answered from results.json's outcomes, scored from the scores
    rows = {name: RunRow.of(read_results(d), d) for name, d in runs.items()}
    assert (rows["half"].answered, rows["half"].scored, rows["half"].failed) == (5, 10, False)
    assert (rows["lost"].answered, rows["lost"].scored, rows["lost"].failed) == (0, 10, False)
    assert rows["half"].headline_value == rows["half"].metrics["em-f1.em"] == 0.5
    assert rows["lost"].metrics["em-f1.em"] == 0.0  # scored as wrong: a value, never hidden as n/a

    # leaderboard: JSON and markdown
    board = build_leaderboard(tmp_path / "runs")
    by_name = {r["path"].rsplit("/", 1)[1]: r for r in board.to_json()["rows"]}  # the JSON rows
    assert by_name["lost"]["n_answered"] == 0 and by_name["lost"]["outcome_note"] == NOTE
    assert by_name["lost"]["outcomes"]["without_answer"] == {"max_steps": 10}
    assert by_name["half"]["n_answered"] == 5 and by_name["half"]["outcome_note"] == half_note
    typed = [(r.answered, r.outcome_note) for r in board.rows]  # the rows it is dumped from: RunRow's
    assert typed == [(rows[n].answered, rows[n].outcome_note) for n in ("half", "lost")]
    lines = [line for line in format_markdown(board).splitlines() if line.startswith("|")]
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    cells = {c[head.index("path")].rsplit("/", 1)[1]: c for c in ([x.strip() for x in line.strip("|").split("|")] for line in lines[2:])}  # fmt: skip
    assert cells["lost"][head.index("no answer")] == f"10 ({WHY})"
    assert cells["lost"][head.index("status")] == "no answer (10 of 10)" and cells["lost"][head.index("n")] == "10"
    assert cells["half"][head.index("no answer")] == "5 (max_steps 5; 35 of 40 steps unreadable)"
    assert cells["half"][head.index("EM (0-1)")].startswith("0.5000 ± ")

    # harness table: a No answer column, why in the notes
    table = build_table([runs["half"], runs["lost"]])
    text = render(table_grid(table), "md")
    table_head = [c.strip() for c in text.splitlines()[0].strip("|").split("|")]
    body = [[c.strip() for c in line.strip("|").split("|")] for line in text.splitlines()[2:4]]
    assert [r[table_head.index("No answer")] for r in body] == ["5", "10"]
    assert [r[table_head.index("n")] for r in body] == ["10", "10"]
    assert f"- {table.rows[1].label}: {NOTE}" in text.splitlines()

    # the report: above the scores, and in the run's facts (its sections; the whole page is test_report's)
    html = _scores_section(read_results(runs["lost"])) + _meta_section(read_results(runs["lost"]))
    assert f'<p class="call" id="no-answer">{NOTE.replace(chr(39), "&#x27;")}</p>' in html
    assert f"0 of 10 finished / 10 ({WHY})" in html

    # the ablation's table
    ablation = {"model": "m", "setting": "open-book", "dataset": "hotpotqa:dev", "n_samples": 10, "ceiling_note": "-",
                "headline": ["em-f1.em"], "rows": [ablation_row(4096, runs["lost"], read_results(runs["lost"]), None)]}  # fmt: skip
    md = format_table(ablation)
    assert md.rstrip().splitlines()[-1] == f"context size 4096: {NOTE}"
    assert "| 4096 | 0.0000 ± n/a | n/a | n/a | 10 | 0 | 10 | — |" in md

    # harness score RUN_DIR: the run's counts before the numbers, the rest after, as `harness run` says them
    assert main(["score", str(runs["half"]), "--out", str(tmp_path / "half.json")]) == 0
    said = capsys.readouterr().out.splitlines()
    assert said[:2] == ["finished 10/10, failed 0, answered 5", "scored 10/10"] and said[-1] == half_note
    assert main(["score", str(runs["lost"]), "--out", str(tmp_path / "lost.json")]) == 4  # as the run exited
    said = capsys.readouterr()
    assert said.out.splitlines()[0] == "finished 10/10, failed 0, answered 0"
    assert said.err.splitlines()[-1] == f"no sample produced an answer: {NOTE}; exit status 4"

    # harness compare: under each run, and beside each of its numbers
    assert main(["compare", str(runs["half"]), str(runs["lost"])]) == 0
    text = capsys.readouterr().out.splitlines()
    at = next(i for i, line in enumerate(text) if line.startswith(f"  B: {runs['lost']}"))
    assert text[at + 1] == f"     no sample produced an answer: {NOTE}" and text[2] == f"     {half_note}"
    em = text.index("em-f1.em")
    assert text[em + 1].endswith("  (5 finished samples without an answer, scored as wrong)")
    assert text[em + 2].endswith("  (10 finished samples without an answer, scored as wrong)")
    assert main(["compare", str(runs["half"]), str(runs["lost"]), "--format", "md"]) == 0
    assert f"- B: no sample produced an answer: {NOTE}" in capsys.readouterr().out.splitlines()

    # the data frames
    pytest.importorskip("pandas")
    from harness.analysis.frames import runs_df

    frame = runs_df(tmp_path / "runs").set_index("dir")
    lost = frame.loc[str(runs["lost"])]
    assert (lost["answered"], lost["no_answer"], lost["no_answer_why"], lost["n"]) == (0, 10, WHY, 10)
    assert frame.loc[str(runs["half"]), "answered"] == 5 and not lost["failed"]


def test_answered_is_the_finished_samples_with_an_answer():
    """One definition, from results.json: ``outcomes["answered"]``; a run recorded before outcomes
    were kept counts every finished sample; failures are apart, by type."""
    from harness.execution.record import RunResults

    record = {
        "run_id": "r", "config_hash": "h", "status": "incomplete", "setting": "closed-book",
        "dataset": {"name": "hotpotqa", "spec": "hotpotqa:dev", "n_total": 5, "n_selected": 5},
        "config": {"model": "scripted/echo"},
        "counts": {"selected": 5, "finished": 4, "failed": 1, "pending": 0},
        "failures": {"q5": {"type": "truncated", "error": "no answer: the reply stopped at the token limit"}},
    }  # fmt: skip
    older = Outcomes.of(RunResults.model_validate(record))  # no outcomes recorded
    assert (older.answered, older.unanswered, older.no_answer) == (4, 0, False) and older.note() is None
    assert older.failure_note() == "1 of 5 failed: truncated (1)"
    mixed = Outcomes.of(RunResults.model_validate({**record, "outcomes": {"answered": 1, "context_full": 1, "max_rounds": 2}}))
    assert (mixed.answered, mixed.unanswered) == (1, 3) and mixed.without_answer == {"max_rounds": 2, "context_full": 1}
    assert mixed.note() == "3 of 4 finished samples ended without an answer (max_rounds 2, context_full 1): " \
        "scored as wrong, the metrics' rule for a missing answer"  # fmt: skip
    none = Outcomes.of(RunResults.model_validate({**record, "outcomes": {"refused": 4}}))
    assert none.no_answer and none.cell() == "4 (refused 4)"


def test_a_refusal_is_counted_apart_from_the_answers(tmp_path, capsys):
    """A reply that declines (Anthropic's documented refusal shape, read by the backend's own parser:
    https://platform.claude.com/docs/en/test-and-evaluate/strengthen-guardrails/handle-streaming-refusals)
    is the sample's outcome ``refused``: kept, scored as wrong, counted apart."""
    refusal = copy.deepcopy(REFUSAL_REPLY)

    def script(messages, tools, tool_choice, params):
        return from_anthropic_message(refusal) if _index(messages) == 1 else HOTPOT[_index(messages)].answer

    register_script("outcomes-refuse", script)
    try:
        rc = main(["run", "--model", "scripted/outcomes-refuse", "--dataset", "hotpotqa:dev", "--limit", "3",
                   "--metrics", "em-f1", "--no-cache", "--out", str(tmp_path / "run")])  # fmt: skip
    finally:
        unregister_script("outcomes-refuse")
    out = capsys.readouterr().out.splitlines()
    assert rc == 0 and out[0] == "finished 3/3, failed 0, answered 2"
    assert out[-1] == "1 of 3 finished samples ended without an answer (refused 1): scored as wrong, the metrics' rule for a missing answer"  # fmt: skip
    rows = [json.loads(line) for line in (tmp_path / "run" / "samples.jsonl").read_text().splitlines()]
    refused = next(r for r in rows if r["outcome"] == "refused")
    assert refused["answer"] == "Hello.." and refused["messages"][-1]["refusal"].startswith("This request was declined")
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["outcomes"] == {"answered": 2, "refused": 1} and results["scores"]["em-f1"]["em"] == pytest.approx(2 / 3)


def test_scoring_generations_without_one_answer_exits_4(tmp_path, capsys):
    """``harness score --generations``: no run record, so no outcomes; a file whose every answer is
    null is the same case as a run where no sample answered (scored as wrong, said, exit 4)."""
    gens = tmp_path / "gens.jsonl"
    gens.write_text("".join(json.dumps({"id": s.id, "answer": None}) + "\n" for s in HOTPOT[:3]), encoding="utf-8")
    argv = ["score", "--dataset", "hotpotqa:dev", "--generations", str(gens), "--metrics", "em-f1"]
    assert main([*argv, "--out", str(tmp_path / "s.json")]) == 4
    err = capsys.readouterr().err.splitlines()
    n = len(HOTPOT)
    assert err[-1] == f"no generation has an answer (0 of {n} questions): scored as wrong, the metrics' rule for a missing answer; exit status 4"  # fmt: skip
    gens.write_text(json.dumps({"id": HOTPOT[0].id, "answer": HOTPOT[0].answer}) + "\n", encoding="utf-8")
    assert main([*argv, "--out", str(tmp_path / "s.json")]) == 0
