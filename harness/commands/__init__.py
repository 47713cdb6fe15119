"""The ``harness`` sub-commands, one module each: ``add_parser(subparsers)`` and ``command(args) -> int``.

Commands are the top layer: they may import anything (core, strategies, tools, ``wiki_snapshot``);
nothing imports them except ``harness.cli``. A module is imported only when its parser is built.
"""

from __future__ import annotations

# command name -> (its module, the line ``harness --help`` shows), in that order. ``harness X`` imports
# only X's module: the others get a placeholder parser with this line, so startup stays small.
COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("harness.commands.run", "generate answers for a dataset and score them"),
    "score": ("harness.commands.score", "score saved generations (no model call)"),
    "merge": ("harness.commands.merge", "join the shards of a run (run --shard I/K) into one run directory"),
    "list": (
        "harness.commands.list",
        "list strategies, metrics, backends and datasets (built in and installed plugins)",
    ),
    "ceiling": (
        "harness.commands.ceiling",
        "answerability ceiling of evidence-provided at several context sizes (no model call)",
    ),
    "snapshot": (
        "harness.commands.snapshot",
        "build or inspect an offline, dated Wikipedia snapshot (one SQLite file)",
    ),
    "index": ("harness.commands.index", "build or inspect a passage index (BM25 or dense) over a snapshot"),
    "search": (
        "harness.commands.search",
        "serve a snapshot's search and passage indexes over HTTP, one copy for many runs (--search-url)",
    ),
    "retrieval-eval": (
        "harness.commands.retrieval_eval",
        "score a passage index on a dataset's gold evidence (no reader, no model)",
    ),
    "leaderboard": (
        "harness.commands.leaderboard",
        "gather every run under a folder into one table (JSON and markdown)",
    ),
    "table": (
        "harness.commands.table",
        "runs as a table for a paper: markdown, LaTeX (booktabs) or CSV, each number with its 95%% interval",
    ),
    "export": (
        "harness.commands.export",
        "export runs: FanOutQA's submission format (fanoutqa-submission), an Inspect AI eval log (inspect)",
    ),
    "ablate": ("harness.commands.ablate", "context-length sweep: one run per size, the ceiling, a table and a figure"),
    "figure": (
        "harness.commands.figure",
        "draw a paper's figure from ablation folders or runs (a panel per metric; PNG, SVG or PDF)",
    ),
    "schema": ("harness.commands.schema", "print the JSON Schema of results.json, a samples.jsonl line or the config"),
    "report": (
        "harness.commands.report",
        "write a static HTML page of a run (metadata, scores, sortable questions, transcripts)",
    ),
    "compare": (
        "harness.commands.compare",
        "compare runs on their shared questions: paired differences, intervals, p-values (no model call)",
    ),
    "power": ("harness.commands.power", "questions needed to detect a difference, from a pilot run's spread"),
}
