"""Model backends. ``create_backend("local/smollm2", options)`` picks the backend by prefix."""

from __future__ import annotations

import importlib

from harness.errors import ModelError
from harness.models.base import (
    BACKENDS,
    BackendOptions,
    GenerationParams,
    ModelBackend,
    ModelResponse,
)

DEFAULT_MODEL = "local/smollm2"

# prefix -> module that registers it. Only the requested one is imported, so a backend's SDK
# matters only when that backend is used.
BACKEND_MODULES = {
    "local": "harness.models.local",
    "llamacpp-server": "harness.models.llamacpp_server",
    "vllm": "harness.models.vllm",
    "openai": "harness.models.openai_api",
    "anthropic": "harness.models.anthropic_api",
}


def create_backend(spec: str | None, options: BackendOptions | None = None) -> ModelBackend:
    spec = spec or DEFAULT_MODEL
    prefix, sep, rest = spec.partition("/")
    known = ", ".join(BACKEND_MODULES)
    if not sep or not rest:
        raise ModelError(f"model {spec!r} must look like PREFIX/NAME (backends: {known}); e.g. {DEFAULT_MODEL}")
    if prefix in BACKEND_MODULES:
        importlib.import_module(BACKEND_MODULES[prefix])
    elif prefix not in BACKENDS:  # backends registered by plugins or tests need no module entry
        raise ModelError(f"unknown model backend {prefix!r} in {spec!r} (known: {known})")
    return BACKENDS.get(prefix)(rest, options or BackendOptions())


__all__ = ["DEFAULT_MODEL", "BackendOptions", "GenerationParams", "ModelBackend", "ModelResponse", "create_backend"]
