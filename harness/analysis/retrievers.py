"""Retriever rows: each ``retrieval.json`` (``harness retrieval-eval --out-dir``) as one typed row
(``RetrieverRow``), so ``harness leaderboard`` compares retrievers apart from readers, as
BrowseComp-Plus keeps a retriever-only leaderboard beside its agents' (texttron/BrowseComp-Plus@97c637ce
README.md, "Evaluating Retrieval-Only Results": recall@5/100/1000 and nDCG@10 per retriever). A row
is never mixed with the runs: its own list in the leaderboard JSON (``retrievers``) and its own
markdown table.

A row's values are ``METRIC@K`` (``page_recall@10``, ``ndcg@10``), each with the interval the
record computed from its per-question values (by the metric's declared kind). A metric the dataset
has but no evaluated question could be scored on (QAMPARI questions without proofs) is ``n/a`` with
the reason, never 0.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel

from harness.execution.record import RetrievalResults, SearchSpaceRecord, read_retrieval

# a metric of the dataset with no value: why (never shown as 0)
NO_GOLD = "no evaluated question has the gold this metric needs (see skipped and gold_coverage)"
NO_NDCG = "no evaluated question has a gold page in the snapshot"


class RetrieverRow(BaseModel):
    """One retriever evaluation as the leaderboard lists it."""

    path: str
    dataset: str
    dataset_spec: str
    split: str | None = None
    version: str | None = None
    retriever: str  # bm25, dense
    passages: str | None = None
    config: str  # the index's options in one line: ``bm25 lucene k1=0.9 b=0.4``
    question_representation: str
    ks: list[int]
    ndcg_k: int | None = None
    n_questions: int
    n_evaluated: int
    skipped: dict[str, int] = {}
    gold_pages: int | None = None
    gold_in_snapshot: int | None = None
    metrics: dict[str, float | None]  # METRIC@K -> value (None: no value, null_reasons says why)
    null_reasons: dict[str, str] = {}
    stderr: dict[str, float | None] = {}
    ci95: dict[str, list[float | None] | None] = {}
    uncertainty_method: dict[str, str | None] = {}
    uncertainty_note: dict[str, str] = {}
    cluster_by: str | None = None
    metric_options: dict[str, dict[str, Any]] = {}
    snapshot_sha256: str | None = None
    search_space: SearchSpaceRecord | None = None
    created_at: str | None = None

    @classmethod
    def of(cls, record: RetrievalResults, path: str | Path) -> RetrieverRow:
        metrics: dict[str, float | None] = {}
        reasons: dict[str, str] = {}
        for name in record.metric_names:
            for k in record.ks:
                value = (record.metrics.get(name) or {}).get(str(k))
                metrics[f"{name}@{k}"] = value
                if value is None:
                    reasons[f"{name}@{k}"] = NO_GOLD
        if record.ndcg_k is not None:
            key = f"ndcg@{record.ndcg_k}"
            metrics[key] = (record.metrics.get("ndcg") or {}).get(str(record.ndcg_k))
            if metrics[key] is None:
                reasons[key] = NO_NDCG
        errors = record.uncertainty
        return cls(
            path=str(path),
            dataset=record.dataset.name or record.dataset_name,
            dataset_spec=record.dataset.spec,
            split=record.dataset.split,
            version=record.dataset.version,
            retriever=record.retriever,
            passages=record.passages,
            config=index_label(record.index, record.retriever),
            question_representation=record.question_representation,
            ks=record.ks,
            ndcg_k=record.ndcg_k,
            n_questions=record.n_questions,
            n_evaluated=record.n_evaluated,
            skipped=record.skipped,
            gold_pages=record.gold_coverage.get("gold_pages"),
            gold_in_snapshot=record.gold_coverage.get("in_snapshot"),
            metrics=metrics,
            null_reasons=reasons,
            stderr={m: errors[m].stderr for m in metrics if m in errors and metrics[m] is not None},
            ci95={m: errors[m].ci95 for m in metrics if m in errors and metrics[m] is not None},
            uncertainty_method={m: errors[m].method for m in metrics if m in errors},
            uncertainty_note={m: errors[m].note for m in metrics if m in errors and getattr(errors[m], "note", None)},
            cluster_by=record.cluster_by,
            metric_options=record.metric_options,
            snapshot_sha256=record.snapshot.content_sha256,
            search_space=record.search_space,
            created_at=record.created_at,
        )

    @property
    def sort_key(self) -> tuple[str, ...]:
        return (self.dataset_spec, self.retriever, self.passages or "", self.config, self.path)


def index_label(index: dict[str, Any], retriever: str) -> str:
    """The index's options in one line: ``bm25 lucene k1=0.9 b=0.4``, ``dense all-MiniLM-L6-v2 hnsw``."""
    bm25 = index.get("bm25")
    if isinstance(bm25, dict):
        opts = bm25.get("options") if isinstance(bm25.get("options"), dict) else bm25
        parts = [f"bm25 {opts.get('method', '?')} k1={opts.get('k1', '?')} b={opts.get('b', '?')}"]
        for key, default in (("stemmer", "porter"), ("stopwords", "en")):
            if key in opts and opts[key] != default:
                parts.append(f"{key}={opts[key]}")
        return " ".join(parts)
    dense = index.get("dense")
    if isinstance(dense, dict):
        ann = dense.get("ann")
        kind = ann.get("kind") if isinstance(ann, dict) else ann
        return f"dense {dense.get('model', '?')}" + (f" {kind}" if kind else " exact")
    return retriever


def load_retriever_row(folder: Path) -> RetrieverRow:
    """One ``retrieval.json`` folder as a row; HarnessError (one line) when the file is unusable."""
    return RetrieverRow.of(read_retrieval(folder), folder)


def _cell(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.4f}"
    return str(value).replace("|", "\\|").replace("\n", " ")


def _value_cell(row: RetrieverRow, key: str) -> str:
    """``0.8500 ± 0.0764``; ``0.0000 ± n/a`` (no spread); ``n/a`` (no value); ``—`` (not measured)."""
    if key not in row.metrics:
        return "—"
    value = row.metrics[key]
    if value is None:
        return "n/a"
    stderr = row.stderr.get(key)
    if stderr is None and key not in row.uncertainty_note:
        return _cell(value)
    return f"{_cell(value)} ± {'n/a' if stderr is None else _cell(stderr)}"


def retriever_metrics(rows: list[RetrieverRow]) -> list[str]:
    """Every METRIC@K of the rows, in the order first met."""
    out: list[str] = []
    for row in rows:
        out += [m for m in row.metrics if m not in out]
    return out


def format_retrievers(rows: list[RetrieverRow]) -> str:
    """The retriever rows' markdown section: one table, never the runs' (``± stderr``; the JSON holds
    each 95% interval and null reason)."""
    metrics = retriever_metrics(rows)
    head = ["dataset", "retriever", "passages", "query", "n", "skipped", "gold in snapshot", *metrics]
    head += ["search space", "path"]
    numeric = {"n", "skipped", *metrics}
    lines = [
        "## Retrievers (harness retrieval-eval: no reader)",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "|".join("---:" if h in numeric else "---" for h in head) + "|",
    ]
    for r in rows:
        gold = f"{r.gold_in_snapshot}/{r.gold_pages}" if r.gold_pages is not None else None
        cells = [
            r.dataset_spec,
            r.config,
            r.passages,
            r.question_representation,
            r.n_evaluated,
            sum(r.skipped.values()),
            gold,
            *[_value_cell(r, m) for m in metrics],
            (r.search_space.label if r.search_space is not None else "") or "—",
            r.path,
        ]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines)
