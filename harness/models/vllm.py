"""``vllm/HF_ID_OR_PATH``: a vLLM OpenAI-compatible server, launched here or attached to.

With ``--base-url URL`` the harness attaches to a running server (API key from ``VLLM_API_KEY``,
else none). Otherwise it runs ``vllm serve MODEL --host 127.0.0.1 --port P [--max-model-len N]
--seed 0 [server args]`` through the shared launcher (needs vLLM and a GPU here).

The context size is the ``max_model_len`` the server reports in ``/v1/models``; tokens are counted
by the server's ``POST /tokenize`` (the model's own tokenizer, without special tokens).

Parsers (launched servers, and ``vllm run-batch``): when the strategy calls tools natively (the runner
sets ``native_tools``), the server gets ``--enable-auto-tool-choice --tool-call-parser NAME``, NAME from
``--tool-parser`` else the model family's ``tool_parser`` in ``harness/models/model_facts.yaml``; a
model with neither is refused before anything is launched. A family that thinks gets
``--reasoning-parser NAME`` (or ``--reasoning-parser``'s); ``none`` turns either off, and a flag already
in ``--server-arg`` is left as given. An attached server that refuses tool_choice "auto" stops the run
with one line naming the flags it needs.
"""

from __future__ import annotations

import functools
import os
import secrets
import shutil
import sys
from pathlib import Path
from typing import Any

import httpx
import yaml

from harness.errors import ContextOverflowError, ModelError
from harness.models.base import register_backend
from harness.models.facts import ModelFacts, default_table, facts_for
from harness.models.http_reply import loads_reply
from harness.models.launcher import ServerLauncher, api_base, attach, server_root
from harness.models.openai_compat import OpenAICompatibleBackend
from harness.redact import register_secret, strip_credentials
from harness._version import pip_install

NOT_INSTALLED = (
    f"vLLM is not installed here: {pip_install('vllm')} on a machine with a GPU, "
    "or pass --base-url URL to attach to a running server"
)


TOOL_FLAGS = ("--enable-auto-tool-choice", "--tool-call-parser")
REASONING_FLAG = "--reasoning-parser"


@functools.lru_cache(maxsize=4)
def _vllm_section(path: str) -> dict[str, Any]:
    try:
        data = yaml.safe_load(Path(path).read_bytes())
    except (OSError, yaml.YAMLError):  # the table itself is checked (one line) where it is loaded
        return {}
    section = data.get("vllm") if isinstance(data, dict) else None
    return section if isinstance(section, dict) else {}


def vllm_facts() -> dict[str, Any]:
    """The ``vllm:`` section of the facts table in force: the parser names vLLM registers and the texts
    it answers with (each with its source there); empty where a replacement table has none."""
    return _vllm_section(default_table().path)


def _chosen_parser(
    args: list[str], flag: str, option: str | None, option_name: str, from_facts: str | None, entry: str | None
) -> dict[str, Any] | None:
    """A parser as given in --server-arg, by the option (``none``: none), or by the facts entry; None
    where nothing names one."""
    given = _named_flag(args, flag)
    if isinstance(given, str):
        return {"name": given, "source": "--server-arg"}
    if option == "none":
        return {"name": None, "source": f"{option_name} none"}
    if option:
        return {"name": option, "source": option_name}
    if from_facts:
        return {"name": from_facts, "source": entry}
    return None


def _named_flag(args: list[str], flag: str) -> str | bool | None:
    """``flag``'s value in ``args`` (``--flag V`` or ``--flag=V``; vLLM's argument parser also reads
    ``--flag_name`` as ``--flag-name``), True for a flag given bare, None where it is absent."""
    for i, arg in enumerate(args):
        name, eq, value = arg.partition("=")
        if not name.startswith("--") or name.replace("_", "-") != flag:
            continue
        if eq:
            return value
        following = args[i + 1] if i + 1 < len(args) else None
        return following if following is not None and not following.startswith("--") else True
    return None


def _parser_list(key: str) -> str:
    names = vllm_facts().get(key) or []
    return ", ".join(str(n) for n in names) if names else "see vLLM's docs"


def find_vllm_executable() -> str | None:
    """``vllm`` on PATH, or next to this interpreter (a virtualenv that is not activated)."""
    found = shutil.which("vllm")
    if found:
        return found
    candidate = Path(sys.executable).parent / "vllm"
    return str(candidate) if candidate.is_file() and os.access(candidate, os.X_OK) else None


@register_backend("vllm")
class VLLMBackend(OpenAICompatibleBackend):
    label = "vLLM server"
    bills_per_token = False  # the user's own hardware

    def __init__(self, model, options):
        super().__init__(model, options)
        self.launcher: ServerLauncher | None = None
        self.base_url = api_base(options.base_url) if options.base_url else None
        if len(options.base_urls) > 1:
            self.use_servers([api_base(url) for url in options.base_urls])
        self._key = os.environ.get("VLLM_API_KEY") if options.base_url else secrets.token_hex(16)
        register_secret(self._key)
        self._served_id: str | None = None
        self._max_model_len: int | None = None
        self._version: str | None = None
        self._native_tools = False
        self.facts: ModelFacts | None = facts_for("vllm", model)

    # parsers -------------------------------------------------------------------
    @property
    def native_tools(self) -> bool:
        """Whether the run's strategy calls tools natively (set by the runner before ``start()``)."""
        return self._native_tools

    @native_tools.setter
    def native_tools(self, value: bool) -> None:
        self._native_tools = bool(value)
        if self._native_tools and not self.options.base_url:
            self.parsers()  # a model without a known tool parser is refused now, before anything launches

    def parsers(self, strict: bool = True) -> dict[str, dict[str, Any]]:
        """The tool-call and reasoning parsers a launched server (or run-batch) gets: per kind, ``name``
        (None: none), ``source`` (--tool-parser/--reasoning-parser, the facts entry, --server-arg) and
        ``flags`` to add. ``strict``: a native-tools run with no parser known raises the one-line refusal."""
        args = list(self.options.server_args)
        entry = f"model facts {self.facts.entry}" if self.facts else None
        out: dict[str, dict[str, Any]] = {}

        facts = self.facts
        tool = _chosen_parser(
            args, TOOL_FLAGS[1], self.options.tool_parser, "--tool-parser",
            facts.tool_parser if self.native_tools and facts else None, entry,
        )  # fmt: skip
        if tool is None:
            if self.native_tools and strict:
                raise ModelError(self._no_tool_parser())
            tool = {"name": None, "source": None}
        tool["flags"] = []
        if tool["name"] is not None:
            if _named_flag(args, TOOL_FLAGS[0]) is None:
                tool["flags"].append(TOOL_FLAGS[0])
            if tool["source"] != "--server-arg":
                tool["flags"] += [TOOL_FLAGS[1], tool["name"]]
        out["tool_parser"] = tool

        thinks = facts is not None and facts.thinking != "never"
        reasoning = _chosen_parser(
            args, REASONING_FLAG, self.options.reasoning_parser, "--reasoning-parser",
            facts.reasoning_parser if thinks else None, entry,
        ) or {"name": None, "source": None}  # fmt: skip
        add = reasoning["name"] is not None and reasoning["source"] != "--server-arg"
        reasoning["flags"] = [REASONING_FLAG, reasoning["name"]] if add else []
        out["reasoning_parser"] = reasoning
        return out

    def parser_args(self) -> list[str]:
        """The parser flags to add to the launch command (see ``parsers``)."""
        found = self.parsers()
        return found["tool_parser"]["flags"] + found["reasoning_parser"]["flags"]

    def _no_tool_parser(self) -> str:
        family = f" (family {self.facts.entry} names none)" if self.facts else " (no model family matches it)"
        return (
            f"vllm/{self.model}: the strategy calls tools natively, which needs vLLM's --tool-call-parser, and "
            f"the model facts ({Path(default_table().path).name}) know no parser for this model{family}: pass "
            f"--tool-parser NAME, one of vLLM's: {_parser_list('tool_parsers')}"
        )

    def _no_auto_tool_choice(self, url: str | None) -> str:
        name = self.facts.tool_parser if self.facts and self.facts.tool_parser else None
        parser = name or f"NAME (one of vLLM's: {_parser_list('tool_parsers')})"
        where = f"the vLLM server at {url}" if url else f"the vLLM server for {self.model}"
        if self.launcher is not None:  # launched here with --tool-parser none
            return f'{where} was launched without a tool-call parser and refuses tool_choice "auto": pass --tool-parser {parser}'
        return (
            f"{where} refuses tool_choice \"auto\" (it was started without tool calling): start vLLM with "
            f"--enable-auto-tool-choice --tool-call-parser {parser}"
        )

    # hooks ---------------------------------------------------------------------
    def api_key(self) -> str:
        return self._key or "EMPTY"

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._key}"} if self._key else {}

    def request_model(self) -> str:
        return self._served_id or self.model

    def command(self, port: int, executable: str) -> list[str]:
        # no --api-key: the key goes in VLLM_API_KEY (start), where no other local user can read it
        argv = [executable, "serve", self.model, "--host", "127.0.0.1", "--port", str(port)]
        if self.options.context_size:
            argv += ["--max-model-len", str(self.options.context_size)]
        if "--seed" not in self.options.server_args:
            argv += ["--seed", "0"]  # the engine seed, for repeatable sampling
        return argv + self.parser_args() + list(self.options.server_args)

    async def _generate(self, messages, params, tools=None, tool_choice=None):
        try:
            return await super()._generate(messages, params, tools, tool_choice)
        except ContextOverflowError:
            raise
        except ModelError as exc:
            text = str(exc)
            said = vllm_facts()
            refused = said.get("auto_tool_choice_refused")
            if tools and isinstance(refused, str) and refused in text:
                url = strip_credentials(self.options.base_url) if self.options.base_url else None
                raise ModelError(self._no_auto_tool_choice(url)) from None
            # vLLM's engine says a prompt over max_model_len in words the shared check does not know
            if any(isinstance(m, str) and m in text for m in said.get("context_overflow") or []):
                raise ContextOverflowError(f"prompt exceeds the context of {self.model}: {text}") from None
            raise

    # lifecycle -----------------------------------------------------------------
    async def start(self) -> None:
        if self._served_id is not None and (self.launcher is None or self.launcher.running()):
            return
        if self.pool is not None:  # attached to several servers: each must serve the model
            await self._attach_all()
            return
        if self.options.base_url:
            url = self.options.base_url
        else:
            self.parsers()  # refused before the launch, as when the runner set native_tools
            executable = find_vllm_executable()
            if executable is None:
                raise ModelError(NOT_INSTALLED)
            self.launcher = ServerLauncher(
                lambda port: self.command(port, executable),
                name="vllm",
                log_dir=self.log_dir,
                ready_path="/v1/models",
                startup_timeout=self.options.startup_timeout,
                headers=self._headers(),
                unset_env=("VLLM_API_KEY", "VLLM_PORT", "VLLM_HOST_IP"),
                # the key in the environment, not argv (ps, /proc/PID/cmdline show argv to any local
                # user): vLLM takes ``args.api_key or [envs.VLLM_API_KEY]`` (vllm-project/vllm
                # vllm/entrypoints/openai/api_server.py build_app, commit 0001948b; vllm/envs.py
                # "VLLM_API_KEY", commit 001f69f8)
                env={"VLLM_API_KEY": self._key} if self._key else None,
                grace_period=30.0,  # vLLM frees GPU memory on SIGTERM; give it time
                redact=(self._key or "",),
            )
            await self.launcher.start()
            url = self.launcher.url
            self.base_url = self.launcher.base_url
        models = await attach(url, api_key=self._key, timeout=30.0, what="vLLM server")
        self._pick_model(models, strip_credentials(url))
        self._version = await self._fetch_version(url)

    async def _attach_all(self) -> None:
        sizes = []
        for endpoint in self.pool.endpoints:
            url = endpoint.url
            models = await attach(url, api_key=self._key, timeout=30.0, what="vLLM server")
            served = self._served_id
            self._pick_model(models, strip_credentials(url))
            if served is not None and served != self._served_id:
                raise ModelError(
                    f"the vLLM servers serve {self.model!r} under different names ({served}, {self._served_id}); "
                    "start them with the same --served-model-name"
                )
            sizes.append(self._max_model_len)
        # the smallest window fits every server
        known = [s for s in sizes if s]
        self._max_model_len = min(known) if known else None
        self._version = await self._fetch_version(self.pool.endpoints[0].url)

    def _pick_model(self, listing: dict[str, Any], url: str) -> None:
        entries = [m for m in (listing.get("data") or []) if isinstance(m, dict)]
        # vLLM lists the served name as ``id`` and the weights it loaded as ``root``.
        match = next((m for m in entries if m.get("id") == self.model), None) or next(
            (m for m in entries if m.get("root") == self.model), None
        )
        if match is None:
            served = ", ".join(str(m.get("id")) for m in entries) or "nothing"
            raise ModelError(
                f"the vLLM server at {url} serves {served}, not {self.model!r}; use vllm/NAME with one of those"
            )
        self._served_id = str(match["id"])
        value = match.get("max_model_len")
        self._max_model_len = int(value) if value else None

    async def _fetch_version(self, url: str) -> str | None:
        try:
            async with httpx.AsyncClient(timeout=5.0, headers=self._headers(), trust_env=False) as client:
                resp = await client.get(server_root(url) + "/version")
            return loads_reply(resp.content).get("version") if resp.status_code == 200 else None
        except (httpx.HTTPError, ValueError, AttributeError):
            return None

    async def close(self) -> None:
        await super().close()
        launcher, self.launcher = self.launcher, None
        if launcher is not None:
            await launcher.close()
            self._served_id = None

    # facts ---------------------------------------------------------------------
    def context_size(self) -> int | None:
        return self._max_model_len or self.options.context_size

    def count_tokens(self, text: str) -> int:
        base = self.pool.first_in_service().url if self.pool is not None else self.base_url
        if base is None or self._served_id is None:
            raise ModelError("vllm: count_tokens needs the server; call start() first")
        url = server_root(base) + "/tokenize"
        try:
            resp = httpx.post(
                url,
                json={"model": self._served_id, "prompt": text, "add_special_tokens": False},
                headers=self._headers(),
                timeout=self.options.request_timeout,
                trust_env=False,
            )
            resp.raise_for_status()
            data = loads_reply(resp.content)
            return int(data["count"]) if "count" in data else len(data["tokens"])
        except (httpx.HTTPError, KeyError, ValueError, TypeError) as exc:
            raise ModelError(f"cannot tokenize with the vLLM server at {strip_credentials(url)}: {exc}") from None

    def tokenizer_name(self) -> str:
        return f"hf:{self.model}"

    def endpoint(self) -> str | None:
        # attached: the servers named; launched: none to name (its identity is the model and server args)
        return strip_credentials(self.options.base_url)

    def cache_identity(self) -> dict[str, Any]:
        identity: dict[str, Any] = {"backend": self.prefix, "model": self.model}
        if self.options.base_url:
            identity["base_url"] = strip_credentials(self.options.base_url)
        else:
            identity["server_args"] = list(self.options.server_args)
            # the parsers decide what comes back (reasoning split off, tool calls read): part of the key
            for kind, found in self.parsers(strict=False).items():
                if found["name"] is not None and found["source"] != "--server-arg":
                    identity[kind] = found["name"]
        return identity

    def describe(self) -> dict[str, Any]:
        info = super().describe()
        info.update(
            {
                "base_url": strip_credentials(self.base_url or self.options.base_url),
                "served_model": self._served_id,
                "vllm_version": self._version,
            }
        )
        info["mode"] = "attached" if self.options.base_url else "launched"
        if self.launcher is not None:
            info["pid"] = self.launcher.pid
            info["log"] = str(self.launcher.log_path) if self.launcher.log_path else None
            info["server_args"] = list(self.options.server_args)
        if not self.options.base_url:
            for kind, found in self.parsers(strict=False).items():
                info[kind] = {k: found[k] for k in ("name", "source")}
        if self.facts is not None:
            info["facts"] = self.facts.describe()
        return info


__all__ = ["NOT_INSTALLED", "VLLMBackend", "find_vllm_executable"]
