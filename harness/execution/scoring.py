"""The one scoring path of a run. ``harness run`` (``Run._results``, hence ``harness ablate``'s runs)
scores its finished samples with ``score_records``; ``harness score RUN_DIR`` calls ``score_run``,
which reloads the run's own dataset (recorded spec, ``--data-path`` file, checked by sha256), its
selected questions, finished answers, metrics and scoring options, and goes through the same
``score_records``: re-scoring an unchanged run gives its own scores back."""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

from pydantic_core import to_jsonable_python

from harness.datasets import Dataset, Sample, load_dataset
from harness.errors import DatasetError, HarnessError
from harness.execution.config import RunConfig
from harness.execution.record import RunClaim, RunResults, parse_results, read_claim, read_results
from harness.records import CONFIG_FILE, FAILURES_FILE, RESULTS_FILE, record_epoch, work_key
from harness.scoring.metrics import ScoringOptions, check_metrics, score_answers, score_nothing
from harness.scoring.results import RESULTS_FORMAT
from harness.scoring.scores import Scores, ScoresMeta


def score_records(
    dataset: Dataset,
    questions: list[Sample],
    records: list[dict[str, Any]],
    metrics: list[str] | None = None,
    options: ScoringOptions | None = None,
    only_answered: bool = False,
    precomputed: dict[Any, dict[str, Any]] | None = None,
    epochs: int = 1,
    reducer: str = "mean",
    failures: dict[str, dict[str, Any]] | None = None,
    stopped: str | None = None,
) -> Scores:
    """Scores of finished sample records ({"id", "answer", ...}) on the selected questions.

    A question is scored iff it has a finished record: one that finished without an answer (context
    full, rounds exhausted) is the model's outcome and counts 0, as a missing answer counts in an
    official submission. A question that failed (``failures``: {work key: its failure row}) or was
    never asked (``stopped``: why the run did not reach it) is not scored at all: not in ``raw``, the
    aggregates, breakdowns or intervals; ``meta`` counts it (``n_failed``, ``n_pending``) and says why
    (``not_scored``). With no question scored every number is null, never 0 (``score_nothing``).

    Records of several epochs (``--epochs``; a record's ``epoch``, 1 when absent): each epoch is
    scored alone over the questions finished in it, then its numbers combined by the reducer
    (``harness.scoring.epochs``); ``precomputed`` is then {epoch: the streamed values of that epoch}."""
    by_epoch: dict[int, dict[str, dict[str, Any]]] = {}
    for r in records:
        by_epoch.setdefault(record_epoch(r), {}).setdefault(r["id"], r)
    n = max([epochs, *by_epoch])

    def scored_in(epoch: int) -> list[Sample]:
        finished = by_epoch.get(epoch, {})
        return [
            q for q in questions if q.id in finished and (not only_answered or finished[q.id].get("answer") is not None)
        ]

    def score_epoch(epoch: int, pre: dict[str, Any] | None) -> dict[str, Any] | None:
        scored = scored_in(epoch)
        if not scored:
            return None
        finished = by_epoch[epoch]
        answers = [{"id": r["id"], "answer": r["answer"]} for r in finished.values() if r.get("answer") is not None]
        # the metrics that read rows (``agent``) get the finished rows
        return score_answers(dataset, scored, answers, metrics, only_answered, options, pre, finished)

    scored_ids = {q.id for e in range(1, n + 1) for q in scored_in(e)}
    counted = _count_unscored(questions, scored_ids, by_epoch, n, failures or {}, stopped)
    if n == 1:
        scores = score_epoch(1, precomputed)
    else:
        from harness.scoring.epochs import check_reducer, reduce_epoch_scores
        from harness.scoring.metrics import resolve_metrics

        fns = {name: entry.obj for name, entry in resolve_metrics(list(metrics or dataset.metrics)).items()}
        check_reducer(reducer, fns, n)  # mode on continuous values: refused before any epoch is scored
        scores = None
        if scored_ids:
            per_epoch = [score_epoch(e, (precomputed or {}).get(e)) for e in range(1, n + 1)]
            scores = reduce_epoch_scores(per_epoch, reducer, questions, fns)
            scores.epochs["n_answered"] = [len(scored_in(e)) for e in range(1, n + 1)]
    if scores is None:
        from harness.scoring.epochs import epochs_of_nothing

        scores = score_nothing(dataset, questions, metrics, options, counted["not_scored"] or "no question selected")
        if n > 1:
            scores.epochs = epochs_of_nothing(n, reducer)
            scores.meta.epochs, scores.meta.epoch_reducer = n, reducer
    for field, value in {"n_questions": len(questions), "n_answered": len(scored_ids), **counted}.items():
        setattr(scores.meta, field, value)
    return scores


def _count_unscored(
    questions: list[Sample],
    scored: set[str],
    finished: dict[int, dict[str, dict[str, Any]]],
    epochs: int,
    failures: dict[str, dict[str, Any]],
    stopped: str | None,
) -> dict[str, Any]:
    """{"n_failed", "n_pending", "not_scored"} of the questions without values: failed (a failure
    row in some epoch, finished in none), not asked, or (``only_answered``) finished unanswered."""
    failed: list[dict[str, Any]] = []
    pending = unanswered = 0
    for q in questions:
        if q.id in scored:
            continue
        rows = [failures[work_key(q.id, e)] for e in range(1, epochs + 1) if work_key(q.id, e) in failures]
        if rows:
            failed.append(rows[0])
        elif any(q.id in finished.get(e, {}) for e in range(1, epochs + 1)):
            unanswered += 1
        else:
            pending += 1
    return {
        "n_failed": len(failed),
        "n_pending": pending,
        "not_scored": not_scored_reason(len(questions), failed, pending, stopped, unanswered),
    }


def not_scored_reason(
    n_questions: int, failed: list[dict[str, Any]], pending: int, stopped: str | None, unanswered: int = 0
) -> str | None:
    """Why questions have no values, e.g. ``3 of 3 failed: model_unavailable (gave up after retries:
    HTTP 500 ...)`` or ``3 of 3 not asked: run stopped (error: ...)``; None when every one was scored.
    ``failed``: one failure row ({"error_type", "error"}) per failed question."""
    parts = []
    if failed:
        kinds: dict[str, list[str]] = {}
        for row in failed:
            kinds.setdefault(str(row.get("error_type") or "error"), []).append(" ".join(str(row.get("error") or "").split()))
        shown = [
            (f"{len(errors)} " if len(kinds) > 1 else "") + kind + (f" ({_short(errors[0])})" if errors[0] else "")
            for kind, errors in sorted(kinds.items(), key=lambda kv: -len(kv[1]))
        ]
        parts.append(f"{len(failed)} of {n_questions} failed: {', '.join(shown)}")
    if pending:
        parts.append(f"{pending} of {n_questions} not asked: {stopped or 'not run yet'}")
    if unanswered:
        parts.append(f"{unanswered} of {n_questions} finished without an answer (only answered questions scored)")
    return "; ".join(parts) or None


def _short(text: str, limit: int = 120) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


# Why a run's pending questions were never asked, by the status it ended with.
STOPPED = {
    "error": "run stopped",
    "interrupted": "run interrupted",
    "budget_exhausted": "run stopped on budget (--max-cost)",
    "running": "run did not reach them (killed, or still running)",
}


def stopped_reason(status: str | None, error: str | None = None) -> str:
    """``run stopped (error: ...)``: why questions of a run ending with ``status`` were not asked."""
    text = STOPPED.get(status or "running", "not run yet")
    if error:
        text += f" (error: {_short(' '.join(error.split()), 200)})"
    return text


# Record kinds (harness.strategy.RECORD_KINDS) that give a strategy's runs the ``agent`` metrics by default
AGENT_METRIC_RECORDS = ("searches", "evidence_recall")


def run_metrics(
    metrics: list[str] | None,
    dataset: Dataset,
    records: tuple[str, ...] | list[str],
    confidence: bool = False,
    citations: bool = False,
) -> list[str] | None:
    """A run's metrics: ``--metrics`` as given; else, for a strategy that records searches or
    evidence recall (open-book, retrieve-read), the dataset's plus ``agent``, and ``calibration`` /
    ``citations`` for a run that asks for a confidence / citations; else None (the dataset's). The
    runner records the result in its config, so ``harness score RUN_DIR`` scores it too."""
    if metrics:
        return metrics
    added = [
        *(["agent"] if set(records) & set(AGENT_METRIC_RECORDS) else []),
        *(["calibration"] if confidence else []),
        *(["citations"] if citations else []),
    ]
    return [*dataset.metrics, *added] if added else metrics


def read_run_files(run_dir: str | Path) -> tuple[RunResults | None, RunClaim | None]:
    """(results.json, config.json) of a run directory, typed, each None when absent."""
    run_dir = Path(run_dir)
    results_file, claim_file = run_dir / RESULTS_FILE, run_dir / CONFIG_FILE
    if not results_file.exists() and not claim_file.exists():
        raise HarnessError(f"{run_dir}: not a run directory (no {RESULTS_FILE} or {CONFIG_FILE})")
    results = read_results(results_file) if results_file.exists() else None
    claim = read_claim(claim_file) if claim_file.exists() else None
    return results, claim


def run_config(results: RunResults | None, claim: RunClaim | None) -> RunConfig:
    if results is not None:
        return results.config
    if claim is not None:
        return claim.config
    raise HarnessError("the run records no configuration")


def load_run_dataset(
    results: RunResults | None,
    claim: RunClaim | None = None,
    data_path: str | None = None,
    run_dir: str | Path | None = None,
) -> Dataset:
    """The dataset a run read, loaded again: its recorded spec (``NAME:SPLIT@VERSION[+file]``) and
    ``--data-path`` file (``data_path`` overrides the recorded one, e.g. after a move), refused
    unless its sha256 is the one recorded. A recorded path relative to the run's working directory
    is found from ``run_dir`` too (``paths.recorded_path``)."""
    from harness.execution.paths import recorded_path

    config = run_config(results, claim)
    spec = (results.dataset.spec if results else None) or (claim.dataset_resolved if claim else None) or config.dataset
    sha256 = (results.dataset.sha256 if results else None) or (claim.dataset_sha256 if claim else None)
    path = data_path or recorded_path(config.data_path, run_dir, config.out)
    try:
        dataset = load_dataset(spec, path)
    except DatasetError as exc:
        hint = "; pass the dataset file with --data-path" if path and not data_path else ""
        raise HarnessError(f"cannot load the run's dataset {spec}: {exc}{hint}") from None
    if dataset.info.spec() != spec:
        raise HarnessError(f"the run's dataset is {spec}, but {dataset.info.spec()} was loaded")
    if sha256 and dataset.info.sha256 != sha256:
        where = f" ({path})" if path else ""
        raise HarnessError(f"{spec}{where} changed since the run (sha256 differs)")
    return dataset


def recorded_options(config: RunConfig) -> ScoringOptions:
    """The scoring options the run was made with (judge, BLEURT checkpoint, response cache), their
    recorded paths read back (``paths.recorded_path``)."""
    from harness.execution.paths import recorded_path

    options = config.scoring_options()
    paths = {k: recorded_path(getattr(options, k)) for k in ("cache_path", "bleurt_checkpoint")}
    return options.model_copy(update=paths)


def score_run(
    run_dir: str | Path,
    metrics: list[str] | None = None,
    options: ScoringOptions | None = None,
    only_answered: bool = False,
    data_path: str | None = None,
    named_options: dict[str, Any] | None = None,
) -> Scores:
    """Scores of a run directory's finished samples. ``metrics`` and
    ``options`` default to the run's own; nothing is written. Checked first as a run is
    (``check_metrics``); ``named_options``: the metric options named now."""
    from harness.records import load_finished
    from harness.execution.selection import select_samples

    run_dir = Path(run_dir)
    results, claimed = read_run_files(run_dir)
    config = run_config(results, claimed)
    dataset = load_run_dataset(results, claimed, data_path, run_dir)
    if not dataset.info.has_answers:
        raise HarnessError(f"{dataset.info.spec()} has no reference answers; export the generations to score them")
    if results is not None and "sample_ids" in results.model_fields_set:
        ids = list(results.sample_ids)
    else:  # killed before its results.json: select as the run did
        ids = [s.id for s in select_samples(dataset, config)]
    by_id = dataset.by_id()
    unknown = [i for i in ids if i not in by_id]
    if unknown:
        raise HarnessError(f"{run_dir}: sample id(s) not in {dataset.info.spec()}: {', '.join(unknown[:5])}")
    finished = load_finished(run_dir)
    questions = [by_id[i] for i in ids]
    epochs = max([config.epochs, *(record_epoch(r) for r in finished.values())])
    records = [finished[work_key(i, e)] for e in range(1, epochs + 1) for i in ids if work_key(i, e) in finished]
    options = options or recorded_options(config)
    check_metrics(
        dataset,
        questions,
        list(metrics or config.metrics or dataset.metrics),
        options,
        [{"id": r["id"], "answer": r.get("answer")} for r in records],
        given=named_options or {},
    )
    failures, stopped = _unfinished_of(run_dir, results, finished)
    return score_records(
        dataset,
        questions,
        records,
        metrics or config.metrics,
        options,
        only_answered,
        epochs=epochs,
        reducer=config.epoch_reducer,
        failures=failures,
        stopped=stopped,
    )


def _unfinished_of(
    run_dir: Path, results: RunResults | None, finished: dict[str, dict[str, Any]]
) -> tuple[dict[str, dict[str, Any]], str]:
    """(the failures its results.json counts, {work key: {"error_type", "error"}}; why its pending
    questions were not asked). A run killed before its results.json: its failure rows not finished since."""
    from harness.records import iter_jsonl

    if results is not None:
        failures = {key: {"error_type": f.type, "error": f.error} for key, f in results.failures.items()}
        last = results.invocations[-1] if results.invocations else None
        return failures, stopped_reason(results.status, last.error if last is not None else None)
    failures = {}
    path = run_dir / FAILURES_FILE
    if path.exists():
        for _, row in iter_jsonl(path, torn_tail=True):
            if row.get("status") == "error" and isinstance(row.get("id"), str):
                key = work_key(row["id"], record_epoch(row))
                if key not in finished:
                    failures[key] = row  # the last attempt's
    return failures, stopped_reason("running")


class Rescored(NamedTuple):
    """What ``rescore_run`` did: the run's scores now (the re-scored metrics merged with the kept
    ones), whether results.json was written, and which metrics were scored now, kept as they were,
    or dropped (``drop_other_metrics``)."""

    scores: Scores
    saved: bool
    scored: list[str]
    kept: list[str]
    dropped: list[str]


def rescore_run(
    run_dir: str | Path,
    metrics: list[str] | None = None,
    given: dict[str, Any] | None = None,
    only_answered: bool = False,
    data_path: str | None = None,
    save: bool = True,
    metric_options: dict[str, dict[str, Any]] | None = None,
    drop_other_metrics: bool = False,
) -> Rescored:
    """``harness score RUN_DIR``: ``score_run`` with the run's options updated by ``given`` (judge,
    bleurt_checkpoint named now) and its metric options by ``metric_options`` (option by option),
    written into its results.json in results format 2 whatever format it had (a killed run has none:
    nothing is written). The metrics scored now replace their own numbers and add to the others
    the file holds, which stay as they were (``merge_scores``); ``drop_other_metrics``: the file
    holds the metrics scored now alone."""
    from harness.execution.cost import refresh_judge_cost
    from harness.execution.lock import RunLock
    from harness.execution.paths import portable_record
    from harness.records import write_json_atomic

    run_dir = Path(run_dir)
    read_run_files(run_dir)  # not a run directory: refused before the lock file is created in it
    with RunLock(run_dir, purpose="re-scoring"):  # no run appends samples or writes results.json meanwhile
        results, claimed = read_run_files(run_dir)
        options = recorded_options(run_config(results, claimed)).model_copy(update=given or {})
        merged = {name: dict(values) for name, values in options.metric_options.items()}
        for name, values in (metric_options or {}).items():
            merged.setdefault(name, {}).update(values)
        options = options.model_copy(update={"metric_options": merged})
        scores = score_run(run_dir, metrics, options, only_answered, data_path=data_path, named_options=metric_options)
        scored = scored_metrics(scores)
        before = results.scores if results is not None else None
        if drop_other_metrics or not before:
            kept: list[str] = []
            dropped = [n for n in metrics_of(before) if n not in scored]
        else:
            scores, kept = merge_scores(before, scores)
            dropped = []
        if results is None or not save:
            return Rescored(scores, False, scored, kept, dropped)
        data = results.model_dump(mode="json", exclude_unset=True)
        data.update(results_format=RESULTS_FORMAT, scores=scores)  # written in this harness's format
        if results.cost is not None:  # a judge named now has a cost of its own
            data["cost"] = refresh_judge_cost(data["cost"], results.config.price_table, scores)
        record = portable_record(parse_results(data, run_dir / RESULTS_FILE))  # what is written validates
        write_json_atomic(run_dir / RESULTS_FILE, record.model_dump(mode="json", exclude_unset=True))
    return Rescored(scores, True, scored, kept, dropped)


# --------------------------------------------------------------------------- merging a re-scoring
def metrics_of(scores: Scores | dict[str, Any] | None) -> list[str]:
    """The metrics a scores dict holds numbers of (``meta.metrics``, then any other namespace), and
    those that failed in it (``meta.failed_metrics``)."""
    if not scores:
        return []
    scores = Scores.of(scores)
    return list(dict.fromkeys([*scores.meta.metrics, *scores.metric_names(), *scores.failed_metrics()]))


def scored_metrics(scores: Scores | dict[str, Any]) -> list[str]:
    """The metrics a scoring covered: those it scored and those that failed in it."""
    scores = Scores.of(scores)
    return list(dict.fromkeys([*scores.meta.metrics, *scores.failed_metrics()]))


# Facts of a scoring every metric's numbers depend on: a kept metric is only kept where they are the
# same in the scoring that keeps it (the same questions and answers, read the same way).
SHARED_FACTS: tuple[tuple[str, str], ...] = (
    ("dataset_sha256", "the dataset file's sha256"),
    ("n_questions", "questions scored"),
    ("n_answered", "answered questions"),
    ("only_score_answered", "--only-answered"),
    ("epochs", "epochs"),
    ("epoch_reducer", "the epoch reducer"),
    ("options.max_answer_chars", "--max-answer-chars"),
    ("options.strip_reasoning", "--strip-reasoning"),
    ("options.confidence", "--confidence"),
    ("options.citations", "--citations"),
    ("clustering.by", "--cluster-by"),
)


def _fact(meta: ScoresMeta, path: str) -> tuple[bool, Any]:
    """(recorded, value) of a fact of a scoring: a field its meta holds (an older file may not have
    set it), then the keys within it."""
    head, *rest = path.split(".")
    if head not in meta.model_fields_set and head not in (meta.model_extra or {}):
        return False, None
    node: Any = getattr(meta, head)
    for part in rest:
        if not isinstance(node, dict) or part not in node:
            return False, None
        node = node[part]
    return True, to_jsonable_python(node)  # compared as written (a tuple scored now, a list read back)


def _metric_fn(name: str, info: dict[str, Any]) -> Any:
    """The ``Metric`` named in a scores dict (a plugin by the reference its info records); None when
    it cannot be loaded now (a plugin file gone)."""
    from harness.scoring.metrics import resolve_metrics

    ref = ((info or {}).get("plugin") or {}).get("ref") or name
    try:
        (entry,) = resolve_metrics([ref]).values()
    except HarnessError:
        return None
    return entry.obj


def _needs_of(name: str, info: dict[str, Any]) -> tuple[str, ...]:
    """The scoring options a kept metric's numbers depend on (its declared ``needs``); every one
    a metric may need when it cannot be loaded now."""
    from harness.scoring.metrics import NEEDS

    fn = _metric_fn(name, info)
    return tuple(NEEDS) if fn is None else fn.declaration.needs


def kept_mismatches(before: Scores, now: Scores, kept: list[str]) -> list[str]:
    """Why the kept metrics' numbers would not be those of this scoring (one phrase each, ``old ->
    new``): another question set or answers, other shared options, another judge or checkpoint
    for a metric that needs one. Facts an older file does not record are not compared."""
    old_meta, new_meta = before.meta, now.meta
    reasons = []
    for path, label in SHARED_FACTS:
        (had, old), (has, new) = _fact(old_meta, path), _fact(new_meta, path)
        if had and has and old != new:
            reasons.append(f"{label} {old!r} -> {new!r}")
    old_ids = [r.get("question_id") for r in before.raw]
    new_ids = [r.get("question_id") for r in now.raw]
    if old_ids and old_ids != new_ids and not any("questions scored" in r for r in reasons):
        reasons.append("the questions scored differ")
    for option in dict.fromkeys(o for name in kept for o in _needs_of(name, before.metric_info(name))):
        (had, old), (has, new) = _fact(old_meta, f"options.{option}"), _fact(new_meta, f"options.{option}")
        if had and has and old != new:
            users = [n for n in kept if option in _needs_of(n, before.metric_info(n))]
            reasons.append(f"--{option.replace('_', '-')} {old!r} -> {new!r} (for {', '.join(users)})")
    return reasons


def _owner(key: str, names: list[str]) -> str | None:
    """The metric a ``METRIC.LEAF`` key belongs to (the longest name it starts with)."""
    found = [n for n in names if key.startswith(f"{n}.")]
    return max(found, key=len) if found else None


def _pick(old: dict[str, Any], new: dict[str, Any], kept: set[str], names: list[str]) -> dict[str, Any]:
    """``METRIC.LEAF``-keyed values: the kept metrics' from ``old``, the others' from ``new``."""
    out = {k: v for k, v in old.items() if _owner(k, names) in kept}
    out.update({k: v for k, v in new.items() if _owner(k, names) not in kept})
    return out


def merge_scores(before: Scores | dict[str, Any], now: Scores | dict[str, Any]) -> tuple[Scores, list[str]]:
    """(the scores a run holds after a re-scoring, the metrics kept). The metrics scored ``now``
    replace their own parts of ``before`` (namespace, per-question values, breakdown, error bars,
    epochs, info, aggregation, options, failure) and the others keep theirs; a metric scored before
    keeps its place, a new one comes last (nothing kept: ``now`` as it is). Refused (one line naming each difference and the two
    ways on) where the kept numbers were scored on other answers or options than these."""
    scored = scored_metrics(now)
    kept = [n for n in metrics_of(before) if n not in scored]
    if not kept:
        return Scores.of(now), []
    before, now = Scores.of(before), Scores.of(now)
    with_numbers = [n for n in kept if before.aggregate(n) is not None]  # not a failure note alone
    reasons = kept_mismatches(before, now, with_numbers)
    if reasons:
        raise HarnessError(
            f"cannot keep {', '.join(with_numbers)} from the run's earlier scoring next to {', '.join(scored)}, "
            f"scored otherwise: {'; '.join(reasons)}. Re-score them too (--metrics {','.join([*scored, *with_numbers])}), "
            "or drop them (--drop-other-metrics)"
        )
    kept_set = set(kept)
    new_names = list(now.meta.metrics)
    names = [n for n in metrics_of(before) if n in with_numbers or n in new_names]
    names += [n for n in new_names if n not in names]
    every = list(dict.fromkeys([*metrics_of(before), *scored]))

    def source(name: str) -> Scores:
        return before if name in kept_set else now

    aggregates = {name: source(name).aggregate(name) for name in names}
    old_rows = {r.get("question_id"): r for r in before.raw}
    rows = []
    for row in now.raw:
        old_row = old_rows.get(row["question_id"]) or {}
        merged = {"question_id": row["question_id"]}
        for name in names:
            picked = old_row if name in kept_set else row
            if name in picked:
                merged[name] = picked[name]
        merged.update({k: v for k, v in row.items() if k not in every and k != "question_id"})
        rows.append(merged)
    sections: dict[str, Any] = {}  # a section the merge leaves empty is not written
    breakdown: dict[str, Any] = {}
    for group in dict.fromkeys([*now.breakdown, *before.breakdown]):
        old_group, new_group = before.breakdown.get(group) or {}, now.breakdown.get(group) or {}
        breakdown[group] = {}
        for value in dict.fromkeys([*new_group, *old_group]):
            old_entry, new_entry = old_group.get(value) or {}, new_group.get(value) or {}
            entry = {"n": new_entry.get("n", old_entry.get("n"))}
            for name in names:
                picked = old_entry if name in kept_set else new_entry
                if name in picked:
                    entry[name] = picked[name]
            breakdown[group][value] = entry
    if breakdown:
        sections["breakdown"] = breakdown
    sections["uncertainty"] = _pick(before.uncertainty, now.uncertainty, kept_set, every)
    if now.epochs:
        old_epochs = before.epochs or {}
        old_per = old_epochs.get("per_epoch") or []
        sections["epochs"] = {
            **now.epochs,
            "per_epoch": [
                _pick(old_per[i] if i < len(old_per) else {}, values, kept_set, every)
                for i, values in enumerate(now.epochs.get("per_epoch") or [])
            ],
            "between_epoch_variance": _pick(
                old_epochs.get("between_epoch_variance") or {}, now.epochs.get("between_epoch_variance") or {},
                kept_set, every,
            ),
        }
    old_metric_options = before.meta.options.get("metric_options") or {}
    options = {
        **now.meta.options,
        "metric_options": {
            **{n: v for n, v in old_metric_options.items() if n in kept_set},
            **{n: v for n, v in (now.meta.options.get("metric_options") or {}).items() if n not in kept_set},
        },
    }
    meta = now.meta.model_copy(
        deep=True,
        update={
            "metrics": names,
            "metric_info": {n: source(n).meta.metric_info[n] for n in names if n in source(n).meta.metric_info},
            "aggregation": {n: source(n).meta.aggregation[n] for n in names if n in source(n).meta.aggregation},
            "options": options,
        },
    )
    failed = {**{n: v for n, v in before.failed_metrics().items() if n in kept_set}, **now.failed_metrics()}
    if "failed_metrics" in (meta.model_extra or {}):
        del meta.failed_metrics  # said again after the others, as the merge found them
    if failed:
        meta.failed_metrics = failed
    upgraded = (before.meta.model_extra or {}).get("upgraded_from_results_format")
    if upgraded:
        meta.upgraded_from_results_format = upgraded
    meta.kept_metrics = kept
    if not now.epochs:  # what relates a metric scored now to the kept ones (a judge and string accuracy)
        for name in new_names:
            metric = _metric_fn(name, meta.metric_info.get(name) or {})
            relate = metric.aggregation.with_other_metrics if metric is not None else None
            if relate is not None and isinstance(aggregates.get(name), dict):
                info = meta.metric_info.get(name) or {}
                aggregates[name], meta.metric_info[name] = relate(aggregates[name], info, rows, name)
    return Scores(results_format=now.results_format, raw=rows, **sections, meta=meta, **aggregates), kept
