"""A scripted model backend: ``--model scripted/NAME`` answers by a script, not a language model.

For dry runs of a configuration, CI of plugins, and tests of the harness itself. NAME picks the script:

- ``echo``: the last non-empty line of the last user message;
- ``answer=TEXT``: always TEXT (``scripted/answer=Paris``);
- ``FILE.py:FUNCTION`` (or ``package.module:FUNCTION``): that function, loaded as any plugin file is
  (``harness.registry``); the file's path and sha256 are recorded (``model.script``) and its sha256
  is part of the run key and the cache key, so an edited script never resumes an old run;
- a name registered in-process with ``register_script(NAME, fn)`` (tests, notebooks).

A script is ``fn(messages, tools, tool_choice, params)``, plain or async, and returns
- a str: the reply;
- a dict with ``content`` and/or ``tool_calls`` (each ``{"name", "arguments", "id"?}``, arguments a
  dict or JSON text), optionally ``finish_reason`` and ``usage`` (``{"prompt_tokens", "completion_tokens"}``, and the
  prompt-cache counts ``cache_read_tokens``, ``cache_write_tokens``, and ``reasoning_tokens``, the hidden
  part of the completion: an empty ``content`` with ``finish_reason: "length"`` is a reasoning model
  that spent ``max_tokens`` thinking);
- a ``ModelResponse``, used as it is (its usage counted as below unless set);
or raises, and the request raises that (a ``TransientModelError`` is retried as for any backend).

Tokens are whitespace-separated words (``count_tokens(text) == len(text.split())``), so tests can
compute usage by hand: prompt tokens are the words of every message's text and tool-call name and
arguments (tool schemas not counted), completion tokens those of the reply. A str or dict reply
longer than ``params.max_tokens`` is cut there with finish_reason "length"; a prompt longer than the
context size (``BackendOptions.context_size``, default 4096) raises ``ContextOverflowError``, as a
server would. Every request (a copy of what was sent) is appended to ``backend.requests`` and to
the script's ``requests``, which is how a test reaches it when the harness made the backend.
"""

from __future__ import annotations

import copy
import inspect
import json
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from harness.errors import ContextOverflowError, HarnessError, ModelError
from harness.models.base import BackendOptions, GenerationParams, ModelBackend, ModelResponse, ToolCall, Usage
from harness.registry import is_reference, load_reference

DEFAULT_CONTEXT_SIZE = 4096
ANSWER_PREFIX = "answer="

Reply = str | dict | ModelResponse
# fn(messages, tools, tool_choice, params) -> Reply, or an awaitable of one
ScriptFn = Callable[
    [list[dict[str, Any]], list[dict[str, Any]] | None, Any, GenerationParams], Reply | Awaitable[Reply]
]


@dataclass(eq=False)
class Script:
    name: str
    fn: ScriptFn
    source: str = "registered"  # or "builtin", "file", "module" (a FILE.py:FUNCTION reference)
    requests: list[dict[str, Any]] = field(default_factory=list)
    plugin: dict[str, Any] = field(default_factory=dict)  # a reference's identity: file and sha256, or package

    def identity(self) -> str:
        """Names the code behind the answers (cache key, results.json); never an object id, which
        would differ per process and so defeat resuming. A file's by its content."""
        if self.source == "builtin":
            return f"builtin:{self.name}"
        if self.source in ("file", "module"):
            version = self.plugin.get("sha256") or f"{self.plugin.get('package')}=={self.plugin.get('version')}"
            return f"{self.source}:{self.name.rpartition(':')[2]}@{version}"
        fn = self.fn
        return f"registered:{getattr(fn, '__module__', '?')}:{getattr(fn, '__qualname__', type(fn).__qualname__)}"


_REGISTERED: dict[str, Script] = {}


def register_script(name: str, fn: ScriptFn) -> Script:
    """Make ``fn`` answer ``scripted/NAME``; returns the Script, whose ``requests`` records what is sent."""
    if not name or name != name.strip() or name == "echo" or name.startswith(ANSWER_PREFIX):
        raise ValueError(f"script name {name!r} is empty, padded or built in (echo, {ANSWER_PREFIX}TEXT)")
    existing = _REGISTERED.get(name)
    if existing is not None:
        if existing.fn is not fn:  # two tests or plugins claiming one name would answer for each other
            raise ValueError(f"script {name!r} registered twice")
        return existing
    _REGISTERED[name] = script = Script(name, fn)
    return script


def unregister_script(name: str) -> None:
    _REGISTERED.pop(name, None)


def last_user(messages: list[dict[str, Any]]) -> str:
    """The text of the last user message ("" if none): what most scripts answer."""
    for message in reversed(messages):
        if message.get("role") == "user":
            return _text(message.get("content"))
    return ""


def echo(messages, tools, tool_choice, params) -> str:
    lines = [line.strip() for line in last_user(messages).splitlines() if line.strip()]
    return lines[-1] if lines else ""


def find_script(name: str) -> Script:
    if name == "echo":
        return Script(name, echo, "builtin")
    if name.startswith(ANSWER_PREFIX):
        text = name[len(ANSWER_PREFIX) :]
        return Script(name, lambda *_: text, "builtin")
    if name in _REGISTERED:
        return _REGISTERED[name]
    if is_reference(name):
        return load_script(name)
    registered = ", ".join(sorted(_REGISTERED)) or "none"
    raise ModelError(
        f"unknown script {name!r} in scripted/{name} (built in: echo, {ANSWER_PREFIX}TEXT, FILE.py:FUNCTION; "
        f"registered: {registered})"
    )


def load_script(ref: str) -> Script:
    """``FILE.py:FUNCTION`` or ``package.module:FUNCTION`` as a script, loaded the way every plugin
    file is (``harness.registry.load_reference``: read again when its content changed)."""
    try:
        fn, source, identity = load_reference(ref, "script")
    except HarnessError as exc:
        raise ModelError(f"{exc} (in scripted/{ref})") from None
    if not callable(fn):
        raise ModelError(f"script {ref}: {type(fn).__name__} is not a function fn(messages, tools, tool_choice, params)")
    return Script(ref, fn, source, plugin=dict(identity))


class ScriptedBackend(ModelBackend):
    """Answers by a script (see the module docstring); describes itself as scripted, never as a model."""

    prefix = "scripted"
    bills_per_token = False  # no provider: free unless a price table prices it
    checks_usage = False  # a script's usage is the test's own figures, not a server's claim

    def __init__(self, model: str, options: BackendOptions):
        super().__init__(model, options)
        self.script = find_script(model)  # now, so an unknown name fails before a run starts
        self.requests: list[dict[str, Any]] = []

    async def _generate(
        self,
        messages: list[dict[str, Any]],
        params: GenerationParams,
        tools: list[dict[str, Any]] | None = None,
        tool_choice: Any = None,
    ) -> ModelResponse:
        # Copied: agents append to their transcripts after the call, and tests assert what was sent.
        request = {
            "messages": copy.deepcopy(messages),
            "tools": copy.deepcopy(tools),
            "tool_choice": copy.deepcopy(tool_choice),
            "params": params.model_copy(),
        }
        self.requests.append(request)
        self.script.requests.append(request)
        number = len(self.requests)
        prompt_tokens = self._prompt_tokens(messages)
        if prompt_tokens > self.context_size():
            raise ContextOverflowError(
                f"prompt of {prompt_tokens} tokens exceeds the context of scripted/{self.model} ({self.context_size()})"
            )
        reply = self.script.fn(messages, tools, tool_choice, params)
        if inspect.isawaitable(reply):
            reply = await reply
        return self._response(reply, prompt_tokens, params, number)

    def _response(self, reply: Any, prompt_tokens: int, params: GenerationParams, number: int) -> ModelResponse:
        if isinstance(reply, ModelResponse):
            response = reply.model_copy(deep=True)  # a script may hand back one object every time
            if "usage" not in reply.model_fields_set:
                response.usage = Usage(prompt_tokens=prompt_tokens, completion_tokens=self._completion_tokens(response))
            response.model = response.model or self.model
            return response
        if isinstance(reply, str):
            reply = {"content": reply}
        if not isinstance(reply, dict) or set(reply) - {"content", "tool_calls", "finish_reason", "usage"}:
            raise TypeError(
                f"script {self.script.name!r} returned {reply!r:.200}: expected a str, a ModelResponse or a dict "
                "of content, tool_calls, finish_reason, usage"
            )
        content = reply.get("content")
        calls = [_tool_call(call, f"call_{number}_{i}") for i, call in enumerate(reply.get("tool_calls") or [])]
        finish = reply.get("finish_reason")
        if content and finish is None:
            content, cut = _truncate(content, params.max_tokens)
            finish = "length" if cut else None
        response = ModelResponse(
            content=content,
            tool_calls=calls,
            finish_reason=finish or ("tool_calls" if calls else "stop"),
            model=self.model,
        )
        if reply.get("usage") is not None:
            response.usage = Usage.model_validate(reply["usage"])
        else:
            response.usage = Usage(prompt_tokens=prompt_tokens, completion_tokens=self._completion_tokens(response))
        return response

    def _prompt_tokens(self, messages: list[dict[str, Any]]) -> int:
        total = 0
        for message in messages:
            total += self.count_tokens(_text(message.get("content")))
            for call in message.get("tool_calls") or []:
                fn = call.get("function") or {}
                total += self.count_tokens(f"{fn.get('name', '')} {fn.get('arguments', '')}")
        return total

    def _completion_tokens(self, response: ModelResponse) -> int:
        calls = sum(self.count_tokens(f"{c.name} {c.arguments}") for c in response.tool_calls)
        return self.count_tokens(response.content or "") + calls

    # facts ---------------------------------------------------------------------
    def context_size(self) -> int:
        return self.options.context_size or DEFAULT_CONTEXT_SIZE

    def count_tokens(self, text: str) -> int:
        return len(text.split())

    def tokenizer_name(self) -> str:
        return "whitespace"

    def identity_facts(self) -> dict[str, Any]:
        """A script from a file or a package: its content (sha256) or version, in the run key."""
        keyed = {k: v for k, v in self.script.plugin.items() if k in ("package", "version", "sha256")}
        return {"script": keyed} if keyed else {}

    def cache_identity(self) -> dict[str, Any]:
        return {**super().cache_identity(), "script": self.script.identity()}

    def describe(self) -> dict[str, Any]:
        # Explicit, so results.json can never be read as a real model's.
        script = {"name": self.script.name, "source": self.script.source, "identity": self.script.identity()}
        return {
            **super().describe(),
            "scripted": True,
            "script": {**script, **self.script.plugin},
            "note": "scripted responses (harness.models.scripted), not a language model",
        }


def _text(content: Any) -> str:
    if isinstance(content, list):  # content parts
        return " ".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content or ""


def _tool_call(call: Any, default_id: str) -> ToolCall:
    if isinstance(call, ToolCall):
        return call
    if not isinstance(call, dict) or "name" not in call:
        raise TypeError(f"a scripted tool call needs a name and arguments, not {call!r:.200}")
    arguments = call.get("arguments", {})
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments)
    return ToolCall(id=call.get("id") or default_id, name=call["name"], arguments=arguments)


def _truncate(text: str, max_tokens: int) -> tuple[str, bool]:
    """``text`` cut after its ``max_tokens``-th word, keeping the layout before it."""
    for i, match in enumerate(re.finditer(r"\S+", text), start=1):
        if i == max_tokens:
            rest = text[match.end() :]
            return (text[: match.end()], True) if rest.strip() else (text, False)
    return text, False


__all__ = [
    "DEFAULT_CONTEXT_SIZE",
    "Script",
    "ScriptedBackend",
    "echo",
    "last_user",
    "load_script",
    "register_script",
    "unregister_script",
]
