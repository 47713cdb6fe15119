"""``harness search serve``: one search service for many workers (``harness.wiki_snapshot.service``)."""

from __future__ import annotations

import argparse
import sys

from harness.argtypes import number
from harness.commands._common import run_subcommand


def add_parser(sub) -> None:
    from harness.wiki_snapshot.service import DEFAULT_HOST, DEFAULT_PORT, DEFAULT_THREADS

    p = sub.add_parser(
        "search",
        description=(
            "Serve a snapshot's search over HTTP, read-only, so that many runs (the K shards of one run, on "
            "one machine or many) read one copy of it: run them with --search-url URL instead of --snapshot. "
            "Their results equal a local snapshot's, byte for byte, and their run key is the same."
        ),
    )
    sub = p.add_subparsers(dest="search_command", metavar="SUBCOMMAND")
    s = sub.add_parser(
        "serve",
        help="serve a snapshot's page search and its passage indexes over HTTP (until Ctrl-C or SIGTERM)",
        description=(
            "Serve SNAPSHOT (a SQLite snapshot or a ZIM archive) read-only: the open-book search tool's page "
            "lookups (full-text search, titles, similar titles, pages) and retrieve-read's passage indexes "
            "(SNAP.db.index/, searched as harness index search does). Prints the service's URL on stderr once it "
            "listens. No authentication: it binds loopback unless --host says otherwise."
        ),
    )
    s.add_argument("snapshot", help="SNAP.db, or a ZIM archive (read in place; open-book search only)")
    s.add_argument(
        "--host",
        default=DEFAULT_HOST,
        help=f"address to listen on (default {DEFAULT_HOST}, this machine only; 0.0.0.0 for every interface: "
        "anyone who reaches the port can read the snapshot)",
    )
    s.add_argument(
        "--port", type=number(int, 0, 65535), default=DEFAULT_PORT, help=f"default {DEFAULT_PORT}; 0: a free port"
    )
    s.add_argument(
        "--threads",
        type=number(int, 1, 1024),
        default=DEFAULT_THREADS,
        help=f"requests answered at once, each thread with its own read connection (default {DEFAULT_THREADS})",
    )
    p.set_defaults(search_parser=p)


def command(args: argparse.Namespace) -> int:
    return run_subcommand(args, {"serve": _serve}, "search_command", "search_parser")


def _serve(args: argparse.Namespace) -> int:
    from harness.wiki_snapshot.service import serve

    def announce(url: str) -> None:
        print(f"serving {args.snapshot} on {url} (read-only; runs use --search-url {url}; Ctrl-C stops)",
              file=sys.stderr, flush=True)  # fmt: skip

    serve(args.snapshot, args.host, args.port, args.threads, announce)
    return 0
