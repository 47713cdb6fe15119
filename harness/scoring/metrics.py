"""Metric registry and the one function that turns per-question metric values into scores.

A metric is one function registered by name that scores saved answers against a dataset's
references with no model call: ``fn(questions, answers, only_answered, options=ScoringOptions)``
returns ``{"raw": {question id: {name: value}}, "info": {...}}`` (typed: ``MetricFn``,
``AnswerRecord``, ``MetricResult``; each question's gold ``Sample.answer`` is typed per dataset in
``harness.datasets.answers``). ``score_answers`` then averages
each per-question value over the questions scored (and over each group for the breakdowns), so
metrics do not each re-implement the mean. A metric whose official aggregate is not that mean
(FanOutQA's acc/ROUGE as fanoutqa computes them, QAMPARI's F1>=0.5 shares, corpus BLEU) also
returns ``"aggregate"``, which is used as it is. Each metric's numbers live under its own name in
the scores (results format 2, see ``harness.scoring.results``), so two metrics cannot clash.

Each metric is one ``Metric`` object, registered once (built-ins by name in ``METRICS``, plugins
by reference, entry point or ``METRICS.register``), the same for both: its function and what the
decorators fill in. ``declare``: what it can score (gold and answer types, datasets), what it needs
(a judge, a checkpoint), its options (a pydantic model, passed to it as keyword arguments), how its
numbers are shown (headline, labels) and what each number is (``kinds``: a share of questions, a
mean on a stated scale, a count, money, unbounded; ``harness.scoring.kinds``), which decides its
error bars. ``streamable``/``aggregates``: how its numbers come from per-question values
(``Aggregation``). ``reads("row")``, ``discrete_values``. ``check_metrics`` checks the declarations
before any model call. A bare function (a plugin that declares nothing) is a Metric with nothing
declared: it scores any answer, needs nothing, has no options, and its numbers are unbounded.
"""

from __future__ import annotations

import logging
import threading
import traceback
from dataclasses import replace
from typing import Any, Callable, Protocol, TypedDict

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from harness.datasets.base import Dataset, Sample
from harness.errors import ConfigError, HarnessError
from harness.models.base import WEEK_S
from harness.registry import Entry
from harness.scoring.display import declared_record
from harness.scoring.kinds import Kind, Kinds, mean, share, unbounded
# the Metric and its parts, public here too
from harness.scoring.metric import Aggregation, Display, Metric, MetricDeclaration, as_metric  # noqa: F401
from harness.scoring.metric_registry import METRICS  # noqa: F401 - public here
from harness.scoring.scores import Scores
from harness.scoring.sections import RESULTS_FORMAT, SECTIONS
from harness.scoring.values import mean_values


def judge_list(value: str | list[str] | None) -> list[str]:
    """The judges named: ``"a,b"`` or ``["a", "b"]`` (items may hold commas) -> ["a", "b"], each once, in order."""
    if value is None:
        return []
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)) or not all(isinstance(i, str) for i in items):
        raise ValueError("expected a model name, comma-separated names or a list of them")
    return list(dict.fromkeys(n.strip() for item in items for n in item.split(",") if n.strip()))


def judge_value(value: Any) -> str | list[str] | None:
    """How a judge option is kept: one judge as its name (as before several were allowed), several
    as the list of names; a value that names none is refused."""
    if value is None:
        return None
    names = judge_list(value)
    if not names:
        raise ValueError(f"{value!r} names no judge (expected MODEL, comma-separated models or a list)")
    return names[0] if len(names) == 1 else names


class ScoringOptions(BaseModel):
    """Options of the metrics that need them; recorded with the scores. No judge runs unless named."""

    judge: str | list[str] | None = Field(
        None,
        description="model(s) for the LLM judge, e.g. openai/gpt-4o-2024-11-20; several (a list, or comma-separated): "
        "a majority vote, each judge's own share and their agreement",
    )
    judge_max_connections: int = 8
    bleurt_checkpoint: str | None = Field(None, description="directory of a BLEURT checkpoint")
    cache_path: str | None = None
    # A server that ignores max_tokens can return megabytes; scoring that whole would take minutes and
    # gigabytes. Longer answers are scored on their first this-many characters and flagged.
    max_answer_chars: int = Field(100_000, ge=1_000, le=10_000_000, description="longest answer scored whole")
    # Error bars only (never a value): the sample field whose questions form one cluster; None: the
    # dataset's default (TopiOCQA: its conversations), "none": every question independent.
    cluster_by: str | None = Field(None, description="sample field clustering the questions in the error bars")
    # <think>/<reasoning> blocks removed from each answer before any metric reads it (harness.scoring.reasoning)
    strip_reasoning: bool = Field(True, description="score answers without their <think>/<reasoning> blocks")
    # {metric: {option: value}} as given (--metric-option / YAML metric_options), checked against each
    # metric's declared options; what is not given is the metric's default (the official value)
    metric_options: dict[str, dict[str, Any]] = Field(default_factory=dict, description="each metric's options")
    # What the run asked each answer to state (harness.scoring.statements): read, and taken out of the
    # answer before any metric reads it; the calibration and citations metrics score what was stated.
    confidence: bool = Field(False, description="answers end with a stated confidence (--confidence)")
    citations: bool = Field(False, description="answers cite the pages they rest on in [brackets] (--citations)")
    # A plugin metric that takes longer (a hang) is that metric's failure, recorded in scores.meta;
    # built-in metrics are the harness's own code and run untimed (the LLM judge's requests have theirs).
    metric_timeout: float = Field(600.0, gt=0, le=WEEK_S, description="seconds one plugin metric may take")

    @field_validator("judge", mode="before")
    @classmethod
    def _judges(cls, value: Any) -> Any:
        return judge_value(value)


log = logging.getLogger(__name__)

class _Answer(TypedDict):
    id: str  # the question's id (``Sample.id``)
    answer: Any  # the system's answer: a model's text, any JSON from a generations file; None: unanswered


class AnswerRecord(_Answer, total=False):
    """One answer a metric scores. ``row``: its sample's row (a ``samples.jsonl`` line, None when
    scoring bare generations), only for the metrics that ``reads("row")``."""

    row: dict[str, Any] | None


class _Result(TypedDict):
    raw: dict[str, dict[str, Any]]  # {question id: {value name: value}}: averaged unless "aggregate"


class MetricResult(_Result, total=False):
    """What a metric returns: per-question values, facts about the scoring (``info``: a judge's
    model, a checkpoint, ...), and its own ``aggregate`` where the official one is not the mean."""

    info: dict[str, Any]
    aggregate: dict[str, Any]


class MetricFn(Protocol):
    """A metric: ``questions`` (each ``Sample.answer`` a gold, typed per dataset:
    ``harness.datasets.answers``), the answers, the official ``only_score_answered``, the scoring
    options, and its declared options as keywords (``declare(options=...)``)."""

    def __call__(
        self,
        questions: list[Sample],
        answers: list[AnswerRecord],
        only_answered: bool,
        options: ScoringOptions | None = None,
    ) -> MetricResult: ...


# Names a metric cannot have: the other keys of a scores dict and of its rows.
RESERVED_NAMES = frozenset(SECTIONS) | {"question_id", "n", "oversized_answer"}


class MetricOptions(BaseModel):
    """Base of a metric's options: unknown names and NaN/inf refused; defaults are the official values."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, protected_namespaces=())


# what a metric may need set: the option and how to set it
NEEDS = {
    "judge": "--judge MODEL (e.g. openai/gpt-4o-2024-11-20, FanOutQA's; no judge runs unless named: it costs money)",
    "bleurt_checkpoint": "--bleurt-checkpoint DIR (a bleurt-pytorch checkpoint folder; none can be downloaded here)",
    "confidence": "answers with a stated confidence: harness run --confidence (harness score --confidence for "
    "generations that state one)",
    "citations": "answers that cite their pages: harness run --citations (harness score --citations for generations "
    "that cite)",
}


def reads(*what: str):
    """Declare what a metric reads besides the answer. ``reads("row")``: each answer record also
    carries ``row``, the sample's row (a ``samples.jsonl`` line; None when scoring bare generations),
    and comes for every finished sample, answered or not (``answer`` None)."""

    def mark(fn: MetricFn | Metric) -> Metric:
        metric = as_metric(fn)
        object.__setattr__(metric, "reads", tuple(what))
        return metric

    return mark


def reads_rows(fn: Any) -> bool:
    return as_metric(fn).reads_rows


_UNSET: Any = object()


def declare(
    *,
    accepts: tuple[str, ...] | None = None,
    answers: tuple[str, ...] | None = None,
    datasets: tuple[str, ...] | None = None,
    needs: tuple[str, ...] = (),
    options: type[MetricOptions] | None = None,
    check: Callable[[ScoringOptions], None] | None = None,
    headline: tuple[str, ...] | list[str] = (),
    labels: dict[str, str] | None = None,
    lower_is_better: tuple[str, ...] | list[str] = (),
    detail: tuple[str, ...] | list[str] = (),
    kind: Kind | None = None,
    kinds: dict[str, Kind] | None = None,
    scale: float | None = _UNSET,
    scales: dict[str, float | None] | None = None,
):
    """Decorator: what the metric scores and needs (its ``MetricDeclaration``), how its numbers are
    shown (``headline``, ``labels``, ``lower_is_better``; ``detail``: the leaves, or prefixes, that
    are no column of a table or leaderboard, the parts of an F-score) and what each number is (``kind``: of every
    number; ``kinds``: {leaf or prefix: kind}; ``harness.scoring.kinds``: ``share``, ``mean``,
    ``count``, ``money``, ``unbounded``, the default). The error bars follow the kinds. ``scale`` (a
    perfect score, 1 or 100; None: unbounded) and ``scales`` (per leaf) are the older way to say the
    same: ``mean(scale)`` or ``unbounded()``."""
    from harness.scoring.gold import ANSWER_TYPES

    for what, names in (("accepts", accepts), ("answers", answers)):
        unknown = [t for t in names or () if t not in ANSWER_TYPES]
        if unknown:
            raise ValueError(f"declare({what}=...): unknown answer types {unknown} (known: {', '.join(ANSWER_TYPES)})")
    unknown = [n for n in needs if n not in ScoringOptions.model_fields]
    if unknown:
        known = ", ".join(ScoringOptions.model_fields)
        raise ValueError(f"declare(needs=...): {unknown} are not scoring options ({known})")
    if options is not None and not (isinstance(options, type) and issubclass(options, BaseModel)):
        raise ValueError("declare(options=...): a pydantic model (subclass harness.scoring.metrics.MetricOptions)")
    for what, leaves in (("headline", headline), ("lower_is_better", lower_is_better), ("detail", detail)):
        if isinstance(leaves, str) or not all(isinstance(leaf, str) for leaf in leaves):
            raise ValueError(f"declare({what}=...): a tuple of leaf names, got {leaves!r}")
    if (kind is not None or kinds) and (scale is not _UNSET or scales):
        raise ValueError("declare: give kind/kinds or the older scale/scales, not both")
    if scale is not _UNSET or scales:
        as_kind = lambda s: unbounded() if s is None else mean(float(s))  # noqa: E731
        kind = as_kind(1.0 if scale is _UNSET else scale)
        kinds = {leaf: as_kind(s) for leaf, s in (scales or {}).items()}
    declaration = MetricDeclaration(
        tuple(accepts) if accepts is not None else None,
        tuple(answers) if answers is not None else None,
        tuple(datasets) if datasets is not None else None,
        tuple(needs),
        options,
        check,
    )
    display = Display(tuple(headline), dict(labels or {}), tuple(lower_is_better), tuple(detail))
    declared_kinds = Kinds.of(kind, kinds)

    def mark(fn: MetricFn | Metric) -> Metric:
        metric = as_metric(fn)
        object.__setattr__(metric, "declaration", declaration)
        object.__setattr__(metric, "display", display)
        object.__setattr__(metric, "kinds", declared_kinds)
        return metric

    return mark


def declaration_of(fn: Any) -> MetricDeclaration:
    """The metric's declaration; a metric without one scores anything and needs nothing."""
    return as_metric(fn).declaration


# METRICS lives in harness.scoring.metric_registry (imported above; the readers of kinds use it there)


def aggregates(
    rows: Callable[[list[dict[str, Any]], float], dict[str, Any]] | None = None,
    per_question_leaves: dict[str, str] | None = None,
    sums: tuple[Callable[[dict[str, Any]], list[float] | None], Callable[[list[float]], dict[str, Any]]] | None = None,
    per_question_paths: Callable[[dict[str, Any]], dict[tuple[str, ...], tuple[str, ...]]] | None = None,
    with_other_metrics: Callable[..., tuple[dict[str, Any], dict[str, Any]]] | None = None,
):
    """Decorator: how the metric's numbers come from its per-question values (``Aggregation``)."""

    def mark(fn: MetricFn | Metric) -> Metric:
        metric = as_metric(fn)
        found = replace(
            metric.aggregation,
            rows=rows,
            per_question_leaves=dict(per_question_leaves or {}),
            sums=sums,
            per_question_paths=per_question_paths,
            with_other_metrics=with_other_metrics,
        )
        object.__setattr__(metric, "aggregation", found)
        return metric

    return mark


def streamable(
    aggregate: Callable[[list[dict[str, Any]], int], dict[str, Any]] | None = None,
    per_question_leaves: dict[str, str] | None = None,
    sums: tuple[Callable[[dict[str, Any]], list[float] | None], Callable[[list[float]], dict[str, Any]]] | None = None,
):
    """Mark a metric whose value for a question depends on that question alone, so a run scores each
    sample as it finishes and the end of the run only aggregates; ``aggregate``, ``per_question_leaves``
    and ``sums`` as ``Aggregation`` has them (``rows`` is ``aggregate``): the batch call must return
    that same aggregate, so both paths give identical numbers."""

    def mark(fn: MetricFn | Metric) -> Metric:
        metric = aggregates(aggregate, per_question_leaves, sums)(fn)
        object.__setattr__(metric, "streaming", True)
        return metric

    return mark


def discrete_values(fn: MetricFn | Metric) -> Metric:
    """Mark a metric whose every per-question number takes a few values (0/1 verdicts): the only
    metrics ``--epoch-reducer mode`` accepts."""
    metric = as_metric(fn)
    object.__setattr__(metric, "aggregation", replace(metric.aggregation, discrete=True))
    return metric


def resolve_metrics(names: list[str]) -> dict[str, Entry[Metric]]:
    """Each name or reference resolved (all before any runs); keyed by the name its scores go under."""
    out: dict[str, Entry[Metric]] = {}
    for name in dict.fromkeys(names):  # a metric named twice is scored once
        if name in RESERVED_NAMES:
            raise HarnessError(f"{name!r} cannot be a metric name (reserved in the scores)")
        entry = METRICS.resolve(name)
        key = entry.name
        if key in RESERVED_NAMES:
            raise HarnessError(f"metric {name}: its name {key!r} is reserved in the scores; give it another `name`")
        if key in out and out[key].obj is not entry.obj:
            raise HarnessError(f"metrics {out[key].ref or key} and {name} would both be scored as {key!r}")
        out[key] = entry
    return out


def get_metric(name: str) -> Metric:
    (entry,) = resolve_metrics([name]).values()
    return entry.obj


def _option_error(metric: str, exc: ValidationError, model: type[BaseModel]) -> ConfigError:
    first = exc.errors()[0]
    key = ".".join(str(p) for p in first["loc"])
    where = f"--metric-option {metric}.{key}" if key else f"--metric-option {metric}"
    if first["type"] == "extra_forbidden":
        known = ", ".join(model.model_fields) or "none"
        return ConfigError(f"{where}: metric {metric} has no option {key!r} (its options: {known})")
    got = first.get("input")
    shown = f" (got {got!r})" if isinstance(got, (int, float, str)) and len(repr(got)) < 80 else ""
    return ConfigError(f"{where}: {first['msg'].lower()}{shown}")


def validate_metric_options(given: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """``{metric: {option: value}}`` checked against each metric's declared options (unknown metric,
    option or value: one line); returns the given values converted, keyed by the metric's scores name."""
    out: dict[str, dict[str, Any]] = {}
    for name, values in given.items():
        if not isinstance(values, dict):
            raise ConfigError(f"metric_options.{name}: expected a mapping of option names to values")
        try:
            entry = METRICS.resolve(str(name))
        except HarnessError as exc:
            raise ConfigError(f"--metric-option {name}: {exc}") from None
        model = entry.obj.declaration.options
        if model is None:
            if values:
                raise ConfigError(f"--metric-option {name}.{next(iter(values))}: metric {entry.name} has no options")
            continue
        try:
            parsed = model.model_validate(values)
        except ValidationError as exc:
            raise _option_error(entry.name, exc, model) from None
        out.setdefault(entry.name, {}).update(parsed.model_dump(mode="json", exclude_unset=True))
    return out


def option_values(name: str, metric: Metric, options: ScoringOptions) -> dict[str, Any]:
    """The keyword arguments metric ``name`` is called with: its declared options, the values given
    (``options.metric_options[name]``) over the defaults."""
    model = metric.declaration.options
    if model is None:
        return {}
    try:
        return model.model_validate((options.metric_options or {}).get(name) or {}).model_dump()
    except ValidationError as exc:
        raise _option_error(name, exc, model) from None


def check_metrics(
    dataset: Dataset,
    questions: list[Sample],
    names: list[str],
    options: ScoringOptions,
    answers: list[dict[str, Any]] | None = None,
    given: dict[str, Any] | None = None,
) -> dict[str, Entry[Metric]]:
    """Everything about the metrics that can be checked before any model call, as each declares it:
    the names, the datasets and the gold answer types of ``questions`` it scores, the answer types of
    ``answers`` (when known), what it needs set, its options, its own checks. ``given``: the metric
    options named now, each for a metric scored here (default: all of ``options.metric_options``)."""
    from harness.scoring.gold import answer_type

    entries = resolve_metrics(list(names))
    scored = {entry.name for entry in entries.values()}
    for name, values in (options.metric_options if given is None else given).items():
        key = METRICS.resolve(str(name)).name
        if key not in scored:
            first = f"{name}.{next(iter(values))}" if isinstance(values, dict) and values else name
            raise ConfigError(
                f"--metric-option {first}: metric {key} is not scored here (metrics: {', '.join(entries)}); "
                "add it with --metrics"
            )
    if not dataset.info.has_answers:  # nothing is scored
        return entries
    check_clustering(dataset, questions, options)
    declared = getattr(dataset, "answer_types", None)
    golds: dict[str, str] = {}  # answer type -> the first question that has it
    for q in questions:
        kind = answer_type(q.answer, declared)
        if kind is not None:
            golds.setdefault(kind, q.id)
    ids = {q.id for q in questions}
    given_answers: dict[str, str] = {}
    for a in answers or []:
        kind = answer_type(a.get("answer")) if a.get("id") in ids else None
        if kind is not None:
            given_answers.setdefault(kind, a["id"])
    for name, entry in entries.items():
        declared_by = entry.obj.declaration
        if declared_by.datasets is not None and dataset.info.name not in declared_by.datasets:
            raise ConfigError(
                f"metric {name} scores only {', '.join(declared_by.datasets)}, not {dataset.info.spec()}"
            )
        checks = (("gold answers", golds, declared_by.accepts), ("answers", given_answers, declared_by.answers))
        for what, found, accepted in checks:
            bad = [kind for kind in found if accepted is not None and kind not in accepted]
            if bad:
                shown = ", ".join(f"{kind} (e.g. question {found[kind]})" for kind in bad[:3])
                raise ConfigError(
                    f"metric {name} cannot score {dataset.info.spec()}: its {what} include {shown}, and {name} "
                    f"scores {', '.join(accepted)} (harness list metrics -v)"
                )
        for need in declared_by.needs:
            if not getattr(options, need, None):
                raise ConfigError(f"metric {name} needs {NEEDS.get(need, '--' + need.replace('_', '-'))}")
        option_values(name, entry.obj, options)
        if declared_by.check is not None:
            declared_by.check(options)
        if entry.obj.verdicts is not None:  # which answers are correct: its rule (harness.scoring.correct)
            entry.obj.verdicts.check(name, dataset, questions, options)
    return entries


def _aggregate_fanoutqa(rows: list[dict[str, Any]], n: int) -> dict[str, Any]:
    from harness.scoring.fanoutqa_metrics import aggregate_fanoutqa

    return aggregate_fanoutqa(rows, n)


# gold types with a reading of their own in each built-in metric (harness.scoring.gold.ANSWER_TYPES)
SCALARS = ("str", "number", "bool")
FANOUTQA_SHAPES = (*SCALARS, "list_of_str", "list", "dict")


ROUGE_LABELS = {
    f"rouge.{r}.{part}": f"ROUGE-{r[5:]} {short}"
    for r in ("rouge1", "rouge2", "rougeL")
    for part, short in (("fscore", "F1"), ("precision", "P"), ("recall", "R"))
}


# loose = the mean share of a question's answer parts found; strict = the share of questions whose
# every part was found: the mean of the indicator acc == 1
@declare(
    accepts=FANOUTQA_SHAPES,
    headline=("acc.loose",),
    labels={"acc.loose": "Accuracy (loose)", "acc.strict": "Accuracy (strict)", **ROUGE_LABELS},
    detail=tuple(f"rouge.{r}.{part}" for r in ("rouge1", "rouge2", "rougeL") for part in ("precision", "recall")),
    kind=mean(),
    kinds={"acc.strict": share()},
)
@streamable(_aggregate_fanoutqa, per_question_leaves={"acc.loose": "acc", "acc.strict": "acc==1"})
def fanoutqa_string(
    questions: list[Sample], answers: list[dict[str, Any]], only_answered: bool, options: ScoringOptions | None = None
) -> dict[str, Any]:
    """FanOutQA loose/strict string accuracy and ROUGE-1/2/L, equal to fanoutqa 1.1.1."""
    import rouge_score

    from harness.scoring.fanoutqa_metrics import score_fanoutqa
    from harness.scoring.normalize import normalizer_info

    refs = [{"id": q.id, "answer": q.answer} for q in questions]
    scores = score_fanoutqa(refs, answers, only_score_answered=only_answered)
    raw = {r["question_id"]: {k: v for k, v in r.items() if k != "question_id"} for r in scores["raw"]}
    info = {
        "normalizer": normalizer_info(),
        "rouge_score": getattr(rouge_score, "__version__", None) or _dist_version("rouge-score"),
        "rouge_stemmer": True,
        "reference": "fanoutqa==1.1.1 eval.scorer (acc, rouge)",
    }
    # The official aggregates, not means of raw: strict is the share fully found, and the sums run
    # over the official int/float values in its order, so they stay bit-identical to fanoutqa's.
    return {"aggregate": {"acc": scores["acc"], "rouge": scores["rouge"]}, "raw": raw, "info": info}


# a gold that is not text is compared as its text (harness.scoring.gold.gold_text: booleans yes/no,
# a list's items one per line, QAMPARI entities by their answer text)
@declare(
    accepts=(*FANOUTQA_SHAPES, "entity_list"),
    headline=("f1",),
    labels={"em": "EM", "f1": "F1", "f1_precision": "F1 precision", "f1_recall": "F1 recall"},
    detail=("f1_precision", "f1_recall"),
    kind=mean(),
    kinds={"em": share()},  # exact match is 0 or 1 per question
)
@streamable()
def em_f1(
    questions: list[Sample], answers: list[dict[str, Any]], only_answered: bool, options: ScoringOptions | None = None
) -> dict[str, Any]:
    """HotpotQA's official answer EM / F1 / precision / recall; unanswered questions count 0."""
    from harness.scoring.gold import gold_text
    from harness.scoring.hotpotqa_metrics import exact_match_score, f1_score

    by_id = {a["id"]: a["answer"] for a in answers}
    pool = [q for q in questions if q.id in by_id] if only_answered else questions
    raw: dict[str, dict[str, Any]] = {}
    for q in pool:
        if q.id in by_id and by_id[q.id] is not None:
            answer, gold = gold_text(by_id[q.id]), gold_text(q.answer)
            f1, precision, recall = f1_score(answer, gold)
            em = float(exact_match_score(answer, gold))
        else:
            em = f1 = precision = recall = 0.0
        raw[q.id] = {"em": em, "f1": f1, "f1_precision": precision, "f1_recall": recall}
    info = {"reference": "hotpot_evaluate_v1.py (answer metrics)", "golds": "not text: read as gold_text (yes/no)"}
    return {"raw": raw, "info": info}  # means: score_answers


def _dist_version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


def score_answers(
    dataset: Dataset,
    questions: list[Sample],
    answers: list[dict[str, Any]],
    metrics: list[str] | None = None,
    only_answered: bool = False,
    options: ScoringOptions | None = None,
    precomputed: dict[str, dict[str, Any]] | None = None,
    sample_rows: dict[str, dict[str, Any]] | None = None,
) -> Scores:
    """Score ``answers`` ({"id", "answer"}) on ``questions``; unanswered questions count 0
    unless ``only_answered`` (mirrors the official Scorer's ``only_score_answered``).
    ``precomputed``: {metric: {"raw": {qid: value}, "info": {...}}} of streamable metrics, scored one
    sample at a time while a run went (``score_one``); only the other questions are scored here.
    ``sample_rows``: {question id: its sample row} for the metrics that read rows (``reads("row")``).
    Returns the ``Scores`` (``harness.scoring.scores``; written in results format 2/3's shape)."""
    if not dataset.info.has_answers:
        raise HarnessError(f"{dataset.info.spec()} has no reference answers; it cannot be scored here")
    entries = resolve_metrics(list(metrics or dataset.metrics))  # every name checked before any is run
    fns = {name: entry.obj for name, entry in entries.items()}
    names = list(fns)
    options = options or ScoringOptions()
    kwargs = {name: option_values(name, fn, options) for name, fn in fns.items()}
    answers, oversized, reasoning = prepare_answers(answers, options)
    if only_answered:  # the official scorer walks the answers in their order
        known = {q.id for q in questions}
        order = list(dict.fromkeys(a["id"] for a in answers if a["id"] in known))
    else:
        order = [q.id for q in questions]
    out: dict[str, Any] = {"results_format": RESULTS_FORMAT}
    rows: dict[str, dict[str, Any]] = {qid: {"question_id": qid} for qid in order}
    info: dict[str, Any] = {}
    aggregation: dict[str, str] = {}
    failed: dict[str, str] = {}
    judged: dict[Any, Any] = {}  # the verdicts of this scoring, for the metrics that ask (harness.scoring.correct)

    def scored_here(key: str, metric: Metric) -> dict[str, Any] | None:
        """{question id: values} of metric ``key`` where this scoring scored it already, else None."""
        return {qid: rows[qid][key] for qid in order if key in rows[qid]} if fns.get(key) is metric else None

    # the metrics that ask which answers are correct go last: a rule's metric scored here is read, not scored again
    for name, fn in sorted(fns.items(), key=lambda item: item[1].verdicts is not None):
        stored = (precomputed or {}).get(name) if fn.streaming and not only_answered else None
        if fn.verdicts is not None:
            if fn.verdicts not in judged:
                judged[fn.verdicts] = fn.verdicts(dataset, questions, answers, only_answered, options, scored_here)
            records = with_rows(answers, sample_rows) if fn.reads_rows else answers
            call = lambda fn=fn, records=records, name=name: fn(  # noqa: E731
                questions, judged[fn.verdicts].given(name, records), only_answered, options=options, **kwargs[name]
            )
        elif stored is None:
            given = with_rows(answers, sample_rows) if fn.reads_rows else answers
            call = lambda fn=fn, given=given, kw=kwargs[name]: fn(questions, given, only_answered, options=options, **kw)  # noqa: E731
        else:
            call = lambda fn=fn, stored=stored, kw=kwargs[name]: _complete(fn, stored, questions, answers, order, options, kw)  # noqa: E731
        try:
            result = run_metric(entries[name], call, options.metric_timeout)
        except MetricFailed as exc:  # that metric alone: the others are scored, and the reason recorded
            failed[name] = str(exc)
            del fns[name]
            log.warning(
                "metric %s failed: %s; the other metrics are scored, the reason is in scores.meta.failed_metrics",
                entries[name].ref or name, exc,
            )
            continue
        per_question = result["raw"]
        for qid in order:
            if qid in per_question:
                rows[qid][name] = per_question[qid]
        if "aggregate" in result:
            out[name] = result["aggregate"]
            aggregation[name] = "the metric's own"
        else:
            out[name] = mean_values([per_question[qid] for qid in order if qid in per_question])
            aggregation[name] = "mean of the per-question values"
        info[name] = result.get("info", {})
        if fn.verdicts is not None:  # the rule used, as the verdicts were given
            info[name] = {**info[name], **judged[fn.verdicts].info(name)}
        if entries[name].source != "builtin":  # its declaration too: tables read it without loading the plugin
            info[name] = {**info[name], "plugin": {**entries[name].record(), "declared": declared_record(fn)}}
    for name, fn in fns.items():  # numbers relating one metric's values to another's (a judge and string accuracy)
        relate = fn.aggregation.with_other_metrics
        if relate is not None and isinstance(out.get(name), dict):
            out[name], info[name] = relate(out[name], info[name], [rows[qid] for qid in order], name)
    out = {"results_format": out["results_format"], **{n: out[n] for n in fns if n in out}}  # in the metrics' order
    info = {n: info[n] for n in fns if n in info}
    for qid, row in rows.items():
        rows[qid] = {"question_id": qid, **{n: row[n] for n in fns if n in row}}
    oversized = {qid: chars for qid, chars in oversized.items() if qid in rows}  # the questions scored
    for qid, chars in oversized.items():
        if qid in rows:
            rows[qid]["oversized_answer"] = {"chars": chars, "scored_chars": options.max_answer_chars}
    names = list(fns)
    out["raw"] = list(rows.values())
    breakdown = _breakdown(questions, rows, names, fns)
    if breakdown:
        out["breakdown"] = breakdown
    clustering, labels = _clustering(dataset, questions, order, options)
    from harness.scoring.uncertainty import compute_uncertainty

    out["uncertainty"] = compute_uncertainty(fns, {**out, "meta": {"n_questions": len(order)}}, labels)
    out["meta"] = {
        "metrics": names,
        "n_questions": len(order),
        # the questions scored that have an answer (an id the dataset does not hold is not one)
        "n_answered": len({a["id"] for a in answers if a["id"] in rows and a.get("answer") is not None}),
        "n_oversized_answers": len(oversized),
        "reasoning_removed": reasoning,
        "only_score_answered": only_answered,
        "dataset": dataset.info.spec(),
        "dataset_sha256": dataset.info.sha256,
        "metric_info": info,
        "aggregation": aggregation,
        # the options used: each declared metric option, given or its default
        "options": {**options.model_dump(), "metric_options": {n: v for n, v in kwargs.items() if v}},
        "clustering": clustering,
    }
    if failed:
        out["meta"]["failed_metrics"] = failed
    return Scores.model_validate(out)


def score_nothing(
    dataset: Dataset,
    questions: list[Sample],
    metrics: list[str] | None,
    options: ScoringOptions | None,
    reason: str,
) -> Scores:
    """The scores of a run that answered none of ``questions`` (every one failed or was never asked):
    each metric's aggregate shaped as ``score_answers`` shapes it, every number null (no value, never
    0); no per-question rows or breakdown; each number's interval n/a and each metric's
    ``meta.metric_info`` ``reason``. The shape comes from scoring one question unanswered, which asks
    no model and no judge; what that gives is thrown away."""
    from harness.scoring.uncertainty import scored_part

    options = options or ScoringOptions()
    entries = resolve_metrics(list(metrics or dataset.metrics))
    names = list(entries)
    probe = score_answers(dataset, questions[:1], [], metrics, False, options, None, {}) if questions else Scores()
    probe_info = probe.meta.metric_info
    out: dict[str, Any] = {"results_format": RESULTS_FORMAT}
    uncertainty: dict[str, dict[str, Any]] = {}
    for name in names:
        shape = probe.aggregate(name) or {}
        out[name] = _null_leaves(shape)
        for path, value in _leaf_paths(scored_part(shape)):
            kind = entries[name].obj.kind_of(path)
            if kind.name == "count" and kind.total:
                continue  # a number of things (TopiOCQA's turns) has no interval
            uncertainty[".".join((name, *path))] = {
                "value": None, "stderr": None, "ci95": None, "method": "none", "kind": kind.name, "note": reason,
            }  # fmt: skip
    out["raw"] = []
    out["uncertainty"] = uncertainty
    plugin = {n: (probe_info.get(n) or {}).get("plugin") for n in names}
    out["meta"] = {
        **probe.meta.model_dump(exclude_unset=True),
        "metrics": names,
        "n_questions": len(questions),
        "n_answered": 0,
        "n_oversized_answers": 0,
        "reasoning_removed": {"n_answers": 0, "unclosed": []},
        "only_score_answered": False,
        "dataset": dataset.info.spec(),
        "dataset_sha256": dataset.info.sha256,
        "metric_info": {n: {"reason": reason, **({"plugin": plugin[n]} if plugin[n] else {})} for n in names},
        "aggregation": {n: "no value: no question was scored" for n in names},
        "options": probe.meta.options or options.model_dump(),
        "clustering": {"by": None},
    }
    out["meta"].pop("failed_metrics", None)  # a plugin failing on the unanswered probe says nothing of the run
    return Scores.model_validate(out)


def _null_leaves(value: Any) -> Any:
    """``value`` with every leaf (number, text, list) None, its dicts kept."""
    if isinstance(value, dict):
        return {k: _null_leaves(v) for k, v in value.items()}
    return None


def _leaf_paths(value: dict[str, Any], prefix: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    out = []
    for key, item in value.items():
        if isinstance(item, dict):
            out.extend(_leaf_paths(item, (*prefix, key)))
        else:
            out.append(((*prefix, key), item))
    return out


class MetricFailed(HarnessError):
    """A plugin metric raised, hung or returned what is not a metric's result: its own failure."""


def run_metric(entry: Entry[Metric], call: Callable[[], dict[str, Any]], timeout: float) -> dict[str, Any]:
    """``call()`` (one metric over the questions). A built-in metric is called as it is. A plugin's
    runs in a thread with ``timeout``; whatever it does wrong (raises, ``sys.exit`` included; hangs;
    returns no ``{"raw": {question id: values}}``, or values that are not JSON) is MetricFailed, so
    one plugin never costs the run its other metrics or its results.json. A thread that hangs is
    left behind (a daemon: it ends with the process); Ctrl-C still interrupts the wait."""
    if entry.source == "builtin":
        return call()
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["result"] = call()
        except BaseException as exc:  # noqa: BLE001 - sys.exit in a plugin is its failure too
            box["error"] = exc

    thread = threading.Thread(target=target, name=f"metric {entry.name}", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise MetricFailed(f"no result within {timeout:g} s (metric_timeout)")
    if "error" in box:
        exc = box["error"]
        frames = traceback.extract_tb(exc.__traceback__)
        where = f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""
        raise MetricFailed(" ".join(f"{type(exc).__name__}: {exc}".split())[:300] + where)
    result = box["result"]
    if not isinstance(result, dict) or not isinstance(result.get("raw"), dict):
        raise MetricFailed(f'returned {type(result).__name__}, not {{"raw": {{question id: values}}, ...}}')
    try:
        from harness.records import to_json

        to_json(result)
    except (TypeError, ValueError) as exc:
        raise MetricFailed(f"its result is not JSON: {exc}") from None
    return result


def check_clustering(dataset: Dataset, questions: list[Sample], options: ScoringOptions) -> str | None:
    """The field clustering the error bars (the option, else the dataset's default; ``"none"``: None),
    refused when no question has it: checked before a run's first sample, not after its last."""
    field = options.cluster_by or getattr(dataset, "cluster_by", None)
    if not field or field.lower() == "none":
        return None
    if not any(field in (q.groups or {}) or field in (q.raw or {}) for q in questions):
        fields = sorted({k for q in questions[:50] for k in (*(q.groups or {}), *(q.raw or {}))})
        known = f" (fields: {', '.join(fields[:12])}{', ...' if len(fields) > 12 else ''})" if fields else ""
        raise HarnessError(f"--cluster-by {field}: no question of {dataset.info.spec()} has that field{known}")
    return field


def _clustering(dataset: Dataset, questions: list[Sample], order: list[str], options: ScoringOptions):
    """(what meta records of the clustering, {question id: cluster} or None). ``cluster_by``: the
    option, else the dataset's default; ``"none"`` turns a default off."""
    from harness.scoring.uncertainty import cluster_labels

    field = check_clustering(dataset, questions, options)
    source = "option" if options.cluster_by else "dataset default"
    if field is None:
        return {"by": None}, None
    labels = cluster_labels(questions, order, field)
    clusters = dict(zip(order, labels))
    return {"by": field, "source": source, "n_clusters": len(set(labels)), "clusters": clusters}, clusters


def _complete(fn, stored, questions, answers, order, options, kwargs=None) -> dict[str, Any]:
    """A streamable metric's result from the stored per-question values, the questions without one
    (unanswered, failed) scored now; its aggregate from all of them in scoring order."""
    raw = dict(stored["raw"])
    missing = [q for q in questions if q.id not in raw]
    info = stored.get("info") or {}
    if missing:
        ids = {q.id for q in missing}
        rest = fn(missing, [a for a in answers if a["id"] in ids], False, options=options, **(kwargs or {}))
        raw.update(rest["raw"])
        info = rest.get("info", info)
    if not info and questions:  # every value stored by an earlier invocation: the info of one question
        first = questions[0]
        only = [a for a in answers if a["id"] == first.id]
        info = fn([first], only, False, options=options, **(kwargs or {})).get("info", {})
    rows = [raw[qid] for qid in order if qid in raw]
    result: dict[str, Any] = {"raw": raw, "info": info}
    if fn.aggregation.rows is not None:
        result["aggregate"] = fn.aggregation.rows(rows, len(order))
    return result


def score_one(sample: Sample, answer: Any, names: list[str], options: ScoringOptions) -> dict[str, Any]:
    """One finished sample's values of the streamable metrics among ``names``: {metric: {"raw",
    "info"}}, exactly what the batch call gives that question (its answer capped the same way)."""
    return score_some([sample], [answer], names, options)[0]


def score_some(
    samples: list[Sample], answers: list[Any], names: list[str], options: ScoringOptions
) -> list[dict[str, Any]]:
    """``score_one`` of each (sample, answer) pair, in the order given: [{metric: {"raw", "info"}}].
    A pair is one (question, epoch): the same question may come several times (its epochs finishing
    together), and each gets its own answer's values. Metrics key values by question id, so the pairs
    go to each metric in rounds with no id twice in a round; within a round, one call per metric
    (spaCy lemmatizes the round in one batch). Streamable metrics score each question alone, so the
    values are those of separate calls."""
    entries = [
        (name, entry.obj, option_values(name, entry.obj, options))
        for name, entry in resolve_metrics(names).items()
        if entry.obj.streaming and entry.obj.verdicts is None  # verdicts come from the whole scoring
    ]
    out: list[dict[str, Any]] = [{} for _ in samples]
    for positions in _rounds_without_repeats([s.id for s in samples]):
        chosen = [samples[i] for i in positions]
        given, _, _ = prepare_answers([{"id": samples[i].id, "answer": answers[i]} for i in positions], options)
        for name, fn, kwargs in entries:
            result = fn(chosen, given, False, options=options, **kwargs)
            for i, sample in zip(positions, chosen):
                out[i][name] = {"raw": result["raw"][sample.id], "info": result.get("info", {})}
    return out


def _rounds_without_repeats(ids: list[str]) -> list[list[int]]:
    """Positions of ``ids`` split into rounds in which no id comes twice: the k-th occurrence of an id
    goes to round k, positions in order within a round."""
    rounds: list[list[int]] = []
    seen: dict[str, int] = {}
    for position, qid in enumerate(ids):
        k = seen.get(qid, 0)
        seen[qid] = k + 1
        if k == len(rounds):
            rounds.append([])
        rounds[k].append(position)
    return rounds


def prepare_answers(
    answers: list[dict[str, Any]], options: ScoringOptions
) -> tuple[list[dict[str, Any]], dict[str, int], dict[str, Any]]:
    """The answers as every metric reads them: reasoning removed (``strip_reasoning``), then what the
    run asked them to state taken out (``stated``: a confidence, citations), then capped
    (``cap_answers``). Returns (answers, oversized lengths, what meta records of the reasoning removed:
    how many answers had some, and the ids of those with a block never closed, cut from its tag on)."""
    from harness.scoring.reasoning import strip_reasoning

    stripped, unclosed = 0, []
    if options.strip_reasoning:
        out = []
        for a in answers:
            text, done = strip_reasoning(a.get("answer"))
            if done is not None:
                stripped += 1
                if done == "unclosed":
                    unclosed.append(a["id"])
                a = {**a, "answer": text}
            out.append(a)
        answers = out
    if options.confidence or options.citations:
        answers = [stated(a, options) for a in answers]
    answers, oversized = cap_answers(answers, options.max_answer_chars)
    return answers, oversized, {"n_answers": stripped, "unclosed": unclosed}


def stated(answer: dict[str, Any], options: ScoringOptions) -> dict[str, Any]:
    """An answer record with what it states taken out of its answer (``harness.scoring.statements``):
    its ``confidence`` (``options.confidence``) and its ``citations`` (``options.citations``) beside it."""
    from harness.scoring.statements import split_citations, split_confidence

    out = dict(answer)
    if options.confidence:
        out["answer"], out["confidence"] = split_confidence(out.get("answer"))
    if options.citations:
        out["answer"], out["citations"] = split_citations(out.get("answer"))
    return out


def with_rows(answers: list[dict[str, Any]], rows: dict[str, dict[str, Any]] | None) -> list[dict[str, Any]]:
    """What a metric that reads rows is given: one record per row, its answer prepared as every
    metric's (None: finished unanswered), with ``row``; without rows, the answers with ``row`` None."""
    if rows is None:
        return [{**a, "row": None} for a in answers]
    prepared = {a["id"]: a for a in answers}  # with what each answer states (``stated``), where read
    out = []
    for qid, row in rows.items():
        given = prepared.get(qid, {})
        out.append({**given, "id": qid, "answer": given.get("answer"), "row": row})
    return out


def cap_answers(answers: list[dict[str, Any]], max_chars: int) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """Answers longer than ``max_chars`` cut to it for scoring (never in the records), and their lengths."""
    oversized: dict[str, int] = {}
    out = []
    for a in answers:
        text = a.get("answer")
        if isinstance(text, str) and len(text) > max_chars:
            oversized[a["id"]] = len(text)
            a = {**a, "answer": text[:max_chars]}
        out.append(a)
    return out, oversized


def _breakdown(
    questions: list[Sample], rows: dict[str, dict[str, Any]], names: list[str], fns: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Per group (FanOutQA categories, QUEST templates, ...) each metric's numbers as its headline
    has them: its own aggregate of the group's rows where it has one (``aggregate_rows``: FanOutQA's
    loose and strict accuracy, TopiOCQA's x100 EM/F1 and corpus BLEU), else the per-question means."""
    groups: dict[str, dict[str, list[str]]] = {}
    for q in questions:
        if q.id not in rows:
            continue
        for group, values in (q.groups or {}).items():
            for value in values:
                groups.setdefault(group, {}).setdefault(value, []).append(q.id)
    shapes = {name: mean_values([row[name] for row in rows.values() if name in row]) for name in names}
    out: dict[str, Any] = {}
    for group, members in groups.items():
        out[group] = {}
        for value, ids in sorted(members.items()):
            entry: dict[str, Any] = {"n": len(ids)}
            for name in names:
                values = [rows[qid][name] for qid in ids if name in rows[qid]]
                metric = (fns or {}).get(name)
                aggregate_rows = metric.aggregation.rows if metric is not None else None
                if aggregate_rows is not None:
                    entry[name] = aggregate_rows(values, len(ids))
                else:
                    entry[name] = mean_values(values, shapes[name])
            out[group][value] = entry
    return out
