"""Exact dated revisions from the MediaWiki API, fetched the way the ``fanoutqa`` package does.

For each evidence page ``{pageid, revid, title}`` (the evidence found anywhere in
``--from FILE.json``, or ``evidence`` the caller collected: ``harness snapshot build`` loads
every evidence page of ``--dataset``, default ``fanoutqa:dev``):
``GET api.php?format=json&action=parse&oldid=REVID&prop=text``, then the HTML rendered to
markdown with FanOutQA's markdownify options (see ``fanoutqa.wiki.wiki_content``).

Polite by default: a User-Agent naming the harness, at most ``rate_limit`` requests per second
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

import email.utils
import hashlib
import html as htmllib
import json
import logging
import os
import re
import sys
import time
from pathlib import Path
from typing import Any, Iterable, Iterator
from urllib.parse import urlparse

from wiki_snapshot._version import HARNESS_VERSION
from wiki_snapshot.builders import BUILDERS, Builder, Redirect, collect_evidence, html_to_markdown, read_small_file
from wiki_snapshot.errors import SnapshotError
from wiki_snapshot.space import SCOPE_EVIDENCE
from wiki_snapshot.store import Page, normalize_title, stable_pageid

log = logging.getLogger(__name__)

DEFAULT_API_URL = "https://en.wikipedia.org/w/api.php"
FANOUTQA_EPOCH = "2023-11-20"
USER_AGENT = f"harness/{HARNESS_VERSION} (LLM evaluation harness; wiki_snapshot offline snapshot builder)"
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
TRANSIENT_CODES = {
    "maxlag",
    "ratelimited",
    "readonly",
    "internal_api_error_DBQueryError",
    "internal_api_error_DBConnectionError",
}
_REDIRECT_MSG = re.compile(r'class="redirectText".*?<a\b[^>]*\btitle="([^"]+)"', re.S)


class _Transient(Exception):
    def __init__(self, message: str, retry_after: float | None = None):
        super().__init__(message)
        self.retry_after = retry_after


def parse_retry_after(value: str | None) -> float | None:
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def default_cache_dir(api_url: str) -> Path:
    root = os.environ.get("HARNESS_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "harness")
    host = urlparse(api_url).netloc.replace(":", "_") or "api"
    return Path(root) / "wiki-api" / host


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
        self.api_url = api_url or DEFAULT_API_URL
        if urlparse(self.api_url).scheme not in ("http", "https"):
            raise SnapshotError(f"--api-url {self.api_url!r}: must be an http(s) URL of api.php")
        self.rate_limit = 1.0 if rate_limit is None else float(rate_limit)
        if self.rate_limit < 0:
            raise SnapshotError("--rate-limit must be >= 0 (requests per second; 0 = unlimited)")
        self.max_attempts = max(1, int(max_attempts or 6))
        self.retry_max_wait = float(retry_max_wait or 60.0)
        self.timeout = float(timeout or 30.0)
        self.cache_dir = Path(cache_dir) if cache_dir else default_cache_dir(self.api_url)
        self.user_agent = user_agent or USER_AGENT
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
        self._next_request = 0.0
        self._client = None

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

    # HTTP -----------------------------------------------------------------------------------
    def _http(self):
        if self._client is None:
            import httpx

            self._client = httpx.Client(
                headers={"User-Agent": self.user_agent, "Accept": "application/json"},
                follow_redirects=True,
                timeout=self.timeout,
            )
        return self._client

    def _throttle(self) -> None:
        if self.rate_limit <= 0:
            return
        now = time.monotonic()
        if now < self._next_request:
            time.sleep(self._next_request - now)
            now = time.monotonic()
        self._next_request = now + 1.0 / self.rate_limit

    def _get_once(self, params: dict[str, Any]) -> dict[str, Any]:
        import httpx

        client = self._http()  # created before the throttle: building it takes tens of ms
        self._throttle()
        try:
            resp = client.get(self.api_url, params=params)
        except httpx.TransportError as exc:
            raise _Transient(f"{type(exc).__name__}: {exc}") from None
        if resp.status_code == 429 or resp.status_code >= 500:
            raise _Transient(f"HTTP {resp.status_code}", parse_retry_after(resp.headers.get("Retry-After")))
        if resp.status_code >= 400:
            raise SnapshotError(f"{self.api_url}: HTTP {resp.status_code} for {params}")
        try:
            data = resp.json()
        except ValueError:
            raise SnapshotError(
                f"{self.api_url}: the response is not JSON (is this a MediaWiki api.php URL?)"
            ) from None
        if not isinstance(data, dict):
            raise SnapshotError(f"{self.api_url}: unexpected response {str(data)[:80]!r}")
        code = (data.get("error") or {}).get("code") if isinstance(data.get("error"), dict) else None
        if code in TRANSIENT_CODES:
            raise _Transient(f"API error {code}", parse_retry_after(resp.headers.get("Retry-After")) or 5.0)
        return data

    def _get(self, params: dict[str, Any]) -> dict[str, Any]:
        from tenacity import RetryCallState, Retrying, retry_if_exception_type, stop_after_attempt
        from tenacity.wait import wait_exponential_jitter

        backoff = wait_exponential_jitter(initial=1, max=self.retry_max_wait, jitter=1)

        def wait(state: RetryCallState) -> float:
            exc = state.outcome.exception() if state.outcome else None
            if isinstance(exc, _Transient) and exc.retry_after is not None:
                return min(exc.retry_after, self.retry_max_wait)
            return backoff(state)

        def before_sleep(state: RetryCallState) -> None:
            self.stats["retries"] += 1
            log.warning("%s: %s; retrying in %.1fs", self.api_url, state.outcome.exception(), state.upcoming_sleep)

        try:
            for attempt in Retrying(
                retry=retry_if_exception_type(_Transient),
                stop=stop_after_attempt(self.max_attempts),
                wait=wait,
                before_sleep=before_sleep,
                reraise=True,
            ):
                with attempt:
                    return self._get_once(params)
        except _Transient as exc:
            raise SnapshotError(
                f"{self.api_url}: gave up after {self.max_attempts} attempts ({exc}); pages fetched so far are "
                f"cached in {self.cache_dir}, run again to continue"
            ) from None
        raise AssertionError("unreachable")

    # cache ----------------------------------------------------------------------------------
    def _cache_path(self, ev: dict[str, Any]) -> Path:
        if ev.get("revid"):
            return self.cache_dir / f"rev-{int(ev['revid'])}.json"
        if ev.get("pageid"):
            return self.cache_dir / f"page-{int(ev['pageid'])}.json"
        return self.cache_dir / f"title-{hashlib.sha1(normalize_title(ev['title']).encode()).hexdigest()}.json"

    def _fetch(self, ev: dict[str, Any]) -> dict[str, Any]:
        path = self._cache_path(ev)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            self.stats["from_cache"] += 1
            return data
        except (FileNotFoundError, json.JSONDecodeError, UnicodeDecodeError):
            pass
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
        data = self._get(params)
        self.stats["fetched"] += 1
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
        os.replace(tmp, path)
        return data

    # items ----------------------------------------------------------------------------------
    def items(self) -> Iterator[Page | Redirect]:
        try:
            for ev in self.evidence:
                yield from self._one(ev)
        finally:
            if self._client is not None:
                self._client.close()
                self._client = None
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
