"""Which answers count as correct, for every metric that needs a yes or no per question
(``calibration``: the confidence against it; ``per-correct``: spend per correct answer; ``outcomes``:
WebDetective's evidence use). One option, ``correct``, in each (``CorrectOptions``), and one verdict
path: a metric decorated ``@asks`` gets, in ``score_answers``, each answer record with its
``correct`` (0.0 or 1.0) from ``Verdicts``, which resolves the rule and scores it once per scoring.
(``harness.scoring.metrics`` reaches this module only through the metric's ``verdicts``: it imports
nothing of it, as it imports no metric.)

A rule is ``METRIC:LEAF``: the per-question value ``LEAF`` of another metric scored on the same
answers with the options this scoring gives it, a 0/1: an indicator ``KEY>=T`` or ``KEY==T``
(``set-f1:f1>=0.5``, ``fanoutqa-string:acc==1``), a leaf the metric declares a share (``em-f1:em``,
``llm-judge:llm_judge``), or an aggregate leaf the metric maps to one (``fanoutqa-string:acc.strict``
is ``acc==1``). ``auto`` (the default) is the dataset's own rule (``DatasetLoader.correct``, cited
there; docs/metrics.md): FanOutQA's strict accuracy, QAMPARI's F1 >= 0.5, QUEST's F1 >= 0.5 on its
titles, TopiOCQA's and HotpotQA's exact match; a dataset without one refuses ``auto`` in one line.

Checked before any model call (``check_rule``): the metric is known, scores answers alone (it reads
no rows and asks for no verdicts), has what it needs, and gives the leaf as a 0/1. Where the chosen
metric is scored in the same scoring its values are read, not scored again (``verdicts``).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from pydantic import Field, field_validator

from harness.errors import ConfigError, HarnessError
from harness.scoring.kinds import key_path
from harness.scoring.uncertainty import is_indicator, leaf
from harness.scoring.metrics import (
    NEEDS,
    Metric,
    MetricOptions,
    ScoringOptions,
    as_metric,
    option_values,
    resolve_metrics,
    run_metric,
)

AUTO = "auto"


class Rule(NamedTuple):
    """``metric``'s per-question ``leaf`` decides (as written: an aggregate leaf it maps is read mapped)."""

    metric: str
    leaf: str

    @property
    def spec(self) -> str:
        return f"{self.metric}:{self.leaf}"


def parse_rule(text: str) -> Rule:
    metric, sep, leaf = str(text).partition(":")
    if not sep or not metric.strip() or not leaf.strip():
        raise ValueError("expected auto or METRIC:LEAF (e.g. fanoutqa-string:acc==1, set-f1:f1>=0.5)")
    return Rule(metric.strip(), leaf.strip())


class CorrectOptions(MetricOptions):
    """What a correct answer is, for the metrics that ask (see the module)."""

    correct: str = Field(
        AUTO,
        description="which answers are correct: auto, the dataset's own rule (DatasetLoader.correct: FanOutQA's "
        "strict accuracy fanoutqa-string:acc==1, QAMPARI's set-f1:f1>=0.5, ...; docs/metrics.md); or METRIC:LEAF, a "
        "per-question 0/1 of a metric scored on the same answers (an indicator KEY>=T / KEY==T, or a 0/1 leaf: "
        "em-f1:em, llm-judge:llm_judge)",
    )

    @field_validator("correct")
    @classmethod
    def _rule(cls, value: str) -> str:
        if value != AUTO:
            parse_rule(value)
        return value


def asks(fn: Any) -> Metric:
    """Decorator: the metric asks which answers are correct; in a scoring each of its answer records
    carries ``correct`` (``Verdicts``: its option ``correct``, so its options are a ``CorrectOptions``)."""
    metric = as_metric(fn)
    object.__setattr__(metric, "reads", (*metric.reads, "correct"))
    object.__setattr__(metric, "verdicts", Verdicts)
    return metric


def _asks(fn: Metric) -> bool:
    return fn.verdicts is not None


def chosen_rule(name: str, options: ScoringOptions, dataset_name: str, dataset_rule: str | None) -> tuple[Rule, str]:
    """(the rule metric ``name`` asks for, how it was chosen): its ``correct`` option, ``auto`` the dataset's."""
    spec = ((options.metric_options or {}).get(name) or {}).get("correct", AUTO)
    if spec != AUTO:
        return parse_rule(spec), "given (--metric-option)"
    if not dataset_rule:
        raise ConfigError(
            f"--metric-option {name}.correct=auto: dataset {dataset_name} declares no rule of its own "
            f"(DatasetLoader.correct); name one, e.g. --metric-option {name}.correct=em-f1:em"
        )
    try:
        return parse_rule(dataset_rule), f"auto: {dataset_name}'s own (DatasetLoader.correct)"
    except ValueError as exc:
        raise ConfigError(f"dataset {dataset_name}'s correct={dataset_rule!r}: {exc}") from None


def _resolved(where: str, rule: Rule) -> tuple[str, Any, tuple[str, ...]]:
    """(scores key, registry entry, per-question key path) of a rule; an aggregate leaf the metric
    maps to a per-question one (``acc.strict`` -> ``acc==1``) read as that."""
    try:
        (key, entry), = resolve_metrics([rule.metric]).items()
    except HarnessError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    path = entry.obj.aggregation.per_question_leaves.get(rule.leaf, rule.leaf)
    return key, entry, key_path(path)


def check_rule(name: str, dataset: Any, questions: list[Any], options: ScoringOptions) -> Rule:
    """Metric ``name``'s rule can give verdicts on ``dataset`` (checked before any model call): see the module."""
    rule, _ = chosen_rule(name, options, dataset.info.name, getattr(dataset, "correct", None))
    where = f"--metric-option {name}.correct={rule.spec}"
    key, entry, path = _resolved(where, rule)
    fn = entry.obj
    if _asks(fn) or fn.reads_rows:
        raise ConfigError(
            f"{where}: {key} cannot say which answers are correct (it reads sample rows or asks for verdicts itself); "
            "name a metric of the answers, e.g. em-f1:em"
        )
    for need in fn.declaration.needs:
        if not getattr(options, need, None):
            raise ConfigError(f"{where}: {key} needs {NEEDS.get(need, need)}")
    option_values(key, fn, options)  # its own options as given here
    if not is_indicator(path[-1]) and fn.kind_of(path).name != "share":
        raise ConfigError(
            f"{where}: {key}'s {rule.leaf} is no 0/1 per question; name an indicator, e.g. {rule.metric}:{rule.leaf}>=0.5"
        )
    if not fn.declaration.needs and questions:  # one unanswered question (no model call): the leaf is there
        kwargs = option_values(key, fn, options)
        try:  # a plugin's failure is said in one line (run_metric), as in a scoring
            result = run_metric(entry, lambda: fn(questions[:1], [], False, options=options, **kwargs), options.metric_timeout)
        except HarnessError as exc:
            raise ConfigError(f"{where}: {key} failed on an unanswered question: {exc}") from None
        values = (result.get("raw") or {}).get(questions[0].id)
        if values is not None and _number(values, path) is None:
            known = ", ".join(_leaves(values)) or "none"
            raise ConfigError(f"{where}: {key} gives no per-question number {rule.leaf!r} (its per-question values: {known})")
    return rule


def _number(values: Any, path: tuple[str, ...]) -> float | None:
    value = leaf(values, path)
    if isinstance(value, bool):
        return float(value)
    return float(value) if isinstance(value, (int, float)) else None


def verdicts(
    rule: Rule,
    questions: list[Any],
    answers: list[dict[str, Any]],
    only_answered: bool,
    options: ScoringOptions,
    scored: dict[str, dict[str, Any]] | None = None,
) -> tuple[dict[str, float], bool]:
    """({question id: 1.0 correct, 0.0 not}, whether values were read rather than scored): the rule's
    metric as this scoring scores it (these questions and answers, its options). ``scored``: {question
    id: values} of that metric already scored here (read, not scored again), or None. A question
    without a value that is unanswered is not correct; a value that is no 0/1 is an error."""
    key, entry, path = _resolved(f"correct={rule.spec}", rule)
    fn = entry.obj
    reused = scored is not None
    if scored is None:  # a plugin's failure is the asking metric's (run_metric), not the scoring's
        kwargs = option_values(key, fn, options)
        call = lambda: fn(questions, answers, only_answered, options=options, **kwargs)  # noqa: E731
        scored = run_metric(entry, call, options.metric_timeout).get("raw") or {}
    answered = {a["id"] for a in answers if a.get("answer") is not None}
    out: dict[str, float] = {}
    for q in questions:
        values = scored.get(q.id)
        if values is None and q.id not in answered:
            out[q.id] = 0.0
            continue
        value = _number(values, path)
        if value not in (0.0, 1.0):
            raise HarnessError(
                f"correct={rule.spec}: question {q.id}'s value is {value!r}, not 0 or 1 "
                f"(its values: {', '.join(_leaves(values)) or 'none'}; name an indicator, e.g. set-f1:f1>=0.5)"
            )
        out[q.id] = value
    return out, reused


def verdict_of(record: dict[str, Any] | None) -> float:
    """One answer record's verdict (``score_answers`` put it there); no record: unanswered, not correct."""
    if not record:
        return 0.0
    if "correct" not in record:
        raise HarnessError("an answer record without its verdict: metrics that read 'correct' are scored by score_answers")
    return float(record["correct"])


class Verdicts:
    """The verdicts of one scoring (``score_answers``), for each metric that asks: its rule resolved
    for the dataset, each rule scored once, or read where the scoring scored its metric already
    (``scored_here(key, metric)``: {question id: values}, or None)."""

    check = staticmethod(check_rule)  # what check_metrics asks before any model call

    def __init__(self, dataset, questions, answers, only_answered, options, scored_here) -> None:
        self.dataset, self.questions, self.answers = dataset, questions, answers
        self.only_answered, self.options, self.scored_here = only_answered, options, scored_here
        self.found: dict[str, tuple[dict[str, float], bool]] = {}
        self.used: dict[str, dict[str, Any]] = {}

    def given(self, name: str, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """``records`` (metric ``name``'s answer records) each with its ``correct``."""
        rule, how = chosen_rule(name, self.options, self.dataset.info.name, getattr(self.dataset, "correct", None))
        if rule.spec not in self.found:
            (key, entry), = resolve_metrics([rule.metric]).items()
            self.found[rule.spec] = verdicts(
                rule, self.questions, self.answers, self.only_answered, self.options, self.scored_here(key, entry.obj)
            )
        correct, reused = self.found[rule.spec]
        self.used[name] = verdict_info(rule, how, reused)
        return [{**r, "correct": correct.get(r["id"], 0.0)} for r in records]

    def info(self, name: str) -> dict[str, Any]:
        """What ``metric_info`` records of metric ``name``'s verdicts."""
        return self.used.get(name, {})


def verdict_info(rule: Rule, how: str, reused: bool) -> dict[str, Any]:
    """What ``metric_info`` records of the verdicts: the rule used and how it was chosen and scored."""
    return {
        "correct": rule.spec,
        "correct_rule": how,
        "correct_scored": f"read from this scoring's {rule.metric}" if reused else f"{rule.metric} scored for it",
    }


def _leaves(values: Any, prefix: str = "") -> list[str]:
    if not isinstance(values, dict):
        return []
    out = []
    for k, v in values.items():
        if isinstance(v, dict):
            out += _leaves(v, f"{prefix}{k}.")
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            out.append(prefix + k)
    return out
