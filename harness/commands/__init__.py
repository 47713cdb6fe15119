"""The ``harness`` sub-commands, one module each: ``add_parser(subparsers)`` and ``command(args) -> int``.

Commands are the top layer: they may import anything (core, strategies, tools, ``wiki_snapshot``);
nothing imports them except ``harness.cli``. A module is imported only when its parser is built.
"""

from __future__ import annotations

# command name -> its module, in the order ``harness --help`` lists them
COMMANDS = {
    "run": "harness.commands.run",
    "score": "harness.commands.score",
    "list": "harness.commands.list",
    "ceiling": "harness.commands.ceiling",
    "snapshot": "harness.commands.snapshot",
    "index": "harness.commands.index",
    "retrieval-eval": "harness.commands.retrieval_eval",
    "leaderboard": "harness.commands.leaderboard",
    "export": "harness.commands.export",
    "ablate": "harness.commands.ablate",
    "report": "harness.commands.report",
}
