"""The scores, typed, in the layer that makes them: ``Scores`` (results.json ``scores``, what
``score_answers``, the epoch reduction and a re-scoring's merge return), ``ScoresMeta`` and
``Interval`` (one entry of ``scores.uncertainty``), with the readers every consumer uses as their
methods (``metric_values``, ``score_values``, ``per_question``, ``breakdown_values``,
``summary_lines``, ...). ``harness.execution.record`` re-exports them. The shape written is results
format 2/3's (``harness.scoring.results``): namespaces by metric name, the sections beside them.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from harness.scoring.display import is_column, learn_declared
from harness.scoring.sections import RESULTS_FORMAT, SECTIONS
from harness.scoring.shape import (
    _is_count_name,
    value_leaves,
    _num,
    _short_label,
    _typed_leaves,
    _without_diagnostics,
    numeric_leaves,
    upgrade,
)


class ScoresMeta(BaseModel):
    model_config = ConfigDict(extra="allow", protected_namespaces=())

    metrics: list[str] = []
    n_questions: int | None = Field(None, ge=0, description="the questions selected (scored from generations: the dataset's)")
    n_answered: int | None = Field(
        None,
        ge=0,
        description="of a run: the questions scored, those with a finished sample (one finished without an answer "
        "included: it scores 0); from generations: those with an answer",
    )
    n_failed: int | None = Field(
        None, ge=0, description="the questions that failed (a failure row, no finished sample): not scored"
    )
    n_pending: int | None = Field(None, ge=0, description="the questions never asked (the run stopped first): not scored")
    not_scored: str | None = Field(
        None, description="why questions have no values, e.g. '3 of 3 failed: model_unavailable (...)'"
    )
    dataset: str | None = None
    dataset_sha256: str | None = None
    metric_info: dict[str, Any] = {}
    aggregation: dict[str, Any] = {}
    options: dict[str, Any] = {}
    clustering: dict[str, Any] = {}
    kept_metrics: list[str] = Field(
        [],
        description="metrics whose numbers (or failure) come from an earlier scoring of the run, kept as they were "
        "when `harness score RUN_DIR --metrics ...` scored the others",
    )


class Interval(BaseModel):
    """One number's uncertainty (an entry of ``scores.uncertainty``, ``harness.scoring.uncertainty``):
    its value, standard error and 95% interval, how they were computed, and why not where they were
    not (``note``). Read from the stored entry; the file keeps the entry as written."""

    model_config = ConfigDict(extra="allow", frozen=True)

    value: float | None = None
    stderr: float | None = None
    ci95: list[float | None] | None = None
    method: str | None = None
    n: int | None = None
    n_clusters: int | None = None
    note: str | None = None
    # the number's kind as its interval was computed (epochs: a mean); a retrieval record's is {"name", "scale"}
    kind: str | dict[str, Any] | None = None
    per_question: list[str] | None = None  # the key path of its per-question value in each raw row

    @property
    def kind_name(self) -> str | None:
        return self.kind.get("name") if isinstance(self.kind, dict) else self.kind

    @property
    def bounds(self) -> tuple[float, float] | None:
        """(low, high), None without a whole interval."""
        ci = self.ci95
        return (ci[0], ci[1]) if ci and len(ci) == 2 and ci[0] is not None and ci[1] is not None else None

    @property
    def missing(self) -> bool:
        """Neither a standard error nor an interval (shown ``± n/a``, with the note)."""
        return self.stderr is None and not self.ci95

    def no_spread(self) -> bool:
        """No standard error because the values (or cluster means) were all equal: a spread measured
        as 0, not one that cannot be measured (one value, one cluster)."""
        return self.stderr is None and str(self.note or "").startswith("all ")

    def text(self, with_note: bool = True) -> str:
        """`` ± SE [LO, HI]``; `` ± n/a [LO, HI]`` where only the interval exists (a share whose values
        are all equal: Wilson); `` ± n/a (why)`` where neither does (the note left to the caller
        without ``with_note``); '' where nothing says why."""
        if self.missing:
            if not self.note:
                return ""
            return f" ± n/a ({self.note})" if with_note else " ± n/a"
        text = " ± n/a" if self.stderr is None else f" ± {self.stderr:.4f}"
        if self.ci95:
            text += f" [{self.ci95[0]:.4f}, {self.ci95[1]:.4f}]"
        return text


class PluginRecord(BaseModel):
    """What a run records of the plugin that scored a metric (``meta.metric_info[METRIC]["plugin"]``,
    ``harness.registry.Entry.record`` with the metric's declarations): where it came from (``source``:
    file, module, entry-point, registered; ``ref``) and its identity (a file's sha256, a package's
    version)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    name: str | None = None
    source: str | None = None
    ref: str | None = None
    file: str | None = None
    sha256: str | None = None
    package: str | None = None
    version: str | None = None
    declared: dict[str, Any] | None = None

    def identity(self) -> dict[str, Any]:
        """{"sha256" | "package" | "version": value} as recorded (those the record holds)."""
        return {k: getattr(self, k) for k in ("sha256", "package", "version") if k in self.model_fields_set}


class Scores(BaseModel):
    """``scores``: one namespace per metric (its aggregate, any keys the metric writes) and the
    sections ``raw`` (per question), ``breakdown``, ``uncertainty``, ``epochs`` and ``meta``."""

    model_config = ConfigDict(extra="allow")
    __pydantic_extra__: dict[str, dict[str, Any]] = Field(init=False)  # metric name -> its aggregate

    results_format: Literal[1, 2, 3] = RESULTS_FORMAT
    raw: list[dict[str, Any]] = []
    breakdown: dict[str, dict[str, dict[str, Any]]] = {}
    uncertainty: dict[str, dict[str, Any]] = {}
    epochs: dict[str, Any] | None = None
    meta: ScoresMeta = Field(default_factory=ScoresMeta)

    @model_validator(mode="before")
    @classmethod
    def _upgrade(cls, data: Any) -> Any:
        return upgrade(data) if isinstance(data, dict) else data

    @model_validator(mode="after")
    def _learn_declared(self) -> "Scores":
        # a plugin given by reference is known to tables by what its run recorded (display.learn_declared)
        learn_declared(self.meta.metric_info)
        return self

    @classmethod
    def of(cls, scores: "Scores | dict[str, Any] | None") -> "Scores":
        """A scores dict (any results format) or ``Scores`` as ``Scores``; None: no scores (empty)."""
        if isinstance(scores, Scores):
            return scores
        return cls.model_validate(scores) if scores else cls()

    def as_dict(self) -> dict[str, Any]:
        """The scores as written (the JSON of ``scores`` in results.json: the fields given, not
        defaults added, as ``RunResults`` dumps them)."""
        return self.model_dump(mode="json", exclude_unset=True)

    # for callers written against the dict (tests, plugins): a read of one top-level key --------------
    def __getitem__(self, key: str) -> Any:
        extra = self.__pydantic_extra__ or {}
        if key in extra:
            return extra[key]
        if key == "meta":
            return self.meta.model_dump()
        if key in type(self).model_fields and (key != "epochs" or self.epochs is not None):
            return getattr(self, key)
        raise KeyError(key)

    def get(self, key: str, default: Any = None) -> Any:
        try:
            return self[key]
        except KeyError:
            return default

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self.get(key) is not None

    # the readers --------------------------------------------------------------------------------
    def metrics(self) -> dict[str, dict[str, Any]]:
        """{metric: its aggregate}, in scoring order."""
        return dict(self.__pydantic_extra__ or {})

    def metric_names(self) -> list[str]:
        return [k for k in self.metrics() if k not in SECTIONS]

    def failed_metrics(self) -> dict[str, Any]:
        """{metric: why it failed} (``meta.failed_metrics``; a metric that raised has no numbers)."""
        return dict((self.meta.model_extra or {}).get("failed_metrics") or {})

    def aggregate(self, name: str) -> dict[str, Any] | None:
        """One metric's aggregate as written (None: not scored)."""
        value = (self.__pydantic_extra__ or {}).get(name)
        return value if isinstance(value, dict) else None

    def metric_aggregates(self) -> dict[str, dict[str, Any]]:
        """{metric: its aggregate without its DIAGNOSTICS}, in scoring order."""
        return {k: _without_diagnostics(v) for k, v in self.metrics().items() if k not in SECTIONS and isinstance(v, dict)}

    def metric_values(self) -> dict[str, float | None]:
        """Every aggregate number as ``METRIC.NAME``; None where a number has no value (n/a, never 0)."""
        return {k: None if v is None else float(v) for k, v in value_leaves(self.metric_aggregates()).items()}

    def score_values(self) -> dict[str, float | None]:
        """``metric_values`` without the counts: what tables and plots show as scores."""
        return {k: v for k, v in _typed_leaves(self.metric_aggregates()).items() if not _is_count_name(k)}

    def count_values(self) -> dict[str, int | None]:
        """The counts among the aggregates (``topiocqa.turns``; None when nothing was scored)."""
        return {k: v for k, v in _typed_leaves(self.metric_aggregates()).items() if _is_count_name(k)}

    def null_values(self) -> list[str]:
        """The ``METRIC.NAME`` numbers recorded as null (no value: n/a)."""
        return [k for k, v in value_leaves(self.metric_aggregates()).items() if v is None]

    def per_question(self) -> dict[str, dict[str, float]]:
        """{question id: {"METRIC.NAME": number}} from the per-question values."""
        return {
            r["question_id"]: numeric_leaves({k: v for k, v in r.items() if k not in ("question_id", "oversized_answer")})
            for r in self.raw
            if "question_id" in r
        }

    def rows_by_question(self) -> dict[str, dict[str, Any]]:
        """{question id: {metric: its per-question values}}, one row per question in scoring order: a
        question's repeated rows (epochs) averaged leaf by leaf (``uncertainty.collapse_repeats``)."""
        from harness.scoring.uncertainty import collapse_repeats

        rows = collapse_repeats(self.raw)
        return {r["question_id"]: {k: v for k, v in r.items() if k != "question_id"} for r in rows}

    def metric_rows(self, name: str) -> dict[str, dict[str, Any]]:
        """{question id: ``name``'s per-question values} (what its aggregate and error bars are computed
        from), as ``rows_by_question``; a question without them is left out."""
        return {q: row[name] for q, row in self.rows_by_question().items() if isinstance(row.get(name), dict)}

    def question_ids(self) -> list[str]:
        """The questions with per-question values, in their order (each once)."""
        return list(dict.fromkeys(r.get("question_id") for r in self.raw))

    def breakdown_values(self) -> dict[str, dict[str, dict[str, Any]]]:
        """{group: {value: {"n": n, "METRIC.NAME": mean, ...}}} from ``breakdown``; a mean without a
        value is None (n/a); a value no question was scored in is left out."""
        out: dict[str, dict[str, dict[str, Any]]] = {}
        for group, values in self.breakdown.items():
            entries: dict[str, dict[str, Any]] = {}
            for value, row in values.items():
                if row.get("n") == 0:
                    continue
                entry: dict[str, Any] = {"n": row.get("n")}
                scored = {k: _without_diagnostics(v) for k, v in row.items() if k != "n" and isinstance(v, dict)}
                entry.update({k: None if v is None else float(v) for k, v in value_leaves(scored).items()})
                entries[value] = entry
            if entries:
                out[group] = entries
        return out

    def interval(self, key: str) -> Interval | None:
        """The uncertainty of ``METRIC.NAME`` (None: the scores hold none, e.g. an older file)."""
        entry = self.uncertainty.get(key)
        return Interval.model_validate(entry) if isinstance(entry, dict) else None

    def intervals(self) -> dict[str, Interval]:
        """Every recorded uncertainty entry, typed."""
        return {k: Interval.model_validate(e) for k, e in self.uncertainty.items() if isinstance(e, dict)}

    @property
    def clustering(self) -> dict[str, Any]:
        return self.meta.clustering

    @property
    def cluster_by(self) -> str | None:
        """The field the error bars were clustered by (None: by question)."""
        return self.meta.clustering.get("by")

    @property
    def clusters(self) -> dict[str, Any] | None:
        """{question id: its cluster} where the error bars were clustered."""
        return self.meta.clustering.get("clusters")

    @property
    def n_clusters(self) -> int | None:
        """How many clusters the error bars resampled (None: not clustered)."""
        return self.meta.clustering.get("n_clusters")

    @property
    def n_oversized_answers(self) -> int:
        """The answers scored on their first ``max_answer_chars`` characters only (0: none, or not recorded)."""
        return (self.meta.model_extra or {}).get("n_oversized_answers") or 0

    def recorded_options(self, *names: str) -> dict[str, Any]:
        """The scoring options the scores were made with (``meta.options`` as recorded: an older file's
        may lack some), only ``names`` where given."""
        return {k: v for k, v in self.meta.options.items() if not names or k in names}

    @property
    def n_epochs(self) -> int | None:
        return (self.epochs or {}).get("n")

    @property
    def epoch_reducer(self) -> str | None:
        return (self.epochs or {}).get("reducer")

    def aggregations(self) -> dict[str, Any]:
        """{metric: how its number was aggregated} as recorded (``meta.aggregation``)."""
        return dict(self.meta.aggregation)

    def metric_info(self, name: str) -> dict[str, Any]:
        return self.meta.metric_info.get(name) or {}

    def plugin(self, name: str) -> PluginRecord | None:
        """The plugin that scored ``name``, as the run recorded it (None: a built-in, which records none)."""
        info = self.metric_info(name)
        record = info.get("plugin") if isinstance(info, dict) else None
        return PluginRecord.model_validate(record) if isinstance(record, dict) else None

    def no_value_reason(self, name: str) -> str | None:
        """Why a metric has no values, as its info records it (a judge or checkpoint unavailable,
        no question scored); None when it says nothing."""
        return self.metric_info(name).get("reason")

    def nothing_scored(self) -> str | None:
        """Why no question has values (every selected one failed or was never asked), or None when
        some question was scored (or the scores do not say: older files)."""
        meta = self.meta
        if meta.n_answered == 0 and (meta.n_failed or meta.n_pending):
            return meta.not_scored or "no question was scored"
        return None

    def answered_note(self) -> str:
        """`` (n=7 of 10; 3 failed)`` when some selected questions have no values (failed, not asked),
        or some epoch scored fewer than the others; '' otherwise."""
        meta = self.meta
        n_questions, n_answered = meta.n_questions, meta.n_answered
        failed, pending = meta.n_failed or 0, meta.n_pending or 0
        per_epoch = (self.epochs or {}).get("n_answered") or []
        short = n_answered is not None and any(n < n_answered for n in per_epoch)
        if n_questions is None or n_answered is None or not (failed or pending or short):
            return ""
        parts = [f"{failed} failed"] if failed else []
        if pending:
            parts.append(f"{pending} not asked")
        if short:
            parts.append("answered per epoch " + "/".join(str(n) for n in per_epoch))
        return f" (n={n_answered} of {n_questions}; {', '.join(parts)})"

    def official_fanoutqa(self) -> dict[str, Any] | None:
        """The fanoutqa-string numbers in the official scorer's shape ``{"acc", "rouge", "raw":
        [{"question_id", "acc", "rouge"}]}``; None when that metric was not scored."""
        agg = self.aggregate("fanoutqa-string")
        if not agg or "acc" not in agg:
            return None
        raw = [{"question_id": r["question_id"], **r["fanoutqa-string"]} for r in self.raw if "fanoutqa-string" in r]
        return {"acc": agg["acc"], "rouge": agg["rouge"], "raw": raw}

    def summary_lines(self) -> list[str]:
        """One line per metric with its aggregate numbers (each ``± stderr [95% interval]`` where the
        scores carry their uncertainty, ``± n/a`` and the reason once where there is none to
        estimate), for the console. Where questions failed or were not asked, each line ends with how
        many (``answered_note``); where none was scored, each metric is ``n/a`` with the reason."""
        nothing = self.nothing_scored()
        note = self.answered_note()
        lines = []
        for name, agg in self.metric_aggregates().items():
            reason = self.no_value_reason(name)
            if nothing is not None and all(v is None for v in value_leaves(agg).values()):
                lines.append(f"{name}: n/a ({reason or nothing})")
                continue
            if name == "fanoutqa-string" and "acc" in agg and "rouge" in agg:
                f = [agg["rouge"][k]["fscore"] for k in ("rouge1", "rouge2", "rougeL")]
                text = f"acc loose {_f4(agg['acc']['loose'])} strict {_f4(agg['acc']['strict'])} | ROUGE-1/2/L F " + "/".join(
                    _f4(x) for x in f
                )
                parts = [
                    (label, self.interval(f"{name}.{key}"))
                    for label, key in (("acc loose", "acc.loose"), ("strict", "acc.strict"), ("ROUGE-L F", "rouge.rougeL.fscore"))
                ]
                shown = " ".join(f"{label}{e.text(False)}" for label, e in parts if e is not None and e.text())
                if shown:
                    text += f" | 95% CI: {shown}{_notes([e for _, e in parts])}"
            else:
                leaves = value_leaves(agg)
                entries = [self.interval(f"{name}.{k}") for k in leaves]
                text = (
                    " ".join(
                        f"{k} {_num(v)}{e.text(False) if e is not None else ''}" for (k, v), e in zip(leaves.items(), entries)
                    )
                    or "no values"
                ) + _notes(entries)
                if leaves and all(v is None for v in leaves.values()) and reason:
                    text = f"unavailable ({reason})"
            lines.append(f"{name}: {text}{note}")
            agreement = (self.aggregate(name) or {}).get("agreement")
            if agreement:
                from harness.scoring.agreement import agreement_line

                line = agreement_line(agreement)
                if line:
                    lines.append(f"  {line}")
        return lines

    def breakdown_lines(self, max_values: int = 12) -> list[str]:
        """For the console: per breakdown group, one line per value with n and the headline means."""
        lines = []
        names = list(self.metric_aggregates())
        strip = f"{names[0]}." if len(names) == 1 else ""  # one metric: its name on every value is noise
        for group, values in self.breakdown_values().items():
            lines.append(f"by {group}:")
            shown = sorted(values.items(), key=lambda kv: -(kv[1].get("n") or 0))
            for value, entry in shown[:max_values]:
                parts = " ".join(
                    f"{_short_label(k.removeprefix(strip))} {_num(v)}"
                    for k, v in entry.items()
                    if k != "n" and is_column(k) and not _is_count_name(k)
                )
                lines.append(f"  {value} (n={entry.get('n')}): {parts}")
            if len(shown) > max_values:
                lines.append(f"  ... {len(shown) - max_values} more (results.json scores.breakdown)")
        return lines


def _f4(value: Any) -> str:
    return "n/a" if value is None else f"{value:.4f}"


def _notes(entries: list[Interval | None]) -> str:
    """`` (n/a: why)`` once for the entries without an interval (each reason once)."""
    notes = [e.note for e in entries if e is not None and e.note and e.missing]
    return f" (n/a: {'; '.join(dict.fromkeys(notes))})" if notes else ""
