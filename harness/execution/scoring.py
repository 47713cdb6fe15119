"""The one scoring path of a run. ``harness run`` (``Run._results``, hence ``harness ablate``'s runs)
scores its finished samples with ``score_records``; ``harness score RUN_DIR`` calls ``score_run``,
which reloads the run's own dataset (recorded spec, ``--data-path`` file, checked by sha256), its
selected questions, finished answers, metrics and scoring options, and goes through the same
``score_records``: re-scoring an unchanged run gives its own scores back."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.datasets import Dataset, Sample, load_dataset
from harness.errors import DatasetError, HarnessError
from harness.execution.config import RunConfig
from harness.execution.record import RunClaim, RunResults, parse_results, read_claim, read_results
from harness.records import CONFIG_FILE, RESULTS_FILE, record_epoch, work_key
from harness.scoring.metrics import ScoringOptions, check_metrics, score_answers
from harness.scoring.results import RESULTS_FORMAT


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
) -> dict[str, Any]:
    """Scores of finished sample records ({"id", "answer", ...}) on the selected questions. A
    sample that finished without an answer (context full, rounds exhausted) counts as unanswered,
    i.e. 0, exactly like a question missing from an official submission.

    Records of several epochs (``--epochs``; a record's ``epoch``, 1 when absent): each epoch is
    scored alone, then its numbers combined by the reducer (``harness.scoring.epochs``); ``precomputed`` is then
    {epoch: the streamed values of that epoch}."""
    by_epoch: dict[int, list[dict[str, Any]]] = {}
    for r in records:
        by_epoch.setdefault(record_epoch(r), []).append(r)
    n = max([epochs, *by_epoch])

    def answers_of(epoch: int) -> list[dict[str, Any]]:
        return [{"id": r["id"], "answer": r["answer"]} for r in by_epoch.get(epoch, []) if r.get("answer") is not None]

    def rows_of(epoch: int) -> dict[str, dict[str, Any]]:  # for the metrics that read rows (``agent``)
        return {r["id"]: r for r in by_epoch.get(epoch, [])}

    if n == 1:
        return score_answers(dataset, questions, answers_of(1), metrics, only_answered, options, precomputed, rows_of(1))
    from harness.scoring.epochs import check_reducer, reduce_epoch_scores
    from harness.scoring.metrics import resolve_metrics

    fns = {name: entry.obj for name, entry in resolve_metrics(list(metrics or dataset.metrics)).items()}
    check_reducer(reducer, fns, n)  # mode on continuous values: refused before any epoch is scored
    per_epoch = [
        score_answers(
            dataset, questions, answers_of(e), metrics, only_answered, options, (precomputed or {}).get(e), rows_of(e)
        )
        for e in range(1, n + 1)
    ]
    return reduce_epoch_scores(per_epoch, reducer, questions, fns)


# Record kinds (harness.strategy.RECORD_KINDS) that give a strategy's runs the ``agent`` metrics by default
AGENT_METRIC_RECORDS = ("searches", "evidence_recall")


def run_metrics(metrics: list[str] | None, dataset: Dataset, records: tuple[str, ...] | list[str]) -> list[str] | None:
    """A run's metrics: ``--metrics`` as given; else, for a strategy that records searches or
    evidence recall (open-book, retrieve-read), the dataset's plus ``agent``; else None (the
    dataset's). The runner records the result in its config, so ``harness score RUN_DIR`` scores it too."""
    if metrics or not set(records) & set(AGENT_METRIC_RECORDS):
        return metrics
    return [*dataset.metrics, "agent"]


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


def load_run_dataset(results: RunResults | None, claim: RunClaim | None = None, data_path: str | None = None) -> Dataset:
    """The dataset a run read, loaded again: its recorded spec (``NAME:SPLIT@VERSION[+file]``) and
    ``--data-path`` file (``data_path`` overrides the recorded one, e.g. after a move), refused
    unless its sha256 is the one recorded."""
    config = run_config(results, claim)
    spec = (results.dataset.spec if results else None) or (claim.dataset_resolved if claim else None) or config.dataset
    sha256 = (results.dataset.sha256 if results else None) or (claim.dataset_sha256 if claim else None)
    path = data_path or config.data_path
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
    """The scoring options the run was made with (judge, BLEURT checkpoint, response cache)."""
    return config.scoring_options()


def score_run(
    run_dir: str | Path,
    metrics: list[str] | None = None,
    options: ScoringOptions | None = None,
    only_answered: bool = False,
    data_path: str | None = None,
    named_options: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Scores of a run directory's finished samples (results format 2). ``metrics`` and
    ``options`` default to the run's own; nothing is written. Checked first as a run is
    (``check_metrics``); ``named_options``: the metric options named now."""
    from harness.records import load_finished
    from harness.execution.selection import select_samples

    run_dir = Path(run_dir)
    results, claimed = read_run_files(run_dir)
    config = run_config(results, claimed)
    dataset = load_run_dataset(results, claimed, data_path)
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
    return score_records(
        dataset,
        questions,
        records,
        metrics or config.metrics,
        options,
        only_answered,
        epochs=epochs,
        reducer=config.epoch_reducer,
    )


def rescore_run(
    run_dir: str | Path,
    metrics: list[str] | None = None,
    given: dict[str, Any] | None = None,
    only_answered: bool = False,
    data_path: str | None = None,
    save: bool = True,
    metric_options: dict[str, dict[str, Any]] | None = None,
) -> tuple[dict[str, Any], bool]:
    """``harness score RUN_DIR``: ``score_run`` with the run's options updated by ``given`` (judge,
    bleurt_checkpoint named now) and its metric options by ``metric_options`` (option by option),
    written into its results.json in results format 2 whatever format it had. Returns (scores,
    whether results.json was written: a killed run has none)."""
    from harness.execution.cost import refresh_judge_cost
    from harness.execution.lock import RunLock
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
        if results is None or not save:
            return scores, False
        data = results.model_dump(mode="json", exclude_unset=True)
        data.update(results_format=RESULTS_FORMAT, scores=scores)  # written in this harness's format
        if results.cost is not None:  # a judge named now has a cost of its own
            data["cost"] = refresh_judge_cost(data["cost"], results.config.price_table, scores)
        record = parse_results(data, run_dir / RESULTS_FILE)  # what is written validates
        write_json_atomic(run_dir / RESULTS_FILE, record.model_dump(mode="json", exclude_unset=True))
    return scores, True
