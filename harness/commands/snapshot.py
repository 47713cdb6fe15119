"""``harness snapshot build|info|search``: build and inspect offline Wikipedia snapshots."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from harness.argtypes import number
from harness.commands._common import run_subcommand, sigterm_interrupts
from harness.errors import HarnessError
from harness._version import pip_install

KINDS = ("dump", "zim", "fanoutqa-cache", "records", "api")
# Whose evidence gives fanoutqa-cache its titles (without --titles) and api its pages (without --from).
DEFAULT_DATASETS = {"fanoutqa-cache": "fanoutqa:dev,fanoutqa:test", "api": "fanoutqa:dev"}


def add_parser(sub) -> None:
    p = sub.add_parser(
        "snapshot",
        description=(
            "A snapshot is one SQLite file of pages (pageid, revid, title, text, timestamp), redirects, "
            "full-text indexes and provenance metadata, built from a MediaWiki XML dump, a ZIM archive, "
            "FanOutQA's page cache, JSON records (HotpotQA too) or the MediaWiki API. info and search also read a "
            "Kiwix ZIM archive in place (no conversion; pages rendered to markdown as build --kind zim does)."
        ),
    )
    sub = p.add_subparsers(dest="snapshot_command", metavar="SUBCOMMAND")

    b = sub.add_parser(
        "build",
        help="build a snapshot from a source",
        description=(
            "Build a snapshot. The kind is inferred from the source when not given: .xml/.xml.bz2 -> dump, "
            ".zim -> zim, a directory of *-dated.md -> fanoutqa-cache, .json/.jsonl -> records; api must be "
            "explicit (it fetches the --dataset evidence pages at their revisions from --api-url). "
            "The file appears at --out only when complete."
        ),
    )
    b.add_argument("--from", dest="source", help="the source file or directory (api: optional JSON file of evidence)")
    b.add_argument("--out", required=True, help="the snapshot file to write (SNAP.db)")
    b.add_argument("--kind", choices=KINDS, help="source kind (default: inferred from --from)")
    b.add_argument("--overwrite", action="store_true", help="replace --out if it exists")
    b.add_argument(
        "--dataset",
        help="fanoutqa-cache: where titles come from (default fanoutqa:dev,fanoutqa:test); "
        "api: whose evidence to fetch (default fanoutqa:dev); comma-separated specs",
    )
    b.add_argument("--titles", help="fanoutqa-cache: JSON file mapping pageid -> title (instead of --dataset)")
    b.add_argument("--api-url", help="api: MediaWiki api.php URL (default https://en.wikipedia.org/w/api.php)")
    b.add_argument(
        "--rate-limit", type=number(float, 0, 1000), help="api: requests per second (default 1; 0 = no limit)"
    )
    b.add_argument(
        "--cache-dir", help="api: where fetched responses are kept (default $HARNESS_CACHE_DIR/wiki-api/HOST)"
    )
    b.add_argument(
        "--max-attempts", type=number(int, 1, 100), help="api: tries per request on 429/5xx/timeouts (default 6)"
    )
    b.add_argument("--limit", type=number(int, 1, 1_000_000_000), help="api: fetch only the first N evidence pages")
    b.add_argument(
        "--workers",
        type=number(int, 1, 1024),
        help="dump, zim: processes converting wikitext/HTML to text (default: every core); the snapshot is the same",
    )
    b.add_argument("--namespaces", help="dump: comma-separated namespace numbers to keep (default 0)")
    b.add_argument("--quiet", action="store_true", help="no progress lines")

    i = sub.add_parser("info", help="print a snapshot's metadata and counts as JSON")
    i.add_argument("snapshot", help="SNAP.db, or a ZIM archive (read in place)")

    s = sub.add_parser(
        "search",
        help="look a title up (exact, any case, via redirects), else list similar titles",
        description="Resolve QUERY as a title; when nothing resolves, print the most similar titles.",
    )
    s.add_argument(
        "snapshot", help="SNAP.db, or a ZIM archive (read in place: its title suggestions and full-text index)"
    )
    s.add_argument("query")
    s.add_argument("--k", type=number(int, 1, 10_000), default=10, help="how many similar titles (default 10)")
    s.add_argument(
        "--text",
        action="store_true",
        help="full-text search instead (titles with bm25 scores; a ZIM: its Xapian index, scored 1/(1+rank))",
    )
    s.add_argument("--json", action="store_true", help="print JSON")
    f = sub.add_parser(
        "fulltext",
        help="build a tantivy full-text index beside a snapshot (SNAP.db.fulltext/)",
        description=(
            "Build SNAP.db.fulltext/, a tantivy index (BM25 with block-max WAND: top-k pruning) of the snapshot's "
            "titles and texts, title matches boosted 5x as FTS5's are. Opening the snapshot then answers full-text "
            "search from it (metadata text_search tantivy-bm25, part of a run's key) while its content_sha256 "
            "matches the snapshot's. FTS5 scores every posting, so its search p95 grows linearly (1.2 s at 1M "
            f"pages); tantivy's stays in milliseconds. Needs tantivy ({pip_install('fulltext')}); a rebuild replaces "
            "the folder, an interrupted build leaves none."
        ),
    )
    f.add_argument("snapshot", help="SNAP.db (a SQLite snapshot; a ZIM archive has its own full-text index)")
    f.add_argument("--quiet", action="store_true", help="no progress lines")
    p.set_defaults(snapshot_parser=p)


def command(args: argparse.Namespace) -> int:
    return run_subcommand(
        args, {"build": _build, "info": _info, "search": _search, "fulltext": _fulltext}, "snapshot_command", "snapshot_parser"
    )


def _build(args: argparse.Namespace) -> int:
    from harness.wiki_snapshot.builders import build_snapshot

    if args.kind != "api" and not args.source:
        raise HarnessError("snapshot build needs --from SOURCE (or --kind api)")
    options: dict[str, Any] = {}
    for name in (
        "dataset",
        "titles",
        "api_url",
        "rate_limit",
        "cache_dir",
        "max_attempts",
        "limit",
        "workers",
        "namespaces",
    ):
        value = getattr(args, name, None)
        if value is not None:
            options[name] = value
    kind = args.kind
    if kind is None:
        from harness.wiki_snapshot.builders import detect_kind

        kind = detect_kind(args.source)
    allowed = {
        "dump": {"workers", "namespaces"},
        "zim": {"workers"},
        "fanoutqa-cache": {"dataset", "titles"},
        "records": set(),
        "api": {"dataset", "api_url", "rate_limit", "cache_dir", "max_attempts", "limit"},
    }[kind]
    extra = sorted(set(options) - allowed)
    if extra:
        flags = ", ".join("--" + e.replace("_", "-") for e in extra)
        raise HarnessError(f"{flags} {'does' if len(extra) == 1 else 'do'} not apply to --kind {kind}")
    # The builders take evidence, not dataset specs (wiki_snapshot does not load datasets). A cache
    # that is not a directory is left to the builder, whose error says so before any dataset loads.
    if (kind == "fanoutqa-cache" and not options.get("titles") and Path(args.source).is_dir()) or (
        kind == "api" and not args.source
    ):
        options.setdefault("dataset", DEFAULT_DATASETS[kind])
        options["evidence"] = dataset_evidence(options["dataset"])
    # A kill unwinds like Ctrl-C: the partial file is removed, --out is untouched.
    try:
        with sigterm_interrupts():
            summary = build_snapshot(
                args.source,
                args.out,
                kind=kind,
                overwrite=args.overwrite,
                progress=None if args.quiet else sys.stderr,
                **options,
            )
    except KeyboardInterrupt:
        print(f"interrupted: nothing written to {args.out}", file=sys.stderr)
        return 130
    meta = summary["metadata"]
    size = summary["input_bytes"]
    print(
        f"wrote {summary['out']}: {summary['pages']:,} pages, {summary['redirects']:,} redirects from {kind} "
        f"in {summary['seconds']:.1f} s ({summary['pages_per_s'] or 0:,.1f} pages/s"
        + (f", {size / 1e6 / summary['seconds']:.2f} MB/s" if size and summary["seconds"] else "")
        + f"); {summary['output_bytes'] / 1e6:.1f} MB; revision date {meta.get('revision_date')}; "
        f"sha256 {meta['content_sha256'][:12]}"
    )
    if meta.get("scope") in ("evidence", "dataset-contexts"):  # harness.wiki_snapshot.space.EVIDENCE_ONLY_SCOPES
        what = "evidence pages" if meta["scope"] == "evidence" else "context paragraphs"
        print(
            f"note: {summary['out']} holds only the {what} of {meta.get('scope_dataset')}: an open-book or "
            "retrieve-read run over it needs --search-space evidence-only (every similar title is a gold page)",
            file=sys.stderr,
        )
    missing = (meta.get("stats") or {}).get("missing")
    if missing:
        print(f"{len(missing)} page(s) missing (see `harness snapshot info`)", file=sys.stderr)
    return 0


def _fulltext(args: argparse.Namespace) -> int:
    from harness.wiki_snapshot.backends import is_zim
    from harness.wiki_snapshot.fulltext import build_fulltext, sidecar_path
    from harness.wiki_snapshot.store import Snapshot

    path = Path(args.snapshot)
    if path.is_dir():
        raise HarnessError(f"{path} is a folder: give the snapshot file (SNAP.db) the index goes beside")
    if not path.is_file():
        raise HarnessError(f"snapshot not found: {path}")
    if is_zim(path):
        raise HarnessError(f"{path} is a ZIM archive: it has its own full-text index (read in place); nothing to build")
    try:
        with sigterm_interrupts():
            with Snapshot.open(path, fulltext=False) as snap:
                meta = build_fulltext(snap, progress=None if args.quiet else sys.stderr)
    except KeyboardInterrupt:
        print(f"interrupted: nothing written to {sidecar_path(path)}", file=sys.stderr)
        return 130
    secs = meta["build_seconds"]
    print(
        f"wrote {sidecar_path(path)}: {meta['pages']:,} pages in {secs:.1f} s "
        f"({meta['pages'] / secs if secs else 0:,.1f} pages/s); tantivy {meta['tantivy_version']}, "
        f"sha256 {meta['content_sha256'][:12]}"
    )
    return 0


def _open(path: str):
    """A SQLite snapshot or a ZIM archive read in place; a ZIM's notices (no full-text index) on stderr."""
    from harness.wiki_snapshot import open_wiki

    wiki = open_wiki(path)
    for notice in getattr(wiki, "notices", ()):
        print(notice, file=sys.stderr)
    return wiki


def _info(args: argparse.Namespace) -> int:
    from harness.wiki_snapshot.store import Snapshot

    from harness.wiki_snapshot.space import EVIDENCE_ONLY_SCOPES, scope_of

    with _open(args.snapshot) as snap:
        info = snap.metadata
        if isinstance(snap, Snapshot):
            info["counts"] = {"pages": len(snap), "redirects": snap._one("SELECT count(*) FROM redirects")[0]}
        else:  # a ZIM archive: what libzim counts without reading every entry (no redirect count)
            info["counts"] = {"pages": info.get("pages"), "redirects": info.get("redirects")}
        info["path"] = str(snap.path)
    # what the space is made of (a snapshot from before the key: read from its builder's record)
    info["scope"], info["scope_dataset"] = scope_of(info)
    info["evidence_only"] = info["scope"] in EVIDENCE_ONLY_SCOPES
    print(json.dumps(info, indent=2, ensure_ascii=False))
    return 0


def _search(args: argparse.Namespace) -> int:
    with _open(args.snapshot) as snap:
        if args.text:
            hits = snap.search(args.query, args.k)
            if args.json:
                print(json.dumps([{"title": t, "score": s} for t, s in hits], ensure_ascii=False))
            else:
                for t, s in hits:
                    print(f"{s:8.3f}  {t}")
                if not hits:
                    print("no matches", file=sys.stderr)
            return 0
        page = snap.resolve_title(args.query)
        if page is not None:
            if args.json:
                print(
                    json.dumps(
                        {
                            "resolved": {
                                "pageid": page.pageid,
                                "revid": page.revid,
                                "title": page.title,
                                "timestamp": page.timestamp,
                                "chars": len(page.text),
                            }
                        },
                        ensure_ascii=False,
                    )
                )
            else:
                via = "" if page.title == args.query else f"  (from {args.query!r})"
                print(f"{page.title}  [pageid {page.pageid}, revid {page.revid}, {len(page.text):,} chars]{via}")
                first = page.text.strip().split("\n\n", 1)[0]
                print(first[:300] + ("..." if len(first) > 300 else ""))
            return 0
        similar = snap.similar_titles(args.query, args.k)
        if args.json:
            print(json.dumps({"resolved": None, "similar": similar}, ensure_ascii=False))
        else:
            print(f"no page titled {args.query!r}; similar titles:")
            for n, t in enumerate(similar, 1):
                print(f"{n:3d}. {t}")
    return 0


def dataset_evidence(specs: str) -> list[dict[str, Any]]:
    """The evidence of one or more datasets (``fanoutqa:dev,fanoutqa:test``): every
    ``{pageid, revid, title[, url]}`` in the samples' raw records (decompositions, recursively, and
    test ``necessary_evidence``), deduplicated by (pageid, revid), first occurrence first."""
    from harness.datasets import load_dataset
    from harness.wiki_snapshot.builders import collect_evidence, unique_evidence

    evidence: list[dict[str, Any]] = []
    for spec in [s.strip() for s in specs.split(",") if s.strip()]:
        for sample in load_dataset(spec).samples:
            collect_evidence(sample.raw, evidence)
    return unique_evidence(evidence)
