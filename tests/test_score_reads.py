"""Readers of scores read the typed model (``harness.scoring.scores``: ``Scores``, ``Interval`` and
their methods), never the scores record by string key (issue 41): an ast scan of the readers
(harness/analysis, harness/commands, harness/api.py; nothing is imported) flags

* a read by a key of the scores record (``x["uncertainty"]``, ``x.get("metric_info")``,
  ``"question_id" in x``): the keys are the fields of ``Scores`` and ``ScoresMeta`` (so a new
  section is covered) and the keys inside them (per-question rows, clustering, epochs, a metric's
  info), less the few that name other things too (``metrics``, ``dataset``, ``options``);
* a read of a raw section off the model (``scores.raw``, ``scores.uncertainty``,
  ``scores.meta.clustering``, ``meta.options``, ...): the dicts behind the readers;
* a round trip through the dict (``scores.as_dict()``, ``scores.meta.model_dump()``).

Writes (``out["n_questions"] = ...``) are not reads. What reads such a key in a dict that is not
the scores (compare's own result, ablation.json's rows) is allowed below, each with why.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

from harness.scoring.scores import Scores, ScoresMeta

ROOT = Path(__file__).resolve().parents[1]
READERS = sorted([*(ROOT / "harness" / "analysis").glob("*.py"), *(ROOT / "harness" / "commands").glob("*.py")]) + [
    ROOT / "harness" / "api.py"
]

# keys of the scores record that name nothing else in the readers
INNER_KEYS = {
    "question_id", "oversized_answer",  # a per-question row (scores.raw)
    "by", "n_clusters", "clusters",  # meta.clustering
    "reducer",  # epochs
    "plugin", "declared",  # meta.metric_info[METRIC]
    "failed_metrics", "n_oversized_answers", "reasoning_removed", "only_score_answered",  # meta, beyond its fields
}  # fmt: skip
SHARED_NAMES = {"metrics", "dataset", "options"}  # compare's result, ablation.json and configs use them too
SCORE_KEYS = (set(Scores.model_fields) | set(ScoresMeta.model_fields) | INNER_KEYS) - SHARED_NAMES
# a raw section read off the model: the dicts the readers stand for
SECTIONS = {
    "raw", "uncertainty", "breakdown", "epochs", "clustering", "metric_info", "options", "aggregation", "model_extra",
}  # fmt: skip
ROUND_TRIPS = {"as_dict", "model_dump"}
SCORES_LIKE = re.compile(r"(^|\.)(scores|meta)$")  # the model's receiver, as every reader names it

# (file, function, key or .attribute): why it is not a read of the scores
ALLOWED = {
    **{
        ("harness/analysis/compare.py", fn, key): "compare_runs' own result (its JSON, read by its formatters)"
        for fn, keys in (
            ("format_comparison", ("n_questions", "clustering", "by", "n_clusters", "question_id")),
            ("comparison_grid", ("clustering", "by")),
        )
        for key in keys
    },
    ("harness/analysis/ablate.py", "_intervals", "uncertainty"): (
        "a row of ablation.json (written by _row from each Interval, read back from the file, any version)"
    ),
    ("harness/analysis/retrieval_eval.py", "format_table", "n_questions"): "retrieval_eval's own result, not a run's",
    ("harness/analysis/retrieval_eval.py", "format_table", "uncertainty"): "retrieval_eval's own result (its nDCG interval), not a run's",
    ("harness/commands/score.py", "command", ".as_dict"): "the scores JSON written (--out, or stdout)",
}


def _read(node: ast.AST, called: set[int]) -> str | None:
    """What ``node`` reads of the scores record (a key, ``.section``, ``.as_dict``), or None."""
    if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
        key = node.slice
        return key.value if isinstance(key, ast.Constant) and key.value in SCORE_KEYS else None
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        args, attr = node.args, node.func.attr
        if attr in ("get", "pop", "setdefault") and args and isinstance(args[0], ast.Constant):
            return args[0].value if args[0].value in SCORE_KEYS else None
        if attr in ROUND_TRIPS and SCORES_LIKE.search(ast.unparse(node.func.value)):
            return f".{attr}"
    elif isinstance(node, ast.Compare) and isinstance(node.left, ast.Constant):
        if node.left.value in SCORE_KEYS and all(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops):
            return node.left.value
    elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load) and id(node) not in called:
        if node.attr in SECTIONS and SCORES_LIKE.search(ast.unparse(node.value)):
            return f".{node.attr}"  # a method call (scores.metric_info(name)) is a reader, not a section
    return None


@functools.cache
def score_reads(path: Path) -> list[tuple[str, str, int, str]]:
    """(file, function, line, what) of each read of the scores record by key in one file."""
    rel = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else path.name
    found: list[tuple[str, str, int, str]] = []
    called: set[int] = set()

    def visit(node: ast.AST, function: str) -> None:  # one pass: the function each read is in
        if isinstance(node, ast.Call):
            called.add(id(node.func))
        what = _read(node, called)
        if what is not None:
            found.append((rel, function, node.lineno, what))
        inner = node.name if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else function
        for child in ast.iter_child_nodes(node):
            visit(child, inner)

    visit(ast.parse(path.read_text(encoding="utf-8")), "")
    return found


def unallowed(paths: list[Path]) -> list[str]:
    return [
        f"{rel}:{line} in {fn or 'module'}: {what}"
        for path in paths
        for rel, fn, line, what in score_reads(path)
        if (rel, fn, what) not in ALLOWED
    ]


def test_no_reader_reads_scores_by_string_key():
    found = unallowed(READERS)
    assert not found, "read the typed Scores/Interval (harness.scoring.scores) instead:\n" + "\n".join(found)


def test_every_allowed_read_is_still_there():
    """An allowance whose read is gone is removed, so the list says only what is true."""
    seen = {(rel, fn, what) for path in READERS for rel, fn, _, what in score_reads(path)}
    assert not set(ALLOWED) - seen, sorted(set(ALLOWED) - seen)


def test_the_scan_catches_each_kind_of_read(tmp_path):
    text = '''
def f(scores, run, row, result):
    a = scores["uncertainty"]["set-f1.f1"]["stderr"]
    b = run.scores.meta.metric_info.get("set-f1")
    c = [r["question_id"] for r in scores.raw]
    d = scores.as_dict()["breakdown"]
    e = scores.meta.model_dump().get("n_oversized_answers")
    g = "epochs" in result
    h = scores.meta.clustering
    row["uncertainty"] = {}  # a write
    return scores.interval("set-f1.f1"), scores.metric_info("set-f1"), scores.per_question(), result["metrics"]
'''
    file = tmp_path / "reader.py"
    file.write_text(text)
    whats = sorted(what for *_, what in score_reads(file))
    assert whats == sorted(
        [
            "uncertainty", ".metric_info", "question_id", ".raw", ".as_dict", "breakdown",
            ".model_dump", "n_oversized_answers", "epochs", ".clustering",
        ]
    )  # fmt: skip
    # the keys come from the model: a new section of Scores is one of them
    assert {"raw", "breakdown", "uncertainty", "epochs", "meta", "metric_info", "clustering"} <= SCORE_KEYS


def test_the_readers_that_replaced_the_key_reads():
    """``metric_rows`` (compare, the effort figure): a question's epochs averaged, a question without
    the metric left out; ``plugin``: the recorded identity, None for a built-in; the options and
    counts the console reads."""
    scores = Scores.of(
        {
            "results_format": 3,
            "set-f1": {"f1": 0.5},
            "quest": {"f1": 0.25},
            "raw": [
                {"question_id": "q1", "set-f1": {"f1": 1.0}, "quest": {"hit": 2}},
                {"question_id": "q2", "set-f1": {"f1": 0.0}},
                {"question_id": "q1", "set-f1": {"f1": 0.0}, "quest": {"hit": 0}},  # q1's second epoch
            ],
            "meta": {
                "metric_info": {
                    "set-f1": {},
                    "quest": {"plugin": {"name": "quest", "source": "file", "ref": "q.py:quest", "sha256": "ab"}},
                },
                "options": {"max_answer_chars": 1000, "strip_reasoning": True},
                "clustering": {"by": "topic", "n_clusters": 2, "clusters": {"q1": "a", "q2": "b"}},
                "n_oversized_answers": 1,
            },
        }
    )
    assert scores.metric_rows("set-f1") == {"q1": {"f1": 0.5}, "q2": {"f1": 0.0}}
    assert scores.metric_rows("quest") == {"q1": {"hit": 1.0}}
    plugin = scores.plugin("quest")
    assert (plugin.source, plugin.ref, plugin.identity()) == ("file", "q.py:quest", {"sha256": "ab"})
    assert scores.plugin("set-f1") is None
    assert scores.recorded_options("max_answer_chars") == {"max_answer_chars": 1000}
    assert (scores.cluster_by, scores.n_clusters, scores.n_oversized_answers) == ("topic", 2, 1)
