"""How much of a ``--max-cost`` budget a run spends before it stops, at many connections.

    python benchmarks/budget.py [--connections 1,8,64] [--budgets 0.2,0.4,1.0] [--max-tokens 32]

A scripted model (``harness.models.scripted``, whitespace tokens) priced 1 / 1,000 USD per 1M
input / output tokens answers every ``hotpotqa:dev`` question (100, x ``--epochs``) with 5 words
after a short pseudo-random delay, so requests overlap and finish out of order. A request's worst
case (prompt + ``--max-tokens`` at the output price, about 0.032 USD at 32) is about six times its
real cost (about 0.005). Printed per connections x budget: USD spent, the share of the budget, the
samples finished and the most requests in flight. Spent must never pass the budget; the stop
leaves less than one worst case unspent.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.execution.config import build_config  # noqa: E402
from harness.execution.runner import Run  # noqa: E402
from harness.models.scripted import register_script  # noqa: E402

IN_FLIGHT = {"now": 0, "most": 0}


async def answer(messages, tools, tool_choice, params):
    IN_FLIGHT["now"] += 1
    IN_FLIGHT["most"] = max(IN_FLIGHT["most"], IN_FLIGHT["now"])
    try:
        digest = hashlib.sha256(json.dumps(messages).encode()).digest()
        await asyncio.sleep(0.002 + digest[0] / 255 * 0.02)  # 2-22 ms, fixed per question
        return "one two three four five"
    finally:
        IN_FLIGHT["now"] -= 1


def run_once(base: Path, connections: int, budget: float, max_tokens: int, epochs: int) -> dict:
    prices = base / "prices.yaml"
    prices.write_text("models:\n  scripted/budget-bench: {input: 1.0, output: 1000.0}\n")
    out = base / f"c{connections}-b{budget}"
    config = build_config(
        {
            "model": "scripted/budget-bench", "dataset": "hotpotqa:dev", "out": str(out), "cache": False,
            "max_connections": connections, "max_cost": budget, "price_table": str(prices),
            "max_tokens": max_tokens, "epochs": epochs, "temperature": 0.0 if epochs == 1 else 0.7,
        }
    )  # fmt: skip
    IN_FLIGHT.update(now=0, most=0)
    results = asyncio.run(Run(config, show_progress=False).execute())
    spent = results["cost"]["spent_usd"]
    return {
        "connections": connections, "budget": budget, "spent": spent, "share": spent / budget,
        "finished": results["counts"]["finished"], "selected": results["counts"]["selected"],
        "most_in_flight": IN_FLIGHT["most"], "status": results["status"],
    }  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", default="1,8,64")
    parser.add_argument("--budgets", default="0.2,0.4,1.0")
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args()
    register_script("budget-bench", answer)
    print(f"{'conn':>4} {'budget':>7} {'spent':>9} {'share':>6} {'finished':>9} {'in flight':>9}  status")
    with tempfile.TemporaryDirectory() as tmp:
        for connections in (int(c) for c in args.connections.split(",")):
            for budget in (float(b) for b in args.budgets.split(",")):
                r = run_once(Path(tmp), connections, budget, args.max_tokens, args.epochs)
                assert r["spent"] <= budget + 1e-12, r
                print(
                    f"{connections:>4} {budget:>7.2f} {r['spent']:>9.4f} {r['share']:>6.1%} "
                    f"{r['finished']:>4}/{r['selected']:<4} {r['most_in_flight']:>9}  {r['status']}"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
