"""Exact dated revisions from the MediaWiki API, fetched the way the ``fanoutqa`` package does.

For each evidence page ``{pageid, revid, title}`` (the evidence found anywhere in
``--from FILE.json``, or ``evidence`` the caller collected: ``harness snapshot build`` loads
every evidence page of ``--dataset``, default ``fanoutqa:dev``):
``GET api.php?format=json&action=parse&oldid=REVID&prop=text``, then the HTML rendered to
markdown with FanOutQA's markdownify options (see ``fanoutqa.wiki.wiki_content``).

Polite by default (``harness.wiki_snapshot.mediawiki_http.MediaWikiClient``, shared with the live search):
a User-Agent naming the harness, at most ``rate_limit`` requests per second
(default 1; 0 = no limit), retries with back-off on 429/5xx/``maxlag``/``ratelimited`` and
dropped connections that wait at least what ``Retry-After`` asks, and an on-disk cache of the raw
API responses (``--cache-dir``, default ``$HARNESS_CACHE_DIR/wiki-api/HOST`` or
``~/.cache/harness/wiki-api/HOST``) so a rerun (or a resumed, interrupted build) fetches nothing
twice. A revision the API does not have (``nosuchrevid``, ``missingtitle``, ...) is recorded in
``metadata["stats"]["missing"]``, not fatal. Redirects the API reports (``parse.redirects``, a
page whose current title differs from the evidence title, a revision that is itself a redirect)
go to the redirects table.
"""

from __future__ import annotations

import hashlib
import html as htmllib
import json
import logging
import re
import sys
from pathlib import Path
from typing import Any, Iterable, Iterator

from harness.wiki_snapshot.builders import BUILDERS, Builder, Redirect, collect_evidence, html_to_markdown, read_small_file
from harness.wiki_snapshot.errors import SnapshotError
from harness.wiki_snapshot.space import SCOPE_EVIDENCE
from harness.wiki_snapshot.mediawiki_http import MediaWikiClient
from harness.wiki_snapshot.store import Page, normalize_title, stable_pageid

log = logging.getLogger(__name__)

FANOUTQA_EPOCH = "2023-11-20"
# API error codes that mean "this page/revision does not exist (here)": record, do not retry.
MISSING_CODES = {
    "nosuchrevid",
    "missingtitle",
    "nosuchpageid",
    "invalidtitle",
    "permissiondenied",
    "revdeleted",
    "nosuchsection",
}
_REDIRECT_MSG = re.compile(r'class="redirectText".*?<a\b[^>]*\btitle="([^"]+)"', re.S)


@BUILDERS.register("api")
class MediaWikiAPIBuilder(Builder):
    name = "api"
    description = "MediaWiki API (action=parse at the evidence's revision ids, HTML rendered as FanOutQA does)"

    def __init__(
        self,
        source: str | None,
        *,
        evidence: Iterable[dict[str, Any]] | None = None,
        dataset: str | None = None,
        api_url: str | None = None,
        rate_limit: float | None = None,
        cache_dir: str | None = None,
        max_attempts: int | None = None,
        retry_max_wait: float | None = None,
        timeout: float | None = None,
        limit: int | None = None,
        user_agent: str | None = None,
        **options: Any,
    ):
        # the polite HTTP client shared with the live search (harness.wiki_snapshot.mediawiki_http)
        self.client = MediaWikiClient(
            api_url,
            user_agent=user_agent,
            rate_limit=rate_limit,
            max_attempts=max_attempts,
            retry_max_wait=retry_max_wait,
            timeout=timeout,
            cache_dir=cache_dir,
        )
        self.api_url = self.client.api_url
        self.rate_limit = self.client.rate_limit
        self.cache_dir = self.client.cache_dir
        self.user_agent = self.client.user_agent
        if source:
            p = Path(source)
            if not p.is_file():
                what = "not a regular file" if p.exists() else "not found"
                raise SnapshotError(
                    f"{p}: {what} (api --from takes a JSON/JSONL file of evidence {{pageid, revid, title}})"
                )
            try:
                text = read_small_file(p, "--from").decode("utf-8")
                data = (
                    [json.loads(line) for line in text.splitlines() if line.strip()]
                    if p.suffix == ".jsonl"
                    else json.loads(text)
                )
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                raise SnapshotError(f"{p}: not valid JSON ({exc})") from None
            self.evidence = collect_evidence(data)
            dataset = None
        elif evidence is not None:  # ``dataset`` only names where it came from
            self.evidence = list(evidence)
        else:
            raise SnapshotError("api: no evidence pages to fetch; give --from FILE.json (or evidence)")
        seen: set[tuple] = set()
        unique = []
        for ev in self.evidence:
            key = (ev.get("pageid"), ev.get("revid"), ev.get("title"))
            if key not in seen:
                seen.add(key)
                unique.append(ev)
        self.evidence = unique[: int(limit)] if limit else unique
        if not self.evidence:
            where = source or dataset or "the evidence given"
            raise SnapshotError(f"no evidence pages {{pageid, revid, title}} found in {where}")
        super().__init__(
            source,
            dataset=dataset,
            api_url=self.api_url,
            rate_limit=self.rate_limit,
            limit=limit,
        )
        self.stats = {
            "evidence": len(self.evidence),
            "fetched": 0,
            "from_cache": 0,
            "pages": 0,
            "redirects": 0,
            "retries": 0,
            "missing": [],
            "without_revid": 0,
        }

    def source_label(self) -> str:
        return f"{self.api_url} ({self.source or self.options.get('dataset')})"

    def source_description(self) -> str:
        return (
            f"{self.description}; {len(self.evidence)} evidence pages of {self.source or self.options.get('dataset')}"
        )

    def scope(self) -> tuple[str, str | None]:
        # a dataset's evidence list, from --dataset or the --from file named by its file name
        return SCOPE_EVIDENCE, self.options.get("dataset") or Path(str(self.source)).name

    def revision_date(self) -> str | None:
        ds = self.options.get("dataset") or ""
        return FANOUTQA_EPOCH if ds.startswith("fanoutqa") else None

    def input_size(self) -> int | None:
        return None

    # cache ----------------------------------------------------------------------------------
    def _cache_path(self, ev: dict[str, Any]) -> Path:
        if ev.get("revid"):
            return self.cache_dir / f"rev-{int(ev['revid'])}.json"
        if ev.get("pageid"):
            return self.cache_dir / f"page-{int(ev['pageid'])}.json"
        return self.cache_dir / f"title-{hashlib.sha1(normalize_title(ev['title']).encode()).hexdigest()}.json"

    def _fetch(self, ev: dict[str, Any]) -> dict[str, Any]:
        path = self._cache_path(ev)
        data = self.client.read_cache(path)
        if data is not None:
            self.stats["from_cache"] += 1
            return data
        params: dict[str, Any] = {"format": "json", "action": "parse", "prop": "text"}
        if ev.get("revid"):
            params["oldid"] = int(ev["revid"])
        else:
            # No dated revision known: the current one (recorded in stats).
            self.stats["without_revid"] += 1
            params["redirects"] = 1
            if ev.get("pageid"):
                params["pageid"] = int(ev["pageid"])
            else:
                params["page"] = ev["title"]
        retries = self.client.stats["retries"]
        try:
            data = self.client.get(params)
        finally:
            self.stats["retries"] += self.client.stats["retries"] - retries
        self.stats["fetched"] += 1
        self.client.write_cache(path, data)
        return data

    # items ----------------------------------------------------------------------------------
    def items(self) -> Iterator[Page | Redirect]:
        try:
            for ev in self.evidence:
                yield from self._one(ev)
        finally:
            self.client.close()
        if self.stats["missing"]:
            n = len(self.stats["missing"])
            first = self.stats["missing"][0]
            print(
                f"warning: {n} evidence page(s) missing from the API (e.g. {first['title']!r} revid {first['revid']}: "
                f"{first['code']}); recorded in the snapshot's metadata",
                file=sys.stderr,
            )

    def _one(self, ev: dict[str, Any]) -> Iterator[Page | Redirect]:
        data = self._fetch(ev)
        err = data.get("error")
        parse = data.get("parse")
        if err or not isinstance(parse, dict):
            code = err.get("code") if isinstance(err, dict) else "noparse"
            info = err.get("info") if isinstance(err, dict) else "no 'parse' in the response"
            if code not in MISSING_CODES and code != "noparse":
                log.warning("%s: API error %s for %s", self.api_url, code, ev)
            self.stats["missing"].append(
                {
                    "pageid": ev.get("pageid"),
                    "revid": ev.get("revid"),
                    "title": ev.get("title"),
                    "code": code,
                    "info": info,
                }
            )
            return
        text_field = parse.get("text")
        html = text_field.get("*", "") if isinstance(text_field, dict) else (text_field or "")
        title = parse.get("title") or ev["title"]
        for r in parse.get("redirects") or []:
            if isinstance(r, dict) and r.get("from") and r.get("to"):
                self.stats["redirects"] += 1
                yield Redirect(r["from"], r["to"] + (f"#{r['tofragment']}" if r.get("tofragment") else ""))
        m = _REDIRECT_MSG.search(html) if 'class="redirectMsg"' in html else None
        if m:  # this revision is itself a redirect page
            self.stats["redirects"] += 1
            yield Redirect(ev["title"], htmllib.unescape(m.group(1)))
            return
        if normalize_title(title) != normalize_title(ev["title"]):
            self.stats["redirects"] += 1
            yield Redirect(ev["title"], title)
        pageid = parse.get("pageid") or ev.get("pageid")
        revid = parse.get("revid") or ev.get("revid")
        self.stats["pages"] += 1
        yield Page(
            pageid=int(pageid) if pageid else stable_pageid(title),
            revid=int(revid) if revid else None,
            title=title,
            text=html_to_markdown(html),
            timestamp=None,
        )
