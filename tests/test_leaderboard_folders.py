"""harness leaderboard over several folders (issue 31): links followed, each real run listed once,
every folder passed over named with the reason (a link back up the tree, a second link to a run, a
broken results.json, a broken link, a folder that holds no run, a run being written); a run in
which every question failed is a failed row (n/a, never 0; sorted last) and the table has a failed
column and display names. The runs are real runs of scripted models (tests/scripted_runs.py)."""

from __future__ import annotations

import json
import os
import shutil

import pytest
from scripted_runs import failing, partial_answerer, scripted_run

from harness.analysis.leaderboard import build_leaderboard, column_labels, format_markdown, is_headline
from harness.cli import main
from harness.execution.lock import RunLock
from harness.scoring.display import display_name
from harness.scoring.results import metric_values


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    base = tmp_path_factory.mktemp("folders")
    scripted_run(base / "results" / "qampari", "lb-qp", partial_answerer("qampari:sample"), "qampari:sample", 3)
    scripted_run(base / "elsewhere" / "quest", "lb-qs", partial_answerer("quest:train-sample"), "quest:train-sample", 3)
    scripted_run(base / "results" / "failed", "lb-fail", failing, "qampari:sample", 3, "--max-attempts", "1")
    return base


@pytest.fixture
def tree(made, tmp_path):
    """results/ (two runs, a corrupt one, an empty folder, a link to its own run), links/ (a link to
    a run kept elsewhere, a link back to links/, a broken link)."""
    root = tmp_path / "t"
    shutil.copytree(made, root, symlinks=True)
    (root / "results" / "corrupt").mkdir()
    (root / "results" / "corrupt" / "results.json").write_text('{"run_id": "x", ')
    (root / "results" / "empty").mkdir()
    os.symlink(root / "results" / "qampari", root / "results" / "zz-again")
    (root / "links").mkdir()
    os.symlink(root / "elsewhere" / "quest", root / "links" / "quest")
    os.symlink(root / "links", root / "links" / "loop")
    os.symlink(root / "gone", root / "links" / "broken")
    return root


def test_several_folders_links_followed_each_run_once_and_every_skip_named(tree, tmp_path, capsys):
    out = tmp_path / "board.json"
    assert main(["leaderboard", str(tree / "links"), str(tree / "results"), "--out", str(out)]) == 0
    captured = capsys.readouterr()
    board = json.loads(out.read_text())
    paths = [r["path"] for r in board["rows"]]
    # the run kept elsewhere is found through its link; the failed run sorts last
    assert paths == [str(tree / "results" / "qampari"), str(tree / "links" / "quest"), str(tree / "results" / "failed")]
    reasons = {s["path"]: s["reason"] for s in board["skipped"]}
    assert reasons.keys() == {
        str(tree / "links" / "loop"),
        str(tree / "links" / "broken"),
        str(tree / "results" / "corrupt"),
        str(tree / "results" / "empty"),
        str(tree / "results" / "zz-again"),
    }
    assert reasons[str(tree / "links" / "loop")] == f"a link to {tree / 'links'}, a folder above it (a loop): not followed"
    assert reasons[str(tree / "links" / "broken")] == "a broken link (its target is missing)"
    assert reasons[str(tree / "results" / "corrupt")].startswith(f"{tree / 'results' / 'corrupt' / 'results.json'}: not valid JSON")
    assert reasons[str(tree / "results" / "empty")] == "not a run (no results.json)"
    assert reasons[str(tree / "results" / "zz-again")] == (
        f"the same run as {tree / 'results' / 'qampari'} (reached again through a link): listed once"
    )
    # each one named on stderr too
    for path, reason in reasons.items():
        assert f"skipped {path}: {reason}" in captured.err.splitlines()
    rows = {r["path"]: r for r in board["rows"]}
    for path, row in rows.items():
        results = json.loads((tree / os.path.relpath(os.path.realpath(path), tree) / "results.json").read_text())
        assert row["run_id"] == results["run_id"]
        if not row["failed"]:
            assert row["metrics"] == metric_values(results["scores"])
            assert 0 < row["metrics"][next(m for m in row["metrics"] if m.endswith(".f1"))] < 1
    # the file format: the keys written before the rows were typed (RunRow dumped), in that order; then
    # the retriever rows (harness retrieval-eval), empty here
    keys = ["roots", "generated_at", "key", "metrics", "scales", "labels", "rows", "skipped", "warnings"]
    assert list(board) == [*keys, "retrievers", "retriever_metrics"]
    assert board["retrievers"] == [] and board["retriever_metrics"] == []
    for row in board["rows"]:
        assert list(row) == BOARD_ROW_KEYS


# a leaderboard JSON row's keys, as harness.analysis.leaderboard wrote them at 6e48360 (a dict built by hand)
BOARD_ROW_KEYS = [
    "model", "dataset", "split", "version", "setting", "agent", "knobs", "run_id", "status", "n_questions",
    "n_scored", "n_selected", "n_finished", "n_failed", "n_pending", "n_answered", "outcomes", "outcome_note",
    "failed", "failure_note", "metrics", "null_reasons", "score_counts", "breakdown", "stderr", "ci95",
    "uncertainty_method", "uncertainty_note", "tokens", "cost_usd", "cost_per_sample_usd", "spent_usd", "cost_note",
    "context_size", "native_tool_calling", "decoding", "search_space", "backend", "path", "config_hash", "ended_at",
]  # fmt: skip


def test_a_failed_run_is_failed_never_zero(tree, tmp_path):
    board = build_leaderboard([tree / "results"])
    failed = board.to_json()["rows"][-1]  # the JSON row
    assert failed["path"] == str(tree / "results" / "failed") and failed["failed"] is True
    assert failed["n_answered"] == 0 and failed["n_failed"] == 3
    assert failed["metrics"] and all(v is None for v in failed["metrics"].values())  # null in the JSON, never 0.0
    assert all(v is None for v in failed["ci95"].values()) and all(v is None for v in failed["stderr"].values())
    assert set(failed["null_reasons"].values()) == {"no question answered (3 of 3 failed: exception (3))"}
    assert failed["failure_note"] == "3 of 3 failed: exception (3)"
    row = board.rows[-1]  # the typed row it is dumped from
    assert (row.failed, row.answered, row.outcomes.failed, row.failure_note) == (True, 0, 3, failed["failure_note"])

    table = format_markdown(board)
    lines = [line for line in table.splitlines() if line.startswith("|")]
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    cells = dict(zip(head, (c.strip() for c in lines[-1].strip("|").split("|"))))
    assert cells["status"] == "failed (3 of 3)" and cells["n"] == "0" and cells["failed"] == "3"
    metric_cells = [cells[h] for h in head if h.endswith("(0-1)")]
    assert cells["Set F1 (0-1)"] == "n/a" and set(metric_cells) == {"n/a"}
    good = dict(zip(head, (c.strip() for c in lines[2].strip("|").split("|"))))
    assert good["failed"] == "0" and good["n"] == "3" and good["status"] == "complete"
    # display names in the headers, one per headline metric; the keys stay in the JSON
    assert board.labels["set-f1.f1"] == "Set F1" and "set-f1.f1" not in lines[0]
    shown = [m for m in board.metrics if is_headline(m)]
    assert [h for h in head if "(0-1)" in h] == [f"{display_name(m)} (0-1)" for m in shown]


def test_labels_that_would_read_the_same_carry_their_keys():
    labels = column_labels(["em-f1.f1", "other.f1"], {"em-f1.f1": "0-1", "other.f1": "0-1"})
    assert labels == {"em-f1.f1": "F1 (0-1)", "other.f1": "other f1 (0-1)"}
    same = column_labels(["em-f1.em", "topiocqa.em"], {"em-f1.em": "0-1", "topiocqa.em": "0-1"})
    assert same == {"em-f1.em": "EM (0-1) [em-f1.em]", "topiocqa.em": "EM (0-1) [topiocqa.em]"}


def test_copies_of_one_run_are_listed_each_with_a_warning(made, tmp_path):
    shutil.copytree(made / "results" / "qampari", tmp_path / "a" / "qampari")
    shutil.copytree(made / "results" / "qampari", tmp_path / "b" / "qampari")
    board = build_leaderboard([tmp_path / "a", tmp_path / "b"])
    assert len(board.rows) == 2
    (warning,) = board.warnings
    assert warning.startswith(f"run {board.rows[0].run_id} is in 2 folders") and str(tmp_path / "b") in warning


def test_a_run_being_written_is_named_not_read(made, tmp_path):
    run = tmp_path / "r" / "qampari"
    shutil.copytree(made / "results" / "qampari", run)
    shutil.copytree(made / "results" / "failed", tmp_path / "r" / "failed")
    with RunLock(run, purpose="run"):
        board = build_leaderboard(tmp_path / "r")
    assert [r.path for r in board.rows] == [str(tmp_path / "r" / "failed")]
    (skipped,) = board.skipped
    assert skipped.path == str(run) and skipped.reason.startswith(f"in use by pid {os.getpid()} ")
    assert [r.path for r in build_leaderboard(tmp_path / "r").rows][0] == str(run)  # released: read


def test_no_runs_is_one_line_naming_what_was_passed_over(tmp_path, capsys):
    (tmp_path / "corrupt").mkdir()
    (tmp_path / "corrupt" / "results.json").write_text("[]")
    assert main(["leaderboard", str(tmp_path)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"error: no runs (folders with results.json) under {tmp_path}; passed over: ")
    assert f"{tmp_path / 'corrupt'}: {tmp_path / 'corrupt' / 'results.json'}: not a harness results file" in line
