"""Executing a run: its configuration, the loop that solves samples, its files, lock, cost and (re-)scoring.

Named apart from ``harness.run`` (the public function a package of that name would shadow)."""
