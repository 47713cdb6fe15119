"""The bm25 index's out-of-core score matrix against bm25s's own in-memory build
(``BM25.build_index_from_ids`` + ``save``) over the same token ids of real passages
(tests/fixtures): every saved file identical, for all five methods, with blocks and merge ranges
small enough to split the corpus, and the edge cases (a passage with no token, a term in every
passage, one passage, one passage with no token)."""

import filecmp
import json
from pathlib import Path

import numpy as np
import pytest

from harness.wiki_snapshot.index_bm25 import METHODS, BM25Build, tokenize_unit

FIXTURES = Path(__file__).parent / "fixtures"


def real_passages() -> list[str]:
    """HotpotQA paragraphs and Wikipedia physics paragraphs: short and long, all real."""
    out = []
    for q in json.loads((FIXTURES / "hotpot_dev_distractor_first100.json").read_text())[:6]:
        out += ["".join(sentences) for sentences in q["context"]["sentences"]]
    page = json.loads((FIXTURES / "wikipedia_en_science_physics_10.json").read_text())[0]
    out += [p for p in page["text"].split("\n\n") if p.strip()][:30]
    return out


PASSAGES = real_passages()
# no token at all: empty, and stop words only (bm25s's English list), at the start, middle and end
WITH_EMPTY = ["", *PASSAGES[:40], "The and of it", *PASSAGES[40:], ""]
EVERY = [p + " Aristotle" for p in PASSAGES[:30]]  # one term (aristotl) in every passage
CORPORA = {"real": WITH_EMPTY, "every": EVERY, "one": [PASSAGES[3]], "one-empty": ["of the"]}
SMALL = {"block_tokens": 400, "block_docs": 9, "merge_pairs": 20}  # blocks and merge ranges split
TINY = {"block_tokens": 1, "block_docs": 1, "merge_pairs": 1}  # a passage a block, a term a range


def build_both(tmp: Path, texts: list[str], opts: dict, sizes: dict) -> tuple[Path, Path, np.ndarray]:
    """Our build into tmp/ours/bm25 and bm25s's into tmp/ref, from the same token files."""
    import bm25s

    build = BM25Build(opts)
    (tmp / "ours").mkdir(parents=True)
    build.open(tmp / "ours")
    third = max(1, len(texts) // 3)
    for i in range(0, len(texts), third):  # several worker payloads: the vocabulary grows across them
        build.add(tokenize_unit(texts[i : i + third], build.opts))
    build.close()
    ids = np.fromfile(build._ids_path, dtype=np.int32)
    lengths = np.fromfile(build._len_path, dtype=np.int32)
    corpus = [a.tolist() for a in np.split(ids, np.cumsum(lengths)[:-1])]

    o = build.opts
    model = bm25s.BM25(k1=float(o["k1"]), b=float(o["b"]), delta=float(o["delta"]), method=o["method"])
    vocab = dict(build.vocab)
    with np.errstate(all="ignore"):  # one passage with no token: bm25s's mean length 0 divides by it
        model.scores = model.build_index_from_ids(list(vocab.values()), corpus, show_progress=False)
    vocab.setdefault("", max(vocab.values(), default=-1) + 1)
    model.vocab_dict = vocab
    model.save(str(tmp / "ref"), show_progress=False)

    for key, value in sizes.items():
        setattr(build, key, value)
    with np.errstate(all="ignore"):
        build.finish(tmp / "ours", None)
    return tmp / "ours" / "bm25", tmp / "ref", lengths


def assert_same(ours: Path, ref: Path) -> None:
    assert sorted(p.name for p in ours.iterdir()) == sorted(p.name for p in ref.iterdir())
    for path in ref.glob("*.npy"):
        a, b = np.load(ours / path.name), np.load(path)
        assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b), path.name
        assert filecmp.cmp(ours / path.name, path, shallow=False), path.name  # the header too
    assert filecmp.cmp(ours / "params.index.json", ref / "params.index.json", shallow=False)
    # bm25s writes the vocabulary with orjson where installed: compare its terms, in order
    mine, theirs = (json.loads((d / "vocab.index.json").read_text(encoding="utf-8")) for d in (ours, ref))
    assert list(mine.items()) == list(theirs.items())


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("corpus", CORPORA)
def test_same_arrays_as_bm25s(tmp_path, method, corpus):
    seen = {}
    for name, sizes in (("default", {}), ("small", SMALL), ("tiny", TINY)):
        # tiny sizes cost a step per (block, term range): a shorter corpus, with both empty kinds
        texts = WITH_EMPTY[:4] + WITH_EMPTY[40:43] if name == "tiny" else CORPORA[corpus]
        if name == "tiny" and corpus != "real":
            continue
        ours, ref, lengths = build_both(tmp_path / name, texts, {"method": method}, sizes)
        assert_same(ours, ref)
        seen[name] = (lengths, np.diff(np.load(ref / "indptr.csc.index.npy")))
    lengths, df = seen["small"]
    if corpus == "real":
        # the small sizes did split: many blocks, many term ranges, terms wider than a range
        assert lengths.sum() > 10 * SMALL["block_tokens"] and len(lengths) > 10 * SMALL["block_docs"]
        assert df.sum() > 10 * SMALL["merge_pairs"] and df.max() > SMALL["merge_pairs"]
        assert (lengths == 0).sum() == 3 and (seen["tiny"][0] == 0).sum() == 2
    if corpus == "every":
        assert df.max() == len(EVERY)
    if corpus == "one-empty":
        assert len(df) == 0 and lengths.tolist() == [0]


@pytest.mark.parametrize(
    "opts",
    [
        {"method": "robertson", "k1": 1.5, "b": 0.75},  # QUEST's gensim parameters
        {"method": "atire", "k1": 1.2, "b": 1.0},
        {"method": "bm25l", "k1": 1.2, "b": 0.75, "delta": 1.0},
        {"method": "bm25+", "k1": 2.0, "b": 0.0, "delta": 0.25},
        {"method": "lucene", "k1": 0.5, "b": 0.9, "stemmer": "none", "stopwords": "none"},
    ],
)
def test_same_arrays_as_bm25s_other_parameters(tmp_path, opts):
    ours, ref, _ = build_both(tmp_path, WITH_EMPTY, opts, SMALL)
    assert_same(ours, ref)
    if opts["method"] in ("bm25l", "bm25+"):
        assert (ours / "nonoccurrence_array.index.npy").exists()
