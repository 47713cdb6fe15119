"""``python -m harness.commands.ray_shard PARENT_PID run ...``: one shard of a Ray launch
(``harness.commands.ray_launcher.run_shard`` starts it), ``harness run ...`` that dies with the Ray task
that started it (``harness.lifeline``): a node that dies takes its shard along, so the retried task finds
the shard's directory unlocked."""

from __future__ import annotations

import sys

from harness.cli import main
from harness.lifeline import die_with_parent

if __name__ == "__main__":
    die_with_parent(int(sys.argv[1]))
    sys.exit(main(sys.argv[2:]))
