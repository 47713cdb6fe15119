"""A metric plugin given as a file (``FILE.py:NAME``), registered under no name: what its
``declare()`` says of its numbers (labels, scale, headline, detail, lower-is-better) reaches the
table, the leaderboard and the report as a registered metric's does, read from what its run
recorded; the plugin file is gone by then, so nothing is loaded to learn it."""

from __future__ import annotations

import json

import pytest

from harness.cli import main
from harness.scoring import display

PLUGIN = '''
from harness.scoring.kinds import count, mean, share
from harness.scoring.metrics import declare


@declare(
    headline=("hits",),
    labels={"hits": "Hit rate", "calls": "Lookups", "hits_precision": "Hit precision"},
    detail=("hits_precision",),
    lower_is_better=("calls",),
    kind=mean(100.0),
    kinds={"calls": count("lookups"), "found": share()},
)
def hit_rate(questions, answers, only_answered, options=None):
    """Whether an answer was given (x100), how many lookups it took."""
    by_id = {a["id"]: a["answer"] for a in answers}
    raw = {
        q.id: {"hits": 100.0 * (by_id.get(q.id) is not None), "hits_precision": 50.0, "calls": len(q.id) % 3, "found": 1.0}
        for q in questions
    }
    return {"raw": raw}
'''


@pytest.fixture
def run_dir(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "hits.py").write_text(PLUGIN, encoding="utf-8")
    argv = ["run", "--model", "scripted/echo", "--dataset", "qampari:sample", "--limit", "3"]
    assert main([*argv, "--metrics", "set-f1,hits.py:hit_rate", "--out", "a"]) == 0
    (tmp_path / "hits.py").unlink()  # tables read what the run recorded, never the plugin's code
    monkeypatch.setattr(display, "_RECORDED", {})  # as a new process: nothing learnt yet
    capsys.readouterr()
    return tmp_path / "a"


def test_the_run_records_the_plugins_declaration(run_dir):
    info = json.loads((run_dir / "results.json").read_text(encoding="utf-8"))["scores"]["meta"]["metric_info"]
    declared = info["hit_rate"]["plugin"]["declared"]
    assert declared["labels"]["hits"] == "Hit rate" and declared["detail"] == ["hits_precision"]
    assert declared["kind"] == {"name": "mean", "scale": 100.0}
    assert declared["kinds"]["calls"] == {"name": "count", "unit": "lookups"}
    assert "declared" not in (info.get("set-f1") or {})  # a built-in is read from its code


def test_the_table_names_its_numbers_as_declared(run_dir, capsys):
    assert main(["table", str(run_dir), "--metric", "hit_rate.hits", "--metric", "hit_rate.calls"]) == 0
    header = capsys.readouterr().out.splitlines()[0]
    assert "| Hit rate | Lookups |" in header
    assert main(["table", str(run_dir), "--metric", "hit_rate"]) == 0  # a metric's name: its declared headline
    header = capsys.readouterr().out.splitlines()[0]
    assert "| Hit rate |" in header and "Lookups" not in header and "hit_rate" not in header


def test_the_leaderboard_shows_its_columns_not_its_detail(run_dir, capsys):
    assert main(["leaderboard", str(run_dir)]) == 0
    header = capsys.readouterr().out.splitlines()[0]
    assert "Hit rate (0-100)" in header and "Lookups (lookups)" in header and "Set F1 (0-1)" in header
    assert "Hit precision" not in header and "hits_precision" not in header  # declared detail
    assert "Set precision" not in header  # a built-in's detail, as before


def test_the_report_names_its_numbers(run_dir, capsys):
    assert main(["report", str(run_dir), "--out", str(run_dir / "r.html")]) == 0
    html = (run_dir / "r.html").read_text(encoding="utf-8")
    assert "hit_rate.hits (0-100)" in html and "hit_rate.calls (lookups)" in html


def test_a_plugin_known_neither_way_shows_every_number_generically():
    assert display.is_column("no-such-metric.precision")  # nothing declared: nothing hidden, never guessed by name
    assert display.display_name("no-such-metric.hits") == "no-such-metric hits"
    assert display.scale_of("no-such-metric.hits") is None
