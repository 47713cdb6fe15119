"""Parallel builds: `harness snapshot build` and `harness index build` with 1 vs N workers on real text.

    python benchmarks/parallel_build.py [--workers 1,2] [--dense-pages 300] [--repeat 2]

Inputs: the real MediaWiki dump excerpt (tests/fixtures/enwiki-sample-pages-articles.xml.bz2, origin in
tests/fixtures) and the HotpotQA dev paragraphs (tests/fixtures). For each
worker count: the dump -> snapshot build (wikitext conversion in workers), the BM25 ``words100`` index of
that snapshot (splitting + tokenizing in workers), and the dense index of the first ``--dense-pages``
HotpotQA paragraphs (splitting + embedding in workers; CPU embedding is slow, hence a subset). Every
build is checked to give byte-identical files to the 1-worker build. Wall seconds are the minimum over
``--repeat`` runs (one for dense); speed-up is against 1 worker. The machine's other jobs share the cores.
"""

from __future__ import annotations

import argparse
import filecmp
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.wiki_snapshot import build_snapshot  # noqa: E402
from harness.wiki_snapshot.parallel import default_workers  # noqa: E402
from harness.wiki_snapshot.retrieval import build_index, index_dir  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures"
DUMP_NAME = "enwiki-sample-pages-articles.xml.bz2"
HOTPOT = FIXTURES / "hotpot_dev_distractor_first100.json"


def same_tree(a: Path, b: Path, skip=("meta.json",)) -> bool:
    """Every file of two index directories byte-identical (meta.json holds timings)."""
    files = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file() and p.name not in skip)
    other = sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file() and p.name not in skip)
    return files == other and all(filecmp.cmp(a / f, b / f, shallow=False) for f in files)


def timed(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--dense-pages", type=int, default=300)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--no-dense", action="store_true")
    args = ap.parse_args()
    counts = [int(x) for x in args.workers.split(",")]
    dump = FIXTURES / DUMP_NAME
    print(f"# {default_workers()} cores; dump: {dump}", flush=True)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        pages = json.loads(HOTPOT.read_text())
        seen: dict[str, str] = {}
        for q in pages:
            for title, sents in zip(q["context"]["title"], q["context"]["sentences"]):
                seen.setdefault(title, "".join(sents))
        subset = [{"title": t, "text": x} for t, x in list(seen.items())[: args.dense_pages]]
        (tmp / "subset.json").write_text(json.dumps(subset))
        build_snapshot(str(tmp / "subset.json"), tmp / "subset.db", progress=None)
        reference: dict = {}
        for n in counts:
            snap = tmp / f"dump-{n}.db"

            summary = {}

            def snapshot_build():
                summary.update(build_snapshot(str(dump), snap, overwrite=True, progress=None, workers=n))

            s = timed(snapshot_build, args.repeat)
            content = summary["metadata"]["content_sha256"]  # the file itself holds its build time
            same = None if n == counts[0] else content == reference.setdefault("snapshot", content)
            reference.setdefault("snapshot", content)
            rows.append((f"dump -> snapshot ({summary['pages']} pages, wikitext conversion)", n, s, same))
            s = timed(lambda: build_index(snap, "bm25", "words100", workers=n), args.repeat)
            meta = json.loads((index_dir(snap, "bm25", "words100") / "meta.json").read_text())
            same = _keep(reference, "bm25", index_dir(snap, "bm25", "words100"), tmp)
            rows.append((f"bm25 words100 index ({meta['n_passages']:,} passages)", n, s, same))
            if not args.no_dense:
                d = index_dir(tmp / "subset.db", "dense", "words100")
                s = timed(lambda: build_index(tmp / "subset.db", "dense", "words100", workers=n), 1)
                meta = json.loads((d / "meta.json").read_text())
                same = _keep(reference, "dense", d, tmp)
                rows.append((f"dense words100 index ({meta['n_passages']:,} passages)", n, s, same))
    base = {r[0]: r[2] for r in rows if r[1] == counts[0]}
    print("| build | workers | seconds | speed-up | files identical to 1 worker |")
    print("|---|---|---|---|---|")
    for what, n, s, same in sorted(rows, key=lambda r: (r[0], r[1])):
        ident = "(reference)" if n == counts[0] else ("n/a" if same is None else ("yes" if same else "NO"))
        print(f"| {what} | {n} | {s:.2f} | {base[what] / s:.2f}× | {ident} |")
    return 0


def _keep(reference: dict, name: str, directory: Path, tmp: Path) -> bool | None:
    if name not in reference:
        reference[name] = tmp / f"ref-{name}"
        shutil.copytree(directory, reference[name])
        return None
    return same_tree(reference[name], directory)


if __name__ == "__main__":
    sys.exit(main())
