"""What a run's results.json says besides its scores, assembled into the typed record
(``harness.execution.record.RunResults``): provenance, dataset, counts, tokens, cost, outcomes."""

from __future__ import annotations

import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from harness._version import __version__
from harness.execution.cost import usage_totals
from harness.execution.record import RunResults
from harness.records import CONFIG_FILE, FAILURES_FILE, SAMPLES_FILE
from harness.scoring.results import RESULTS_FORMAT


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def git_commit(package: Path | None = None) -> str | None:
    """The commit of the clone the harness runs from, ``-dirty`` when ``git status --porcelain`` lists
    anything: a changed tracked file or an untracked one that ``.gitignore`` does not cover (a run's
    default ``results/`` and the cache are ignored, so running leaves it clean). None where the
    harness package is not the top of a clone's own tree (an installed wheel, even one in a virtual
    environment inside another project's repository, whose commit is not the harness's)."""
    package = (package or Path(__file__).resolve().parents[1]).resolve()  # the harness/ folder

    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(["git", *args], cwd=package, capture_output=True, text=True, timeout=5)
        except (OSError, subprocess.SubprocessError):
            return None
        return out.stdout.strip() if out.returncode == 0 else None

    top = git("rev-parse", "--show-toplevel")
    if top is None or Path(top).resolve() != package.parent:
        return None
    head = git("rev-parse", "HEAD")
    if head is None:
        return None
    status = git("status", "--porcelain")
    return head + ("-dirty" if status is None or status else "")


def snapshot_hash(snapshot) -> str:
    meta = snapshot.metadata
    return str(meta.get("content_hash") or meta.get("content_sha256") or meta.get("hash"))


def snapshot_text_search(snapshot) -> dict[str, Any] | None:
    """The full-text engine when it is not the snapshot's own (a tantivy sidecar): it changes which
    pages a search returns, so it joins the run key. None otherwise, so existing run keys stay."""
    fulltext = snapshot.metadata.get("fulltext")
    if not isinstance(fulltext, dict):
        return None
    return {k: fulltext.get(k) for k in ("text_search", "tokenizer", "boosts")}


def snapshot_info(snapshot) -> dict[str, Any] | None:
    if snapshot is None:
        return None
    return {
        "path": str(getattr(snapshot, "path", "")),
        "content_hash": snapshot_hash(snapshot),
        "metadata": snapshot.metadata,
    }


def search_space_info(snapshot, samples: list) -> dict[str, Any] | None:
    """The search space a run reads (``SearchSpaceRecord``): the backend's metadata, its scope, and
    the selected questions' gold pages found in it, each needed title resolved by one lookup (no
    scan: cheap on a whole-Wikipedia archive). None without a snapshot."""
    if snapshot is None:
        return None
    from harness.execution.record import SearchSpaceRecord
    from harness.wiki_snapshot.space import EVIDENCE_ONLY_SCOPES, scope_of

    meta = snapshot.metadata
    backend = meta.get("format")
    scope, dataset = scope_of(meta)
    pages = meta.get("pages")
    if pages is None and backend != "mediawiki-live" and hasattr(snapshot, "__len__"):
        pages = len(snapshot)
    needed: dict[str, str] = {}
    for sample in samples:
        for title in sample.needed_titles or ():
            if isinstance(title, str) and title.strip():
                needed.setdefault(title.casefold(), title)
    gold_pages = gold_share = gold_note = None
    if backend == "mediawiki-live":
        gold_note = "not counted: each title would be a request to the live API"
    elif needed:
        found = set()
        # a ZIM names a title's pageid without rendering the page: gold is counted before the first model call
        resolve_pageid = getattr(snapshot, "resolve_pageid", None)
        for title in needed.values():
            if resolve_pageid is not None:
                pageid = resolve_pageid(title)
            else:
                page = snapshot.resolve_title(title)
                pageid = None if page is None else page.pageid
            if pageid is not None:
                found.add(pageid)
        gold_pages = len(found)
        gold_share = gold_pages / pages if pages else None
    else:
        gold_note = "not counted: the selected questions name no needed pages"
    evidence_only = scope in EVIDENCE_ONLY_SCOPES
    path = str(getattr(snapshot, "path", "") or "") or None
    source = meta.get("source") or path  # a ZIM read in place is its own source
    facts = {
        "backend": backend,
        "path": path,
        "pages": pages,
        "redirects": meta.get("redirects"),
        "source": None if source is None else str(source),
        "revision_date": meta.get("revision_date"),
        "scope": scope,
        "scope_dataset": dataset,
        "evidence_only": evidence_only,
        "gold_needed": len(needed),
        "gold_pages": gold_pages,
        "gold_share": gold_share,
        "gold_note": gold_note,
    }
    label = SearchSpaceRecord.label_of(
        backend, facts["source"], facts["revision_date"], pages, scope, dataset, evidence_only, gold_share
    )
    return {**facts, "label": label}


def outcome_counts(done: list[dict[str, Any]]) -> dict[str, int]:
    """How finished samples ended (answered, max_rounds, context_full, ...), from each row's ``outcome``
    (rows written before it was a field kept it in ``extra``)."""
    counts: dict[str, int] = {}
    for r in done:
        outcome = r.get("outcome") or (r.get("extra") or {}).get("outcome") or "answered"
        counts[outcome] = counts.get(outcome, 0) + 1
    return counts


def build_results(
    *,
    run_id: str,
    config_hash: str,
    status: str,
    config,  # RunConfig
    dataset,  # harness.datasets.Dataset
    selected: list,  # the selected samples
    keys: list[str],  # their work keys (question x epoch)
    done: list[dict[str, Any]],
    failed: dict[str, dict[str, Any]],  # work key -> its last failure row, for keys not finished
    agent,  # harness.strategy.Agent
    model_info: dict[str, Any] | None,
    invocations: list[dict[str, Any]],
    started_at: str,
    cost: dict[str, Any],
    stopped_on_budget: bool,
    snapshot,
    scores: dict[str, Any] | None,
    scoring_note: str | None,
    search_space: dict[str, Any] | None = None,
) -> RunResults:
    info = dataset.info
    usage = usage_totals(done)
    tokens_prompt, tokens_completion = usage["prompt_tokens"], usage["completion_tokens"]
    data = {
        "results_format": RESULTS_FORMAT,
        "run_id": run_id,
        "config_hash": config_hash,
        "status": status,
        "harness": {"version": __version__, "git_commit": git_commit(), "python": sys.version.split()[0]},
        "dataset": {
            "name": info.name,
            "split": info.split,
            "version": info.version,
            "spec": info.spec(),
            "path": info.path,
            "sha256": info.sha256,
            "license": info.license,
            **({"plugin": info.plugin} if info.plugin.get("source") not in (None, "builtin") else {}),
            "n_total": len(dataset.samples),
            "n_selected": len(selected),
        },
        "setting": config.setting,
        "agent": agent.describe(),
        "model": model_info,
        "generation": config.generation.model_dump(),
        "max_tokens_source": config.max_tokens_source or None,
        "config": config.model_dump(mode="json"),
        "started_at": started_at,
        "ended_at": now_iso(),
        "counts": {
            # with --epochs, samples are question x epoch
            "selected": len(keys),
            **({"questions": len(selected), "epochs": config.epochs} if config.epochs > 1 else {}),
            "finished": len(done),
            "failed": len(failed),
            "pending": len(keys) - len(done) - len(failed),
            "truncated_output": sum(1 for r in done if r.get("truncated_output")),
        },
        "tokens": {
            "prompt": tokens_prompt,
            "completion": tokens_completion,
            "total": tokens_prompt + tokens_completion,
            # parts of prompt: read from the provider's prompt cache, and written to it
            "cache_read": usage["cache_read_tokens"],
            "cache_write": usage["cache_write_tokens"],
            # part of completion: hidden reasoning or thinking; and what the failed samples spent on it
            "reasoning": usage["reasoning_tokens"],
            "reasoning_failed": usage_totals(failed.values())["reasoning_tokens"],
        },
        "model_calls": sum(r.get("model_calls", 0) for r in done),
        "cost": cost,
        "stopped_on_budget": stopped_on_budget,
        "failures": {key: {"type": row["error_type"], "error": row["error"]} for key, row in failed.items()},
        "sample_ids": [s.id for s in selected],
        "outcomes": outcome_counts(done),
        # the strategy summarizes what it recorded (its searches, evidence recall, packing)
        "retrieval": agent.summarize([r.get("extra") or {} for r in done]),
        "snapshot": snapshot_info(snapshot),
        **({"search_space": search_space} if search_space else {}),  # none: results.json as before
        "invocations": invocations,
        "scores": scores,
        "scoring_note": scoring_note,
        "files": {"samples": SAMPLES_FILE, "failures": FAILURES_FILE, "config": CONFIG_FILE},
    }
    return RunResults.model_validate(data)
