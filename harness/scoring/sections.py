"""The fixed keys of a scores dict: a module of constants alone, so that the metric registry
(``metrics``), the error bars (``uncertainty``) and the readers (``results``) share them without
importing each other."""

from __future__ import annotations

RESULTS_FORMAT = 3  # 3: the typed run record (harness.execution.record); its scores are shaped as in 2
# the keys of a scores dict that are not metrics (uncertainty: error bars, harness.scoring.uncertainty;
# epochs: harness.scoring.epochs)
SECTIONS = ("results_format", "raw", "breakdown", "uncertainty", "epochs", "meta")
# Keys of a metric's aggregate that describe its scoring, not the answers (llm-judge's ``agreement``
# of several judges): kept in the scores, never a score (no table column, error bar or comparison)
DIAGNOSTICS = frozenset({"agreement"})
