"""Reading finished runs: compare, power, ablate, ceiling, leaderboard, report, export, retrieval evaluation."""
