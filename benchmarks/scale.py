"""Snapshots, ZIM archives and passage indexes at 10k, 100k and 1M Wikipedia-shaped pages.

    python benchmarks/scale.py --sizes 10000,100000 --dir /tmp/scale [--queries 1000] [--steps ...]
    python benchmarks/scale.py --sizes 1000000 --dir /tmp/scale --steps corpus,records,zimq,sqliteq

The corpora come from benchmarks/synth_wiki.py (real Wikipedia sentences from tests/fixtures,
Wikipedia's page-length distribution and title shapes; see its docstring). For each size:

- steps ``corpus``: write the JSONL, the ZIM (libzim writer, Xapian full-text index on) and the
  MediaWiki XML dump (``.xml.bz2``) -- the ZIM write is the "ZIM build" row;
- ``records``, ``dump``, ``zim``: ``harness snapshot build`` from each format (dump and zim with
  ``--workers 1`` and ``2``; records has no workers);
- ``sqliteq``, ``zimq``: resolve_title, similar_titles (k=10) and full-text search (k=10) over the
  same 1,000 queries on the SQLite snapshot and on the ZIM read in place;
- ``--child fts5|fulltext SNAP QUERIES``: full-text search only, FTS5 or the tantivy sidecar
  (``harness snapshot fulltext SNAP``); ``sqliteq`` always times FTS5;
- ``--child titles SNAP QUERIES [CODE]``: ``similar_titles`` (k=10) only, with this checkout's
  ``wiki_snapshot`` or CODE's (a before/after comparison), and the process's peak RSS;
- ``bm25``: ``harness index build --kind bm25`` (words100) with 1 and 2 workers, then query
  latency.

Every build and every query phase runs as a child process, timed by ``os.wait4``: wall seconds,
CPU seconds (user + sys, the child and its workers) and the peak RSS of the largest process in
that tree. "pages/CPU-s" is pages per CPU-second, i.e. per core fully used: on a shared machine
the wall clock says more about the neighbours than about the code.

Results are appended to DIR/results.jsonl; ``--report`` prints the tables and the extrapolation
to the whole English Wikipedia from what is there.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import synth_wiki  # noqa: E402

WIKI_ARTICLES = 6.9e6  # English Wikipedia articles (Special:Statistics, 2025: ~6.9M)
QUESTION_STARTS = ("What is", "Who was", "When did", "Where is", "Which", "How many", "Why did")


# child processes ---------------------------------------------------------------------------
def timed(cmd: list[str], label: str, log) -> dict:
    """Run cmd; wall, CPU of the child tree, peak RSS of its largest process (wait4)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    log(f"  $ {' '.join(str(c) for c in cmd)}")
    out_path = Path(os.environ.get("TMPDIR", "/tmp")) / f"scale-child-{os.getpid()}.out"
    with open(out_path, "w+") as out:
        started = time.perf_counter()
        proc = subprocess.Popen([str(c) for c in cmd], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
        _, status, ru = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - started
        out.seek(0)
        text = out.read()
    out_path.unlink(missing_ok=True)
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise SystemExit(f"{label} failed (exit {code}):\n{text[-3000:]}")
    return {
        "wall_s": round(wall, 2),
        "cpu_s": round(ru.ru_utime + ru.ru_stime, 2),
        "peak_rss_mb": round(ru.ru_maxrss / 1024, 1),  # Linux: KB; the largest process of the tree
        "output": text[-4000:],
    }


def record(dirpath: Path, row: dict) -> None:
    row = {"at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "load1": os.getloadavg()[0], **row}
    with open(dirpath / "results.jsonl", "a", encoding="utf-8") as f:
        f.write(json.dumps(row) + "\n")
    print("  ->", json.dumps({k: v for k, v in row.items() if k not in ("output", "queries")}), flush=True)


def du(path: Path) -> int:
    if path.is_dir():
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    return path.stat().st_size if path.exists() else 0


# queries -----------------------------------------------------------------------------------
def _typo(rng: random.Random, s: str) -> str:
    spots = [i for i in range(1, len(s) - 1) if s[i].isalpha() and s[i + 1].isalpha()]
    if not spots:
        return s + "s"
    i = rng.choice(spots)
    kind = rng.choice(["swap", "drop", "double", "replace"])
    if kind == "swap":
        return s[:i] + s[i + 1] + s[i] + s[i + 2 :]
    if kind == "drop":
        return s[:i] + s[i + 1 :]
    if kind == "double":
        return s[:i] + s[i] + s[i:]
    return s[:i] + rng.choice("aeiourstnl") + s[i + 1 :]


def make_queries(jsonl: Path, n: int, seed: int = 0) -> list[dict]:
    """The query mix, from the corpus: 30 % existing titles, 15 % case variants, 15 % redirect
    titles, 20 % misspelt titles, 20 % multi-word questions built from a page's sentence."""
    rng = random.Random(seed)
    titles, redirects, sample_texts = [], [], []
    with open(jsonl, encoding="utf-8") as f:
        for line in f:
            rec = json.loads(line)
            if "redirect" in rec:
                redirects.append(rec["title"])
            else:
                titles.append(rec["title"])
                if rng.random() < 0.01 or len(sample_texts) < 200:
                    sample_texts.append(rec["text"])
    out = []
    for i in range(n):
        r = i % 20
        if r < 6:
            out.append({"kind": "title", "q": rng.choice(titles)})
        elif r < 9:
            t = rng.choice(titles)
            out.append({"kind": "case", "q": rng.choice([t.lower(), t.upper(), t.swapcase()])})
        elif r < 12:
            out.append({"kind": "redirect", "q": rng.choice(redirects)})
        elif r < 16:
            out.append({"kind": "misspelt", "q": _typo(rng, rng.choice(titles))})
        else:
            text = rng.choice(sample_texts)
            sents = [s for s in text.split(". ") if len(s.split()) >= 6]
            words = [w.strip(",;:()\"'") for w in rng.choice(sents or [text]).split()]
            words = [w for w in words if w]
            start = rng.randrange(max(1, len(words) - 6))
            tail = " ".join(words[start : start + rng.randint(3, 7)])
            out.append({"kind": "question", "q": f"{rng.choice(QUESTION_STARTS)} {tail}?"})
    rng.shuffle(out)
    return out


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def _time_all(fn, queries: list[str]) -> dict:
    """p50/p95 of wall and of CPU time per call (the CPU time of one thread's call is its latency on
    an idle machine; the wall time on a shared one includes waiting for a core)."""
    fn(queries[0])
    wall, cpu = [], []
    for q in queries:
        c, t = time.thread_time(), time.perf_counter()
        fn(q)
        wall.append((time.perf_counter() - t) * 1000)
        cpu.append((time.thread_time() - c) * 1000)
    return {"p50_ms": round(statistics.median(wall), 3), "p95_ms": round(pct(wall, 0.95), 3),
            "max_ms": round(max(wall), 1), "cpu_p50_ms": round(statistics.median(cpu), 3),
            "cpu_p95_ms": round(pct(cpu, 0.95), 3)}  # fmt: skip


def query_child(backend: str, path: str, queries_file: str) -> None:
    """In a child process: open the backend, time the three calls over every query; prints JSON."""
    qs = [q["q"] for q in json.loads(Path(queries_file).read_text(encoding="utf-8"))]
    res: dict = {}
    t = time.perf_counter()
    if backend in ("fts5", "fulltext"):  # full-text search only: FTS5, or the tantivy sidecar beside it
        from harness.wiki_snapshot import Snapshot

        s = Snapshot.open(path, fulltext=backend == "fulltext")
        res["text_search"] = s.metadata["text_search"]
        if backend == "fulltext" and res["text_search"] != "tantivy-bm25":
            raise SystemExit(f"{path}: no usable sidecar (harness snapshot fulltext {path})")
        res["open_s"] = round(time.perf_counter() - t, 3)
        t = time.perf_counter()
        s.search("physics")
        res["first_search_s"] = round(time.perf_counter() - t, 3)
        # the process's CPU over the loop too: a library's own threads would escape thread_time
        c = time.process_time()
        res["search"] = _time_all(lambda q: s.search(q, 10), qs)
        res["search"]["process_cpu_ms_per_query"] = round((time.process_time() - c) * 1000 / (len(qs) + 1), 3)
    elif backend == "titles":  # similar_titles alone: its FTS5 candidate queries and difflib scoring
        import resource

        from harness.wiki_snapshot import Snapshot

        try:  # a miss falls back to full-text search: FTS5's, also where a sidecar lies beside it
            s = Snapshot.open(path, fulltext=False)
        except TypeError:  # --code: a checkout from before the sidecar
            s = Snapshot.open(path)
        res["similar_titles_version"] = s.metadata.get("similar_titles")
        res["open_s"] = round(time.perf_counter() - t, 3)
        res["similar_titles"] = _time_all(lambda q: s.similar_titles(q, 10), qs)
        res["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    elif backend == "sqlite":
        from harness.wiki_snapshot import Snapshot

        try:  # the snapshot's own FTS5 search, also where a tantivy sidecar lies beside it
            s = Snapshot.open(path, fulltext=False)
        except TypeError:  # --code: a checkout from before the sidecar
            s = Snapshot.open(path)
        res["open_s"] = round(time.perf_counter() - t, 3)
        t = time.perf_counter()
        s.search("physics")
        res["first_search_s"] = round(time.perf_counter() - t, 3)
        res["resolve_title"] = _time_all(s.resolve_title, qs)
        res["similar_titles"] = _time_all(lambda q: s.similar_titles(q, 10), qs)
        res["search"] = _time_all(lambda q: s.search(q, 10), qs)
    elif backend == "zim":
        zimwiki = None
        try:
            from harness.wiki_snapshot.backends import open_wiki

            zimwiki = open_wiki(path)
            res["via"] = type(zimwiki).__module__ + "." + type(zimwiki).__name__
        except Exception as exc:  # noqa: BLE001 - ZimWiki not in this checkout yet: libzim directly
            res["via"] = f"libzim directly; no ZimWiki here ({type(exc).__name__})"
        if zimwiki is not None:
            res["open_s"] = round(time.perf_counter() - t, 3)
            t = time.perf_counter()
            zimwiki.search("physics", 10)
            res["first_search_s"] = round(time.perf_counter() - t, 3)
            res["resolve_title"] = _time_all(zimwiki.resolve_title, qs)
            res["similar_titles"] = _time_all(lambda q: zimwiki.similar_titles(q, 10), qs)
            res["search"] = _time_all(lambda q: zimwiki.search(q, 10), qs)
        else:
            from libzim.reader import Archive
            from libzim.search import Query, Searcher
            from libzim.suggestion import SuggestionSearcher

            a = Archive(path)
            searcher, suggester = Searcher(a), SuggestionSearcher(a)
            res["open_s"] = round(time.perf_counter() - t, 3)

            def search(q: str) -> list[str]:
                hits = searcher.search(Query().set_query(q)).getResults(0, 10)
                return [a.get_entry_by_path(p).title for p in hits]

            def similar(q: str) -> list[str]:
                return [a.get_entry_by_path(p).title for p in suggester.suggest(q).getResults(0, 10)]

            def resolve(q: str):
                # exact title, then a case-insensitive match among the title suggestions
                for path in (synth_wiki.zim_path(q),):
                    if a.has_entry_by_path(path):
                        e = a.get_entry_by_path(path)
                        return e.get_redirect_entry() if e.is_redirect else e
                folded = q.casefold()
                for p in suggester.suggest(q).getResults(0, 10):
                    e = a.get_entry_by_path(p)
                    if e.title.casefold() == folded:
                        return e.get_redirect_entry() if e.is_redirect else e
                return None

            t = time.perf_counter()
            search("physics")
            res["first_search_s"] = round(time.perf_counter() - t, 3)
            res["resolve_title"] = _time_all(resolve, qs)
            res["similar_titles"] = _time_all(similar, qs)
            res["search"] = _time_all(search, qs)
    elif backend == "bm25":
        from harness.wiki_snapshot import Snapshot
        from harness.wiki_snapshot.retrieval import open_retriever

        s = Snapshot.open(path)
        r = open_retriever(s, "bm25", "words100")
        res["open_s"] = round(time.perf_counter() - t, 3)
        res["passages"] = int(r.n_passages) if getattr(r, "n_passages", None) is not None else None
        res["search"] = _time_all(lambda q: r.search_many([q], 10), qs)
    print("RESULT " + json.dumps(res))


# steps -------------------------------------------------------------------------------------
def step_corpus(n: int, d: Path, formats: list[str], log) -> None:
    paths = synth_wiki.corpus_paths(d, n)
    for fmt in formats:
        if paths[fmt].exists():
            log(f"  {paths[fmt]} exists: kept")
            continue
        cmd = niced(ROOT / "benchmarks/synth_wiki.py", "--pages", n, "--out", d, "--formats", fmt)
        res = timed(cmd, f"corpus {fmt}", log)
        record(d, {"step": "corpus", "size": n, "format": fmt, **res, "bytes": du(paths[fmt])})


def niced(*args) -> list:
    """A child command at SCALE_NICE (default 10): the machine is shared."""
    return ["nice", "-n", os.environ.get("SCALE_NICE", "10"), sys.executable, *args]


def harness(*args) -> list:
    return niced("-m", "harness", *args)


def step_build(n: int, d: Path, fmt: str, workers: list[int], log) -> None:
    src = synth_wiki.corpus_paths(d, n)["jsonl" if fmt == "records" else {"dump": "xml", "zim": "zim"}[fmt]]
    for w in [None] if fmt == "records" else workers:
        out = d / f"snap{n}-{fmt}" f"{'' if w is None else f'-w{w}'}.db"
        cmd = harness("snapshot", "build", "--from", src, "--out", out, "--overwrite", "--quiet")
        if w is not None:
            cmd += ["--workers", w]
        res = timed(cmd, f"build {fmt}", log)
        meta = json.loads(subprocess.run([sys.executable, "-m", "harness", "snapshot", "info", str(out)], cwd=ROOT,
                                         capture_output=True, text=True).stdout or "{}")  # fmt: skip
        pages = meta.get("pages") or meta.get("metadata", {}).get("pages") or n
        record(d, {"step": "build", "size": n, "format": fmt, "workers": w or 1, **res, "pages": pages,
                   "bytes": du(out), "source_bytes": du(src)})  # fmt: skip


def queries_file(n: int, d: Path, count: int) -> Path:
    qf = d / f"queries{n}-{count}.json"
    if not qf.exists():
        qf.write_text(json.dumps(make_queries(synth_wiki.corpus_paths(d, n)["jsonl"], count)), encoding="utf-8")
    return qf


def step_queries(n: int, d: Path, backend: str, count: int, log, code: str | None = None) -> None:
    qf = queries_file(n, d, count)
    path = synth_wiki.corpus_paths(d, n)["zim"] if backend == "zim" else d / f"snap{n}-records.db"
    cmd = niced(ROOT / "benchmarks/scale.py", "--child", backend, path, qf, *([code] if code else []))
    res = timed(cmd, f"queries {backend}", log)
    line = [ln for ln in res["output"].splitlines() if ln.startswith("RESULT ")][-1]
    out = json.loads(line[7:])
    record(d, {"step": "queries", "size": n, "backend": backend + (f" ({code})" if code else ""), "queries": count,
               "bytes": du(path), **out,
               "peak_rss_mb": res["peak_rss_mb"], "wall_s": res["wall_s"], "cpu_s": res["cpu_s"]})  # fmt: skip


def step_bm25(n: int, d: Path, workers: list[int], count: int, log) -> None:
    snap = d / f"snap{n}-records.db"
    for w in workers:
        res = timed(harness("index", "build", snap, "--kind", "bm25", "--workers", w, "--quiet"), "bm25", log)
        idx = Path(f"{snap}.index")
        record(d, {"step": "bm25", "size": n, "workers": w, **res, "pages": n, "bytes": du(idx)})
    qf = queries_file(n, d, count)
    res = timed(niced(ROOT / "benchmarks/scale.py", "--child", "bm25", snap, qf), "bm25 q", log)
    out = json.loads([ln for ln in res["output"].splitlines() if ln.startswith("RESULT ")][-1][7:])
    record(d, {"step": "bm25q", "size": n, **out, "peak_rss_mb": res["peak_rss_mb"], "wall_s": res["wall_s"]})


# report ------------------------------------------------------------------------------------
def _slope(rows: dict[int, float]) -> tuple[float, float] | None:
    """(per-page slope, intercept) between the two largest sizes measured."""
    sizes = sorted(rows)
    if len(sizes) < 2:
        return None
    a, b = sizes[-2], sizes[-1]
    s = (rows[b] - rows[a]) / (b - a)
    return s, rows[b] - s * b


def _loglog(rows: dict[int, float]) -> float | None:
    sizes = sorted(k for k in rows if rows[k] > 0)
    if len(sizes) < 2:
        return None
    a, b = sizes[-2], sizes[-1]
    return math.log(rows[b] / rows[a]) / math.log(b / a)


def _lat(t: dict) -> str:
    cpu = f" (CPU {t['cpu_p50_ms']:.2f} / {t['cpu_p95_ms']:.2f})" if "cpu_p50_ms" in t else ""
    return f"{t['p50_ms']:.2f} / {t['p95_ms']:.2f}{cpu}"


def report(d: Path) -> None:
    rows = [json.loads(ln) for ln in (d / "results.jsonl").read_text().splitlines() if ln.strip()]
    latest: dict[tuple, dict] = {}
    for r in rows:
        key = (r["step"], r["size"], r.get("format"), r.get("workers"), r.get("backend"))
        latest[key] = r  # the last run of each
    sizes = sorted({r["size"] for r in rows})
    print(f"machine: {os.cpu_count()} cores ({platform.processor() or platform.machine()}), shared; "
          f"load average at each step in results.jsonl")  # fmt: skip
    print("\n### Builds (pages/CPU-s = pages per CPU-second of the whole process tree, i.e. per core)\n")
    print("| pages | build | workers | wall s | pages/s | CPU s | pages/CPU-s | peak RSS MB | output MB | load |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for (step, size, fmt, w, _), r in sorted(latest.items(), key=lambda kv: (kv[0][1], str(kv[0]))):
        if step == "corpus" and fmt == "zim":
            label, pages = "ZIM write (libzim, Xapian index on)", size
        elif step == "build":
            label, pages = f"snapshot build from {fmt}", r["pages"]
        elif step == "bm25":
            label, pages = "index build bm25 words100", size
        else:
            continue
        print(f"| {size:,} | {label} | {w or 'libzim default'} | {r['wall_s']:,.1f} | {pages / r['wall_s']:,.0f} | "
              f"{r['cpu_s']:,.1f} | {pages / max(r['cpu_s'], 1e-9):,.0f} | {r['peak_rss_mb']:,.0f} | "
              f"{r['bytes'] / 1e6:,.0f} | {r['load1']:.1f} |")  # fmt: skip
    print("\n### Queries: wall p50 / p95 ms (CPU p50 / p95) over the query mix (target: p95 <= 50 ms, memory flat)\n")
    print("| pages | backend | open s | first search s | resolve_title | similar_titles | search | peak RSS MB |")
    print("|---|---|---|---|---|---|---|---|")
    for (step, size, _, _, be), r in sorted(latest.items(), key=lambda kv: (kv[0][1], str(kv[0]))):
        if step == "queries":
            cells = [_lat(r[k]) for k in ("resolve_title", "similar_titles", "search")]
            if be.startswith("sqlite"):
                label = "SQLite snapshot" + (", before this round's fixes" if "(" in be else "")
            else:
                label = "ZIM in place" + ("" if "ZimWiki" in r.get("via", "") else f" ({r.get('via', '')})")
            print(f"| {size:,} | {label} | {r['open_s']} | {r.get('first_search_s', '')} | {' | '.join(cells)} | "
                  f"{r['peak_rss_mb']:,.0f} |")  # fmt: skip
        elif step == "bm25q":
            print(f"| {size:,} | bm25 words100 ({r.get('passages') or '?':,} passages) | {r['open_s']} | | | | "
                  f"{_lat(r['search'])} | {r['peak_rss_mb']:,.0f} |")
    # extrapolation
    print(f"\n### Whole English Wikipedia ({WIKI_ARTICLES / 1e6:.1f}M articles), extrapolated\n")
    print("Assumption: cost per page stays at the slope between the two largest measured sizes (linear "
          "in pages: seconds, CPU and bytes); latencies and RSS follow the power law fitted between those "
          "two sizes (p(N) = p(N1) * (N/N1)^alpha).\n")
    print("| what | measured at | slope | whole Wikipedia |")
    print("|---|---|---|---|")
    groups: dict[tuple, dict[int, dict]] = {}
    for (step, size, fmt, w, be), r in latest.items():
        groups.setdefault((step, fmt, w, be), {})[size] = r
    for (step, fmt, w, be), by_size in sorted(groups.items(), key=str):
        if step in ("build", "bm25") or (step == "corpus" and fmt == "zim"):
            name = {"build": f"snapshot build from {fmt}, {w} worker(s)", "bm25": f"bm25 index, {w} worker(s)",
                    "corpus": "ZIM write"}[step]  # fmt: skip
            measures = (("cpu_s", "CPU h", 3600), ("wall_s", "wall h (shared machine)", 3600), ("bytes", "GB", 1e9))
            for key, unit, scale in measures:
                sl = _slope({s: r[key] for s, r in by_size.items()})
                if sl:
                    total = (sl[0] * WIKI_ARTICLES + sl[1]) / scale
                    per_page = f"{sl[0]:,.0f} B/page" if unit == "GB" else f"{sl[0] * 1000:.3g} ms/page"
                    print(f"| {name}: {unit} | {', '.join(f'{s:,}' for s in sorted(by_size))} | {per_page} | "
                          f"{total:,.2f} {unit} |")  # fmt: skip
            alpha = _loglog({s: r["peak_rss_mb"] for s, r in by_size.items()})
            if alpha is not None:
                top = max(by_size)
                est = by_size[top]["peak_rss_mb"] * (WIKI_ARTICLES / top) ** alpha
                print(f"| {name}: peak RSS | | alpha {alpha:.2f} | {est:,.0f} MB |")
        elif step in ("queries", "bm25q") and "(" not in (be or ""):
            calls = ("resolve_title", "similar_titles", "search") if step == "queries" else ("search",)
            for call in calls:
                key = "cpu_p95_ms" if all("cpu_p95_ms" in r[call] for r in by_size.values()) else "p95_ms"
                alpha = _loglog({s: r[call][key] for s, r in by_size.items()})
                if alpha is not None:
                    top = max(by_size)
                    est = by_size[top][call][key] * (WIKI_ARTICLES / top) ** alpha
                    what = f"{be or 'bm25'} {call} {'CPU ' if key.startswith('cpu') else ''}p95"
                    print(f"| {what} | {', '.join(f'{s:,}' for s in sorted(by_size))} | "
                          f"alpha {alpha:.2f} | {est:,.1f} ms |")  # fmt: skip


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        if len(sys.argv) > 5:  # another checkout's wiki_snapshot (a before/after comparison)
            sys.path.insert(0, sys.argv[5])
            if not (Path(sys.argv[5]) / "harness" / "_namespace.py").is_file():  # from before one namespace
                import harness
                import wiki_snapshot

                sys.modules["harness.wiki_snapshot"] = harness.wiki_snapshot = wiki_snapshot
        query_child(*sys.argv[2:5])
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="10000,100000")
    ap.add_argument("--dir", required=True, help="where corpora, snapshots and results.jsonl go (tens of GB at 1M)")
    ap.add_argument("--steps", default="corpus,records,sqliteq,zimq,dump,zim,bm25")
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--corpus-formats", help="which corpus files the corpus step writes (default: what the steps need)")
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--code", help="sqliteq: time this checkout's wiki_snapshot instead (a before/after comparison)")
    ap.add_argument("--report", action="store_true", help="only print the tables from DIR/results.jsonl")
    args = ap.parse_args()
    d = Path(args.dir)
    d.mkdir(parents=True, exist_ok=True)
    if args.report:
        report(d)
        return 0
    workers = [int(w) for w in args.workers.split(",")]
    steps = args.steps.split(",")

    def log(msg: str) -> None:
        print(msg, flush=True)

    for n in [int(s) for s in args.sizes.split(",")]:
        log(f"== {n:,} pages ({time.strftime('%H:%M:%S')})")
        if "corpus" in steps:
            formats = ["jsonl"] + [f for f, s in (("zim", ("zim", "zimq")), ("xml", ("dump",))) if set(s) & set(steps)]
            if args.corpus_formats:
                formats = args.corpus_formats.split(",")
            step_corpus(n, d, formats, log)
        for step in steps:
            if step == "records":
                step_build(n, d, "records", workers, log)
            elif step == "dump":
                step_build(n, d, "dump", workers, log)
            elif step == "zim":
                step_build(n, d, "zim", workers, log)
            elif step == "sqliteq":
                step_queries(n, d, "sqlite", args.queries, log, args.code)
            elif step == "zimq":
                step_queries(n, d, "zim", args.queries, log)
            elif step == "bm25":
                step_bm25(n, d, workers, args.queries, log)
    report(d)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
