"""One run as one typed row (``RunRow``), built from its typed record (``RunResults``): what the
leaderboard, ``harness table``, the data frames and the ablation read of a run, so that each fact of
it (answered, failed, how the samples ended, the headline, the cost) is computed in one place.

**Answered** is one count, of samples (question x epoch): the finished samples whose strategy ended
with an answer, results.json's ``outcomes["answered"]`` (``outcomes`` counts the finished samples by
how they ended; a run recorded before it was kept counts every finished sample, the outcome a row
without one has). A finished sample that ended otherwise (``max_steps``, ``max_rounds``,
``context_full``, ``refused``, ...) is *without an answer*: it is still scored, as the metrics score a
missing answer (wrong), and said beside the numbers with why. **Scored** is the questions with
values (``scores.meta.n_answered``: those with a finished sample, answered or not). A run with
nothing scored (no sample finished) is **failed**: its values are null, never 0.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, computed_field

from harness.execution.config import BACKEND_NOT_HASHED, NOT_HASHED, RunConfig
from harness.execution.record import CostRecord, Decoding, RunResults, SearchSpaceRecord, Tokens, metric_names_of
from harness.redact import strip_credentials
from harness.scoring.display import dataset_headline
from harness.scoring.scores import Scores

ANSWERED = "answered"  # the outcome of a sample that ended with an answer (harness.strategy.SampleResult)
SCORED_AS_WRONG = "scored as wrong, the metrics' rule for a missing answer"
# configuration values that are never knobs: unhashed options (limits, folders) and a row's own columns
NOT_KNOBS = NOT_HASHED | BACKEND_NOT_HASHED | {"model", "dataset", "setting", "agent"}


class Outcomes(BaseModel):
    """How a run's samples ended, read from results.json alone: counts, outcomes, failures and the
    strategy's summary (unreadable steps or tool calls)."""

    selected: int  # samples: questions x epochs
    finished: int
    answered: int  # finished with an answer
    without_answer: dict[str, int] = {}  # finished without one, by outcome (most first)
    failed: int
    failure_types: dict[str, int] = {}  # failed samples by error type (most first)
    pending: int  # never asked
    truncated_output: int = 0  # answers cut at max tokens: kept and scored
    steps: int | None = None  # ReAct's steps (None: not a stepping strategy, or not recorded)
    unreadable_steps: int | None = None  # of them, replies with no readable action
    unreadable_tool_calls: int | None = None  # the tool loops' tool calls that could not be read

    @classmethod
    def of(cls, results: RunResults) -> Outcomes:
        counts = results.counts
        outcomes = results.outcomes
        answered = outcomes.get(ANSWERED, 0) if outcomes else counts.finished
        without = {k: n for k, n in sorted(outcomes.items(), key=lambda kv: (-kv[1], kv[0])) if k != ANSWERED and n}
        types = Counter(note.type for note in results.failures.values())
        summary = results.retrieval or {}

        def count(key: str) -> int | None:
            value = summary.get(key)
            return value if isinstance(value, int) and not isinstance(value, bool) else None

        return cls(
            selected=counts.selected,
            finished=counts.finished,
            answered=min(answered, counts.finished),
            without_answer=without,
            failed=counts.failed,
            failure_types=dict(types.most_common()),
            pending=counts.pending,
            truncated_output=counts.truncated_output,
            steps=count("steps"),
            unreadable_steps=count("malformed_steps"),
            unreadable_tool_calls=count("malformed_tool_calls"),
        )

    @property
    def unanswered(self) -> int:
        """Finished samples without an answer."""
        return self.finished - self.answered

    @property
    def no_answer(self) -> bool:
        """Samples finished, and none of them with an answer."""
        return self.finished > 0 and self.answered == 0

    def why(self) -> str:
        """``max_steps 10; 70 of 70 steps unreadable``: the outcomes of the samples without an answer
        and what the strategy could not read."""
        parts = [", ".join(f"{k} {n}" for k, n in self.without_answer.items())] if self.without_answer else []
        if self.unreadable_steps:
            of = f" of {self.steps}" if self.steps is not None else ""
            parts.append(f"{self.unreadable_steps}{of} steps unreadable")
        if self.unreadable_tool_calls:
            parts.append(f"{self.unreadable_tool_calls} tool calls unreadable")
        return "; ".join(parts)

    def note(self) -> str | None:
        """``10 of 10 finished samples ended without an answer (max_steps 10; ...): scored as wrong,
        ...``; None when every finished sample answered."""
        if not self.unanswered:
            return None
        why = self.why()
        return (
            f"{self.unanswered} of {self.finished} finished samples ended without an answer"
            + (f" ({why})" if why else "")
            + f": {SCORED_AS_WRONG}"
        )

    def counts_line(self) -> str:
        """``finished 10/10, failed 0, answered 0`` (answered where some finished sample has none):
        the first line of what ``harness run``, ``harness score RUN_DIR`` and ``harness compare`` say."""
        answered = f", answered {self.answered}" if self.unanswered else ""
        return f"finished {self.finished}/{self.selected}, failed {self.failed}{answered}"

    @property
    def none_answered(self) -> bool:
        """No sample produced an answer: none finished, or every finished one ended without one."""
        return bool(self.selected) and (self.finished == 0 or self.no_answer)

    def none_answered_line(self) -> str | None:
        """Why no sample produced an answer (``harness run`` and ``harness score`` exit non-zero then), or None."""
        if self.selected and self.finished == 0:
            return "no question was answered: no scores (n/a, not 0)"
        if self.no_answer:
            return f"no sample produced an answer: {self.note()}"
        return None

    def cell(self) -> str:
        """The leaderboard's cell: ``10 (max_steps 10; 70 of 70 steps unreadable)``, ``0``."""
        why = self.why() if self.unanswered else ""
        return f"{self.unanswered} ({why})" if why else str(self.unanswered)

    def failure_note(self) -> str | None:
        """``3 of 3 failed: model_unavailable (3)``, with the questions never asked; None when none failed."""
        parts = []
        if self.failed:
            kinds = ", ".join(f"{t} ({n})" for t, n in self.failure_types.items())
            parts.append(f"{self.failed} of {self.selected} failed" + (f": {kinds}" if kinds else ""))
        if self.pending:
            parts.append(f"{self.pending} of {self.selected} never asked")
        return "; ".join(parts) or None


def answered_nothing(results: RunResults) -> str | None:
    """Why the run has nothing to measure (no sample finished, or none of the finished ones scored),
    or None. A run whose finished samples all ended without an answer has values (each scored as
    wrong) and is not one: ``Outcomes.no_answer`` says that."""
    counts = results.counts
    meta = results.scores.meta if results.scores is not None else None
    if counts.finished and not (meta is not None and meta.n_answered == 0):
        return None
    failed = Counter(note.type for note in results.failures.values())
    why = ", ".join(f"{n} {kind}" for kind, n in failed.most_common(3))
    if counts.finished == 0:
        return f"the run answered nothing (0 of {counts.selected} samples finished{'; failed: ' + why if why else ''})"
    return f"the run answered nothing ({counts.finished} samples finished, none of them with an answer)"


def null_values(scores: Scores | None) -> list[str]:
    """The ``METRIC.NAME`` leaves whose value is null (no value: nothing answered, a judge unavailable)."""
    return scores.null_values() if scores is not None else []


class RunRow(BaseModel):
    """A run as every table of runs reads it. Dumped (``by_alias``), its fields are the leaderboard
    JSON's row: the counts under their JSON names (``n_questions``, ``n_answered``, ...)."""

    path: str
    run_id: str
    config_hash: str
    status: str
    model: str  # as --model gave it
    model_name: str  # as its backend named it
    backend: str | None
    dataset: str  # the name
    dataset_spec: str
    split: str | None
    version: str | None
    setting: str
    agent: str | None
    context_size: int | None
    native_tool_calling: bool
    epochs: int
    outcomes: Outcomes
    questions: int | None = Field(serialization_alias="n_questions")  # the questions scored over (None: not scored)
    scored: int | None = Field(serialization_alias="n_scored")  # of them, those with values (None: not scored)
    not_scored: int  # questions failed or never asked (the scores' count; unscored: the samples')
    failed: bool  # nothing to measure: every value null (never 0)
    failed_reason: str | None  # why (``answered_nothing``)
    failure_note: str | None  # failed and never-asked samples, by type
    headline: list[str]  # the dataset's headline keys
    metrics: dict[str, float | None]  # METRIC.NAME scores (counts apart), None where no value
    numbers: dict[str, float | None] = {}  # every numeric leaf as stored, counts too (a table's --metric)
    null_reasons: dict[str, str] = {}
    stderr: dict[str, float | None] = {}
    ci95: dict[str, list[float] | None] = {}
    uncertainty_method: dict[str, Any] = {}
    uncertainty_note: dict[str, str] = {}  # why a value has no standard error (shown ± n/a)
    score_counts: dict[str, Any] = {}  # e.g. topiocqa.turns: not a score
    breakdown: dict[str, Any] = {}
    tokens: Tokens | None = None
    cost_usd: float | None = None
    cost_per_sample_usd: float | None = None
    spent_usd: float | None = None
    cost_note: str | None = None
    decoding: Decoding
    search_space: SearchSpaceRecord | None = None
    started_at: str | None = None
    ended_at: str | None = None
    # config leaves by flag name (generation and backend knobs unnested, the endpoint): what may tell
    # apart runs of one key; never written
    config: dict[str, Any] = Field({}, exclude=True)
    knobs: dict[str, Any] = {}  # those whose values differ between the runs of its key (the leaderboard's)

    @computed_field(alias="n_answered")  # type: ignore[prop-decorator]
    @property
    def answered(self) -> int:
        """Samples that finished with an answer (``Outcomes.answered``: the one count)."""
        return self.outcomes.answered

    @computed_field(alias="n_selected")  # type: ignore[prop-decorator]
    @property
    def selected(self) -> int:
        return self.outcomes.selected

    @computed_field(alias="n_finished")  # type: ignore[prop-decorator]
    @property
    def finished(self) -> int:
        return self.outcomes.finished

    @computed_field(alias="n_failed")  # type: ignore[prop-decorator]
    @property
    def failed_samples(self) -> int:
        return self.outcomes.failed

    @computed_field(alias="n_pending")  # type: ignore[prop-decorator]
    @property
    def pending(self) -> int:
        return self.outcomes.pending

    @computed_field  # type: ignore[prop-decorator]
    @property
    def outcome_note(self) -> str | None:
        """The one line saying the finished samples without an answer (``Outcomes.note``)."""
        return self.outcomes.note()

    @property
    def key(self) -> tuple[str | None, ...]:
        """The row's identity: model, dataset, split, version, setting, agent."""
        return (self.model, self.dataset, self.split, self.version, self.setting, self.agent)

    @property
    def headline_key(self) -> str | None:
        return self.headline[0] if self.headline else None

    @property
    def headline_value(self) -> float | None:
        key = self.headline_key
        return self.metrics.get(key) if key else None

    @classmethod
    def of(cls, results: RunResults, path: str | Path) -> RunRow:
        scores = results.scores or Scores()
        outcomes = Outcomes.of(results)
        cost = results.cost or CostRecord()
        price = cost.price or {}
        meta = results.scores.meta if results.scores is not None else None
        metrics: dict[str, float | None] = dict(scores.score_values())
        note = outcomes.failure_note()
        null_reasons: dict[str, str] = {}
        for key in null_values(scores):
            metrics[key] = None
            null_reasons[key] = scores.no_value_reason(key.split(".", 1)[0]) or note or "no value"
        reason = answered_nothing(results) if results.counts.selected else None
        if reason:  # nothing answered: whatever a run from before this rule stored (0.0), no value
            for key in metrics:
                metrics[key] = None
                null_reasons[key] = f"no question answered ({note})" if note else "no question answered"
        errors = scores.intervals()
        failed = reason is not None
        names = metric_names_of(results.scores) or list(results.config.metrics or [])
        return cls(
            path=str(path),
            run_id=results.run_id,
            config_hash=results.config_hash,
            status=results.status,
            model=results.config.model,
            model_name=results.model_name,
            backend=results.backend,
            dataset=results.dataset.name,
            dataset_spec=results.dataset.spec,
            split=results.dataset.split,
            version=results.dataset.version,
            setting=results.setting,
            agent=results.agent_name,
            context_size=results.context_size,
            native_tool_calling=results.native_tool_calling,
            epochs=results.counts.epochs or 1,
            outcomes=outcomes,
            questions=meta.n_questions if meta is not None else None,
            scored=(0 if failed else meta.n_answered) if meta is not None else (0 if failed else None),
            not_scored=_not_scored(results),
            failed=failed,
            failed_reason=reason,
            failure_note=note,
            headline=dataset_headline(results.dataset.name, names),
            metrics=metrics,
            numbers=scores.metric_values(),  # every numeric leaf, counts included, None kept
            null_reasons=null_reasons,
            stderr={m: None if failed else errors[m].stderr for m in metrics if m in errors},
            ci95={m: None if failed else errors[m].ci95 for m in metrics if m in errors},
            uncertainty_method={m: errors[m].method for m in metrics if m in errors},
            uncertainty_note={m: errors[m].note for m in metrics if m in errors and errors[m].note},
            score_counts=scores.count_values(),
            breakdown=scores.breakdown_values(),
            tokens=results.tokens,
            cost_usd=cost.total_usd,
            cost_per_sample_usd=cost.per_sample_usd,
            spent_usd=cost.spent_usd,
            cost_note=price.get("reason") or price.get("note"),
            decoding=results.decoding(),
            search_space=results.search_space,
            started_at=results.started_at,
            ended_at=results.ended_at,
            config=config_leaves(results.config, results.model.endpoint if results.model else None),
        )


def config_leaves(config: RunConfig, endpoint: str | None = None) -> dict[str, Any]:
    """Config leaves under their flag names (generation and backend knobs unnested), the knobs'
    candidates. A knob that a run from an older harness did not record has its default (the typed
    record fills it), so it does not show as a difference. The endpoint a backend recorded is one
    too (two servers behind OPENAI_BASE_URL are two runs)."""
    out: dict[str, Any] = {}
    for key, value in config.model_dump(mode="json").items():
        if key in ("generation", "backend") and isinstance(value, dict):
            for sub, v in value.items():
                if sub not in NOT_KNOBS:
                    out[sub] = v
        elif key not in NOT_KNOBS:
            out[key] = value
    if config.backend.base_url:  # a run from before URLs were stripped of credentials shows none either
        out.update(base_url=strip_credentials(config.backend.base_url))
    if endpoint:
        out["endpoint"] = strip_credentials(endpoint)
    return out


def _not_scored(results: RunResults) -> int:
    """Questions failed plus those never asked: the scores' own count where it has one, else the
    run's sample counts."""
    meta = results.scores.meta if results.scores is not None else None
    n_failed, n_pending = getattr(meta, "n_failed", None), getattr(meta, "n_pending", None)
    failed = n_failed if isinstance(n_failed, int) else results.counts.failed
    pending = n_pending if isinstance(n_pending, int) else results.counts.pending
    return failed + pending
