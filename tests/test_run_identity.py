"""Run identity (issue 41): two runs of one configuration in two folders have two run ids (the key,
the configuration's hash, is the same), a run keeps its id when resumed and a copied folder keeps it
too (the leaderboard's "copies?" warning is for copies alone); results.json and config.json hold no
path under the home directory (relative to the working directory, a shipped file by its place in the
package, else from ~), and what reads a run opens those paths again, old absolute ones included."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import harness
from harness.analysis.leaderboard import build_leaderboard
from harness.execution.paths import portable_text, recorded_path
from harness.execution.scoring import rescore_run, score_run
from harness.execution.record import results_dict

QAMPARI = Path(harness.__file__).parent / "datasets" / "data" / "qampari" / "qampari_sample.jsonl"


def _run(out, data, cache, limit=2):
    return results_dict(harness.run(  # the JSON written
        model="scripted/answer=Paris", dataset="qampari:dev", data_path=str(data), limit=limit, show_progress=False,
        out=str(out), cache_path=str(cache),
    ))  # fmt: skip


def _home(tmp_path, monkeypatch) -> tuple[Path, Path]:
    """A home directory under tmp_path with a project folder in it (the working directory) and the
    real QAMPARI sample in ~/data (outside the project)."""
    home = tmp_path / "home" / "alice"
    project = home / "proj"
    (home / "data").mkdir(parents=True)
    project.mkdir()
    shutil.copy(QAMPARI, home / "data" / "qampari.jsonl")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(project)
    return home, project


def test_two_folders_two_ids_one_key_and_a_copy_keeps_its_id(tmp_path, monkeypatch):
    home, project = _home(tmp_path, monkeypatch)
    data, cache = home / "data" / "qampari.jsonl", home / "cache.sqlite"
    a = _run(project / "results" / "a", data, cache)
    b = _run(project / "results" / "b", data, cache)
    assert a["config_hash"] == b["config_hash"] and a["run_id"] != b["run_id"]
    for r in (a, b):
        assert r["run_id"].startswith(a["config_hash"][:12] + "-") and len(r["run_id"]) == 19
    claim = json.loads((project / "results" / "a" / "config.json").read_text())
    assert claim["run_id"] == a["run_id"]
    assert _run(project / "results" / "a", data, cache, limit=3)["run_id"] == a["run_id"]  # resumed: the same run
    board = build_leaderboard([project / "results"])
    assert len(board.rows) == 2 and board.warnings == []  # two runs, not copies
    shutil.copytree(project / "results" / "a", project / "copies" / "a")
    (warning,) = build_leaderboard([project / "results", project / "copies"]).warnings
    assert warning.startswith(f"run {a['run_id']} is in 2 folders") and "copies?" in warning


def test_no_home_directory_in_the_run_files_and_readers_find_the_paths(tmp_path, monkeypatch):
    home, project = _home(tmp_path, monkeypatch)
    (project / "data").mkdir()
    inside = project / "data" / "q.jsonl"  # under the working directory: stored relative to it
    shutil.copy(QAMPARI, inside)
    run_dir = project / "results" / "r1"
    results = _run(run_dir, inside, home / "data" / "cache.sqlite")
    config = results["config"]
    assert config["out"] == "results/r1" and config["data_path"] == "data/q.jsonl"
    assert config["cache_path"] == "~/data/cache.sqlite"  # under home, outside the project
    assert results["cost"]["price_table"]["path"] == "harness/prices.yaml"  # shipped with the harness
    for name in ("results.json", "config.json"):
        text = (run_dir / name).read_text()
        assert str(home) not in text and str(tmp_path) not in text, name
    assert json.loads((run_dir / "results.json").read_text())["config"] == config

    # read from elsewhere: the dataset is found from where the run directory lies
    monkeypatch.chdir(tmp_path)
    assert recorded_path("data/q.jsonl", run_dir, "results/r1") == str(inside)
    assert recorded_path("~/data/cache.sqlite") == str(home / "data" / "cache.sqlite")
    assert recorded_path("harness/prices.yaml") == str(Path(harness.__file__).parent / "prices.yaml")
    scores = score_run(run_dir)
    assert scores["set-f1"] == results["scores"]["set-f1"]

    # a results file written before (absolute paths) is read and re-scored as it was, and written portably
    old = json.loads((run_dir / "results.json").read_text())
    old["config"].update(data_path=str(inside), out=str(run_dir), cache_path=str(home / "data" / "cache.sqlite"))
    (run_dir / "results.json").write_text(json.dumps(old))
    monkeypatch.chdir(project)
    rescored = rescore_run(run_dir)
    assert rescored.saved and rescored.scores["set-f1"] == results["scores"]["set-f1"]
    again = json.loads((run_dir / "results.json").read_text())
    assert again["config"]["data_path"] == "data/q.jsonl" and str(home) not in (run_dir / "results.json").read_text()


def test_portable_text_rewrites_paths_only_where_they_start():
    bases = [("/home/alice/proj", "."), ("/home/alice/.venv/lib/harness", "harness"), ("/home/alice", "~")]
    bases.sort(key=lambda b: -len(b[0]))
    cases = {
        "/home/alice/proj": ".",
        "/home/alice/proj/results/r1": "results/r1",
        "/home/alice/proj2/x": "~/proj2/x",  # another folder beside the project
        "/home/alice/data/q.jsonl": "~/data/q.jsonl",
        "table /home/alice/.venv/lib/harness/prices.yaml sha256:abc": "table harness/prices.yaml sha256:abc",
        "/home/alicebob/x": "/home/alicebob/x",  # another user's home
        "/data/wiki/en.db": "/data/wiki/en.db",  # shared, outside home: as it was
        "/v1/chat/completions": "/v1/chat/completions",
        "x/home/alice/y": "x/home/alice/y",  # not where a path starts
        "'/home/alice/proj/a b.txt' missing": "'a b.txt' missing",
    }
    for text, expected in cases.items():
        assert portable_text(text, bases) == expected, text
