"""The tantivy full-text sidecar (`harness snapshot fulltext`): built beside a snapshot from its
pages, used by `Snapshot.search` only while it matches the snapshot's content hash, recorded in the
snapshot metadata and the run key. Real text: the 991 HotpotQA distractor paragraphs."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
from collections import Counter
from pathlib import Path

import pytest
from conftest import run_harness

from harness.execution.config import build_config
from harness.execution.runner import Run
from harness.models.scripted import register_script, unregister_script
from harness.wiki_snapshot.builders import build_snapshot
from harness.wiki_snapshot.fulltext import build_fulltext, sidecar_path
from harness.wiki_snapshot.store import Snapshot


def build_sidecar(path):
    with Snapshot.open(path, fulltext=False) as snap:
        return build_fulltext(snap)

tantivy = pytest.importorskip("tantivy")

FIXTURES = Path(__file__).parent / "fixtures"
HOTPOT = FIXTURES / "hotpot_dev_distractor_first100.json"
WORD = re.compile(r"[a-z]+")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A snapshot of the HotpotQA distractor paragraphs with its sidecar, and one without."""
    base = tmp_path_factory.mktemp("fulltext")
    with_it, without = base / "with.db", base / "without.db"
    build_snapshot(str(HOTPOT), with_it, progress=None)
    shutil.copyfile(with_it, without)
    build_sidecar(with_it)
    return {"with": with_it, "without": without}


def test_sidecar_is_built_beside_the_snapshot_and_used(built):
    folder = sidecar_path(built["with"])
    meta = json.loads((folder / "meta.json").read_text())
    with Snapshot.open(built["with"]) as snap:
        assert meta["engine"] == "tantivy" and meta["tantivy_version"] in tantivy.__version__
        assert meta["content_sha256"] == snap._metadata["content_sha256"] and meta["pages"] == len(snap) == 991
        assert meta["boosts"] == {"title": 5.0, "body": 1.0} and meta["tokenizer"] == "unicode61-like"
        assert snap.full_text_search and snap.metadata["text_search"] == "tantivy-bm25"
        assert snap.metadata["fulltext"]["content_sha256"] == meta["content_sha256"]
        hits = snap.search("Scott Derrickson", 5)
    with Snapshot.open(built["without"]) as plain:
        assert plain.full_text_search and plain.metadata["text_search"] == "fts5-bm25"
        assert "fulltext" not in plain.metadata
        fts = plain.search("Scott Derrickson", 5)
    assert hits[0][0] == fts[0][0] == "Scott Derrickson"
    assert [s for _, s in hits] == sorted((s for _, s in hits), reverse=True) and hits[0][1] > 0


def test_a_word_only_in_a_page_body_finds_that_page(built):
    with Snapshot.open(built["with"]) as snap:
        pages = list(snap.pages())
    title_words = {w for p in pages for w in WORD.findall(p.title.lower())}
    df = Counter(w for p in pages for w in set(WORD.findall(p.text.lower())))
    chosen = [(w, p.title) for p in pages[:200] for w in WORD.findall(p.text.lower())
              if df[w] == 1 and len(w) >= 7 and w not in title_words]  # fmt: skip
    assert len(chosen) >= 20
    with Snapshot.open(built["with"]) as snap:
        for word, title in chosen[::max(1, len(chosen) // 20)]:
            assert snap.search(word, 3)[0][0] == title, word
            assert snap.search(word.upper(), 3)[0][0] == title  # the analyzer lower-cases queries too


def test_title_boost_ranks_the_page_with_that_title_first(built):
    with Snapshot.open(built["with"]) as snap:
        titles = [p.title for p in snap.pages()][:300]
        first = [snap.search(t, 5)[0][0] for t in titles]
    # Some titles are one common word another page's title also holds; the rest rank their page first.
    assert sum(f == t for f, t in zip(first, titles)) >= 0.9 * len(titles)
    with Snapshot.open(built["with"]) as snap:
        # a title word also in other pages' bodies: the 5x title weight puts the titled page first
        assert snap.search("Sinister", 5)[0][0] == "Sinister (film)"
        assert snap.search("Doctor Strange 2016 film", 5)[0][0] == "Doctor Strange (2016 film)"


HOSTILE = ["", "   ", '"', '""unbalanced', "title:Scott", "body:(a OR b)", "(((", ")", "AND", "OR NOT AND",
           "a AND OR b", "*", "?~2^5", "Zürich café — 東京 🚀", "\x00\x01", "-" * 50, "x" * 10_000,
           " ".join(["Scott"] * 3000), "Einstien (physicist)\" OR *:-", "[1 TO 5]", "\\"]  # fmt: skip


def test_hostile_queries_never_raise(built):
    with Snapshot.open(built["with"]) as snap:
        for q in HOSTILE:
            hits = snap.search(q, 10)
            assert isinstance(hits, list) and len(hits) <= 10, q
        assert snap.search("", 10) == [] and snap.search("AND", 10) == snap.search("and", 10)
        assert snap.search("title:Scott", 3)[0][0].startswith("Scott")  # a colon is not a field name here
        assert snap.search("Scott", 0) == []


def test_a_stale_sidecar_is_ignored_with_a_warning(built, tmp_path, capsys):
    snap_path = tmp_path / "s.db"
    shutil.copyfile(built["with"], snap_path)
    build_sidecar(snap_path)
    # the snapshot rebuilt from other content (the first 50 questions): another content hash
    records = tmp_path / "half.json"
    records.write_text(json.dumps(json.loads(HOTPOT.read_text())[:50]))
    build_snapshot(str(records), snap_path, overwrite=True, progress=None)
    capsys.readouterr()
    with Snapshot.open(snap_path) as snap:
        assert snap.metadata["text_search"] == "fts5-bm25" and "fulltext" not in snap.metadata
        hits = snap.search("Scott Derrickson", 3)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "built from another snapshot" in err[0] and "ignored" in err[0], err
    assert hits[0][0] == "Scott Derrickson"  # FTS5 answered
    build_sidecar(snap_path)  # a rebuild replaces it
    with Snapshot.open(snap_path) as snap:
        assert snap.metadata["text_search"] == "tantivy-bm25"
    assert capsys.readouterr().err == ""


def test_a_failed_build_leaves_no_folder_and_keeps_the_old_one(built, tmp_path, monkeypatch):
    snap_path = tmp_path / "s.db"
    shutil.copyfile(built["without"], snap_path)
    real_pages = Snapshot.pages

    def failing(self, batch=500):
        for n, page in enumerate(real_pages(self, batch)):
            if n == 400:
                raise OSError("disk full (simulated)")
            yield page

    monkeypatch.setattr(Snapshot, "pages", failing)
    with pytest.raises(OSError):
        build_sidecar(snap_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.db"]  # no sidecar, no temporary folder
    monkeypatch.setattr(Snapshot, "pages", real_pages)
    build_sidecar(snap_path)
    before = json.loads((sidecar_path(snap_path) / "meta.json").read_text())
    monkeypatch.setattr(Snapshot, "pages", failing)
    with pytest.raises(OSError):
        build_sidecar(snap_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.db", "s.db.fulltext"]
    assert json.loads((sidecar_path(snap_path) / "meta.json").read_text()) == before
    monkeypatch.setattr(Snapshot, "pages", real_pages)
    with Snapshot.open(snap_path) as snap:
        assert snap.metadata["text_search"] == "tantivy-bm25"


@pytest.fixture
def answering():
    script = register_script("fulltext-yes", lambda messages, tools, tool_choice, params: "yes")
    yield script
    unregister_script("fulltext-yes")


def _run(snapshot: Path) -> Run:
    options = {"model": "scripted/fulltext-yes", "dataset": "hotpotqa:dev", "setting": "open-book", "limit": 1,
               "cache": False, "snapshot": str(snapshot), "search_space": "evidence-only", "metrics": ["em-f1"]}  # fmt: skip
    return Run(build_config(options), show_progress=False)


def test_the_engine_joins_the_run_key_only_when_the_sidecar_is_used(built, answering, tmp_path):
    plain, sidecar = _run(built["without"]), _run(built["with"])
    assert "snapshot_text_search" not in plain.hash_extra
    assert sidecar.hash_extra["snapshot_text_search"] == {
        "text_search": "tantivy-bm25", "tokenizer": "unicode61-like", "boosts": {"title": 5.0, "body": 1.0}}  # fmt: skip
    # the same snapshot content: without the engine fact the keys would be equal; with it they differ
    assert plain.hash_extra["snapshot_content_hash"] == sidecar.hash_extra["snapshot_content_hash"]
    base = {k: v for k, v in sidecar.hash_extra.items() if k != "snapshot_text_search"}
    assert plain.config_hash == plain.config.config_hash(base)  # today's key, unchanged
    assert sidecar.config_hash != plain.config_hash
    options = {"out": str(tmp_path / "run")}
    run = Run(build_config({**_run(built["with"]).config.model_dump(mode="json"), **options}), show_progress=False)
    results = asyncio.run(run.execute())
    assert results.snapshot.metadata["text_search"] == "tantivy-bm25"


def test_cli_builds_and_reports_one_line_errors(built, tmp_path):
    snap_path = tmp_path / "c.db"
    shutil.copyfile(built["without"], snap_path)
    proc = run_harness("snapshot", "fulltext", str(snap_path), "--quiet")
    assert proc.returncode == 0, proc.stderr
    assert "991 pages" in proc.stdout and "pages/s" in proc.stdout and proc.stderr == ""
    proc = run_harness("snapshot", "search", "--text", str(snap_path), "Scott Derrickson", "--json")
    assert json.loads(proc.stdout)[0]["title"] == "Scott Derrickson"
    zim = tmp_path / "a.zim"
    zim.write_bytes((72173914).to_bytes(4, "little") + b"\0" * 100)
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "tantivy.py").write_text("raise ImportError('no tantivy here')\n")
    for argv, env, needle in [
        ((str(tmp_path / "missing.db"),), None, "snapshot not found"),
        ((str(shim),), None, "is a folder: give the snapshot file"),
        ((str(zim),), None, "has its own full-text index"),
        ((str(snap_path),), {"PYTHONPATH": f"{shim}:{Path(__file__).parents[1]}"}, "pip install 'manyanswer-harness[fulltext]'"),
    ]:
        proc = run_harness("snapshot", "fulltext", *argv, env=env)
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        assert proc.returncode == 2 and len(lines) == 1 and needle in lines[0], proc.stderr
        assert "Traceback" not in proc.stderr
