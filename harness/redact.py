"""Secrets never leave the process: every message, log line, error record and file the harness
writes goes through :func:`redact`.

What counts as a secret: the values of the key variables the backends read (and any environment
variable named like a key or token), passwords of ``--base-url``, keys the harness makes itself
(a launched vLLM server's), and anything shaped like one (``Bearer ...``, ``sk-...``), because a
server's error body may echo a header the harness never saw as text.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from urllib.parse import urlsplit, urlunsplit

MASK = "[REDACTED]"
_MIN_SECRET_LEN = 6  # shorter values ("EMPTY", "1") would mask ordinary words
_ENV_NAME = re.compile(r"(API_?KEY|TOKEN|SECRET|PASSWORD)$", re.IGNORECASE)
_NOT_SECRETS = {"EMPTY", "none", "None", "null"}
_SHAPES = re.compile(
    r"(?i:bearer)\s+[A-Za-z0-9._~+/=-]{6,}"  # an Authorization header echoed back
    r"|\bsk-(?:ant-|proj-)?[A-Za-z0-9_-]{8,}"  # OpenAI / Anthropic key shapes
    r"|(?i:x-api-key|api[_-]?key)(['\"]?\s*[:=]\s*['\"]?)[A-Za-z0-9._-]{8,}"
)

_lock = threading.Lock()
_registered: set[str] = set()


def register_secret(value: str | None) -> None:
    """Mask ``value`` wherever it appears from now on (keys and passwords the process holds)."""
    if value and len(value) >= _MIN_SECRET_LEN and value not in _NOT_SECRETS:
        with _lock:
            _registered.add(value)


def known_secrets() -> list[str]:
    """Registered values and key-like environment variables, longest first (a key may contain another)."""
    values = set(_registered)
    for name, value in os.environ.items():
        if _ENV_NAME.search(name) and value and len(value) >= _MIN_SECRET_LEN and value not in _NOT_SECRETS:
            values.add(value)
    return sorted(values, key=len, reverse=True)


def redact_known(text: str) -> str:
    """Only the exact secret values (cheap, safe on model output and whole files)."""
    for secret in known_secrets():
        if secret in text:
            text = text.replace(secret, MASK)
    return text


def redact(text: object) -> str:
    """``str(text)`` with secret values and secret-shaped tokens masked (messages, logs, errors)."""
    text = redact_known(str(text))

    def mask(m: re.Match) -> str:
        if m.group(1) is not None:  # keep the "api_key=" part, mask the value
            return m.group(0)[: m.end(1) - m.start(0)] + MASK
        head = m.group(0).split()[0] if m.group(0).lower().startswith("bearer") else ""
        return f"{head} {MASK}" if head else MASK

    return _SHAPES.sub(mask, text)


def split_urls(value: str | None) -> list[str]:
    """``--base-url URL1,URL2`` -> its URLs (one URL -> a list of one; blanks kept, so they can be refused)."""
    if value is None:
        return []
    return [part.strip() for part in value.split(",")]


def _strip_one(url: str) -> str:
    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def strip_credentials(url: str | None) -> str | None:
    """``http://user:pass@host/v1`` -> ``http://host/v1``: what is recorded, hashed and printed.
    A comma list of URLs (several servers) is stripped URL by URL."""
    if not url:
        return url
    if "," in url:
        return ",".join(_strip_one(part.strip()) for part in url.split(","))
    return _strip_one(url)


def register_url_credentials(url: str | None) -> None:
    for part in split_urls(url):
        try:
            register_secret(urlsplit(part).password)
        except ValueError:
            continue


class RedactingFilter(logging.Filter):
    """Masks secrets in every log record (installed on the root handlers by the CLI)."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a bad format string is the logger's problem, not ours
            return True
        cleaned = redact(message)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        if record.exc_info and record.exc_info[1] is not None:
            record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
            record.exc_info = None
        return True


def install_log_filter() -> None:
    root = logging.getLogger()
    for handler in root.handlers:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(RedactingFilter())


__all__ = [
    "MASK",
    "RedactingFilter",
    "install_log_filter",
    "known_secrets",
    "redact",
    "redact_known",
    "register_secret",
    "register_url_credentials",
    "split_urls",
    "strip_credentials",
]
