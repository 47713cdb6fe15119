"""Does ``similar_titles`` still find the title meant? Queries with a known answer, drawn from a snapshot.

    python benchmarks/titles_quality.py SNAP.db [--n 300] [--code OTHER_CHECKOUT]

Draws (seed 7) page titles and redirects from the snapshot and makes five kinds of query, each with
the page it means: ``misspelt`` (one typo: a letter swapped, dropped, doubled or replaced, as
``scale.py``'s query mix), ``misspelt2`` (two typos), ``lowtypo`` (lower case and one typo),
``partial`` (a title of three or more words with one word dropped) and ``redirect`` (a redirect's
title, lower case). Prints, per kind, how often the page is the first suggestion and among the ten
(k=10), and the CPU p50 / p95 ms. ``--code`` imports another checkout's ``wiki_snapshot`` (a
before/after comparison on the same queries).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sqlite3
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KINDS = ("misspelt", "misspelt2", "lowtypo", "partial", "redirect")


def make_queries(path: str, n: int, seed: int = 7) -> list[dict]:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from scale import _typo

    rng = random.Random(seed)
    con = sqlite3.connect(Path(path).resolve().as_uri() + "?mode=ro", uri=True)
    top = con.execute("SELECT max(pageid) FROM pages").fetchone()[0]
    n_redirects = con.execute("SELECT count(*) FROM redirects").fetchone()[0]

    def title() -> str:
        while True:  # pageids may have gaps (records builders hash titles): draw until one exists
            pageid = rng.randint(1, top)
            row = con.execute("SELECT title FROM pages WHERE pageid >= ? ORDER BY pageid LIMIT 1", (pageid,)).fetchone()
            if row is not None:
                return row[0]

    out = []
    for i in range(n):
        kind = KINDS[i % len(KINDS)]
        if kind == "redirect" and n_redirects:
            title_, target = con.execute(
                "SELECT r.title, p.title FROM redirects r JOIN pages p ON p.title = r.target LIMIT 1 OFFSET ?",
                (rng.randrange(n_redirects),),
            ).fetchone() or (None, None)
            if title_:
                out.append({"kind": kind, "q": title_.lower(), "target": target})
            continue
        if kind == "partial":
            words: list[str] = []
            for _ in range(50):
                t = title()
                if len(words := t.split()) >= 3:
                    break
            if len(words) < 3:
                continue
            j = rng.randrange(len(words))
            out.append({"kind": kind, "q": " ".join(words[:j] + words[j + 1 :]), "target": t})
            continue
        t = title()
        q = {"misspelt": lambda: _typo(rng, t), "misspelt2": lambda: _typo(rng, _typo(rng, t)),
             "lowtypo": lambda: _typo(rng, t).lower()}[kind]()  # fmt: skip
        out.append({"kind": kind, "q": q, "target": t})
    con.close()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("snapshot")
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--code", help="import the snapshot library from this checkout instead")
    args = ap.parse_args()
    queries = make_queries(args.snapshot, args.n)
    sys.path.insert(0, args.code or str(ROOT))
    try:
        from harness.wiki_snapshot import Snapshot
    except ImportError:  # --code: a checkout from before one namespace, with a top-level wiki_snapshot
        from wiki_snapshot import Snapshot

    try:  # a miss is filled up with full-text results: FTS5's, as scale.py times it
        s = Snapshot.open(args.snapshot, fulltext=False)
    except TypeError:  # --code: a checkout from before the tantivy sidecar
        s = Snapshot.open(args.snapshot)
    s.similar_titles(queries[0]["q"])
    rows: dict[str, list] = {}
    for q in queries:
        t = time.thread_time()
        got = s.similar_titles(q["q"], 10)
        ms = (time.thread_time() - t) * 1000
        rows.setdefault(q["kind"], []).append((bool(got) and got[0] == q["target"], q["target"] in got, ms))
    print(f"{args.snapshot} ({s.metadata.get('similar_titles') or 'similar_titles before version 2'}), "
          f"{len(queries)} queries")  # fmt: skip
    print("| kind | queries | first | in top 10 | CPU p50 / p95 ms |")
    print("|---|---|---|---|---|")
    for kind in KINDS:
        r = rows.get(kind, [])
        if r:
            ms = sorted(x[2] for x in r)
            p95 = ms[min(len(ms) - 1, round(0.95 * (len(ms) - 1)))]
            print(f"| {kind} | {len(r)} | {sum(x[0] for x in r) / len(r):.1%} | {sum(x[1] for x in r) / len(r):.1%} | "
                  f"{statistics.median(ms):.1f} / {p95:.1f} |")  # fmt: skip
    print(json.dumps({"result": {k: [sum(x[0] for x in r), sum(x[1] for x in r), len(r)] for k, r in rows.items()}}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
