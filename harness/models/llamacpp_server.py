"""``llamacpp-server/PATH.gguf`` (or ``llamacpp-server/smollm2``): llama-cpp-python's OpenAI-compatible
server, launched as a child process on a free loopback port and stopped on close.

The server is llama-cpp-python's ``llama_cpp.server`` from this interpreter (``pip install
'llama-cpp-python[server]'``), started through ``python -m harness.models.llama_child server`` so that
``--weight-repack`` reaches the model it builds. If the server process dies (a segfault in llama.cpp),
the next request fails at once with ``ProcessDiedError`` (its signal and log), not after retries. ``n_ctx`` is ``--context-size`` when given, else the context length the
model was trained with, read from the GGUF header (pure Python, no weights loaded). The model's own
chat template is used unless ``--server-arg=--chat_format --server-arg=NAME`` says otherwise.
Tokens are counted by the server itself (``POST /extras/tokenize``).

Threads: ``--n-threads`` or every core this process may use (the server's own default is half of
them), for generation and prompt processing alike. Slots: llama-cpp-python's server (0.3.x) has
no parallel slots, it holds one lock around the model, so it runs one request at a time; more
connections only queue there (``server_slots()`` says so and the runner prints it).
"""

from __future__ import annotations

import importlib.util
import os
import secrets
import sys
from pathlib import Path
from typing import Any

import httpx

from harness.errors import ModelError
from harness.models.base import available_cores, register_backend
from harness.models.gguf import gguf_trained_context
from harness.models.http_reply import loads_reply
from harness.models.launcher import ServerLauncher
from harness.models.llama_child import repack_identity, reported_weight_repack
from harness.models.openai_compat import OpenAICompatibleBackend
from harness.redact import register_secret

FALLBACK_N_CTX = 4096
SERVER_SLOTS = 1  # llama_cpp.server serializes requests (one global lock, no n_parallel option)



def resolve_model_file(model: str) -> Path:
    """A ``.gguf`` path (resolved) or a packaged alias such as ``smollm2``."""
    if model.endswith(".gguf") or os.sep in model or model.startswith((".", "~")):
        path = Path(model).expanduser()
        if not path.is_file():
            raise ModelError(f"model file not found: {path} (llamacpp-server wants a .gguf file or 'smollm2')")
        return path.resolve()
    from harness.models.local import packaged_model_path

    return packaged_model_path(model).resolve()


def _flag_value(args: list[str], flag: str) -> str | None:
    """The value given to ``flag`` (``--flag V`` or ``--flag=V``; the last one wins, as in argparse)."""
    value = None
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith(flag + "="):
            value = arg.split("=", 1)[1]
    return value


# --------------------------------------------------------------------------- backend
@register_backend("llamacpp-server")
class LlamaCppServerBackend(OpenAICompatibleBackend):
    """llama-cpp-python's server, launched here. ``options.base_url`` is not used: the server is
    always ours (use the ``vllm`` or ``openai`` backend with ``--base-url`` to attach elsewhere)."""

    supports_auto_tool_choice = False
    bills_per_token = False  # the user's own hardware

    label = "llama.cpp server"

    def __init__(self, model, options):
        super().__init__(model, options)
        self.path = resolve_model_file(model)
        self.base_url = None  # set once launched
        self.launcher: ServerLauncher | None = None
        self._api_key = secrets.token_hex(16)  # keeps other local users off our server
        register_secret(self._api_key)  # masked as vLLM's is, should the server ever echo it
        self._n_ctx: int | None = None
        self._tokenize_overhead: int | None = None
        self._weight_repack: dict[str, Any] | None = None  # as the server's process decided it

    # facts ---------------------------------------------------------------------
    def n_ctx(self) -> int:
        """The ``--n_ctx`` the server gets (explicit override, server arg, trained length, 4096)."""
        if self._n_ctx is None:
            from_args = _flag_value(list(self.options.server_args), "--n_ctx")
            if from_args is not None:
                self._n_ctx = int(from_args)
            elif self.options.context_size:
                self._n_ctx = int(self.options.context_size)
            else:
                self._n_ctx = gguf_trained_context(self.path) or FALLBACK_N_CTX
        return self._n_ctx

    def max_context_size(self) -> int | None:
        return gguf_trained_context(self.path)

    def context_size(self) -> int | None:
        return self.n_ctx()

    def api_key(self) -> str:
        return self._api_key

    def request_model(self) -> str:
        return str(self.path)

    def command(self, port: int) -> list[str]:
        # llama_cpp.server behind harness.models.llama_child, which applies --weight-repack to the
        # model the server builds (llama_cpp.Llama has no parameter for it); --parent: SIGKILL with
        # the run even when the launcher's own SIGTERM-on-parent-death is not set (started off the
        # main thread) or is ignored
        argv = [
            sys.executable, "-m", "harness.models.llama_child", "server",
            "--weight-repack", self.options.weight_repack, "--parent", str(os.getpid()), "--",
            "--model", str(self.path),
            "--host", "127.0.0.1",
            "--port", str(port),
            "--n_ctx", str(self.n_ctx()),
        ]  # fmt: skip
        threads = str(self.n_threads())
        argv += ["--n_threads", threads, "--n_threads_batch", threads]
        return argv + list(self.options.server_args)

    def n_threads(self) -> int:
        """``--n-threads``, else every available core; a ``--server-arg=--n_threads`` given wins (last flag)."""
        from_args = _flag_value(list(self.options.server_args), "--n_threads")
        if from_args is not None and from_args.lstrip("-").isdigit():
            return int(from_args)
        return self.options.n_threads or available_cores()

    def server_slots(self) -> int:
        return SERVER_SLOTS

    # lifecycle -----------------------------------------------------------------
    async def start(self) -> None:
        if self.launcher is not None and self.launcher.running():
            return
        # Fail here with a clear message rather than in the child (without importing llama_cpp here).
        missing = [m for m in ("llama_cpp", "uvicorn", "fastapi", "sse_starlette", "pydantic_settings",
                               "starlette_context") if importlib.util.find_spec(m) is None]  # fmt: skip
        if missing:
            raise ModelError(
                f"llamacpp-server needs llama-cpp-python with its server extra "
                f"(missing: {', '.join(missing)}): pip install 'llama-cpp-python[server]'"
            )
        self.launcher = ServerLauncher(
            self.command,
            name="llama-cpp-server",
            log_dir=self.log_dir,
            ready_path="/v1/models",
            startup_timeout=self.options.startup_timeout,
            headers={"Authorization": f"Bearer {self._api_key}"},
            unset_env=("HOST", "PORT", "CONFIG_FILE", "API_KEY", "MODEL"),
            # the key in the server's environment, not its argv: any local user reads a command line
            # (ps, /proc/PID/cmdline), only its owner /proc/PID/environ. llama-cpp-python's server reads
            # it there: ServerSettings.api_key, a pydantic-settings BaseSettings field with no prefix
            # (abetlen/llama-cpp-python llama_cpp/server/settings.py, commit 3dcbc1da; 0.3.36 installed)
            env={"API_KEY": self._api_key},
            grace_period=10.0,
            redact=(self._api_key,),
        )
        await self.launcher.start()
        self.base_url = self.launcher.base_url
        self._weight_repack = reported_weight_repack(self.launcher.log_path)

    async def close(self) -> None:
        await super().close()
        launcher, self.launcher = self.launcher, None
        if launcher is not None:
            await launcher.close()

    # tokens --------------------------------------------------------------------
    def _tokenize(self, text: str) -> list[int]:
        died = self.launcher.exit_error(self.server_process_name()) if self.launcher is not None else None
        if died is not None:
            raise died
        if self.launcher is None or not self.launcher.running():
            raise ModelError("llamacpp-server: count_tokens needs the server; call start() first")
        url = self.launcher.url + "/extras/tokenize"
        try:
            resp = httpx.post(
                url,
                json={"input": text},
                headers={"Authorization": f"Bearer {self._api_key}"},
                timeout=self.options.request_timeout,
                trust_env=False,
            )
            resp.raise_for_status()
            return list(loads_reply(resp.content)["tokens"])
        except (httpx.HTTPError, KeyError, ValueError) as exc:
            if isinstance(exc, httpx.TransportError):
                died = self.launcher.exit_error_within(self.server_process_name())
                if died is not None:
                    raise died from None
            raise ModelError(f"cannot tokenize with the llama.cpp server at {url}: {exc}") from None

    def count_tokens(self, text: str) -> int:
        """Tokens of ``text`` by the model's tokenizer, without the BOS/EOS the server adds."""
        if self._tokenize_overhead is None:
            self._tokenize_overhead = len(self._tokenize(""))
        return max(len(self._tokenize(text)) - self._tokenize_overhead, 0)

    def tokenizer_name(self) -> str:
        return f"gguf:{self.path.name}"

    def cache_identity(self) -> dict[str, Any]:
        return {
            "backend": self.prefix,
            "model": str(self.path),
            "size": self.path.stat().st_size,
            "server_args": list(self.options.server_args),
        } | repack_identity(self._weight_repack)

    def describe(self) -> dict[str, Any]:
        info = super().describe()
        info.update(
            {
                "model_path": str(self.path),
                "base_url": self.base_url,
                "server": "llama_cpp.server",
                "n_ctx": self.n_ctx(),
                "n_threads": self.n_threads(),
                "server_slots": SERVER_SLOTS,
                "server_args": list(self.options.server_args),
            }
        )
        if self._weight_repack is not None:
            info["weight_repack"] = self._weight_repack
        if self.launcher is not None:
            info["pid"] = self.launcher.pid
            info["log"] = str(self.launcher.log_path) if self.launcher.log_path else None
        try:
            import importlib.metadata

            info["llama_cpp_python"] = importlib.metadata.version("llama-cpp-python")
        except Exception:
            pass
        return info


__all__ = ["LlamaCppServerBackend", "resolve_model_file"]
