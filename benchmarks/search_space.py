"""What a small search space does to open-book numbers: the same questions over an evidence-only
snapshot and over one with many more pages.

    python benchmarks/search_space.py --small hotpot.db --large hotpot_plus100k.db \
        [--dataset hotpotqa:dev] [--limit 100] [--runs RUN_SMALL RUN_LARGE]

Part 1 asks the open-book search tool itself (default knobs: hit rule, 10 results) the queries a
model would send for each question, over both snapshots, and prints how often a query finds a
page, how often that page is one the question needs, and what share of the titles listed on a
miss are gold pages: of this question, and of any question in the selection. No model is
involved, so this part is exact and repeatable.

Part 2 (``--runs``) reads two finished ``harness run`` directories (the same model and questions,
one per snapshot) and prints their scores, evidence recall and the same shares over the searches
the model actually made.

How the large snapshot was made for docs/performance.md: ``python benchmarks/synth_wiki.py
--extra 100000 --with-hotpot --out hotpot_plus100k.jsonl`` (the HotpotQA distractor pages exactly
as the records builder makes them, then 100,000 pages of real Wikipedia sentences under
Wikipedia-shaped titles, none copying a HotpotQA sentence), then ``harness snapshot build``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.datasets import load_dataset  # noqa: E402
from harness.tools.search import SearchConfig, SearchTool  # noqa: E402
from harness.wiki_snapshot import open_wiki  # noqa: E402


def _query_kinds(question: str, gold: list[str]) -> dict[str, list[str]]:
    """The queries a model sends, by kind: the whole question, each gold title as written, in lower
    case, and with its first word dropped (a partial title)."""
    partial = [" ".join(t.split()[1:]) for t in gold if len(t.split()) > 1]
    return {
        "question": [question],
        "gold title": list(gold),
        "gold title, lower case": [t.lower() for t in gold],
        "gold title, first word dropped": partial,
    }


def tool_table(paths: list[str], samples) -> list[dict]:
    rows = []
    any_gold = {t.casefold() for s in samples for t in s.needed_titles}
    for path in paths:
        wiki = open_wiki(path)
        tool = SearchTool(wiki, SearchConfig(), lambda text: len(text) // 4, 8192)
        totals: dict[str, dict[str, float]] = {}
        for s in samples:
            gold = {t.casefold() for t in s.needed_titles}
            for kind, queries in _query_kinds(s.question, list(s.needed_titles)).items():
                t = totals.setdefault(kind, {"queries": 0, "hits": 0, "gold_hits": 0, "listed": 0, "listed_gold": 0,
                                             "listed_any_gold": 0})
                for q in queries:
                    result = tool(q, s.question)
                    t["queries"] += 1
                    if result.found_title:
                        t["hits"] += 1
                        t["gold_hits"] += result.found_title.casefold() in gold
                    t["listed"] += len(result.similar_titles)
                    t["listed_gold"] += sum(x.casefold() in gold for x in result.similar_titles)
                    t["listed_any_gold"] += sum(x.casefold() in any_gold for x in result.similar_titles)
        space = wiki.metadata
        for kind, t in totals.items():
            rows.append({"snapshot": Path(path).name, "pages": space.get("pages"), "kind": kind, **t})
        wiki.close()
    return rows


def print_tool_table(rows: list[dict]) -> None:
    print("| snapshot | pages | queries | n | found a page | found a gold page | titles listed on a miss | "
          "listed that are this question's gold | listed that are any question's gold |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        n = r["queries"] or 1
        listed = r["listed"] or 1
        print(
            f"| {r['snapshot']} | {r['pages']:,} | {r['kind']} | {r['queries']} | {r['hits'] / n:.1%} | "
            f"{r['gold_hits'] / n:.1%} | {r['listed']:,} | {r['listed_gold'] / listed:.1%} | "
            f"{r['listed_any_gold'] / listed:.1%} |"
        )


def run_table(run_dirs: list[str], samples) -> None:
    gold_of = {s.id: {t.casefold() for t in s.needed_titles} for s in samples}
    any_gold = set().union(*gold_of.values()) if gold_of else set()
    print("| run | search space | n | acc loose | F1 | evidence recall | searches a question | found a page | "
          "listed that are this question's gold | listed that are any question's gold |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for d in run_dirs:
        results = json.loads((Path(d) / "results.json").read_text())
        rows = [json.loads(line) for line in (Path(d) / "samples.jsonl").read_text().splitlines() if line.strip()]
        searches = [(r["id"], s) for r in rows for s in (r.get("extra") or {}).get("searches", [])]
        listed = [(i, t) for i, s in searches for t in s.get("similar_titles") or []]
        found = sum(1 for _, s in searches if s.get("found_title"))
        scores = results.get("scores") or {}

        def metric(name: str, *path: str) -> str:
            value = scores.get(name)
            for key in path:
                value = value.get(key) if isinstance(value, dict) else None
            return "n/a" if not isinstance(value, (int, float)) else f"{value:.3f}"

        label = (results.get("search_space") or {}).get("label", "?")
        n = len(rows)
        print(
            f"| {Path(d).name} | {label} | {n} | {metric('fanoutqa-string', 'acc', 'loose')} | {metric('em-f1', 'f1')} | "
            f"{metric('agent', 'evidence_recall')} | {len(searches) / max(n, 1):.2f} | "
            f"{found / max(len(searches), 1):.1%} | "
            f"{sum(t.casefold() in gold_of.get(i, set()) for i, t in listed) / max(len(listed), 1):.1%} | "
            f"{sum(t.casefold() in any_gold for _, t in listed) / max(len(listed), 1):.1%} |"
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--small", required=True, help="the evidence-only snapshot (e.g. the HotpotQA distractor one)")
    ap.add_argument("--large", required=True, help="the same pages and many more")
    ap.add_argument("--dataset", default="hotpotqa:dev")
    ap.add_argument("--limit", type=int, default=100)
    ap.add_argument("--runs", nargs=2, metavar=("RUN_SMALL", "RUN_LARGE"), help="two finished run directories")
    args = ap.parse_args()
    samples = list(load_dataset(args.dataset).samples)[: args.limit]
    print_tool_table(tool_table([args.small, args.large], samples))
    if args.runs:
        print()
        run_table(args.runs, [s for s in samples])
    return 0


if __name__ == "__main__":
    sys.exit(main())
