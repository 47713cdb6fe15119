"""The ``Metric`` object: one metric's function and everything said about it (its declaration,
streaming, aggregation, display and kinds), filled by the decorators of ``harness.scoring.metrics``
(``declare``, ``streamable``, ``aggregates``, ``reads``, ``discrete_values``) and registered once
(``harness.scoring.metric_registry.METRICS``, public in ``harness.scoring.metrics``), the same for built-ins and plugins. A module of its own, with
no import of the registry, so that the error bars (``uncertainty``) read a Metric's fields without
importing the metrics."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable

from harness.errors import HarnessError
from harness.scoring.kinds import Kind, Kinds, key_path


@dataclass(frozen=True)
class MetricDeclaration:
    """What a metric scores and needs. ``accepts``: the gold answer types it scores
    (``harness.scoring.gold.ANSWER_TYPES``), ``answers``: the answer types, ``datasets``: the only
    datasets it scores; None: any. ``needs``: ScoringOptions fields that must be set. ``options``: its
    options (a ``MetricOptions`` model), passed to it as keyword arguments. ``check(options)``: more
    checks before any model call (raise HarnessError)."""

    accepts: tuple[str, ...] | None = None
    answers: tuple[str, ...] | None = None
    datasets: tuple[str, ...] | None = None
    needs: tuple[str, ...] = ()
    options: type | None = None  # a harness.scoring.metrics.MetricOptions model
    check: Callable[[Any], None] | None = None  # check(ScoringOptions)


@dataclass(frozen=True)
class Aggregation:
    """How a metric's numbers come from its per-question values (``streamable``, ``aggregates``).
    ``rows(rows, n)``: its own aggregate of the per-question rows in scoring order (None: the mean of
    each value; the batch call must return that same aggregate); what the error bars of its numbers
    that are no mean are bootstrapped through. ``per_question_leaves``: {aggregate leaf: per-question
    leaf} where a number is the mean of a differently named per-question value (``{"acc.loose":
    "acc"}``) or of an indicator (``{"acc.strict": "acc==1"}``, ``KEY>=NUMBER`` too). ``sums``: (row ->
    numbers, column sums -> {leaf: value}) for numbers that are a function of per-question numbers
    summed (corpus BLEU): bootstrapped as one matrix product. ``per_question_paths(aggregate)``:
    {aggregate key path: per-question key path} for numbers named at run time (each judge's share).
    ``with_other_metrics(aggregate, info, rows, name) -> (aggregate, info)``: called once every
    metric is scored, with the full per-question rows (llm-judge's agreement with string accuracy).
    ``discrete``: every per-question number takes a few values (0/1 verdicts): the only metrics
    ``--epoch-reducer mode`` accepts."""

    rows: Callable[[list[dict[str, Any]], float], dict[str, Any]] | None = None
    per_question_leaves: dict[str, str] = field(default_factory=dict)
    sums: tuple[Callable[[dict[str, Any]], list[float] | None], Callable[[list[float]], dict[str, Any]]] | None = None
    per_question_paths: Callable[[dict[str, Any]], dict[tuple[str, ...], tuple[str, ...]]] | None = None
    with_other_metrics: Callable[..., tuple[dict[str, Any], dict[str, Any]]] | None = None
    discrete: bool = False


@dataclass(frozen=True)
class Display:
    """How tables, figures and reports show a metric's numbers (``harness.scoring.display``):
    ``headline``, the leaves shown by default; ``labels``, {leaf: display name}; ``lower_is_better``,
    the leaves whose best value is the lowest (cost, tokens); ``detail``, the leaves that are no
    column of a table, a leaderboard or the report's summary (the precision and recall parts of an
    F-score, a run's cost): a key path, or a prefix of several; kept in the scores and the report's
    detail. A metric that declares none has every number a column."""

    headline: tuple[str, ...] = ()
    labels: dict[str, str] = field(default_factory=dict)
    lower_is_better: tuple[str, ...] = ()
    detail: tuple[str, ...] = ()

    def is_column(self, path: tuple[str, ...] | list[str] | str) -> bool:
        """Whether the number at ``path`` (a key path of the aggregate or of a question's values, or
        its dotted text) is a column of tables: not declared ``detail``, nor under a declared one."""
        parts = key_path(path) if isinstance(path, str) else tuple(path)
        return not any(parts[: len(d)] == d for d in map(key_path, self.detail))

    def record(self) -> dict[str, Any]:
        """What a results file records of it (a plugin's, so tables read it without loading the plugin)."""
        return {"headline": list(self.headline), "labels": dict(self.labels),
                "lower_is_better": list(self.lower_is_better), "detail": list(self.detail)}  # fmt: skip


# Attributes a metric function carried before it was a Metric, and the Metric field each fills: a
# plugin that sets them on its function (or on the Metric a decorator made) keeps working.
_LEGACY = ("declaration", "streamable", "aggregate_rows", "per_question_leaves", "aggregate_sums",
           "per_question_paths", "with_other_metrics", "discrete_values", "reads")  # fmt: skip


@dataclass(eq=False)
class Metric:
    """One metric: its function (``MetricFn``) and everything said about it, filled by the
    decorators (``declare``: declaration, display and kinds; ``streamable``/``aggregates``:
    aggregation and streaming; ``reads``; ``discrete_values``). Built-ins and plugins alike: a plugin
    that is a bare function is made a Metric with nothing declared when it is looked up (it scores
    any answer, needs nothing, has no options, and each of its numbers is unbounded). Calling it
    calls the function."""

    fn: Callable[..., Any]  # a harness.scoring.metrics.MetricFn
    declaration: MetricDeclaration = field(default_factory=MetricDeclaration)
    streaming: bool = False  # each question's values depend on it alone: scored as each sample finishes
    # a metric that asks which answers are correct (harness.scoring.correct.asks): what gives its answer
    # records their ``correct`` in a scoring (harness.scoring.correct.Verdicts); None: it does not ask
    verdicts: Any = None
    reads: tuple[str, ...] = ()  # "row": its answer records carry the sample's row
    aggregation: Aggregation = field(default_factory=Aggregation)
    display: Display = field(default_factory=Display)
    kinds: Kinds = field(default_factory=Kinds)

    def __post_init__(self) -> None:
        for name in ("__module__", "__name__", "__qualname__", "__doc__"):  # as the function reads (listings)
            if hasattr(self.fn, name):
                object.__setattr__(self, name, getattr(self.fn, name))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:  # a MetricResult
        return self.fn(*args, **kwargs)

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "declaration" and not isinstance(value, MetricDeclaration):
            raise HarnessError("a metric's declaration must come from harness.scoring.metrics.declare(...)")
        if name == "reads":
            value = tuple(value)
        if name in _LEGACY and name not in ("declaration", "reads"):
            _set_legacy(self, name, value)
        else:
            object.__setattr__(self, name, value)

    @property
    def reads_rows(self) -> bool:
        return "row" in self.reads

    def kind_of(self, path: tuple[str, ...] | list[str] | str) -> Kind:
        """The declared kind of the number at ``path`` of its aggregate (``unbounded`` unless declared)."""
        return self.kinds.of_path(path)

    @classmethod
    def of(cls, obj: Any, ref: str = "") -> "Metric":
        """``obj`` as a Metric: itself, or a bare function with what it carries as attributes."""
        if isinstance(obj, Metric):
            return obj
        if not callable(obj):
            raise HarnessError(f"metric {ref}: not a metric function fn(questions, answers, only_answered, options)")
        metric = cls(obj)
        for name in _LEGACY:
            if name in getattr(obj, "__dict__", {}):
                setattr(metric, name, obj.__dict__[name])
        return metric


def _set_legacy(metric: Metric, name: str, value: Any) -> None:
    """A pre-Metric attribute written on a Metric: the field it stands for."""
    agg = metric.aggregation
    if name == "streamable":
        object.__setattr__(metric, "streaming", bool(value))
    elif name == "discrete_values":
        object.__setattr__(metric, "aggregation", replace(agg, discrete=bool(value)))
    else:
        field_name = {"aggregate_rows": "rows", "aggregate_sums": "sums"}.get(name, name)
        if field_name == "per_question_leaves":
            value = dict(value or {})
        object.__setattr__(metric, "aggregation", replace(agg, **{field_name: value}))


def as_metric(obj: Any, ref: str = "") -> Metric:
    """``Metric.of``: what a decorator or the registry makes of a metric function."""
    return Metric.of(obj, ref)
