"""Reading a ``scores`` dict (results.json ``scores``, ``harness score`` output) in either format.

Format 2 (``results_format: 2``) gives each metric its own namespace, so no metric can overwrite
another's numbers::

    {"results_format": 2,
     "fanoutqa-string": {"acc": {"loose", "strict"}, "rouge": {...}},   # official FanOutQA shape
     "set-f1": {"precision", "recall", "f1", ...},
     "raw": [{"question_id", "fanoutqa-string": {"acc", "rouge"}, "set-f1": {...}}, ...],
     "breakdown": {GROUP: {VALUE: {"n", "fanoutqa-string": {...}, "set-f1": {...}}}},
     "meta": {...}}

Format 1 (no ``results_format``; harness before issue 10) merged every metric's aggregate into one
flat dict, a later metric overwriting an earlier one's keys. ``upgrade`` reads it as format 2:
each key goes to the last metric of ``meta.metrics`` that wrote it, which is whose value it holds.
Every reader (console summary, leaderboard, report, ablate) goes through these functions.
"""

from __future__ import annotations

from typing import Any

from harness.errors import HarnessError
from harness.scoring.sections import DIAGNOSTICS, RESULTS_FORMAT, SECTIONS  # noqa: F401 - read from here too
# What each metric wrote into a format-1 scores dict: (aggregate keys, per-question keys). Format 1
# is frozen, so this table is history, not something new metrics need to join.
FORMAT1_KEYS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "fanoutqa-string": (("acc", "rouge"), ("acc", "rouge")),
    "em-f1": (("em", "f1", "f1_precision", "f1_recall"),) * 2,
    "set-f1": (
        ("precision", "recall", "f1", "f1_ge_0.5", "recall_ge_0.8"),
        ("precision", "recall", "f1", "n_predicted", "n_correct"),
    ),
    "quest": (("precision", "recall", "f1"), ("precision", "recall", "f1", "n_predicted", "n_correct")),
    "topiocqa": (("em", "f1", "bleu", "bleu_corpus", "turns"), ("em", "f1", "bleu")),
    "bleurt": (("bleurt",),) * 2,
    "llm-judge": (("llm_judge",), ("llm_judge", "judge_output")),
}
UNATTRIBUTED = "unattributed"  # format-1 keys no known metric wrote


def results_format(scores: dict[str, Any]) -> int:
    version = scores.get("results_format", 1)
    if version not in (1, 2, RESULTS_FORMAT):
        raise HarnessError(f"scores in results format {version!r}; this harness reads formats 1 to {RESULTS_FORMAT}")
    return version


def upgrade(scores: dict[str, Any] | None) -> dict[str, Any] | None:
    """``scores`` in format 2 (a format-2 dict is returned as it is, a format-1 one converted)."""
    if not scores or results_format(scores) != 1:  # 2 and 3 share one shape
        return scores
    meta = scores.get("meta") or {}
    names = list(meta.get("metrics") or [])

    def owner(key: str, part: int) -> str:
        for name in reversed(names):  # a later metric's update won
            if key in FORMAT1_KEYS.get(name, ((), ()))[part]:
                return name
        unknown = [n for n in names if n not in FORMAT1_KEYS]
        return unknown[-1] if unknown else UNATTRIBUTED

    out: dict[str, Any] = {"results_format": RESULTS_FORMAT}
    for name in names:  # in scoring order; one whose keys were all overwritten stays, empty
        out[name] = {}
    for key, value in scores.items():
        if key not in SECTIONS:
            out.setdefault(owner(key, 0), {})[key] = value
    if "raw" in scores:
        out["raw"] = []
        for row in scores["raw"]:
            new: dict[str, Any] = {"question_id": row.get("question_id")}
            for key, value in row.items():
                if key != "question_id":
                    new.setdefault(owner(key, 1), {})[key] = value
            out["raw"].append(new)
    if "breakdown" in scores:
        out["breakdown"] = {}
        for group, values in scores["breakdown"].items():
            out["breakdown"][group] = {}
            for value, row in values.items():
                new = {"n": row.get("n")}
                for key, mean in row.items():  # flattened per-question leaves: "rouge.rougeL.fscore"
                    if key == "n":
                        continue
                    parts = key.split(".")
                    node = new.setdefault(owner(parts[0], 1), {})
                    for part in parts[:-1]:
                        node = node.setdefault(part, {})
                    node[parts[-1]] = mean
                out["breakdown"][group][value] = new
    if "meta" in scores:
        out["meta"] = {**meta, "upgraded_from_results_format": 1}
    return out


def metric_aggregates(scores: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    """{metric: its aggregate dict without its DIAGNOSTICS}, in scoring order."""
    scores = upgrade(scores)
    if not scores:
        return {}
    return {k: _without_diagnostics(v) for k, v in scores.items() if k not in SECTIONS and isinstance(v, dict)}


def numeric_leaves(values: dict[str, Any], prefix: str = "") -> dict[str, float]:
    """Nested numbers flattened to dotted names; bools count 0/1, None and text are left out (for
    arithmetic; a table reads ``metric_values``/``score_values``, which keep None as no value)."""
    out: dict[str, float] = {}
    for key, value in values.items():
        name = f"{prefix}{key}"
        if isinstance(value, (bool, int, float)):
            out[name] = float(value)
        elif isinstance(value, dict):
            out.update(numeric_leaves(value, name + "."))
    return out


def metric_values(scores: dict[str, Any] | None) -> dict[str, float | None]:
    """Every aggregate number as ``METRIC.NAME`` (``fanoutqa-string.acc.loose``, ``em-f1.f1``, ...);
    None where a number has no value (no question answered, a judge unavailable): shown as n/a,
    never as 0, never dropped (``numeric_leaves`` drops them)."""
    return {k: None if v is None else float(v) for k, v in _leaves(metric_aggregates(scores)).items()}


def per_question(scores: dict[str, Any] | None) -> dict[str, dict[str, float]]:
    """{question id: {"METRIC.NAME": number}} from the per-question values."""
    scores = upgrade(scores) or {}
    return {
        r["question_id"]: numeric_leaves({k: v for k, v in r.items() if k not in ("question_id", "oversized_answer")})
        for r in scores.get("raw") or []
        if "question_id" in r
    }


def scale_of(name: str) -> str:
    """The scale of a ``METRIC.NAME`` score as its metric declares it (``harness.scoring.kinds``):
    "0-100" (TopiOCQA's official EM/F1 x100, BLEU), "0-1", the unit of a count or money per question
    (``searches``, ``USD``), or "unbounded" (BLEURT, a plugin that declares nothing)."""
    from harness.scoring.display import kind_of

    return kind_of(name).text()


def score_values(scores: dict[str, Any] | None) -> dict[str, float | None]:
    """``metric_values`` without the counts: what tables and plots show as scores (None: no value, n/a)."""
    return {k: v for k, v in _typed_leaves(metric_aggregates(scores)).items() if not _counts(k, v)}


def count_values(scores: dict[str, Any] | None) -> dict[str, int | None]:
    """The counts among a scores dict's aggregates (``topiocqa.turns``; None when nothing was scored)."""
    return {k: v for k, v in _typed_leaves(metric_aggregates(scores)).items() if _counts(k, v)}


def _counts(name: str, value: Any) -> bool:
    """A number of things (TopiOCQA's turns scored), declared ``count(total=True)``: not a score."""
    return _is_count_name(name)


def _typed_leaves(values: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Numeric leaves as they are (ints stay ints, bools count 0/1, None: no value), under dotted names."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        name = f"{prefix}{key}"
        if isinstance(value, bool):
            out[name] = float(value)
        elif value is None or isinstance(value, (int, float)):
            out[name] = value
        elif isinstance(value, dict):
            out.update(_typed_leaves(value, name + "."))
    return out


def breakdown_values(scores: dict[str, Any] | None) -> dict[str, dict[str, dict[str, Any]]]:
    """{group: {value: {"n": n, "METRIC.NAME": mean, ...}}} from ``scores.breakdown`` (FanOutQA
    category, QAMPARI type, QUEST template/domain, TopiOCQA turn type); {} when there is none. A
    mean without a value is None (n/a); a value no question was scored in is left out."""
    scores = upgrade(scores) or {}
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for group, values in (scores.get("breakdown") or {}).items():
        entries: dict[str, dict[str, Any]] = {}
        for value, row in values.items():
            if row.get("n") == 0:
                continue
            entry: dict[str, Any] = {"n": row.get("n")}
            scored = {k: _without_diagnostics(v) for k, v in row.items() if k != "n" and isinstance(v, dict)}
            entry.update({k: None if v is None else float(v) for k, v in _leaves(scored).items()})
            entries[value] = entry
        if entries:
            out[group] = entries
    return out


def _without_diagnostics(values: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in values.items() if k not in DIAGNOSTICS}


# Of the agent namespace, tables show the evidence recall, searches and hops (the rest: scores, report).
AGENT_DETAIL = frozenset({"agent.evidence_precision", "agent.rounds", "agent.tokens", "agent.cost"})


def headline_of(name: str) -> bool:
    """Shown in tables: F-scores and accuracies, not their precision/recall parts."""
    if name.startswith("agent."):
        return name not in AGENT_DETAIL
    last = name.rsplit(".", 1)[-1]
    return not (last in ("precision", "recall") or last.endswith(("_precision", "_recall")))


def _is_count_name(name: str) -> bool:
    """Whether ``METRIC.NAME`` is declared a number of things (``count(total=True)``)."""
    from harness.scoring.display import kind_of

    kind = kind_of(name)
    return kind.name == "count" and kind.total


def _short_label(name: str) -> str:
    """``rouge.rougeL.fscore`` -> ``rougeL`` (the F-score is the one shown): console lines stay short."""
    parts = name.split(".")
    if len(parts) == 3 and parts[0] == "rouge" and parts[2] == "fscore":
        return parts[1]
    return name


def breakdown_lines(scores: dict[str, Any] | None, max_values: int = 12) -> list[str]:
    """For the console: per breakdown group, one line per value with n and the headline means."""
    lines = []
    names = list(metric_aggregates(scores))
    strip = f"{names[0]}." if len(names) == 1 else ""  # one metric: its name on every value is noise
    for group, values in breakdown_values(scores).items():
        lines.append(f"by {group}:")
        shown = sorted(values.items(), key=lambda kv: -(kv[1].get("n") or 0))
        for value, entry in shown[:max_values]:
            parts = " ".join(
                f"{_short_label(k.removeprefix(strip))} {_num(v)}"
                for k, v in entry.items()
                if k != "n" and headline_of(k) and not _is_count_name(k)
            )
            lines.append(f"  {value} (n={entry.get('n')}): {parts}")
        if len(shown) > max_values:
            lines.append(f"  ... {len(shown) - max_values} more (results.json scores.breakdown)")
    return lines


def official_fanoutqa(scores: dict[str, Any] | None) -> dict[str, Any] | None:
    """The fanoutqa-string numbers in the official scorer's shape ``{"acc", "rouge", "raw":
    [{"question_id", "acc", "rouge"}]}``; None when that metric was not scored."""
    scores = upgrade(scores) or {}
    agg = scores.get("fanoutqa-string")
    if not agg or "acc" not in agg:
        return None
    raw = [
        {"question_id": r["question_id"], **r["fanoutqa-string"]}
        for r in scores.get("raw") or []
        if "fanoutqa-string" in r
    ]
    return {"acc": agg["acc"], "rouge": agg["rouge"], "raw": raw}


def _num(value: Any) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, int):
        return str(value)
    return f"{value:.4f}"


def _f4(value: Any) -> str:
    return "n/a" if value is None else f"{value:.4f}"


def interval_text(entry: dict[str, Any] | None, with_note: bool = True) -> str:
    """`` ± SE [LO, HI]`` of an uncertainty entry; `` ± n/a [LO, HI]`` where only the interval exists
    (a share whose values are all equal: Wilson), `` ± n/a (why)`` where neither does (the note left
    to the caller without ``with_note``); '' without an entry."""
    if not entry:
        return ""
    stderr, ci = entry.get("stderr"), entry.get("ci95")
    if stderr is None and not ci:
        if not entry.get("note"):
            return ""
        return f" ± n/a ({entry['note']})" if with_note else " ± n/a"
    text = " ± n/a" if stderr is None else f" ± {stderr:.4f}"
    if ci:
        text += f" [{ci[0]:.4f}, {ci[1]:.4f}]"
    return text


def _notes(entries: list[dict[str, Any] | None]) -> str:
    """`` (n/a: why)`` once for the entries without an interval (each reason once)."""
    notes = [e["note"] for e in entries if e and e.get("note") and e.get("stderr") is None and not e.get("ci95")]
    return f" (n/a: {'; '.join(dict.fromkeys(notes))})" if notes else ""


def nothing_scored(scores: dict[str, Any] | None) -> str | None:
    """Why a scores dict has no values at all (every selected question failed or was never asked,
    ``meta.not_scored``), or None when some question was scored (or it does not say: older files)."""
    meta = (upgrade(scores) or {}).get("meta") or {}
    if meta.get("n_answered") == 0 and (meta.get("n_failed") or meta.get("n_pending")):
        return meta.get("not_scored") or "no question was scored"
    return None


def answered_note(scores: dict[str, Any] | None) -> str:
    """`` (n=7 of 10; 3 failed)`` when some selected questions have no values (failed, not asked),
    or some epoch scored fewer than the others; '' otherwise."""
    scores = upgrade(scores) or {}
    meta = scores.get("meta") or {}
    n_questions, n_answered = meta.get("n_questions"), meta.get("n_answered")
    failed, pending = meta.get("n_failed") or 0, meta.get("n_pending") or 0
    per_epoch = (scores.get("epochs") or {}).get("n_answered") or []
    short = n_answered is not None and any(n < n_answered for n in per_epoch)
    if n_questions is None or n_answered is None or not (failed or pending or short):
        return ""
    parts = [f"{failed} failed"] if failed else []
    if pending:
        parts.append(f"{pending} not asked")
    if short:
        parts.append("answered per epoch " + "/".join(str(n) for n in per_epoch))
    return f" (n={n_answered} of {n_questions}; {', '.join(parts)})"


def summary_lines(scores: dict[str, Any] | None) -> list[str]:
    """One line per metric with its aggregate numbers (each ``± stderr [95% interval]`` where the
    scores carry their uncertainty, ``± n/a`` and the reason once where there is none to estimate),
    for the console. Where questions failed or were not asked, each line ends with how many
    (``answered_note``); where none was scored, each metric is ``n/a`` with the reason."""
    scores = upgrade(scores) or {}
    info = (scores.get("meta") or {}).get("metric_info") or {}
    errors = scores.get("uncertainty") or {}
    nothing = nothing_scored(scores)
    note = answered_note(scores)
    lines = []
    for name, agg in metric_aggregates(scores).items():
        if nothing is not None and all(v is None for v in _leaves(agg).values()):
            lines.append(f"{name}: n/a ({(info.get(name) or {}).get('reason') or nothing})")
            continue
        if name == "fanoutqa-string" and "acc" in agg and "rouge" in agg:
            f = [agg["rouge"][k]["fscore"] for k in ("rouge1", "rouge2", "rougeL")]
            text = f"acc loose {_f4(agg['acc']['loose'])} strict {_f4(agg['acc']['strict'])} | ROUGE-1/2/L F " + "/".join(
                _f4(x) for x in f
            )
            parts = [
                (label, errors.get(f"{name}.{key}"))
                for label, key in (
                    ("acc loose", "acc.loose"),
                    ("strict", "acc.strict"),
                    ("ROUGE-L F", "rouge.rougeL.fscore"),
                )
            ]
            shown = " ".join(f"{label}{interval_text(e, False)}" for label, e in parts if interval_text(e))
            if shown:
                text += f" | 95% CI: {shown}{_notes([e for _, e in parts])}"
        else:
            leaves = _leaves(agg)
            entries = [errors.get(f"{name}.{k}") for k in leaves]
            text = (
                " ".join(f"{k} {_num(v)}{interval_text(e, False)}" for (k, v), e in zip(leaves.items(), entries))
                or "no values"
            ) + _notes(entries)
            reason = (info.get(name) or {}).get("reason")
            if leaves and all(v is None for v in leaves.values()) and reason:
                text = f"unavailable ({reason})"
        lines.append(f"{name}: {text}{note}")
        agreement = (scores.get(name) or {}).get("agreement")
        if agreement:
            from harness.scoring.agreement import agreement_line

            line = agreement_line(agreement)
            if line:
                lines.append(f"  {line}")
    return lines


def _leaves(values: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Like numeric_leaves, but None kept (an unavailable value is shown, never as 0)."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        if isinstance(value, dict):
            out.update(_leaves(value, f"{prefix}{key}."))
        elif value is None or isinstance(value, (bool, int, float)):
            out[f"{prefix}{key}"] = value
    return out
