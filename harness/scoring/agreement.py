"""How far raters agree: Krippendorff's alpha for nominal data and plain percent agreement.

Used for several LLM judges (``harness.scoring.llm_judge``): the judges' 0/1 verdicts with each other,
and each judge's with a string metric's 0/1. A rater may lack a value for a question (None or NaN):
alpha uses every question that has two values or more, as Krippendorff defines it.

Alpha = 1 - D_o / D_e: 1 is perfect agreement, 0 agreement no better than chance (the values' own
frequencies), below 0 systematic disagreement. It is undefined (0/0) when every value is the same
(no variation to agree on) or no question has two values: then None, with the reason.
"""

from __future__ import annotations

from itertools import combinations
from typing import Any

import numpy as np

NO_PAIRS = "no question has values from two raters"
NO_VARIATION = "every value is the same, so there is no variation to agree on (alpha is 0/0)"


def nominal_alpha(data: Any) -> tuple[float | None, str | None]:
    """Krippendorff's alpha (nominal) of ``data``, raters x units with None/NaN where a rater gave
    no value: (alpha, None), or (None, why) where it is undefined. Through the coincidence matrix
    o_ck = sum over units of n_uc (n_uk - [c == k]) / (m_u - 1), units with m_u >= 2 values only."""
    matrix = np.array([[np.nan if v is None else v for v in row] for row in data], dtype=float)
    if matrix.ndim != 2:
        raise ValueError("data must be raters x units")
    present = ~np.isnan(matrix)
    values = np.unique(matrix[present])
    counts = np.stack([(matrix == v).sum(axis=0) for v in values], axis=1) if values.size else np.zeros((0, 0))
    m_u = counts.sum(axis=1) if values.size else np.zeros(0)
    pairable = m_u >= 2
    if not pairable.any():
        return None, NO_PAIRS
    counts, m_u = counts[pairable].astype(float), m_u[pairable].astype(float)
    weighted = counts / (m_u - 1)[:, None]
    o = weighted.T @ counts - np.diag(weighted.sum(axis=0))
    n_c = o.sum(axis=1)
    n = n_c.sum()
    expected = n * n - (n_c**2).sum()  # sum over c != k of n_c n_k
    if expected <= 0:
        return None, NO_VARIATION
    observed = n - np.trace(o)  # sum over c != k of o_ck
    return float(1.0 - (n - 1.0) * observed / expected), None


def _both(a: list[Any], b: list[Any]) -> list[tuple[Any, Any]]:
    return [(x, y) for x, y in zip(a, b) if x is not None and y is not None]


def pair_agreement(a: list[Any], b: list[Any]) -> dict[str, Any]:
    """Two raters over the same questions: the share of questions (both rated) they agree on, their alpha."""
    both = _both(a, b)
    alpha, note = nominal_alpha([a, b])
    out: dict[str, Any] = {
        "n": len(both),
        "agreement": sum(x == y for x, y in both) / len(both) if both else None,
        "alpha": alpha,
    }
    if note:
        out["alpha_note"] = note
    return out


def raters_agreement(columns: dict[str, list[Any]], label: str = "raters") -> dict[str, Any]:
    """Several raters ({name: values over the same questions, None where missing}): alpha over the
    whole matrix, percent agreement pooled over every pair of raters (the share of pairs of values
    that agree), the share of questions (with two values or more) all raters agree on, and each
    pair's own agreement. ``label`` names the raters in the keys (``n_judges``)."""
    names = list(columns)
    alpha, note = nominal_alpha([columns[n] for n in names])
    rated = [[columns[n][i] for n in names if columns[n][i] is not None] for i in range(len(columns[names[0]]))]
    rated = [r for r in rated if len(r) >= 2]
    pairs = [{label: [a, b], **pair_agreement(columns[a], columns[b])} for a, b in combinations(names, 2)]
    agreeing = sum(p["agreement"] * p["n"] for p in pairs if p["n"])
    compared = sum(p["n"] for p in pairs)
    out: dict[str, Any] = {
        "alpha": alpha,
        f"n_{label}": len(names),
        "n_questions": len(rated),
        "percent_agreement": agreeing / compared if compared else None,
        "unanimous": sum(len(set(r)) == 1 for r in rated) / len(rated) if rated else None,
        "pairs": pairs,
    }
    if note:
        out["alpha_note"] = note
    return out


def _alpha_text(entry: dict[str, Any]) -> str:
    alpha = entry.get("alpha")
    return f"{alpha:.2f}" if alpha is not None else f"n/a ({entry.get('alpha_note') or 'undefined'})"


def agreement_line(agreement: dict[str, Any] | None) -> str | None:
    """One console line: the judges' alpha and, when a string metric was scored, each judge's alpha
    with it; None without an agreement section."""
    if not agreement:
        return None
    parts = []
    judges = agreement.get("judges")
    if judges:
        pct = judges.get("percent_agreement")
        shown = f", pairwise agreement {pct:.2f}" if pct is not None else ""
        parts.append(
            f"judges agree: alpha {_alpha_text(judges)} "
            f"({judges['n_judges']} judges, {judges['n_questions']} questions{shown})"
        )
    string = agreement.get("with_string")
    if string:
        each = string.get("by_judge") or {}
        if len(each) == 1 and not judges:
            ((name, entry),) = each.items()
            pct = entry.get("agreement")
            text = f"alpha {_alpha_text(entry)}" + (f", agreement {pct:.2f}" if pct is not None else "")
            parts.append(f"judge agrees with string accuracy ({string['string']}): {text} ({entry['n']} questions)")
        else:
            text = ", ".join(f"{name} {_alpha_text(entry)}" for name, entry in each.items())
            if string.get("majority"):
                text += f"; majority {_alpha_text(string['majority'])}"
            parts.append(f"with string accuracy ({string['string']}): alpha {text}")
    return "; ".join(parts) or None
