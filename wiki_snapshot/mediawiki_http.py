"""A polite client of a MediaWiki ``api.php``, shared by the ``api`` snapshot builder and the live search.

Polite by default (https://meta.wikimedia.org/wiki/User-Agent_policy, https://www.mediawiki.org/wiki/API:Etiquette):
a User-Agent naming the harness, at most ``rate_limit`` requests per second (default 1; 0 = no
limit), retries with back-off on 429/5xx/``maxlag``/``ratelimited`` and dropped connections that
wait at least what ``Retry-After`` asks (capped at ``retry_max_wait``), and an on-disk cache of the
raw JSON responses (``cached_get``) so a rerun sends nothing it sent before.
"""

from __future__ import annotations

import email.utils
import hashlib
import json
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from harness.wiki_snapshot._version import HARNESS_VERSION
from harness.wiki_snapshot.errors import SnapshotError
from harness.wiki_snapshot.text import json_bytes, plain_text

log = logging.getLogger(__name__)

DEFAULT_API_URL = "https://en.wikipedia.org/w/api.php"
USER_AGENT = f"harness/{HARNESS_VERSION} (LLM evaluation harness; wiki_snapshot offline snapshot builder)"
# API error codes worth retrying (https://www.mediawiki.org/wiki/API:Errors_and_warnings, API:Etiquette#maxlag)
TRANSIENT_CODES = {
    "maxlag",
    "ratelimited",
    "readonly",
    "internal_api_error_DBQueryError",
    "internal_api_error_DBConnectionError",
}


class Transient(Exception):
    def __init__(self, message: str, retry_after: float | None = None, transport: bool = False):
        super().__init__(message)
        self.retry_after = retry_after
        self.transport = transport  # no HTTP answer at all (refused, DNS, reset)


class Unreachable(SnapshotError):
    """The API could not be reached at all (no network, refused, DNS): a one-line error."""


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a ``Retry-After`` header: delta-seconds or an HTTP date (RFC 9110 10.2.3)."""
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


def sendable_params(params: dict[str, Any]) -> dict[str, Any]:
    """``params`` as sent: a lone surrogate (a model's "\\ud800" in a search, a title in a hostile
    reply) as U+FFFD, which ``httpx`` can encode in a URL (it raises on the surrogate itself)."""
    return {k: plain_text(v)[0] if isinstance(v, str) else v for k, v in params.items()}


def default_cache_dir(api_url: str) -> Path:
    root = os.environ.get("HARNESS_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "harness")
    host = urlparse(api_url).netloc.replace(":", "_") or "api"
    return Path(root) / "wiki-api" / host


class MediaWikiClient:
    """GET requests to one ``api.php``, throttled, retried and (``cached_get``) cached on disk."""

    def __init__(
        self,
        api_url: str | None = None,
        *,
        user_agent: str | None = None,
        rate_limit: float | None = None,
        max_attempts: int | None = None,
        retry_max_wait: float | None = None,
        timeout: float | None = None,
        cache_dir: str | os.PathLike | None = None,
        option: str = "--api-url",
        rate_option: str = "--rate-limit",
    ):
        self.api_url = api_url or DEFAULT_API_URL
        if urlparse(self.api_url).scheme not in ("http", "https"):
            raise SnapshotError(f"{option} {self.api_url!r}: must be an http(s) URL of api.php")
        self.rate_limit = 1.0 if rate_limit is None else float(rate_limit)
        if self.rate_limit < 0:
            raise SnapshotError(f"{rate_option} must be >= 0 (requests per second; 0 = unlimited)")
        self.max_attempts = max(1, int(max_attempts or 6))
        self.retry_max_wait = float(retry_max_wait or 60.0)
        self.timeout = float(timeout or 30.0)
        self.cache_dir = Path(cache_dir) if cache_dir else default_cache_dir(self.api_url)
        self.user_agent = user_agent or USER_AGENT
        self.stats = {"requests": 0, "from_cache": 0, "retries": 0}
        self._next_request = 0.0
        self._client = None
        self._lock = threading.Lock()  # one request at a time: the rate limit is per client

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
        now = time.monotonic()
        if self.rate_limit > 0 and now < self._next_request:
            time.sleep(self._next_request - now)

    def _done(self) -> None:
        # the next request starts 1/rate after this one ended: the server sees them at least that far
        # apart whatever the latency (spacing the starts alone lets a slow request bunch up with the next)
        if self.rate_limit > 0:
            self._next_request = time.monotonic() + 1.0 / self.rate_limit

    def _get_once(self, params: dict[str, Any]) -> dict[str, Any]:
        import httpx

        params = sendable_params(params)
        client = self._http()  # created before the throttle: building it takes tens of ms
        self._throttle()
        self.stats["requests"] += 1
        try:
            resp = client.get(self.api_url, params=params)
        except httpx.TransportError as exc:
            raise Transient(f"{type(exc).__name__}: {exc}", transport=True) from None
        finally:
            self._done()
        if resp.status_code == 429 or resp.status_code >= 500:
            raise Transient(f"HTTP {resp.status_code}", parse_retry_after(resp.headers.get("Retry-After")))
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
            raise Transient(f"API error {code}", parse_retry_after(resp.headers.get("Retry-After")) or 5.0)
        return data

    def get(
        self, params: dict[str, Any], *, attempts: int | None = None, retry_transport: bool = True
    ) -> dict[str, Any]:
        """One API response (JSON object), retried on transient failures; never cached.
        ``retry_transport=False``: no answer at all (refused, DNS) raises :class:`Unreachable` at once."""
        from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_attempt
        from tenacity.wait import wait_exponential_jitter

        backoff = wait_exponential_jitter(initial=1, max=self.retry_max_wait, jitter=1)
        attempts = attempts or self.max_attempts

        def wait(state: RetryCallState) -> float:
            exc = state.outcome.exception() if state.outcome else None
            if isinstance(exc, Transient) and exc.retry_after is not None:
                return min(exc.retry_after, self.retry_max_wait)
            return backoff(state)

        def before_sleep(state: RetryCallState) -> None:
            self.stats["retries"] += 1
            log.warning("%s: %s; retrying in %.1fs", self.api_url, state.outcome.exception(), state.upcoming_sleep)

        with self._lock:
            try:
                for attempt in Retrying(
                    retry=retry_if_exception(
                        lambda e: isinstance(e, Transient) and (retry_transport or not e.transport)
                    ),
                    stop=stop_after_attempt(attempts),
                    wait=wait,
                    before_sleep=before_sleep,
                    reraise=True,
                ):
                    with attempt:
                        return self._get_once(params)
            except Transient as exc:
                raise (Unreachable if exc.transport else SnapshotError)(
                    f"{self.api_url}: gave up after {attempts} attempts ({exc}); responses fetched so far are "
                    f"cached in {self.cache_dir}, run again to continue"
                ) from None
        raise AssertionError("unreachable")

    # cache ----------------------------------------------------------------------------------
    def cache_path(self, params: dict[str, Any], name: str | None = None) -> Path:
        """``name`` (a caller's own file name) or the sha256 of the request's parameters."""
        if name:
            return self.cache_dir / name
        params = sendable_params(params)  # keyed by what is sent
        key = json.dumps({str(k): str(v) for k, v in params.items()}, sort_keys=True, ensure_ascii=False)
        action = str(params.get("list") or params.get("prop") or params.get("meta") or params.get("action"))
        digest = hashlib.sha256(key.encode("utf-8")).hexdigest()
        return self.cache_dir / f"{action}-{digest[:32]}.json"

    def read_cache(self, path: Path) -> dict[str, Any] | None:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (FileNotFoundError, json.JSONDecodeError, UnicodeDecodeError):
            return None
        self.stats["from_cache"] += 1
        return data

    def write_cache(self, path: Path, data: dict[str, Any]) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_bytes(json_bytes(json.dumps(data, ensure_ascii=False)))  # a reply's "\ud800": its escape
        os.replace(tmp, path)

    def cached_get(self, params: dict[str, Any], name: str | None = None) -> dict[str, Any]:
        """The raw response from the on-disk cache, else fetched and cached. An API error that is an
        answer (``missingtitle``, ``nosuchrevid``) is cached too; transient ones raise and never are."""
        path = self.cache_path(params, name)
        data = self.read_cache(path)
        if data is not None:
            return data
        data = self.get(params)
        self.write_cache(path, data)
        return data

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


__all__ = [
    "DEFAULT_API_URL",
    "MediaWikiClient",
    "TRANSIENT_CODES",
    "Transient",
    "USER_AGENT",
    "Unreachable",
    "default_cache_dir",
    "sendable_params",
    "parse_retry_after",
]
