"""A run in which every question failed, through the whole chain (issue 31): run -> leaderboard ->
table -> compare -> figure -> report -> data frames. Each output shows it as failed, never as a
score of 0; beside it a run that answered every question wrongly does score 0."""

from __future__ import annotations

import json
import math
import pytest

from harness.cli import main
from harness.models.scripted import register_script, unregister_script


def _never(messages, tools, tool_choice, params):
    raise KeyError("malformed response")


def _wrong(messages, tools, tool_choice, params):
    return "zzz qqq"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    register_script("chain-never", _never)
    register_script("chain-wrong", _wrong)
    root = tmp_path_factory.mktemp("runs")
    base = ["run", "--dataset", "hotpotqa:dev", "--limit", "5", "--no-cache", "--max-attempts", "1"]
    try:
        assert main([*base, "--model", "scripted/chain-wrong", "--out", str(root / "wrong")]) == 0
        assert main([*base, "--model", "scripted/chain-never", "--out", str(root / "never")]) == 4
    finally:
        unregister_script("chain-never")
        unregister_script("chain-wrong")
    return root


def _out(capsys) -> str:
    captured = capsys.readouterr()
    return captured.out + captured.err


def test_results_json_holds_no_value_and_the_reason(runs):
    results = json.loads((runs / "never" / "results.json").read_text())
    scores = results["scores"]
    assert scores["em-f1"]["em"] is None and scores["em-f1"]["f1"] is None and scores["raw"] == []
    assert scores["meta"]["n_answered"] == 0 and scores["meta"]["n_failed"] == 5
    assert scores["meta"]["not_scored"].startswith("5 of 5 failed")
    wrong = json.loads((runs / "wrong" / "results.json").read_text())["scores"]
    assert wrong["em-f1"]["em"] == 0.0 and wrong["meta"]["n_answered"] == 5  # wrong answers: a real 0


def test_leaderboard_markdown_and_json_show_it_failed(runs, capsys):
    board_file = runs.parent / "board.json"
    assert main(["leaderboard", str(runs), "--out", str(board_file)]) == 0
    text = _out(capsys)
    row = next(line for line in text.splitlines() if "chain-never" in line)
    header = next(line for line in text.splitlines() if line.startswith("|") and "failed" in line.lower())
    cells = dict(zip([c.strip() for c in header.strip("|").split("|")], [c.strip() for c in row.strip("|").split("|")]))
    metric_cells = [v for k, v in cells.items() if k.startswith(("EM", "F1", "Accuracy", "ROUGE"))]
    assert metric_cells and set(metric_cells) == {"n/a"}, cells  # no metric reads 0
    assert "failed (5 of 5)" in row, row
    board = json.loads(board_file.read_text())
    never = next(r for r in board["rows"] if "chain-never" in json.dumps(r))
    wrong = next(r for r in board["rows"] if "chain-wrong" in json.dumps(r))
    assert board["rows"][-1] is never  # a failed run is never ranked as 0: it sorts last
    assert never["failed"] and all(v is None for v in never["metrics"].values()), never
    assert wrong["metrics"]["em-f1.em"] == 0.0


def test_table_shows_failed_never_zero(runs, capsys):
    assert main(["table", str(runs / "wrong"), str(runs / "never")]) == 0
    lines = [line for line in _out(capsys).splitlines() if line.startswith("|")]
    wrong_row, never_row = lines[2], lines[3]
    assert "0.000" in wrong_row
    cells = [c.strip() for c in never_row.strip("|").split("|")]
    assert cells[-2:] == ["0", "5"] and cells.count("failed") >= 2 and "0.000" not in never_row, never_row
    assert main(["table", str(runs / "never"), "--format", "csv"]) == 0
    csv_text = capsys.readouterr().out
    header, row = csv_text.splitlines()[:2]
    values = dict(zip(header.split(","), row.split(",")))
    assert values["em-f1.em"] in ("", "n/a") and values["em-f1.em"] != "0.0", values


def test_compare_lists_it_failed_and_runs_no_test_on_it(runs, capsys):
    code = main(["compare", str(runs / "wrong"), str(runs / "never"), "--format", "md"])
    text = _out(capsys)
    assert code == 1  # nothing could be compared: every run but the baseline failed
    rows = [line for line in text.splitlines() if line.startswith("| ") and "chain-never" in line]
    assert rows and all("| failed | not compared | n/a |" in row for row in rows), rows
    assert "no test ran" in text and "B failed, not compared: the run answered nothing" in text


def test_figure_marks_it_failed_and_draws_no_point(runs, tmp_path, capsys):
    from harness.analysis.figures import draw, scores_spec
    from harness.execution.record import read_results

    spec = scores_spec([("wrong", read_results(runs / "wrong")), ("never", read_results(runs / "never"))])
    figure = draw(spec)
    ticks = [t.get_text() for ax in figure.axes for t in ax.get_yticklabels()]
    assert any("failed" in t for t in ticks), ticks
    for panel in spec.panels:
        failed_points = [p for line in panel.lines for p in line.points if "never" in line.label or "failed" in line.label]
        assert all(p.y is None or math.isnan(p.y) for p in failed_points)
    assert main(["figure", "scores", str(runs / "never"), str(runs / "wrong"), "--out", str(tmp_path / "f.svg")]) == 0


def test_report_says_failed_and_shows_no_zero_score(runs, capsys):
    assert main(["report", str(runs / "never")]) == 0
    html = (runs / "never" / "report.html").read_text()
    assert "5 of 5 failed" in html
    scores_section = html[html.find("Scores") : html.find("Scores") + 3000]
    assert "0.0000" not in scores_section and "n/a" in scores_section


def test_data_frames_hold_missing_not_zero(runs):
    pytest.importorskip("pandas")
    import harness

    frame = harness.runs_df(str(runs))
    never = frame[frame["model"].str.contains("never")].iloc[0]
    assert math.isnan(never["em-f1.em"]) and never["n"] == 0
    samples = harness.samples_df(str(runs / "never"))
    assert set(samples["status"]) == {"error"} and len(samples) == 5
    assert "em-f1.em" not in samples or samples["em-f1.em"].isna().all()  # no per-question value at all
