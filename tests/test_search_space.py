"""The search space is part of the result: a snapshot records what it holds (its scope), a run
records what it searched (results.json search_space: size, source, evidence-only, the share of it
that is the selection's gold pages) and every output shows it beside the numbers; a searching
strategy over a snapshot of a dataset's evidence is refused in one line before any model call unless
--search-space evidence-only says it is meant. Real text: the HotpotQA distractor fixture (991
context paragraphs of the first 100 dev questions) and ten physics articles."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from harness.cli import main
from harness.datasets import load_dataset
from harness.execution.config import RunConfig, build_config
from harness.execution.paths import portable_text
from harness.models.scripted import register_script, unregister_script
from harness.wiki_snapshot.builders import build_snapshot
from harness.wiki_snapshot.builders.fanoutqa_cache import FanOutQACacheBuilder
from harness.wiki_snapshot.builders.mediawiki_api import MediaWikiAPIBuilder
from harness.wiki_snapshot.store import Snapshot

FIXTURES = Path(__file__).parent / "fixtures"
HOTPOT = FIXTURES / "hotpot_dev_distractor_first100.json"
PHYSICS = FIXTURES / "wikipedia_en_science_physics_10.json"
CONTEXTS = "hotpotqa (hotpot_dev_distractor_first100.json)"


@pytest.fixture(scope="module")
def spaces(tmp_path_factory):
    """The distractor snapshot (dataset-contexts) and a snapshot of the same 991 pages given as
    plain records (scope source: all its file held)."""
    base = tmp_path_factory.mktemp("spaces")
    contexts = base / "hotpot.db"
    build_snapshot(str(HOTPOT), contexts, progress=None)
    pages: dict[str, str] = {}
    for q in json.loads(HOTPOT.read_text()):
        for title, sentences in zip(q["context"]["title"], q["context"]["sentences"]):
            pages.setdefault(title, "".join(sentences))
    records = base / "pages.json"
    records.write_text(json.dumps([{"title": t, "text": x} for t, x in pages.items()]))
    whole = base / "pages.db"
    build_snapshot(str(records), whole, progress=None)
    return {"contexts": contexts, "whole": whole}


@pytest.fixture
def answering():
    """A scripted model that answers at once ("yes"), its requests kept."""
    script = register_script("space-yes", lambda messages, tools, tool_choice, params: "yes")
    yield script
    unregister_script("space-yes")


def run(out, snapshot, *extra, setting="open-book", limit=3):
    argv = ["run", "--model", "scripted/space-yes", "--dataset", "hotpotqa:dev", "--setting", setting,
            "--snapshot", str(snapshot), "--limit", str(limit), "--metrics", "em-f1", "--no-cache", "--out", str(out),
            *extra]  # fmt: skip
    return main(argv)


def results(out) -> dict:
    return json.loads((out / "results.json").read_text())


# snapshots record their scope ---------------------------------------------------------------
def test_each_builder_records_what_the_snapshot_holds(spaces, tmp_path):
    with Snapshot.open(spaces["contexts"]) as snap:
        meta = snap.metadata
    assert (meta["scope"], meta["scope_dataset"]) == ("dataset-contexts", CONTEXTS)
    with Snapshot.open(spaces["whole"]) as snap:
        assert (snap.metadata["scope"], snap.metadata["scope_dataset"]) == ("source", None)
    # a FanOutQA page cache titled by a dataset's evidence holds those pages only
    cache = tmp_path / "cache"
    cache.mkdir()
    articles = json.loads(PHYSICS.read_text())
    for i, article in enumerate(articles[:3], 1):
        (cache / f"{i}-dated.md").write_text(article["text"])
    evidence = [{"pageid": i, "revid": 100 + i, "title": a["title"]} for i, a in enumerate(articles[:3], 1)]
    build_snapshot(str(cache), tmp_path / "cache.db", kind="fanoutqa-cache", evidence=evidence,
                   dataset="fanoutqa:dev", progress=None)  # fmt: skip
    with Snapshot.open(tmp_path / "cache.db") as snap:
        assert (snap.metadata["scope"], snap.metadata["scope_dataset"]) == ("evidence", "fanoutqa:dev")
        assert len(snap) == 3
    # titled by a --titles file it says nothing of what the pages are: all of its source
    titles = tmp_path / "titles.json"
    titles.write_text(json.dumps({str(e["pageid"]): e["title"] for e in evidence}))
    assert FanOutQACacheBuilder(str(cache), titles=str(titles)).scope() == ("source", None)
    # the API builder fetches an evidence list: a dataset's, or a file's (named by its file name)
    assert MediaWikiAPIBuilder(None, evidence=evidence, dataset="fanoutqa:dev").scope() == ("evidence", "fanoutqa:dev")
    listed = tmp_path / "my_evidence.json"
    listed.write_text(json.dumps(evidence))
    assert MediaWikiAPIBuilder(str(listed)).scope() == ("evidence", "my_evidence.json")


def test_snapshot_info_shows_the_scope_of_new_and_old_snapshots(spaces, tmp_path, capsys):
    assert main(["snapshot", "info", str(spaces["contexts"])]) == 0
    info = json.loads(capsys.readouterr().out)
    assert (info["scope"], info["scope_dataset"], info["evidence_only"]) == ("dataset-contexts", CONTEXTS, True)
    # a snapshot written before the key: its scope is read from what its builder recorded
    old = tmp_path / "old.db"
    old.write_bytes(spaces["contexts"].read_bytes())
    with sqlite3.connect(old) as con:
        con.execute("DELETE FROM metadata WHERE key IN ('scope', 'scope_dataset')")
    assert main(["snapshot", "info", str(old)]) == 0
    info = json.loads(capsys.readouterr().out)
    assert (info["scope"], info["scope_dataset"], info["evidence_only"]) == ("dataset-contexts", "hotpotqa", True)
    assert main(["snapshot", "info", str(spaces["whole"])]) == 0
    assert json.loads(capsys.readouterr().out)["evidence_only"] is False


# the refusal ---------------------------------------------------------------------------------
@pytest.mark.parametrize("setting", ["open-book", "retrieve-read"])
def test_searching_an_evidence_only_snapshot_is_refused_before_any_model_call(
    spaces, answering, tmp_path, capsys, setting
):
    out = tmp_path / "run"
    assert run(out, spaces["contexts"], setting=setting) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith(f"error: {spaces['contexts']} holds only the context paragraphs of {CONTEXTS}")
    assert "scope dataset-contexts" in err and f"--setting {setting}" in err
    assert "every similar title is a gold page" in err
    assert "whole-Wikipedia snapshot or ZIM" in err and "--search-space evidence-only" in err
    # before anything ran: no request, no run directory (retrieve-read: before its missing index is looked for)
    assert answering.requests == [] and not out.exists()


def test_the_option_is_refused_where_it_is_not_true(spaces, answering, tmp_path, capsys):
    assert run(tmp_path / "a", spaces["whole"], "--search-space", "evidence-only") == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"error: --search-space evidence-only: {spaces['whole']} is not evidence-only (scope source: all of its "
        "source); leave the option out"
    )
    argv = ["run", "--model", "scripted/space-yes", "--dataset", "hotpotqa:dev", "--limit", "1",
            "--search-space", "evidence-only", "--out", str(tmp_path / "b")]  # fmt: skip
    assert main(argv) == 2
    assert capsys.readouterr().err.strip() == "error: --search-space evidence-only: no --snapshot to search"
    assert answering.requests == []


# accepted, recorded, in the run key ---------------------------------------------------------
def test_accepted_with_the_option_recorded_in_results_and_run_key(spaces, answering, tmp_path, capsys):
    out = tmp_path / "run"
    assert run(out, spaces["contexts"], "--search-space", "evidence-only") == 0
    printed = capsys.readouterr().out
    r = results(out)
    space = r["search_space"]
    assert r["config"]["search_space"] == "evidence-only"
    assert space["backend"] == "wiki-snapshot" and space["pages"] == 991 and space["redirects"] == 0
    assert space["scope"] == "dataset-contexts" and space["scope_dataset"] == CONTEXTS and space["evidence_only"]
    # paths as results.json writes them (tests/fixtures/... from the repository, never a home directory)
    assert space["source"] == portable_text(str(HOTPOT)) and space["path"] == portable_text(str(spaces["contexts"]))
    assert f"search space: {space['label']}" in printed.splitlines()
    claim = json.loads((out / "config.json").read_text())
    assert claim["config"]["search_space"] == "evidence-only"
    # the option is part of the run key; unset, the key is as it was before the option existed
    with_it = build_config({"setting": "open-book", "snapshot": "s.db", "search_space": "evidence-only"})
    without = build_config({"setting": "open-book", "snapshot": "s.db"})
    assert with_it.identity()["search_space"] == "evidence-only" and "search_space" not in without.identity()
    assert with_it.config_hash() != without.config_hash()
    recorded = RunConfig.model_validate(claim["config"])
    extra = {k: v for k, v in claim.items() if k not in ("config_hash", "config", "run_id")}
    assert recorded.config_hash(extra) == r["config_hash"] == claim["config_hash"]
    assert recorded.model_copy(update={"search_space": None}).config_hash(extra) != r["config_hash"]
    # a strategy that does not search (closed-book, given the snapshot) is not refused, and records the space too
    assert run(tmp_path / "cb", spaces["contexts"], setting="closed-book") == 0
    assert results(tmp_path / "cb")["search_space"]["evidence_only"] is True


def test_gold_share_of_the_distractor_snapshot(spaces, answering, tmp_path):
    """The first 10 questions need 20 distinct pages (HotpotQA's supporting-fact titles), all among the
    991 context pages: 20 / 991 of the space is gold; counted independently from the fixture."""
    n = 10
    fixture = json.loads(HOTPOT.read_text())
    assert [s.question for s in load_dataset("hotpotqa:dev").samples[:n]] == [q["question"] for q in fixture[:n]]
    in_space = {t.casefold() for q in fixture for t in q["context"]["title"]}
    needed = {t.casefold() for q in fixture[:n] for t in q["supporting_facts"]["title"]}
    assert needed <= in_space and len(in_space) == 991
    out = tmp_path / "run"
    assert run(out, spaces["contexts"], "--search-space", "evidence-only", limit=n) == 0
    space = results(out)["search_space"]
    assert space["gold_needed"] == len(needed) == 20 and space["gold_pages"] == 20
    assert space["gold_share"] == pytest.approx(20 / 991)
    assert space["label"] == f"evidence-only: {CONTEXTS} contexts, 991 pages (gold 2.0%)"
    # the same pages given as plain records: a whole source, the same share
    whole = tmp_path / "whole"
    assert run(whole, spaces["whole"], limit=n) == 0
    space = results(whole)["search_space"]
    assert not space["evidence_only"] and space["scope"] == "source" and space["gold_pages"] == 20
    assert space["label"] == "whole source: snapshot pages.json, 991 pages (gold 2.0%)"


def test_a_closed_book_run_records_no_search_space(answering, tmp_path):
    argv = ["run", "--model", "scripted/space-yes", "--dataset", "hotpotqa:dev", "--limit", "1", "--metrics", "em-f1",
            "--no-cache", "--out", str(tmp_path / "cb")]  # fmt: skip
    assert main(argv) == 0
    assert "search_space" not in results(tmp_path / "cb")


# shown wherever the number is shown ---------------------------------------------------------
@pytest.fixture(scope="module")
def two_spaces(spaces, tmp_path_factory):
    """The same 3 questions searched over the distractor snapshot (evidence-only) and over the same
    pages as a whole source, and a closed-book run."""
    root = tmp_path_factory.mktemp("shown")
    register_script("space-yes", lambda messages, tools, tool_choice, params: "yes")
    try:
        assert run(root / "evidence", spaces["contexts"], "--search-space", "evidence-only") == 0
        assert run(root / "whole", spaces["whole"]) == 0
    finally:
        unregister_script("space-yes")
    labels = {name: results(root / name)["search_space"]["label"] for name in ("evidence", "whole")}
    assert labels["evidence"].startswith("evidence-only: ") and labels["whole"].startswith("whole source: ")
    return root, labels


def test_leaderboard_and_table_show_the_search_space(two_spaces, capsys):
    root, labels = two_spaces
    assert main(["leaderboard", str(root), "--out", str(root.parent / "board.json")]) == 0
    captured = capsys.readouterr()
    head, _, *rows = captured.out.splitlines()
    assert "| search space |" in head
    for label in labels.values():
        assert sum(label in row for row in rows) == 1
    board = json.loads((root.parent / "board.json").read_text())
    assert {Path(r["path"]).name: r["search_space"]["evidence_only"] for r in board["rows"]} == {
        "evidence": True, "whole": False
    }  # fmt: skip
    assert any("evidence-only" in w and "different searches" in w for w in board["warnings"])
    assert "warning: 1 of the 2 runs with a search space searched an evidence-only one" in captured.err

    assert main(["table", str(root / "evidence"), str(root / "whole")]) == 0
    table = capsys.readouterr().out
    assert "| Search space |" in table.splitlines()[0]
    assert labels["evidence"] in table and labels["whole"] in table
    assert "their numbers are not open-book over Wikipedia" in table and "different searches" in table


def test_compare_shows_each_space_and_warns_when_they_differ(two_spaces, capsys):
    root, labels = two_spaces
    assert main(["compare", str(root / "evidence"), str(root / "whole")]) == 0
    out = capsys.readouterr().out
    assert f"     search space: {labels['evidence']}" in out and f"     search space: {labels['whole']}" in out
    warning = [line for line in out.splitlines() if line.startswith("warning: ")]
    assert warning == [
        f"warning: the runs searched different spaces (A: {labels['evidence']}; B: {labels['whole']}): an "
        "evidence-only number is not an open-book number over Wikipedia; a difference between them is partly the "
        "search space's"
    ]
    assert main(["compare", str(root / "evidence"), str(root / "whole"), "--format", "md"]) == 0
    assert "warning: the runs searched different spaces" in capsys.readouterr().out
    # the same space twice: no warning
    assert main(["compare", str(root / "evidence"), str(root / "evidence")]) == 0
    assert "warning:" not in capsys.readouterr().out


def test_report_shows_the_search_space(two_spaces):
    root, labels = two_spaces
    assert main(["report", str(root / "evidence")]) == 0
    html = (root / "evidence" / "report.html").read_text()
    assert f"<b>Search space {labels['evidence']}</b>" in html and "not open-book over Wikipedia" in html
    assert f"<th>search space</th><td>{labels['evidence']}</td>" in html


def test_merged_shards_count_the_whole_selections_gold_pages(spaces, answering, tmp_path):
    """Each shard counts its own questions' gold pages; the merged run counts the whole selection's
    again (the same as the unsharded run), and says so where the snapshot cannot be opened."""
    flags = ("--search-space", "evidence-only")
    assert run(tmp_path / "whole", spaces["contexts"], *flags, limit=6) == 0
    shards = [tmp_path / f"s{i}" for i in (1, 2)]
    for i, out in enumerate(shards, 1):
        assert run(out, spaces["contexts"], *flags, "--shard", f"{i}/2", limit=6) == 0
    whole = results(tmp_path / "whole")["search_space"]
    assert sum(results(s)["search_space"]["gold_needed"] for s in shards) == whole["gold_needed"] == 12
    assert main(["merge", *map(str, shards), "--out", str(tmp_path / "merged")]) == 0
    assert results(tmp_path / "merged")["search_space"] == whole
    moved = spaces["contexts"].with_name("moved.db")
    spaces["contexts"].rename(moved)
    try:
        assert main(["merge", *map(str, shards), "--out", str(tmp_path / "merged2")]) == 0
    finally:
        moved.rename(spaces["contexts"])
    space = results(tmp_path / "merged2")["search_space"]
    assert space["gold_pages"] is None and space["gold_note"].endswith("could not be opened when the shards were merged")
    assert space["label"] == f"evidence-only: {CONTEXTS} contexts, 991 pages"


def test_labels_of_a_whole_wikipedia_archive_and_of_the_live_api():
    """A ZIM read in place (its metadata: format zim, no source but its path) and the live API (pages
    unknown): the label names the backend, and a live space's gold pages are not counted (each title
    would be a request); resolve_title is never called on it."""
    from harness.execution.summary import search_space_info

    class Backend:
        def __init__(self, path, metadata):
            self.path, self.metadata = path, metadata

        def resolve_title(self, title):
            raise AssertionError("the live API is not asked for the gold pages")

    samples = load_dataset("hotpotqa:dev").samples[:2]
    zim = {"format": "zim", "pages": 6_912_000, "redirects": 10_400_000, "revision_date": "2023-11-01",
           "source_description": "Kiwix wikipedia_en_all_nopic", "scope": "source"}  # fmt: skip
    pages = {t.casefold(): i for i, t in enumerate(t for s in samples for t in s.needed_titles)}

    class Archive(Backend):
        def resolve_title(self, title):
            from harness.wiki_snapshot.store import Page

            i = pages.get(title.casefold())
            return None if i is None else Page(pageid=i, revid=None, title=title, text="", timestamp=None)

    space = search_space_info(Archive(Path("/data/wikipedia_en_all_nopic_2023-11.zim"), zim), samples)
    assert space["gold_pages"] == 4 and space["gold_share"] == pytest.approx(4 / 6_912_000)
    assert space["label"] == (
        "whole source: ZIM wikipedia_en_all_nopic_2023-11.zim 2023-11-01, 6,912,000 pages (gold 0.000058%)"
    )
    live = {"format": "mediawiki-live", "pages": None, "source": "https://en.wikipedia.org/w/api.php"}
    space = search_space_info(Backend(None, live), samples)
    assert space["gold_pages"] is None and space["gold_note"].startswith("not counted: each title would be a request")
    assert space["label"] == "whole source: live MediaWiki https://en.wikipedia.org/w/api.php, pages not counted"


def test_the_runs_data_frame_carries_the_search_space(two_spaces):
    pytest.importorskip("pandas")
    from harness.api import runs_df

    root, labels = two_spaces
    frame = runs_df(root).set_index("dir")
    assert frame.loc[str(root / "evidence"), "search_space"] == labels["evidence"]
    assert frame.loc[str(root / "whole"), "search_space"] == labels["whole"]
    assert bool(frame.loc[str(root / "evidence"), "evidence_only"]) and not bool(frame.loc[str(root / "whole"), "evidence_only"])
