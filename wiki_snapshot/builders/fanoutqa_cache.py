"""FanOutQA's page cache: a directory of ``{pageid}-dated.md`` files.

The ``fanoutqa`` package (``fanoutqa.wiki.wiki_content``) writes each evidence page it fetched
at its dated revision to ``~/.cache/fanoutqa/wikicache/{pageid}-dated.md``, as markdown. Those
files carry no title, so titles (and revids) come from

- ``--titles FILE.json``: ``{"pageid": "title", ...}`` (or ``{"pageid": {"title", "revid"}}``), or
- ``evidence``: ``{pageid, revid, title}`` dicts the caller collected, e.g. every evidence page of
  FanOutQA's questions (``harness snapshot build`` loads ``--dataset``, default
  ``fanoutqa:dev,fanoutqa:test``; ``dataset`` only names it in the metadata).

Files whose pageid has no title are skipped and counted; empty files (what ``wiki_content``
writes when the dated revision could not be found) are skipped and counted.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Iterable, Iterator

from harness.wiki_snapshot.builders import BUILDERS, Builder, Redirect, read_small_file, unique_evidence
from harness.wiki_snapshot.errors import SnapshotError
from harness.wiki_snapshot.space import SCOPE_EVIDENCE, SCOPE_SOURCE
from harness.wiki_snapshot.store import Page

_NAME = re.compile(r"^(\d+)-dated\.md$")
FANOUTQA_EPOCH = "2023-11-20"  # fanoutqa.utils.DATASET_EPOCH: revisions are the last before this day


def load_titles_file(path: str) -> dict[int, dict[str, Any]]:
    p = Path(path)
    try:
        data = json.loads(read_small_file(p, "--titles").decode("utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise SnapshotError(f"--titles {p}: not valid JSON ({exc})") from None
    out: dict[int, dict[str, Any]] = {}
    if isinstance(data, dict):
        items = data.items()
    elif isinstance(data, list):  # a list of {pageid, title[, revid]}
        items = [(d.get("pageid"), d) for d in data if isinstance(d, dict)]
    else:
        raise SnapshotError(f"--titles {p}: expected a JSON object {{pageid: title}}")
    for key, value in items:
        try:
            pageid = int(key)
        except (TypeError, ValueError):
            raise SnapshotError(f"--titles {p}: key {key!r} is not a page id") from None
        if isinstance(value, str):
            out[pageid] = {"title": value, "revid": None}
        elif isinstance(value, dict) and isinstance(value.get("title"), str):
            out[pageid] = {"title": value["title"], "revid": value.get("revid")}
        else:
            raise SnapshotError(f"--titles {p}: page {key}: expected a title string")
    return out


@BUILDERS.register("fanoutqa-cache")
class FanOutQACacheBuilder(Builder):
    name = "fanoutqa-cache"
    description = "FanOutQA page cache (fanoutqa.wiki.wiki_content markdown at the dataset's dated revisions)"

    def __init__(
        self,
        source: str | None,
        *,
        titles: str | None = None,
        evidence: Iterable[dict[str, Any]] | None = None,
        dataset: str | None = None,
        **options: Any,
    ):
        """Titles come from ``titles`` (a JSON file) or ``evidence``; ``dataset`` labels the evidence."""
        if not source:
            raise SnapshotError("fanoutqa-cache: no source directory given (--from DIR)")
        path = Path(source)
        if not path.exists():
            raise SnapshotError(f"{path}: not found")
        if not path.is_dir():
            raise SnapshotError(
                f"{path}: not a directory (a FanOutQA page cache directory of *-dated.md files expected)"
            )
        self.files = sorted((int(m.group(1)), f) for f in path.iterdir() if f.is_file() and (m := _NAME.match(f.name)))
        if not self.files:
            raise SnapshotError(f"{path}: no {{pageid}}-dated.md files (not a FanOutQA page cache)")
        if not titles and evidence is None:
            raise SnapshotError("fanoutqa-cache: the files carry no titles; give titles (a JSON file) or evidence")
        super().__init__(str(path), titles=titles, dataset=dataset, **options)
        self.path = path
        if titles:
            self.titles = load_titles_file(titles)
        else:
            self.titles = {}
            for ev in unique_evidence(evidence):
                try:
                    pid = int(ev["pageid"])
                except (TypeError, ValueError):
                    continue
                self.titles.setdefault(pid, {"title": ev["title"], "revid": ev.get("revid")})
        self.stats = {"files": len(self.files), "pages": 0, "skipped_no_title": [], "skipped_empty": []}
        self._bytes = 0

    def recorded_options(self) -> dict[str, Any]:
        return {
            k: v for k, v in {"titles": self.options.get("titles"), "dataset": self.options.get("dataset")}.items() if v
        }

    def revision_date(self) -> str | None:
        return None if self.options.get("titles") else FANOUTQA_EPOCH

    def scope(self) -> tuple[str, str | None]:
        # titled by a dataset's evidence, it holds those pages only; a --titles file says nothing of what it is
        if self.options.get("titles"):
            return SCOPE_SOURCE, None
        return SCOPE_EVIDENCE, self.options.get("dataset") or "fanoutqa"

    def source_description(self) -> str:
        return f"{self.description}; {len(self.files)} files in {self.path}"

    def input_size(self) -> int | None:
        return sum(f.stat().st_size for _, f in self.files)

    def bytes_read(self) -> int | None:
        return self._bytes

    def items(self) -> Iterator[Page | Redirect]:
        for pageid, f in self.files:
            raw = f.read_bytes()
            self._bytes += len(raw)
            info = self.titles.get(pageid)
            if info is None:
                self.stats["skipped_no_title"].append(pageid)
                continue
            text = raw.decode("utf-8", "replace")
            if not text.strip():
                self.stats["skipped_empty"].append(pageid)
                continue
            revid = info.get("revid")
            self.stats["pages"] += 1
            yield Page(
                pageid=pageid,
                revid=int(revid) if revid is not None else None,
                title=info["title"],
                text=text,
                timestamp=None,
            )
        if self.stats["skipped_no_title"]:
            import sys

            n = len(self.stats["skipped_no_title"])
            dataset = self.options.get("dataset") or "the caller"
            where = "--titles" if self.options.get("titles") else f"the evidence of {dataset}"
            print(
                f"warning: {n} file(s) skipped: no title for their pageid in {where} "
                f"(e.g. {self.stats['skipped_no_title'][0]}-dated.md)",
                file=sys.stderr,
            )
