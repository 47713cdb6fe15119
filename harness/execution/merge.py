"""``harness merge DIR... --out DIR``: the shards of one run (``harness run --shard I/K``) joined into
the run they are parts of, as if it had run on one machine.

The shards are checked first, each refusal one line: every directory a run directory of the same
configuration (config hash) that nobody is writing now, a shard (``--shard``) of the same K, the same
selection and scoring options (``--limit``, ``--epochs``, ``--metrics``, ...: not hashed, so the hash
cannot tell), no shard twice, no work key finished in two directories, no row outside its directory's
shard, and every shard 1..K present (``partial``: the missing shards' pairs are counted pending, with
a warning).

The merged run directory is a run directory like any other: ``config.json`` (the run's key, no
shard), ``samples.jsonl`` and ``failures.jsonl`` (every shard's rows, as written), and
``results.json`` built as the runner builds it (``build_results``), over the whole selection, its
scores from the one scoring path (``score_run`` on the merged directory), every shard's invocations
kept. Rerunning the unsharded ``harness run`` with ``--out`` the merged directory resumes it (same
key): it finishes what the shards left pending or failed. The inputs are only read; the output is
assembled in a temporary folder beside it (``.OUT.merging-PID``) and renamed into place whole.

One merge at a time writes an ``--out``: it holds an exclusive ``flock`` on ``.OUT.merge-lock``
beside it (a second merge is refused in one line), and, holding it, removes the temporary folders
that merges killed before their rename left (the kernel drops a killed merge's lock, so no live
merge can own them).
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.errors import HarnessError
from harness.execution.config import RunConfig, parse_shard
from harness.execution.paths import directory_run_id, portable_record, recorded_path
from harness.execution.record import RunClaim, RunResults
from harness.records import (
    CONFIG_FILE,
    FAILURES_FILE,
    RESULTS_FILE,
    SAMPLES_FILE,
    iter_jsonl,
    record_epoch,
    to_json,
    work_key,
    write_bytes_atomic,
    write_json_atomic,
)
from harness.text import json_bytes

# Options outside the run key that decide which pairs a run selects or how they are scored: shards
# that differ in one of them are not parts of one run.
MUST_AGREE = (
    "limit",
    "sample_ids",
    "sample_filter",
    "shuffle",
    "shuffle_seed",
    "stratify_by",
    "epochs",
    "epoch_reducer",
    "metrics",
    "judge",
    "cluster_by",
    "strip_reasoning",
    "metric_options",
    "max_answer_chars",
)


@dataclass
class Shard:
    path: Path
    claim: RunClaim | None
    results: RunResults | None
    config: RunConfig
    config_hash: str
    index: int
    k: int
    finished: dict[str, dict[str, Any]] = field(default_factory=dict)  # work key -> first ok row
    ok_rows: list[dict[str, Any]] = field(default_factory=list)
    failure_rows: list[dict[str, Any]] = field(default_factory=list)

    @property
    def spec(self) -> str:
        return f"{self.index}/{self.k}"


def _rows(path: Path) -> list[dict[str, Any]]:
    """A run file's rows, read only: a line a kill tore (the run's own reader drops it) is skipped,
    never repaired in place."""
    if not path.exists():
        return []
    return [r for _, r in iter_jsonl(path, torn_tail=True) if isinstance(r.get("id"), str)]


def read_shard(path: Path) -> Shard:
    from harness.execution.lock import is_locked
    from harness.execution.scoring import read_run_files, run_config

    results, claim = read_run_files(path)
    holder = is_locked(path)
    if holder:
        raise HarnessError(f"{path} is being written by {holder}: merge once its run has ended")
    config = run_config(results, claim)
    config_hash = claim.config_hash if claim is not None else results.config_hash  # type: ignore[union-attr]
    if not config.shard:
        raise HarnessError(f"{path}: not a shard (its run has no --shard I/K); only shards of one run merge")
    index, k = parse_shard(config.shard)
    shard = Shard(path, claim, results, config, config_hash, index, k)
    shard.ok_rows = [r for r in _rows(path / SAMPLES_FILE) if r.get("status") == "ok"]
    shard.failure_rows = _rows(path / FAILURES_FILE)
    for row in shard.ok_rows:
        shard.finished.setdefault(work_key(row["id"], record_epoch(row)), row)
    return shard


def _shown(value: Any) -> str:
    return "unset" if value is None else repr(value)


def check_shards(shards: list[Shard], partial: bool = False) -> list[int]:
    """Refuse shards that are not the disjoint parts of one run; returns the missing shard numbers
    (refused unless ``partial``)."""
    from harness.execution.selection import shard_of

    first = shards[0]
    by_index: dict[int, Shard] = {}
    owner: dict[str, Shard] = {}
    for shard in shards:
        if shard.config_hash != first.config_hash:
            raise HarnessError(
                f"{shard.path}: a different configuration from {first.path} (run {shard.config_hash[:12]}, "
                f"not {first.config_hash[:12]}): only shards of one run merge"
            )
        if shard.k != first.k:
            raise HarnessError(
                f"{shard.path}: shard {shard.spec}, but {first.path} is shard {first.spec}: "
                "the shards of one run split it into the same K"
            )
        for name in MUST_AGREE:
            mine, theirs = getattr(shard.config, name), getattr(first.config, name)
            if mine != theirs:
                raise HarnessError(
                    f"{shard.path}: --{name.replace('_', '-')} {_shown(mine)}, but {first.path} has "
                    f"{_shown(theirs)}: the shards of one run select and score alike"
                )
        for key, row in shard.finished.items():
            held = shard_of(row["id"], shard.k)
            if held != shard.index:
                raise HarnessError(
                    f"{shard.path}: sample {key} is finished there, but it belongs to shard {held}/{shard.k}, "
                    f"not {shard.spec}"
                )
            if key in owner:
                raise HarnessError(
                    f"sample {key} is finished in both {owner[key].path} and {shard.path}: the shards overlap"
                )
            owner[key] = shard
        if shard.index in by_index:  # (with rows finished in both, refused above as an overlap)
            raise HarnessError(f"shard {shard.spec} given twice: {by_index[shard.index].path} and {shard.path}")
        by_index[shard.index] = shard
    missing = [i for i in range(1, first.k + 1) if i not in by_index]
    if missing and not partial:
        names = ", ".join(f"{i}/{first.k}" for i in missing)
        raise HarnessError(
            f"shard{'s' if len(missing) > 1 else ''} {names} of run {first.config_hash[:12]} missing: give every "
            "shard's run directory (or --partial: merge these, the missing shards' samples counted pending)"
        )
    return missing


# what a merge writes, results.json last (a reader never sees new results over old rows)
MERGED_FILES = (CONFIG_FILE, SAMPLES_FILE, FAILURES_FILE, RESULTS_FILE)


def _check_out(out: Path, shards: list[Shard], shards_folder: str | None = None) -> None:
    from harness.execution.lock import LOCK_FILE
    from harness.records import check_output_path

    check_output_path(out, "--out", directory=True)
    # beside the shards' folder: the lock of whoever launched them, and an earlier merge's files (replaced)
    allowed = {shards_folder, LOCK_FILE, *MERGED_FILES} if shards_folder else set()
    if out.exists() and any(p.name not in allowed for p in out.iterdir()):
        raise HarnessError(f"--out {out}: exists and is not empty; merge writes a new run directory")
    real = Path(os.path.realpath(out))
    for shard in shards:
        inside = Path(os.path.realpath(shard.path))
        if real == inside or inside in real.parents:
            raise HarnessError(f"--out {out}: inside the shard {shard.path}; merge never writes into its inputs")


def merge_runs(
    dirs: list[str | Path], out: str | Path, partial: bool = False, shards_folder: str | None = None
) -> RunResults:
    """Merge the shard directories ``dirs`` into the new run directory ``out``; returns its results.
    ``shards_folder``: the folder inside ``out`` that holds the shards (``harness run --shards K
    --launcher ray`` keeps them in OUT/shards): ``out`` may hold it, and the files an earlier merge of
    them wrote there, which this merge replaces."""
    if not dirs:
        raise HarnessError("merge needs the shards' run directories")
    paths = [Path(d) for d in dirs]
    seen: dict[str, Path] = {}
    for path in paths:
        real = os.path.realpath(path)
        if real in seen:
            raise HarnessError(f"{path}: given twice (as {seen[real]})")
        seen[real] = path
    shards = [read_shard(path) for path in paths]
    missing = check_shards(shards, partial)
    out = Path(out)
    from harness.execution.lock import PathLock
    from harness.records import check_output_path

    check_output_path(out, "--out", directory=True)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise HarnessError(f"--out {out}: cannot create its parent folder: {exc.strerror}") from None
    lock = PathLock(out.parent / f".{out.name}.merge-lock")
    if not lock.acquire():
        raise HarnessError(
            f"--out {out}: another harness merge ({lock.holder()}) is writing it now; wait for it to end, "
            "or choose another --out"
        )
    try:
        return _merge_locked(shards, missing, out, shards_folder)
    finally:
        lock.release()


def _remove_dead_merges(out: Path) -> None:
    """The temporary folders of merges into ``out`` that were killed before their rename (called
    holding the merge lock: no live merge owns one)."""
    prefix = f".{out.name}.merging-"
    for path in out.parent.iterdir():
        if path.name.startswith(prefix) and path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)


def _merge_locked(shards: list[Shard], missing: list[int], out: Path, shards_folder: str | None) -> RunResults:
    _check_out(out, shards, shards_folder)
    _remove_dead_merges(out)
    shards.sort(key=lambda s: s.index)
    if missing:
        names = ", ".join(f"{i}/{shards[0].k}" for i in missing)
        print(
            f"warning: shard{'s' if len(missing) > 1 else ''} {names} missing: their samples are counted pending "
            f"(run the unsharded command with --out {out} to finish them)",
            file=sys.stderr,
        )
    tmp = out.parent / f".{out.name}.merging-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        record = _write_merged(shards, tmp, out, _claimed_run_id(out, shards[0]) if shards_folder else None)
        if shards_folder and out.exists():  # around the shards' folder: file by file, results.json last
            (out / RESULTS_FILE).unlink(missing_ok=True)
            for name in MERGED_FILES:
                if (tmp / name).exists():
                    os.replace(tmp / name, out / name)
                else:
                    (out / name).unlink(missing_ok=True)
            tmp.rmdir()
        else:
            if out.exists():
                out.rmdir()  # empty: checked above
            os.rename(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return record


def _claimed_run_id(out: Path, first: Shard) -> str | None:
    """The run id an earlier merge into ``out`` gave this run (merged again: the same directory's run)."""
    from harness.records import read_json

    try:
        old = read_json(out / CONFIG_FILE)
    except Exception:  # noqa: BLE001 - none, or unreadable: a new id
        return None
    run_id = old.get("run_id") if isinstance(old, dict) and old.get("config_hash") == first.config_hash else None
    return run_id if isinstance(run_id, str) and run_id.startswith(first.config_hash[:12]) else None


def _write_merged(shards: list[Shard], tmp: Path, out: Path, run_id: str | None = None) -> RunResults:
    from harness.execution.cost import load_price_table, pricing_for, run_cost
    from harness.execution.scoring import load_run_dataset, score_run
    from harness.execution.selection import select_samples
    from harness.execution.summary import build_results, now_iso
    from harness.strategy import create_agent

    first = shards[0]
    config = first.config.model_copy(update={"shard": None, "shard_env": None, "out": str(out), "only_failed": False})
    claim = first.claim.model_dump(mode="json") if first.claim is not None else {}
    # the merged directory's run, not a shard's
    run_id = run_id or directory_run_id(first.config_hash, out, now_iso())
    claim.update(config_hash=first.config_hash, run_id=run_id, config=config.model_dump(mode="json"))
    write_json_atomic(tmp / CONFIG_FILE, claim)
    ok_rows = [row for shard in shards for row in shard.ok_rows]
    failure_rows = [row for shard in shards for row in shard.failure_rows]
    for name, rows in ((SAMPLES_FILE, ok_rows), (FAILURES_FILE, failure_rows)):
        if rows or any((shard.path / name).exists() for shard in shards):
            write_bytes_atomic(tmp / name, json_bytes("".join(to_json(row) + "\n" for row in rows)))

    dataset = load_run_dataset(first.results, first.claim)
    selected = select_samples(dataset, config)
    epochs = range(1, config.epochs + 1)
    keys = [work_key(s.id, e) for e in epochs for s in selected]
    finished = {key: row for shard in shards for key, row in shard.finished.items()}
    done = [finished[k] for k in keys if k in finished]
    failed: dict[str, dict[str, Any]] = {}
    for shard in shards:  # what each shard's results.json counts failed, its last failure row
        if shard.results is None:
            continue
        last = {work_key(r["id"], record_epoch(r)): r for r in shard.failure_rows}
        for key in shard.results.failures:
            if key not in finished and key in last:
                failed[key] = last[key]
    failed = {k: failed[k] for k in keys if k in failed}

    scores, scoring_note = None, None
    if not selected:
        scoring_note = "the run selects no questions: nothing to score"
    elif dataset.info.has_answers:  # the one scoring path: `harness score` of the merged directory
        scores = score_run(tmp)
    else:
        scoring_note = f"{dataset.info.spec()} has no reference answers; export the generations to score them"

    invocations: list[dict[str, Any]] = []
    for shard in shards:  # every shard's, in shard order, numbered on; rows keep their shard's numbers
        for inv in shard.results.invocations if shard.results is not None else []:
            data = inv.model_dump(mode="json", exclude_unset=True)
            data.update(
                number=len(invocations) + 1, shard=shard.spec, shard_number=inv.number, merged_from=str(shard.path)
            )
            invocations.append(data)
    started = [s.results.started_at for s in shards if s.results is not None and s.results.started_at]
    stopped_on_budget = any(s.results is not None and s.results.stopped_on_budget for s in shards)
    table = load_price_table(config.price_table)
    # as the shards priced it (their batch price under --batch); backend None: resolved from the prefix
    pricing = pricing_for(config.model, table, batch=config.backend.batch, backend=None)
    pending = len(keys) - len(done) - len(failed)
    status = "complete" if not failed and not pending else "budget_exhausted" if stopped_on_budget else "incomplete"
    record = build_results(
        run_id=run_id,
        config_hash=first.config_hash,
        status=status,
        config=config,
        dataset=dataset,
        selected=selected,
        keys=keys,
        done=done,
        failed=failed,
        agent=create_agent(config),
        model_info=_model_info(shards),
        invocations=invocations,
        started_at=min(started) if started else now_iso(),
        cost=run_cost(pricing, table, done, ok_rows + failure_rows, scores, None, config.max_cost),
        stopped_on_budget=stopped_on_budget,
        snapshot=None,
        scores=scores,
        scoring_note=scoring_note,
    )
    # as the shards recorded it: their config, read back, has max_tokens set whatever set it
    record.max_tokens_source = next(
        (s.results.max_tokens_source for s in shards if s.results is not None and s.results.max_tokens_source), None
    )
    record.snapshot = next(  # the snapshot the shards read, as they recorded it (its hash is in their key)
        (s.results.snapshot for s in shards if s.results is not None and s.results.snapshot is not None), None
    )
    space = _merged_search_space(shards, config, selected)
    if space is not None:
        record.search_space = space
    record = portable_record(record)
    write_json_atomic(tmp / RESULTS_FILE, record.model_dump(mode="json", exclude_unset=True))
    return record


def _merged_search_space(shards: list[Shard], config, selected: list):
    """The whole selection's search space: its gold pages counted again over every shard's questions
    where the snapshot is at hand; else the shards' record without a gold count (theirs were of their
    own questions, and pages shared between shards cannot be told apart from the counts)."""
    from harness.execution.record import SearchSpaceRecord
    from harness.execution.summary import search_space_info

    recorded = next((s.results.search_space for s in shards if s.results is not None and s.results.search_space), None)
    if recorded is None:
        return None
    try:
        if config.search_url:  # the shards read a search service: asked again if it still serves that snapshot
            from harness.wiki_snapshot.remote import RemoteWiki

            read = [s.results.snapshot.content_hash for s in shards if s.results is not None and s.results.snapshot]
            wiki = RemoteWiki.connect(config.search_url, attempts=1)
            if not read or wiki.content_hash != read[0]:
                wiki.close()
                raise ValueError("it serves another snapshot now")
        else:
            from harness.wiki_snapshot import open_wiki

            wiki = open_wiki(recorded_path(config.snapshot, shards[0].path, shards[0].config.out))
    except Exception:  # noqa: BLE001 - moved, unreadable or not served here: said in the record
        facts = recorded.model_dump()
        facts.update(gold_pages=None, gold_share=None, gold_needed=None)
        where = config.search_url or config.snapshot
        facts["gold_note"] = f"not counted: {where} could not be opened when the shards were merged"
        keys = ("backend", "source", "revision_date", "pages", "scope", "scope_dataset", "evidence_only", "gold_share")
        facts["label"] = SearchSpaceRecord.label_of(*(facts[k] for k in keys))
        return SearchSpaceRecord.model_validate(facts)
    try:
        return SearchSpaceRecord.model_validate(search_space_info(wiki, selected))
    finally:
        wiki.close()


def _model_info(shards: list[Shard]) -> dict[str, Any] | None:
    """The shards' model facts; where they differ (each shard's per-server counters, a context size
    reported by each machine's server), the first shard's without its counters, and every shard's as it
    recorded them under ``shards``."""
    records = {s.spec: s.results.model.model_dump(mode="json", exclude_unset=True) for s in shards
               if s.results is not None and s.results.model is not None}  # fmt: skip
    if not records:
        return None
    first = next(iter(records.values()))
    if all(record == first for record in records.values()):
        return first
    return {**{k: v for k, v in first.items() if k != "servers"}, "shards": records}
