"""Model backends. ``create_backend("local/smollm2", options)`` picks the backend by prefix.

A model is ``PREFIX/NAME``: PREFIX is a backend name (``harness list backends``: built in, or an
installed package's ``harness.backends`` entry point) or a reference, ``FILE.py:Class/NAME`` or
``package.module:Class/NAME``; NAME is handed to the backend.
"""

from __future__ import annotations

from harness.errors import HarnessError, ModelError
from harness.models.base import (
    BACKENDS,
    BackendOptions,
    GenerationParams,
    ModelBackend,
    ModelResponse,
)
from harness.registry import Entry, split_reference

DEFAULT_MODEL = "local/smollm2"
# its answer length unless --max-tokens is given (measured: README "Answer length"); other models: 512
DEFAULT_MODEL_MAX_TOKENS = 128


def parse_model(spec: str | None) -> tuple[str, str]:
    """``PREFIX/NAME`` -> (PREFIX or reference, NAME)."""
    spec = (spec or DEFAULT_MODEL).strip()
    ref = split_reference(spec)
    if ref is not None and ref[1].startswith("/"):
        prefix, rest = ref[0], ref[1][1:]
    else:
        prefix, _, rest = spec.partition("/")
    if not prefix or not rest:
        known = ", ".join(BACKENDS.names())
        raise ModelError(f"model {spec!r} must look like PREFIX/NAME (backends: {known}); e.g. {DEFAULT_MODEL}")
    return prefix, rest


def resolve_backend(spec: str | None) -> tuple[Entry[type[ModelBackend]], str]:
    prefix, rest = parse_model(spec)
    try:
        entry = BACKENDS.resolve(prefix)
    except ModelError:
        raise
    except HarnessError as exc:  # the registry's one-line error, as a model error
        raise ModelError(f"{exc} in {spec!r}") from None
    if entry.source != "builtin" or not getattr(entry.obj, "prefix", None):
        entry.obj.prefix = entry.name
    return entry, rest


def create_backend(spec: str | None, options: BackendOptions | None = None) -> ModelBackend:
    entry, rest = resolve_backend(spec)
    backend = entry.obj(rest, options or BackendOptions())
    backend.plugin = entry.record()
    if backend.options.batch:  # --batch: answered through the provider's batch interface
        from harness.models.batch import BatchBackend

        return BatchBackend(backend)
    return backend


__all__ = [
    "DEFAULT_MODEL",
    "DEFAULT_MODEL_MAX_TOKENS",
    "BackendOptions",
    "GenerationParams",
    "ModelBackend",
    "ModelResponse",
    "create_backend",
    "parse_model",
    "resolve_backend",
]
