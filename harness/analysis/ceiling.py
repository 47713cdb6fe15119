"""Answerability ceiling: with no model, how much of the gold answer is even present in what the
evidence-provided setting would pack at each context size. The score is FanOutQA's own string
accuracy of the packed documents against the reference (loose: share of answer items found;
strict: all found), so it bounds what a perfect reader could reach at that size.

It bounds that measure only (``BOUNDS``): the same ``answer_in_text`` applied to the model's answer,
FanOutQA's loose and strict accuracy. Other metrics match differently and are not bounded by it: F1
and ROUGE give credit for overlapping tokens with no answer item packed (a sweep measured F1 0.083
at 1k tokens where the ceiling was 0.000), EM compares the whole answer under another normalization
(SQuAD's, no lemmas), a judge reads meaning. Figures draw the ceiling on BOUNDS' panels alone."""

from __future__ import annotations

from typing import Any, Literal

from harness.execution.config import RunConfig
from harness.errors import ConfigError, MissingEvidenceError

# The metric keys the ceiling bounds, each with the ceiling of its own measure: the share of answer
# items present (loose) or every item present (strict).
BOUNDS: dict[str, Literal["loose", "strict"]] = {
    "fanoutqa-string.acc.loose": "loose",
    "fanoutqa-string.acc.strict": "strict",
}


def ceiling_of(key: str) -> Literal["loose", "strict"] | None:
    """Which ceiling bounds the metric key (``BOUNDS``); None: the ceiling is not its measure."""
    return BOUNDS.get(key)


async def compute_ceiling(config: RunConfig, context_sizes: list[int]) -> dict[str, Any]:
    from harness.datasets import load_dataset
    from harness.models import create_backend
    from harness.execution.runner import select_samples
    from harness.execution.summary import snapshot_hash
    from harness.scoring.fanoutqa_metrics import answer_in_text
    from harness.strategy import budget_tokens, create_agent
    from harness.wiki_snapshot import Snapshot

    if config.setting != "evidence-provided":
        raise ConfigError("the ceiling is defined for --setting evidence-provided")
    if not config.snapshot:
        raise ConfigError("ceiling needs --snapshot SNAP.db")
    agent = create_agent(config)
    if not all(hasattr(agent, m) for m in ("ranked_evidence", "build_prompt", "packed_documents")):
        raise ConfigError(f"agent {agent.name} does not pack evidence (ranked_evidence, build_prompt): no ceiling")
    knobs = agent.knobs  # evidence-provided's: the packing being bounded
    if not context_sizes or any(size <= knobs.evidence_reserve for size in context_sizes):
        raise ConfigError(f"context sizes must each exceed the reserve ({knobs.evidence_reserve} tokens)")
    dataset = load_dataset(config.dataset, config.data_path)
    if not dataset.info.has_answers:
        raise ConfigError(f"{dataset.info.spec()} has no reference answers")
    samples = select_samples(dataset, config)
    agent.check_dataset(dataset, samples)
    snapshot = Snapshot.open(config.snapshot)
    backend = create_backend(config.model, config.backend)  # only its tokenizer is used
    await backend.start()
    try:
        agent.prepare(backend, snapshot)
        per_sample = []
        for sample in samples:
            row: dict[str, Any] = {"id": sample.id, "sizes": {}}
            try:
                chunks = agent.ranked_evidence(sample)
            except MissingEvidenceError as exc:
                row["missing_evidence"] = exc.titles
                per_sample.append(row)
                continue
            for size in context_sizes:
                budget = budget_tokens(size, knobs.evidence_reserve)
                prompt, record = agent.build_prompt(sample, budget=budget, chunks=chunks)
                # Only the packed documents count: a question can name its own answer ("A or B?").
                documents = agent.packed_documents(chunks, record["chunks_packed"])
                result = answer_in_text(sample.answer, documents)
                row["sizes"][str(size)] = {
                    "loose": result.score,
                    "strict": float(result.found),
                    "chunks_packed": record["chunks_packed"],
                    "chunks_total": record["chunks_total"],
                    "prompt_tokens": record["prompt_tokens"],
                }
            per_sample.append(row)
    finally:
        await backend.close()
    rows = []
    n = len(per_sample)
    for size in context_sizes:
        cells = [r["sizes"].get(str(size)) for r in per_sample]
        ok = [c for c in cells if c]
        rows.append(
            {
                "context_size": size,
                "loose": sum(c["loose"] for c in ok) / n if n else 0.0,  # missing evidence counts 0
                "strict": sum(c["strict"] for c in ok) / n if n else 0.0,
                "chunks_packed_mean": sum(c["chunks_packed"] for c in ok) / len(ok) if ok else 0.0,
                "prompt_tokens_mean": sum(c["prompt_tokens"] for c in ok) / len(ok) if ok else 0.0,
                "cut": sum(1 for c in ok if c["chunks_packed"] < c["chunks_total"]),
            }
        )
    return {
        "dataset": dataset.info.spec(),
        "dataset_sha256": dataset.info.sha256,
        "snapshot_content_hash": snapshot_hash(snapshot),
        "tokenizer": backend.tokenizer_name(),
        "reserve_tokens": knobs.evidence_reserve,
        "chunk_size": knobs.chunk_size,
        "n_samples": n,
        "missing_evidence": sum(1 for r in per_sample if "missing_evidence" in r),
        "rows": rows,
        "per_sample": per_sample,
    }


def format_table(result: dict[str, Any]) -> str:
    lines = [
        "| context size | ceiling loose | ceiling strict | chunks packed | prompt tokens | samples cut |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for r in result["rows"]:
        lines.append(
            f"| {r['context_size']} | {r['loose']:.4f} | {r['strict']:.4f} | {r['chunks_packed_mean']:.1f} | "
            f"{r['prompt_tokens_mean']:.0f} | {r['cut']} |"
        )
    return "\n".join(lines)
