"""Reference definitions of BrowseComp-Plus's calibration error and citation metrics, for the
differential tests in tests/test_calibration_citations.py.

Our own code, written from what the official evaluator computes; a restatement, not a copy:
texttron/BrowseComp-Plus at commit 97c637cebfd93965b28f93199e27abfd1dcc5de6,
``scripts_evaluation/evaluate_run.py``: ``calculate_calibration_error`` and the ``calib_err`` it
calls (taken by BrowseComp-Plus from hendrycks/outlier-exposure ``utils/calibration_tools.py`` at
commit 404c6268865e84dbab5ab4ccf855e8ae39de853f, identical there), the summary's rule for fewer than
100 confidences, ``extract_citations_from_response`` (single docids only), ``compute_citation_metrics``
and the citation summary's averages. That repository has no licence file. It is written apart from
``harness.scoring.calibration`` / ``citations`` (other loops, other data structures; docids as
strings) so that the two check each other.

During development this module was run against the official functions themselves (copied out of
``evaluate_run.py`` at that commit into a scratch file, unchanged) on 20,000 generated cases of 1 to
1,000 confidences (many ties: confidences drawn from 0, 5, ..., 100 and from uniform floats; all
right, none right, mixed; p "1" and "2"): identical (``==``) wherever the official code returns, and
``IndexError`` in both below 100 confidences; on 5,000 generated citation cases (``[docid]`` texts,
duplicates, no citation, no relevant docid): identical cited sets, precision and recall.
"""

from __future__ import annotations

import re

import numpy as np


def official_calibration_error(confidences_percent: list[float], correctness: list[bool], p: str = "2",
                               beta: int = 100) -> float:
    """``calculate_calibration_error`` (p="2") / ``calib_err``: confidences in percent; the result in
    percent. Sorted by numpy's default argsort; bins of ``beta``, the last taking the remainder; every
    bin but the last weighs |mean confidence - mean correct| (squared for p 2) by its size over all;
    p 2 takes the square root. Fewer than ``beta`` values: IndexError, as ``bins[-1]`` of no bins."""
    conf = np.array(confidences_percent) / 100.0
    right = np.array(correctness, dtype=float)
    order = np.argsort(conf)
    conf, right = conf[order], right[order]
    n = len(conf)
    cuts = list(range(0, (n // beta) * beta, beta))
    if not cuts:
        raise IndexError("no bin: fewer values than beta")
    ends = [c + beta for c in cuts[:-1]] + [n]
    err = 0.0
    for start, end in list(zip(cuts, ends))[:-1]:  # the official loop stops before the last bin
        gap = np.abs(np.nanmean(conf[start:end]) - np.nanmean(right[start:end]))
        err += (end - start) / n * (np.square(gap) if p == "2" else gap)
    if p == "2":
        err = np.sqrt(err)
    return err * 100


def official_summary_calibration(confidences_percent: list[float], correctness: list[bool]) -> float:
    """What the summary reports: the calibration error at 100 confidences or more, else 0.0."""
    if len(confidences_percent) >= 100:
        return official_calibration_error(confidences_percent, correctness)
    return 0.0


def official_cited_docids(text: str) -> set[str]:
    """The docids a response cites, single ``[123]`` / ``【123】`` brackets (as a set: the official
    list comes from one)."""
    return set(re.findall(r"\[(\d+)\]", text)) | set(re.findall(r"【(\d+)】", text))


def official_citation_metrics(cited: list[str], relevant: list[str]) -> dict[str, float]:
    """``compute_citation_metrics``: precision over the cited, recall over the relevant; both 0.0
    without a citation, recall 0.0 without a relevant docid."""
    hits = len(set(cited) & set(relevant))
    if not cited:
        return {"precision": 0.0, "recall": 0.0}
    return {"precision": hits / len(cited), "recall": hits / len(relevant) if relevant else 0.0}


def official_citation_summary(per_response: list[tuple[list[str], dict[str, float]]]) -> dict[str, float]:
    """The summary: coverage over every response; precision, recall and citations per response over
    the responses with at least one citation (0.0 when none has)."""
    with_citations = [(c, m) for c, m in per_response if c]
    k = len(with_citations)
    return {
        "coverage": k / len(per_response) if per_response else 0.0,
        "precision": sum(m["precision"] for _, m in with_citations) / k if k else 0.0,
        "recall": sum(m["recall"] for _, m in with_citations) / k if k else 0.0,
        "avg_citations": sum(len(c) for c, _ in with_citations) / k if k else 0.0,
    }
