"""Corpus-level passage retrieval: index build and query speed, bm25s vs rank-bm25, and dense search.

    python benchmarks/retrieval.py [--dense-passages 1500] [--repeat 3]

Real text: snapshots built from tests/fixtures (HotpotQA dev's 991 paragraphs; the 106 full
articles of the MediaWiki dump excerpt), split into ``words100`` passages (spaCy sentencizer,
timed apart). Queries: HotpotQA's 100 dev questions, for both corpora.

- BM25: both libraries get the same tokens (bm25s's tokenizer with the index's options: lower-case,
  English stop words, Porter stemmer; timed apart). bm25s is the index the harness builds
  (method "lucene", k1 0.9, b 0.4); rank_bm25 is ``BM25Okapi`` with Lucene's idf (its tf part is
  Lucene's times k1+1, so the order is the same). Build = index construction from tokens; query =
  all passages scored + the top 10 taken. "same top-10": queries whose ten best passages (those
  with a score > 0) are the same, in the same order.
- Dense: all-MiniLM-L6-v2 embedding speed on the first ``--dense-passages`` passages of the
  HotpotQA corpus (CPU), and exact search (one float32 matrix product) over those embeddings,
  query encoding included; then the product alone over a 250,000 x 384 matrix of random unit
  vectors, to measure the memory-bound cost that grows with the corpus.

Then the extrapolation to full English Wikipedia, with its assumptions printed. Timings are the
minimum over ``--repeat`` runs (one run for embedding).
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.datasets import load_dataset
from harness.wiki_snapshot import build_snapshot
from harness.wiki_snapshot.index_bm25 import DEFAULTS, tokenize
from harness.wiki_snapshot.passages import sentencizer
from harness.wiki_snapshot.retrieval import collect_passages, top_k
from harness.wiki_snapshot.store import Snapshot

FIXTURES = ROOT / "tests" / "fixtures"
CORPORA = {
    "HotpotQA dev paragraphs": FIXTURES / "hotpot_dev_distractor_first100.json",
    "enwiki dump excerpt (106 articles)": FIXTURES / "enwiki-sample-pages-articles.xml.bz2",
}
WIKIPEDIA_ARTICLES = 6.7e6
# DPR's 100-word split of the Dec. 2018 English Wikipedia: 21,015,324 passages from about 5.9M articles.
DPR_PASSAGES, DPR_ARTICLES = 21_015_324, 5.9e6


def best(fn, repeat):
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return min(times), out


def lucene_okapi(tokens):
    from rank_bm25 import BM25Okapi

    class LuceneOkapi(BM25Okapi):
        def _calc_idf(self, nd):
            for word, df in nd.items():
                self.idf[word] = math.log(1 + (self.corpus_size - df + 0.5) / (df + 0.5))

    return LuceneOkapi(tokens, k1=DEFAULTS["k1"], b=DEFAULTS["b"])


def top10(scores):
    idx, vals = top_k(np.asarray(scores), 10)
    return [int(i) for i, v in zip(idx, vals) if v > 0]


def bench_bm25(name, texts, questions, repeat):
    import bm25s

    chars = sum(map(len, texts))
    tok_s, tokens = best(lambda: tokenize(texts, DEFAULTS, return_ids=False), repeat)
    queries = [tokenize([q], DEFAULTS, return_ids=False)[0] for q in questions]

    def build_bm25s():
        model = bm25s.BM25(k1=DEFAULTS["k1"], b=DEFAULTS["b"], method="lucene")
        model.index(tokens, show_progress=False)
        return model

    b_build, model = best(build_bm25s, repeat)
    r_build, ref = best(lambda: lucene_okapi(tokens), repeat)

    def q_bm25s():
        out = []
        for q in queries:
            ids = model.get_tokens_ids(q)
            out.append(top10(model.get_scores_from_ids(ids)) if ids else [])
        return out

    def q_ref():
        return [top10(ref.get_scores(q)) for q in queries]

    b_query, ours = best(q_bm25s, repeat)
    r_query, theirs = best(q_ref, repeat)
    same = sum(a == b for a, b in zip(ours, theirs))
    same_set = sum(set(a) == set(b) for a, b in zip(ours, theirs))
    n = len(texts)
    nnz = int(model.scores["data"].shape[0])
    return {
        "corpus": name,
        "passages": n,
        "chars": chars,
        "tokens": sum(map(len, tokens)),
        "tokenize_s": tok_s,
        "rows": [
            ("bm25s (lucene), the harness's index", b_build, n / b_build, b_query, len(queries) / b_query),
            ("rank_bm25 BM25Okapi + Lucene idf", r_build, n / r_build, r_query, len(queries) / r_query),
        ],
        "same_top10": same,
        "same_top10_set": same_set,
        "queries": len(queries),
        "nnz": nnz,
    }


def bench_dense(texts, questions, n_dense):
    from harness.wiki_snapshot.index_dense import encode, load_encoder

    model = load_encoder(None)
    encode(model, texts[:32])  # warm-up
    subset = texts[:n_dense]
    t = time.perf_counter()
    emb = encode(model, subset)
    embed_s = time.perf_counter() - t
    t = time.perf_counter()
    q = encode(model, list(questions))
    scores = emb @ q.T
    [top_k(scores[:, j], 10) for j in range(q.shape[0])]
    search_s = time.perf_counter() - t
    t = time.perf_counter()
    for question in questions:  # one query at a time, as an agent asks
        qv = encode(model, [question])
        top_k((emb @ qv.T)[:, 0], 10)
    single_s = time.perf_counter() - t
    rng = np.random.default_rng(0)
    big = rng.standard_normal((250_000, emb.shape[1]), dtype=np.float32)
    big /= np.linalg.norm(big, axis=1, keepdims=True)
    product_s, _ = best(lambda: big @ q.T, 3)
    single_product_s, _ = best(lambda: big @ q[:1].T, 3)
    return {
        "n": len(subset),
        "embed_s": embed_s,
        "embed_per_s": len(subset) / embed_s,
        "batch_qps": len(questions) / search_s,
        "single_qps": len(questions) / single_s,
        "product_rows_per_s": big.shape[0] * q.shape[0] / product_s,
        "single_product_s_per_1m": single_product_s * 1e6 / big.shape[0],
        "dim": emb.shape[1],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dense-passages", type=int, default=1500, help="passages embedded (CPU is slow)")
    parser.add_argument("--no-dense", action="store_true")
    args = parser.parse_args()

    questions = [s.question for s in load_dataset("hotpotqa:dev").samples]
    sentencizer()
    results, hotpot_texts = [], None
    with tempfile.TemporaryDirectory() as tmp:
        for name, source in CORPORA.items():
            snap_path = Path(tmp) / f"{len(results)}.db"
            build_snapshot(str(source), str(snap_path), progress=None)
            with Snapshot.open(snap_path) as snap:
                pages = len(snap)
                text_chars = sum(len(p.text) for p in snap.pages())
                _, texts, split_s = collect_passages(snap, "words100")
            row = bench_bm25(name, texts, questions, args.repeat)
            row.update({"pages": pages, "split_s": split_s, "page_chars": text_chars})
            results.append(row)
            hotpot_texts = hotpot_texts or texts

    print("\n### BM25 (words100 passages; HotpotQA's 100 questions; same tokens for both)\n")
    print("| corpus | passages | implementation | build s | passages/s | query s (100) | queries/s | same top-10 |")
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        for label, build_s, dps, query_s, qps in r["rows"]:
            same = f"{r['same_top10']}/{r['queries']}" if label.startswith("bm25s") else "(reference)"
            print(
                f"| {r['corpus']} | {r['passages']:,} | {label} | {build_s:.3f} | {dps:,.0f} | {query_s:.3f} | "
                f"{qps:,.0f} | {same} |"
            )
    print()
    for r in results:
        print(
            f"- {r['corpus']}: {r['pages']:,} pages, {r['page_chars'] / 1e6:.2f} MB of text; splitting into passages "
            f"{r['split_s']:.2f} s ({r['page_chars'] / 1e6 / r['split_s']:.2f} MB/s); tokenizing "
            f"{r['tokenize_s']:.2f} s ({r['passages'] / r['tokenize_s']:,.0f} passages/s); "
            f"{r['nnz'] / r['passages']:.1f} index entries per passage; same top-10 as a set "
            f"{r['same_top10_set']}/{r['queries']}"
        )

    dense = None
    if not args.no_dense:
        dense = bench_dense(hotpot_texts, questions, args.dense_passages)
        print("\n### Dense (all-MiniLM-L6-v2, CPU, exact inner-product search)\n")
        print("| what | figure |")
        print("|---|---|")
        print(
            f"| embedding {dense['n']:,} HotpotQA passages | {dense['embed_s']:.1f} s, {dense['embed_per_s']:.1f} passages/s |"
        )
        print(
            f"| search over them, 100 queries in one batch (encoding included) | {dense['batch_qps']:.1f} queries/s |"
        )
        print(f"| search over them, one query at a time (encoding included) | {dense['single_qps']:.1f} queries/s |")
        print(
            f"| matrix product alone, 250,000 x {dense['dim']} float32 | "
            f"{dense['product_rows_per_s'] / 1e6:,.0f}M passage-query scores/s batched; "
            f"{dense['single_product_s_per_1m'] * 1e3:.0f} ms per 1M passages for one query |"
        )

    # extrapolation ------------------------------------------------------------------------------
    big = max(results, key=lambda r: r["page_chars"])
    per_article = DPR_PASSAGES / DPR_ARTICLES
    passages = WIKIPEDIA_ARTICLES * per_article
    chars_per_passage = big["chars"] / big["passages"]
    text_gb = passages * chars_per_passage / 1e9
    nnz_per_passage = big["nnz"] / big["passages"]
    bm25_gb = passages * nnz_per_passage * 8 / 1e9  # float32 score + int32 row per entry
    table_gb = passages * 20 / 1e9  # passages.npy: pageid, start, end, ordinal
    (_, _, bm25s_dps, _, bm25s_qps) = big["rows"][0]
    split_mb_s = big["page_chars"] / 1e6 / big["split_s"]
    tok_ps = big["passages"] / big["tokenize_s"]
    print("\n### Extrapolation to full English Wikipedia\n")
    print(
        f"- passages: {passages / 1e6:.1f}M (assumption: DPR's 100-word split, {DPR_PASSAGES / 1e6:.1f}M passages of "
        f"~{DPR_ARTICLES / 1e6:.1f}M articles in 2018, i.e. {per_article:.2f} per article, x {WIKIPEDIA_ARTICLES / 1e6:.1f}M)"
    )
    print(f"- passage text: {text_gb:.0f} GB at {chars_per_passage:.0f} characters per passage (measured)")
    print(
        f"- BM25 index: {nnz_per_passage:.0f} entries per passage (measured on the {big['corpus']}) x 8 bytes = "
        f"{bm25_gb:.0f} GB on disk, memory-mapped at query time; passage table {table_gb:.1f} GB"
    )
    print(
        f"- BM25 build on one core: splitting {text_gb * 1e3 / split_mb_s / 3600:.1f} h ({split_mb_s:.2f} MB/s), "
        f"tokenizing {passages / tok_ps / 3600:.1f} h, indexing {passages / bm25s_dps / 3600:.1f} h; the build holds "
        f"all passage texts and token ids in memory (~{text_gb + passages * big['tokens'] / big['passages'] * 4 / 1e9:.0f} GB)"
    )
    print(
        f"- BM25 query: scoring is linear in the postings of the query terms; measured {bm25s_qps:,.0f} queries/s on "
        f"{big['passages']:,} passages"
    )
    if dense:
        dense_gb = passages * dense["dim"] * 4 / 1e9
        print(
            f"- dense index: {passages / 1e6:.1f}M x {dense['dim']} float32 = {dense_gb:.0f} GB; embedding at "
            f"{dense['embed_per_s']:.0f} passages/s (this CPU) takes {passages / dense['embed_per_s'] / 86400:.0f} days "
            f"(a GPU is the practical route); exact search reads all {dense_gb:.0f} GB per batch of queries: about "
            f"{dense['single_product_s_per_1m'] * passages / 1e6:.1f} s per single query here, so at this scale an "
            "approximate index (IVF-PQ or HNSW, e.g. faiss; not implemented) is needed"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
