"""Breakdowns everywhere (console summary, leaderboard JSON, report tables), the report's filters
(status, outcome, breakdown group; checked in headless Chromium), and one scale per leaderboard
column with counts kept out of the metrics (issue 14)."""

from __future__ import annotations

import json

import pytest
from test_report import browser, row_ids  # noqa: F401  (the Chromium fixture)

from harness.cli import main
from harness.datasets import load_dataset
from harness.analysis.leaderboard import build_leaderboard, format_markdown
from harness.models.scripted import register_script, unregister_script

QAMPARI = load_dataset("qampari:sample").samples[:8]
FAILS = QAMPARI[1].question


def answer(messages, tools, tool_choice, params):
    if FAILS in messages[-1]["content"]:
        raise KeyError("malformed response")
    return "Paris, London"


@pytest.fixture(scope="module")
def qampari_run(tmp_path_factory):
    register_script("breakdowns", answer)
    out = tmp_path_factory.mktemp("bd") / "runs" / "qampari"
    argv = ["run", "--model", "scripted/breakdowns", "--dataset", "qampari:sample", "--limit", "8"]
    try:
        code = main([*argv, "--no-cache", "--out", str(out)])
    finally:
        unregister_script("breakdowns")
    assert code != 0 and json.loads((out / "results.json").read_text())["status"] == "incomplete"  # one failed
    assert main(["report", str(out)]) == 0
    return out


def test_console_summary_has_each_breakdown(qampari_run):
    import io

    from harness.commands.run import print_summary  # what `harness run` prints at the end

    buffer = io.StringIO()
    print_summary(json.loads((qampari_run / "results.json").read_text()), file=buffer)
    out = buffer.getvalue()
    assert "n_predicted" not in out  # means of counts are not shown as scores
    assert "by type:" in out
    answered = [s for s in QAMPARI if s.question != FAILS]  # the failed question is in no breakdown
    types = {t for s in answered for t in s.groups["type"]}
    lines = [line.strip() for line in out.splitlines()]
    for t in types:
        n = sum(t in s.groups["type"] for s in answered)
        assert any(line.startswith(f"{t} (n={n}): ") and "f1 " in line for line in lines), (t, out)
    assert lines[1].endswith("(n=7 of 8; 1 failed)")  # the headline says how many failed


def test_leaderboard_rows_carry_the_breakdown_and_one_scale_per_column(qampari_run):
    board = build_leaderboard(qampari_run.parent)
    (row,) = board.to_json()["rows"]
    results = json.loads((qampari_run / "results.json").read_text())
    assert row["breakdown"]["type"].keys() == results["scores"]["breakdown"]["type"].keys()
    assert sum(v["n"] for v in row["breakdown"]["type"].values()) == 7  # the failed question is not scored
    for value, entry in row["breakdown"]["type"].items():
        assert entry["set-f1.f1"] == results["scores"]["breakdown"]["type"][value]["set-f1"]["f1"]
    assert board.scales and set(board.scales.values()) == {"0-1"}
    assert all(not isinstance(v, int) or isinstance(v, bool) for v in row["metrics"].values())
    assert "Set F1 (0-1)" in format_markdown(board)


def test_topiocqa_turns_are_a_count_and_its_scores_say_0_100(tmp_path):
    def reply(messages, tools, tool_choice, params):
        return "the answer"

    register_script("bd-topiocqa", reply)
    try:
        argv = ["run", "--model", "scripted/bd-topiocqa", "--dataset", "topiocqa:dev", "--limit", "5"]
        assert main([*argv, "--no-cache", "--out", str(tmp_path / "runs" / "t")]) == 0
    finally:
        unregister_script("bd-topiocqa")
    board = build_leaderboard(tmp_path / "runs")
    (row,) = board.to_json()["rows"]
    assert "topiocqa.turns" not in row["metrics"] and row["score_counts"]["topiocqa.turns"] == 5
    assert board.scales["topiocqa.em"] == board.scales["topiocqa.bleu_corpus"] == "0-100"
    table = format_markdown(board)
    assert "EM (0-100)" in table and "Turns" not in table
    assert "turn_type" in row["breakdown"]


def test_report_has_breakdown_tables_and_filters(qampari_run):
    html = (qampari_run / "report.html").read_text()
    assert 'class="breakdown" data-group="type"' in html
    assert 'data-filter="status"' in html and '<option value="failed">' in html
    assert 'data-filter="group:type"' in html
    for t in {t for s in QAMPARI for t in s.groups["type"]}:
        assert f'<option value="{t}">' in html


def test_report_filters_in_chromium(qampari_run, browser):  # noqa: F811
    from selenium.webdriver.support.ui import Select

    browser.get((qampari_run / "report.html").resolve().as_uri())
    assert [e for e in browser.get_log("browser") if e["level"] in ("SEVERE", "ERROR")] == []

    def visible():
        return browser.execute_script(
            "return Array.from(document.querySelectorAll('#question-table tbody tr'))"
            ".filter(r => r.style.display !== 'none').map(r => r.dataset.id)"
        )

    assert visible() == row_ids(browser) and len(visible()) == 8
    status = Select(browser.find_element("css selector", 'select[data-filter="status"]'))
    status.select_by_value("failed")
    assert visible() == [QAMPARI[1].id]
    assert browser.find_element("css selector", "#shown-count").text == "1 of 8 shown"
    # the failed sample's transcript stays, the others are hidden with their rows
    hidden = browser.execute_script(
        "return Array.from(document.querySelectorAll('details.transcript')).filter(d => d.style.display === 'none').length"
    )
    assert hidden == 7
    status.select_by_value("")
    wanted = QAMPARI[0].groups["type"][0]
    Select(browser.find_element("css selector", 'select[data-filter="group:type"]')).select_by_value(wanted)
    assert visible() == [s.id for s in QAMPARI if wanted in s.groups["type"]]
