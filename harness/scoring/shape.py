"""The shape of a scores dict, with no model of it: reading a format-1 dict as format 2
(``upgrade``) and walking an aggregate's leaves. ``harness.scoring.scores`` (the typed scores) and
``harness.scoring.results`` (the readers by function) both build on it."""

from __future__ import annotations

from typing import Any

from harness.errors import HarnessError
from harness.scoring.sections import DIAGNOSTICS, RESULTS_FORMAT, SECTIONS

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


def _without_diagnostics(values: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in values.items() if k not in DIAGNOSTICS}


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


def _num(value: Any) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, int):
        return str(value)
    return f"{value:.4f}"


def value_leaves(values: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Like numeric_leaves, but None kept (an unavailable value is shown, never as 0)."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        if isinstance(value, dict):
            out.update(value_leaves(value, f"{prefix}{key}."))
        elif value is None or isinstance(value, (bool, int, float)):
            out[f"{prefix}{key}"] = value
    return out
