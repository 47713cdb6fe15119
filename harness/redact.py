"""Secrets never leave the process: every message, log line, error record and file the harness
writes goes through :func:`redact` (files: :func:`redact_data`).

What counts as a secret: the values of the key variables the backends read (and any environment
variable named like a key or token), credentials of a URL (``--base-url``, ``OPENAI_BASE_URL``: its
password, or its user name where it has no password (a token given as the user), a key in its query or
its fragment), keys the harness makes itself (a launched
vLLM server's), and anything shaped like one (``Bearer ...``, ``Basic ...``, ``sk-...``, a URL's
``user:pass@``, ``?api_key=`` or ``#token=``), because a server's error body may echo a header the
harness never saw as text. Known secrets are masked however short, in clear and in the forms a
request or an echo carries them (URL-encoded, base64 of ``user:pass``, JSON-escaped, base64 of the
key wherever it sits in what was encoded); short ones (under 6 characters) only as a whole word, so
that masking "abc" leaves "abcdef" alone.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import os
import re
import threading
from typing import Any, Callable
from urllib.parse import quote, quote_plus, unquote, unquote_plus, urlsplit, urlunsplit

MASK = "[REDACTED]"
_SHORT = 6  # shorter secrets are masked only as whole words: "abc" inside "abcdef" is not the key
_ENV_NAME = re.compile(r"(API_?KEY|TOKEN|SECRET|PASSWORD)$", re.IGNORECASE)
# The variables the backends and libraries read keys from: masked however short. Other variables
# named like a key only from 6 characters ("1", "true" would mask ordinary words and numbers).
KEY_ENV_VARS = (
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "VLLM_API_KEY",
    "HF_TOKEN",
    "HUGGING_FACE_HUB_TOKEN",
)
# Variables holding an endpoint URL the SDKs read: credentials in them are secrets too.
URL_ENV_VARS = ("OPENAI_BASE_URL", "ANTHROPIC_BASE_URL")
_NOT_SECRETS = {"", "EMPTY", "none", "None", "NONE", "null"}
# query parameters that carry a credential (api_key, key, access_token, X-Amz-Signature, sig, ...)
_CREDENTIAL_WORDS = r"(?:key|token|secret|password|passwd|pwd|sig|signature|auth|credentials?)"
_CREDENTIAL_PARAM = re.compile(_CREDENTIAL_WORDS + "$", re.IGNORECASE)
_SHAPES = re.compile(
    r"(?i:bearer)\s+[A-Za-z0-9._~+/=-]{6,}"  # an Authorization header echoed back
    r"|\bsk-(?:ant-|proj-)?[A-Za-z0-9_-]{8,}"  # OpenAI / Anthropic key shapes
    r"|(?i:x-api-key|api[_-]?key)(['\"]?\s*[:=]\s*['\"]?)[A-Za-z0-9._-]{8,}"
)
_BASIC = re.compile(r"(?i:basic)\s+([A-Za-z0-9+/]{4,}={0,2})")  # masked when it decodes to user:pass
_URL_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@]+@")
# in a query or a fragment (``#token=...``: never sent, but written wherever the URL is)
_URL_QUERY_CREDENTIAL = re.compile(r"(?i)([?&#][A-Za-z0-9_.-]*" + _CREDENTIAL_WORDS + r"=)[^&#\s\"']+")

_lock = threading.Lock()
_registered: set[str] = set()
_generation = 0  # bumped whenever _registered changes: the maskers below are cached per generation
# A transcript message's role is one of these words: never masked, because a masked role changes what
# the transcript says and the word reveals nothing (a secret equal to "user" is masked everywhere else).
_MESSAGE_ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})


def _is_secret(value: str | None) -> bool:
    return bool(value) and value not in _NOT_SECRETS


def _encoded_forms(value: str) -> set[str]:
    """``value`` as it may appear in a URL, a form, a JSON text or base64 (``_base64_forms``)."""
    forms = {value, quote(value, safe=""), quote(value), quote_plus(value)}
    forms |= {json.dumps(value, ensure_ascii=as_ascii)[1:-1] for as_ascii in (True, False)}
    return forms | _base64_forms(value)


_URLSAFE = str.maketrans("+/", "-_")
_MIN_BASE64 = 8  # shorter runs of base64 would mask ordinary words


def _base64_core(data: bytes, shift: int) -> str:
    """The base64 characters that ``data`` alone decides when it starts ``shift`` bytes (0, 1, 2)
    into a 3-byte group of whatever was encoded: the same wherever such an encoding holds it."""
    encoded = base64.b64encode(b"\0" * shift + data).decode()
    return encoded[-(-8 * shift // 6) : 8 * (shift + len(data)) // 6]


def _base64_forms(value: str) -> set[str]:
    """``value`` as any base64 text holding it shows it (a server echoing the Authorization header
    base64-encoded, a JSON body with the header inside, encoded whole): at each of the three byte
    alignments, in the standard and the URL-safe alphabet. ``Bearer value`` too, for a key too short
    for its own characters to be told from ordinary text (a longer key's core is inside that form)."""
    data = value.encode("utf-8", "surrogatepass")
    cores = {_base64_core(data, shift) for shift in range(3)}
    if min(map(len, cores)) < _MIN_BASE64:
        cores = {_base64_core(b"Bearer " + data, shift) for shift in range(3)}
    forms = cores | {core.translate(_URLSAFE) for core in cores}
    return {form for form in forms if len(form) >= _MIN_BASE64}


def register_secret(value: str | None) -> None:
    """Mask ``value`` wherever it appears from now on (keys and passwords the process holds)."""
    global _generation
    if _is_secret(value):
        with _lock:
            _registered.update(_encoded_forms(value))
            _generation += 1


def registered_secrets() -> frozenset[str]:
    """What is registered now (with :func:`restore_registered`: a test leaves the process as it found it)."""
    with _lock:
        return frozenset(_registered)


def restore_registered(secrets: frozenset[str]) -> None:
    global _generation
    with _lock:
        if _registered != secrets:
            _registered.clear()
            _registered.update(secrets)
            _generation += 1


def _env_snapshot() -> tuple:
    """The process environment as it is now (compared in C: cheap enough to check per write)."""
    data = getattr(os.environ, "_data", None)
    return tuple(data.items()) if isinstance(data, dict) else tuple(os.environ.items())


_env_cache: tuple[tuple, set[str]] | None = None


def _env_secrets() -> set[str]:
    """Key-like environment values and their encoded forms; recomputed whenever the environment changed."""
    global _env_cache
    snapshot = _env_snapshot()
    cached = _env_cache
    if cached is not None and cached[0] == snapshot:
        return cached[1]
    values: set[str] = set()
    for name, value in os.environ.items():
        if not _is_secret(value):
            continue
        if name in KEY_ENV_VARS or (_ENV_NAME.search(name) and len(value) >= _SHORT):
            values |= _encoded_forms(value)
    for name in URL_ENV_VARS:
        for url in split_urls(os.environ.get(name)):
            values |= url_secrets(url)
    _env_cache = (snapshot, values)
    return values


def known_secrets() -> list[str]:
    """Registered values and key-like environment variables (and their encoded forms), longest
    first (a key may contain another)."""
    with _lock:
        values = set(_registered)
    values |= _env_secrets()
    return sorted((v for v in values if _is_secret(v)), key=len, reverse=True)


_masker_cache: tuple[tuple, tuple[list[str], re.Pattern | None], tuple[str, ...]] | None = None


def _masker_and_forms() -> tuple[tuple[list[str], re.Pattern | None], tuple[str, ...]]:
    global _masker_cache
    key = (_generation, _env_snapshot())
    cached = _masker_cache
    if cached is not None and cached[0] == key:
        return cached[1], cached[2]
    secrets = tuple(known_secrets())
    long = [s for s in secrets if len(s) >= _SHORT]
    short = [s for s in secrets if len(s) < _SHORT]
    pattern = (
        re.compile(r"(?<![A-Za-z0-9])(?:" + "|".join(map(re.escape, short)) + r")(?![A-Za-z0-9])") if short else None
    )
    _masker_cache = (key, (long, pattern), secrets)
    return (long, pattern), secrets


def _masker() -> tuple[list[str], re.Pattern | None]:
    """(long secrets, replaced anywhere; one pattern for the short ones, matched as whole words)."""
    return _masker_and_forms()[0]


def _mask_known(text: str, long: list[str], short: re.Pattern | None) -> str:
    for secret in long:
        if secret in text:
            text = text.replace(secret, MASK)
    return short.sub(MASK, text) if short is not None else text


def redact_known(text: str) -> str:
    """Only the exact secret values (cheap, safe on model output and whole files)."""
    return _mask_known(text, *_masker())


def redact_data(data: Any) -> Any:
    """``data`` (JSON-like: dicts, lists, strings) with known secrets masked in every string, keys
    included: what a file is written from. Masking values, not the JSON text, never breaks the file
    (a key "1" is not masked in ``"limit": 1``) and finds a key JSON would escape."""
    long, short = _masker()
    if not long and short is None:
        return data

    # a container with nothing masked in it is returned as it is, not copied: results.json at
    # 100,000 samples is written without a second copy of its tree in memory
    def walk(value: Any) -> Any:
        if isinstance(value, str):
            return _mask_known(value, long, short)
        if isinstance(value, dict):
            items = [
                (walk(k) if isinstance(k, str) else k, v if k == "role" and isinstance(v, str) and v in _MESSAGE_ROLES else walk(v))
                for k, v in value.items()
            ]
            if all(new[0] is old[0] and new[1] is old[1] for new, old in zip(items, value.items())):
                return value
            return dict(items)
        if isinstance(value, (list, tuple)):
            walked = [walk(v) for v in value]
            return value if all(new is old for new, old in zip(walked, value)) else walked
        return value

    return walk(data)


def dumps_redacted(data: Any, dumps: Callable[[Any], str]) -> str:
    """``dumps(redact_data(data))`` for a JSON writer ``dumps``, walking ``data`` only when its text
    shows a secret: JSON escapes a string character by character, so a string holding a secret holds
    its escaped form in the text, and that form is one of the known ones (``_encoded_forms``). A
    record with nothing to mask (nearly all) is serialized once and never copied."""
    text = dumps(data)
    return dumps(redact_data(data)) if mentions_secret(text) else text


def mentions_secret(text: str) -> bool:
    """Whether ``text`` holds any known secret in any of its forms (raw, URL-, JSON-encoded); a
    JSON text that holds none has no string with a secret in it (see ``dumps_redacted``)."""
    return any(form in text for form in _masker_and_forms()[1])


def _mask_basic(m: re.Match) -> str:
    try:
        decoded = base64.b64decode(m.group(1), validate=True)
    except (binascii.Error, ValueError):
        return m.group(0)
    return m.group(0)[: m.start(1) - m.start(0)] + MASK if b":" in decoded else m.group(0)


def redact(text: object) -> str:
    """``str(text)`` with secret values and secret-shaped tokens masked (messages, logs, errors)."""
    text = redact_known(str(text))

    def mask(m: re.Match) -> str:
        if m.group(1) is not None:  # keep the "api_key=" part, mask the value
            return m.group(0)[: m.end(1) - m.start(0)] + MASK
        head = m.group(0).split()[0] if m.group(0).lower().startswith("bearer") else ""
        return f"{head} {MASK}" if head else MASK

    text = _SHAPES.sub(mask, text)
    text = _BASIC.sub(_mask_basic, text)
    text = _URL_USERINFO.sub(lambda m: f"{m.group(1)}{MASK}@", text)
    return _URL_QUERY_CREDENTIAL.sub(lambda m: m.group(1) + MASK, text)


def split_urls(value: str | None) -> list[str]:
    """``--base-url URL1,URL2`` -> its URLs (one URL -> a list of one; blanks kept, so they can be refused)."""
    if value is None:
        return []
    return [part.strip() for part in value.split(",")]


def _credential_params(query: str) -> list[tuple[str, str]]:
    """(name, value) of the query's parameters that carry a credential, as written."""
    found = []
    for part in query.split("&"):
        name, _, value = part.partition("=")
        if _CREDENTIAL_PARAM.search(unquote_plus(name)):
            found.append((name, value))
    return found


def url_secrets(url: str | None) -> set[str]:
    """The credentials ``url`` carries, in every form a request or a log line shows them: user and
    password (raw and decoded), the base64 ``user:pass`` of the Basic auth an HTTP client makes of
    them, the values of key parameters of its query and its fragment, the fragment itself."""
    try:
        parts = urlsplit(url or "")
    except ValueError:
        return set()
    values: set[str] = set()
    if "@" in parts.netloc:
        userinfo = parts.netloc.rpartition("@")[0]
        user, _, password = userinfo.partition(":")
        # beside a password the user name is an identity, not a credential (masking "user" everywhere
        # would rewrite every transcript); alone, it is a token given as the user
        for raw in (password,) if _is_secret(password) else (user,):
            if _is_secret(raw):
                values |= _encoded_forms(raw) | _encoded_forms(unquote(raw))
        pair = f"{unquote(user)}:{unquote(password)}".encode()
        values.add(base64.b64encode(pair).decode())
    for _, raw in _credential_params(parts.query) + _credential_params(parts.fragment):
        if _is_secret(raw):
            values |= _encoded_forms(raw) | _encoded_forms(unquote_plus(raw))
    if len(parts.fragment) >= _SHORT:  # "#sk-..." holds no name=value to tell a key by
        values |= _encoded_forms(parts.fragment)
    return {v for v in values if _is_secret(v)}


def http_url_parts(url: str | None):
    """``url`` taken apart (``urllib.parse.SplitResult``) where it is an http(s) URL with a host and
    a numeric port if any; None otherwise (the shape every endpoint option must have)."""
    try:
        parts = urlsplit(url or "")
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError:
        return None
    return parts if parts.scheme in ("http", "https") and parts.hostname else None


def url_credential_problem(url: str | None) -> str | None:
    """What credential ``url`` carries, said in a few words (None: none). The harness refuses such
    a URL: an HTTP client sends a user:password as Basic auth in place of the API key, and a key in
    the query would be written with every URL the run records."""
    try:
        parts = urlsplit(url or "")
    except ValueError:
        return None
    if "@" in parts.netloc:
        return "a user or password (it would be sent as Basic auth in place of the API key)"
    names = [unquote_plus(name) for name, _ in _credential_params(parts.query)]
    if names:
        return f"a key in its query ({', '.join(names)})"
    if "#" in (url or ""):
        # never sent to a server (so no key it holds would reach one), but recorded with the URL,
        # and the request paths an SDK appends would land inside it
        return "a fragment (#...: a URL's fragment is never sent to the server)"
    return None


def _strip_one(url: str) -> str:
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:  # not a URL one can take apart: cut what looks like a credential
        return _URL_QUERY_CREDENTIAL.sub(lambda m: m.group(1) + MASK, _URL_USERINFO.sub(r"\1", url))
    netloc = parts.netloc
    if "@" in netloc:
        host = parts.hostname or ""
        if ":" in host:  # IPv6 literal
            host = f"[{host}]"
        netloc = f"{host}:{port}" if port else host
    query = parts.query
    if _credential_params(query):
        kept = [p for p in query.split("&") if p and not _CREDENTIAL_PARAM.search(unquote_plus(p.partition("=")[0]))]
        query = "&".join(kept)
    # a fragment is never sent to a server: nothing of it is recorded (it may hold a "#token=")
    if netloc == parts.netloc and query == parts.query and "#" not in url:
        return url
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))


def strip_credentials(url: str | None) -> str | None:
    """``http://user:pass@host/v1?api_key=K&x=1#token=T`` -> ``http://host/v1?x=1``: what is recorded,
    hashed and printed. A comma list of URLs (several servers) is stripped URL by URL."""
    if not url:
        return url
    if "," in url:
        return ",".join(_strip_one(part.strip()) for part in url.split(","))
    return _strip_one(url)


def register_url_credentials(url: str | None) -> None:
    for part in split_urls(url):
        for value in url_secrets(part):
            register_secret(value)


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
    "KEY_ENV_VARS",
    "MASK",
    "RedactingFilter",
    "URL_ENV_VARS",
    "install_log_filter",
    "known_secrets",
    "redact",
    "redact_data",
    "redact_known",
    "register_secret",
    "register_url_credentials",
    "split_urls",
    "strip_credentials",
    "url_credential_problem",
    "url_secrets",
]
