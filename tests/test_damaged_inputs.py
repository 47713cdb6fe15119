"""Damaged inputs of the readers (issue 45, item 9): a SQLite file with the snapshot's tables but other
columns is refused when opened (one line, exit 2), not in every sample; a damaged line in the middle
of a run's rows is refused by score, merge and report naming file:line (never skipped silently),
while the torn last line a kill leaves is still skipped; ``--out NAME.png/`` names a folder and is
refused, nothing written."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest
from scripted_runs import scripted_run

from harness.cli import main
from harness.models.scripted import last_user, register_script, unregister_script
from harness.records import SAMPLES_FILE

ROWS = SAMPLES_FILE


def harness(capsys, *argv) -> tuple[int, list[str]]:
    capsys.readouterr()
    code = main([str(a) for a in argv])
    return code, [line for line in capsys.readouterr().err.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def shards(tmp_path_factory) -> tuple[Path, Path]:
    """A scripted run of 6 HotpotQA questions in two shards, in process (a few seconds)."""
    base = tmp_path_factory.mktemp("runs")
    for i in (1, 2):
        scripted_run(base / f"s{i}", "damaged-inputs", lambda messages, *_: last_user(messages)[-12:],
                     "hotpotqa:dev", 6, "--shard", f"{i}/2")  # fmt: skip
        assert len((base / f"s{i}" / ROWS).read_text().splitlines()) >= 2  # hotpot-dev-000 and more
    return base / "s1", base / "s2"


@pytest.fixture
def run_dir(shards) -> Path:
    return shards[0]


def copy_with(run_dir: Path, tmp_path: Path, edit) -> Path:
    copy = tmp_path / "copy"
    shutil.copytree(run_dir, copy)
    lines = (copy / ROWS).read_text().splitlines(keepends=True)
    (copy / ROWS).write_text("".join(edit(lines)))
    return copy


# ------------------------------------------------------------------------------------------ rows
GARBAGE = "@@ not a row @@\n"


@pytest.mark.slow  # two scripted runs, then commands over them (about 10 s in all)
@pytest.mark.parametrize("command", ["score", "report", "merge"])
def test_a_damaged_line_in_the_middle_is_named_never_skipped(shards, run_dir, tmp_path, capsys, command):
    damaged = copy_with(run_dir, tmp_path, lambda lines: [lines[0], GARBAGE, *lines[1:]])
    before = (damaged / ROWS).read_bytes()
    args = {"score": [damaged], "report": [damaged, "--out", tmp_path / "r.html"],
            "merge": [damaged, shards[1], "--out", tmp_path / "merged"]}[command]  # fmt: skip
    code, err = harness(capsys, command, *args)
    assert code == 2 and len(err) == 1, err
    assert f"{damaged / ROWS}:2: not valid JSON" in err[0] and "cut short by a kill" in err[0], err
    assert (damaged / ROWS).read_bytes() == before  # nothing repaired or rewritten
    assert not (tmp_path / "r.html").exists() and not (tmp_path / "merged").exists()


@pytest.mark.slow
def test_a_line_that_is_no_object_or_no_utf8_is_named_too(run_dir, tmp_path, capsys):
    damaged = copy_with(run_dir, tmp_path, lambda lines: [lines[0], "[1, 2]\n", *lines[1:]])
    code, err = harness(capsys, "score", damaged)
    assert code == 2 and f"{ROWS}:2: expected a JSON object" in err[0], err
    (damaged / ROWS).write_bytes((damaged / ROWS).read_bytes().replace(b"[1, 2]", b'{"id": "\xff"}'))
    code, err = harness(capsys, "score", damaged)
    assert code == 2 and f"{ROWS}:2: not UTF-8 text" in err[0], err


@pytest.mark.slow
@pytest.mark.parametrize("command", ["score", "report", "merge"])
def test_a_torn_last_line_is_still_skipped(shards, run_dir, tmp_path, capsys, command):
    torn = copy_with(run_dir, tmp_path, lambda lines: [*lines, lines[0][:40]])  # a kill mid-append
    args = {"score": [torn], "report": [torn, "--out", tmp_path / "r.html"],
            "merge": [torn, shards[1], "--out", tmp_path / "merged"]}[command]  # fmt: skip
    code, err = harness(capsys, command, *args)
    assert code == 0, err
    if command == "merge":
        assert len((tmp_path / "merged" / ROWS).read_text().splitlines()) == 6  # every finished row, once


@pytest.mark.slow
def test_a_run_with_a_damaged_line_does_not_resume_over_it(run_dir, tmp_path, capsys):
    damaged = copy_with(run_dir, tmp_path, lambda lines: [lines[0], GARBAGE, *lines[1:]])
    register_script("damaged-inputs", lambda messages, *_: last_user(messages)[-12:])
    try:
        code, err = harness(capsys, "run", "--model", "scripted/damaged-inputs", "--dataset", "hotpotqa:dev",
                            "--limit", "6", "--shard", "1/2", "--no-cache", "--out", damaged)  # fmt: skip
    finally:
        unregister_script("damaged-inputs")
    assert code == 2 and f"{ROWS}:2: not valid JSON" in err[-1], err


# ------------------------------------------------------------------------------------------ snapshot
def test_a_sqlite_file_with_the_tables_but_other_columns_is_refused_before_any_sample(tmp_path, capsys):
    path = tmp_path / "lookalike.db"
    con = sqlite3.connect(path)
    con.executescript(
        "CREATE TABLE metadata (key TEXT, value TEXT);"
        "CREATE TABLE pages (id INTEGER, name TEXT, body TEXT);"
        "CREATE TABLE redirects (src TEXT, dst TEXT);"
    )
    con.executemany("INSERT INTO metadata VALUES (?, ?)", [("format", '"wiki-snapshot"'), ("format_version", "1")])
    con.commit()
    con.close()
    code, err = harness(capsys, "snapshot", "info", path)
    assert code == 2 and len(err) == 1 and "not a wiki snapshot (missing column(s): pages.pageid" in err[0], err
    code, err = harness(capsys, "run", "--model", "scripted/echo", "--dataset", "hotpotqa:dev", "--limit", "2",
                        "--setting", "evidence-provided", "--snapshot", path, "--no-cache", "--out", tmp_path / "run")  # fmt: skip
    assert code == 2 and len(err) == 1 and "redirects.target" in err[0], err
    assert not (tmp_path / "run").exists()


# ------------------------------------------------------------------------------------------ --out
def test_an_out_file_ending_in_a_slash_is_refused_before_any_work(tmp_path, capsys):
    for command in (["figure", "scores", tmp_path / "no-run"], ["leaderboard", tmp_path]):
        code, err = harness(capsys, *command, "--out", f"{tmp_path / 'DIR.png'}/")
        assert code == 2 and len(err) == 1 and "DIR.png/: ends in '/', so names a folder" in err[0], err
    assert list(tmp_path.iterdir()) == []  # before: figure wrote the file DIR.png
