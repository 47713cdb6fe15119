"""The bm25 index's query over the query terms' postings (``query_top_k``) against bm25s's dense
scores (``BM25.get_scores_from_ids``) + ``top_k`` + the score > 0 rule, on indexes built from real
passages (tests/fixtures), for all five methods: the same passages in the same order with the
same float32 scores bit for bit, for real questions, repeated words, unknown words, stop words
only, a term in every passage, duplicated passages (ties) and k past the matches."""

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from harness.wiki_snapshot.index_bm25 import METHODS, BM25Build, Scratch, query_top_k, tokenize, tokenize_unit
from harness.wiki_snapshot.retriever import top_k

FIXTURES = Path(__file__).parent / "fixtures"
HOTPOT = json.loads((FIXTURES / "hotpot_dev_distractor_first100.json").read_text())


def passages() -> list[str]:
    out = []
    for q in HOTPOT[:25]:
        out += ["".join(sentences) for sentences in q["context"]["sentences"]]
    for page in json.loads((FIXTURES / "wikipedia_en_science_physics_10.json").read_text())[:3]:
        out += [p for p in page["text"].split("\n\n") if p.strip()]
    out += out[:20]  # duplicates: equal scores, ranked in passage order
    out += ["", "the of and"]  # passages with no token
    return out


PASSAGES = passages()
CORPORA = {"real": PASSAGES, "every": [p + " Aristotle" for p in PASSAGES]}  # atire/robertson idf 0
QUERIES = [q["question"] for q in HOTPOT[:40]] + [
    "physics physics physics energy",  # a repeated word counts each time, as bm25s counts it
    "energy physics energy",
    "zzqxv unknownword",  # no indexed term
    "zzqxv energy",
    "the of and it",  # stop words only: no token
    "",
    "Aristotle",
    "Aristotle Aristotle motion",
]


def load(tmp: Path, texts: list[str], method: str):
    import bm25s

    build = BM25Build({"method": method})
    build.open(tmp)
    build.add(tokenize_unit(texts, build.opts))
    with np.errstate(all="ignore"):
        build.finish(tmp, None)
    return bm25s.BM25.load(str(tmp / "bm25"), mmap=True, load_vocab=True), build.opts


def dense(model, ids: list[int], k: int):
    scores = model.get_scores_from_ids(ids)
    idx, best = top_k(scores, k)
    return idx[best > 0], best[best > 0]


@pytest.mark.parametrize("corpus", sorted(CORPORA))
@pytest.mark.parametrize("method", METHODS)
def test_postings_query_equals_bm25s_dense_ranking(tmp_path, method, corpus):
    model, opts = load(tmp_path, CORPORA[corpus], method)
    assert (model.nonoccurrence_array is not None) == (method in ("bm25l", "bm25+"))
    scratch = Scratch()
    n = len(CORPORA[corpus])
    checked = 0
    for query in QUERIES:
        ids = model.get_tokens_ids(tokenize([query], opts, return_ids=False)[0])
        for k in (1, 3, 10, n + 5):
            want_idx, want = dense(model, ids, k)
            for share in (0, 1e9):  # the accumulator scanned, then the touched passages tracked
                got_idx, got = query_top_k(model.scores, model.nonoccurrence_array, ids, k, scratch, share)
                assert got.dtype == np.float32 and got_idx.tolist() == want_idx.tolist(), (query, k, share)
                assert got.view(np.uint32).tolist() == want.view(np.uint32).tolist(), (query, k, share)
                checked += len(want)
        assert not scratch.acc.any() and not scratch.seen.any()  # only touched entries, all reset
    assert checked > 1000
    if method in ("bm25l", "bm25+"):  # passages without the term score too: k past the matches fills up
        ids = model.get_tokens_ids(["aristotl"] if corpus == "every" else ["energi"])
        assert len(query_top_k(model.scores, model.nonoccurrence_array, ids, n + 5, scratch, 1e9)[0]) == n


def test_threads_share_a_retrievers_scratch(tmp_path):
    """``Scratch`` is per thread: the same answers when the queries run on several threads at once."""
    model, opts = load(tmp_path, PASSAGES, "lucene")
    ids = [model.get_tokens_ids(tokenize([q], opts, return_ids=False)[0]) for q in QUERIES]
    want = [dense(model, i, 10)[0].tolist() for i in ids]
    scratch = Scratch()

    def run(_):
        return [query_top_k(model.scores, None, i, 10, scratch, 1e9)[0].tolist() for i in ids]

    with ThreadPoolExecutor(4) as pool:
        assert all(got == want for got in pool.map(run, range(4)))
