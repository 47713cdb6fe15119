"""The processes that hold a llama.cpp model, apart from the run's own process, so that a crash in
native code (llama.cpp's AMX matrix multiply segfaults on some Intel CPUs, llama.cpp issue 20824)
ends only them and the run can say what died:

    python -m harness.models.llama_child worker --model F --n-ctx N --n-threads T --weight-repack auto --parent PID
    python -m harness.models.llama_child server --weight-repack auto -- <llama_cpp.server arguments>

``worker`` serves the ``local/`` backend over its stdin and a copy of its stdout (pickled messages,
see ``harness.models.local``); ``server`` is llama-cpp-python's OpenAI-compatible server for
``llamacpp-server/``. Both build the model with the weight-repack decision below applied.

Weight repacking: llama.cpp's "extra buffer types" (``llama_model_params.use_extra_bufts``) copy
weights into CPU-specific layouts at load: AMX tiles on Intel CPUs with AMX, 8x8 interleaved blocks
for Q4_0/Q4_K/... on AVX2 and NEON. ``llama_cpp.Llama`` does not expose the flag, so it is set on
the defaults ``Llama`` starts from. ``auto`` turns it off where AMX would be used (llama.cpp built
with AMX, or the CPU reports it) and leaves it on elsewhere, where it costs nothing and speeds
prompts of repackable models (benchmarks/local_model.py; docs/models.md, "Local models and crashes").

Only the standard library at module level: the decision is importable (and tested) without llama_cpp.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import queue
import re
import sys
import threading
from typing import Any

WEIGHT_REPACK_CHOICES = ("auto", "on", "off")
AMX_CPU_FLAGS = ("amx_int8", "amx_tile")
AMX_SYSTEM_INFO = "AMX_INT8 = 1"
REPORT_PREFIX = "harness weight repacking: "


def reported_weight_repack(log_path: str | os.PathLike[str] | None) -> dict[str, Any] | None:
    """The decision a child printed to its log (the last one, for a log appended to across starts)."""
    found = None
    try:
        with open(log_path or "", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.startswith(REPORT_PREFIX):
                    found = line[len(REPORT_PREFIX):]
    except OSError:
        return None
    try:
        return json.loads(found) if found else None
    except ValueError:
        return None


def repack_identity(decision: dict[str, Any] | None) -> dict[str, Any]:
    """For the response cache: answers made without the extra buffer types (rounded otherwise) are
    kept apart; with them (llama.cpp's default) the key is what it always was."""
    return {"extra_buffer_types": False} if decision and decision.get("extra_buffer_types") is False else {}


def read_cpu_flags(path: str = "/proc/cpuinfo") -> set[str]:
    """The CPU's feature flags as Linux reports them (empty where there is no /proc/cpuinfo)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.startswith(("flags", "Features")):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def resolve_weight_repack(setting: str, cpu_flags: set[str], system_info: str) -> tuple[bool, str]:
    """Whether llama.cpp's extra buffer types are on, and why: ``on``/``off`` as asked; ``auto`` is
    off when llama.cpp was built with AMX (its system info) or the CPU has AMX, on otherwise."""
    if setting not in WEIGHT_REPACK_CHOICES:
        raise ValueError(f"weight repack must be one of {', '.join(WEIGHT_REPACK_CHOICES)}, not {setting!r}")
    if setting != "auto":
        return setting == "on", f"--weight-repack {setting}"
    signs = []
    if AMX_SYSTEM_INFO in system_info:
        signs.append(f"llama.cpp reports {AMX_SYSTEM_INFO}")
    amx_flags = sorted(f for f in AMX_CPU_FLAGS if f in cpu_flags)
    if amx_flags:
        signs.append(f"the CPU has {', '.join(amx_flags)}")
    if signs:
        return False, "auto: off, " + " and ".join(signs) + " (llama.cpp's AMX path crashes: issue 20824)"
    return True, "auto: on, no AMX"


def apply_weight_repack(use: bool) -> None:
    """Every model this process loads through ``llama_cpp.Llama`` gets ``use_extra_bufts = use``."""
    import llama_cpp.llama_cpp as lib

    original = getattr(lib.llama_model_default_params, "_harness_original", lib.llama_model_default_params)

    def model_defaults():
        params = original()
        params.use_extra_bufts = use
        return params

    model_defaults._harness_original = original  # type: ignore[attr-defined]
    lib.llama_model_default_params = model_defaults


def decide_and_apply(setting: str) -> dict[str, Any]:
    """Resolve ``setting`` on this machine, apply it, and return what was decided (for the records)."""
    import llama_cpp

    info = llama_cpp.llama_print_system_info().decode("utf-8", errors="replace")
    use, reason = resolve_weight_repack(setting, read_cpu_flags(), info)
    apply_weight_repack(use)
    return {"setting": setting, "extra_buffer_types": use, "reason": reason}


def keep_the_context_asked_for(llm: Any) -> int:
    """The context ``llm`` really has room for, made the one it enforces. llama.cpp pads the context
    up to a multiple of 256 (``--context-size 16`` gets 256), but llama-cpp-python sizes its token
    buffer by the size asked for and checks prompts against the padded one: a prompt between the two
    passed the check and failed in numpy ("could not broadcast input array"). Its check and its cap
    on max_tokens read ``_n_ctx``: set to the buffer, a prompt over the size asked for is refused
    as any prompt over the context (a ``context_overflow`` failure of that sample)."""
    n_ctx = llm.n_ctx()
    room = len(getattr(llm, "input_ids", ()))
    if 0 < room < n_ctx and hasattr(llm, "_n_ctx"):
        llm._n_ctx = room
        return room
    return n_ctx


def enforce_the_context_asked_for() -> None:
    """Every ``llama_cpp.Llama`` this process builds keeps the context asked for (the server's)."""
    from llama_cpp import Llama

    init = Llama.__init__
    if getattr(init, "_harness_context", False):
        return

    def init_then_keep(self, *args, **kwargs):
        init(self, *args, **kwargs)
        keep_the_context_asked_for(self)

    init_then_keep._harness_context = True  # type: ignore[attr-defined]
    Llama.__init__ = init_then_keep


def overflow_message(error: str, n_ctx: int) -> str:
    """llama-cpp-python's "Requested tokens (N) exceed context window of M" names llama.cpp's
    padded context, not the one in force: said again with the latter."""
    found = re.search(r"Requested tokens \((\d+)\)", error)
    if not found:
        return error
    return f"prompt of {found.group(1)} tokens does not fit the context of {n_ctx} tokens (with room for an answer)"


def _die_with_parent(parent: int | None) -> None:
    """Linux: SIGKILL this process when the run's process dies (kill -9 included); ``harness.lifeline``."""
    from harness.lifeline import die_with_parent

    die_with_parent(parent)


def _crash_reports_to_stderr() -> None:
    # A copy of the log's descriptor: llama_cpp points fd 2 at /dev/null while it loads quietly.
    faulthandler.enable(file=os.fdopen(os.dup(2), "w"), all_threads=True)


# --------------------------------------------------------------------------- worker
def worker(args: argparse.Namespace) -> int:
    from multiprocessing.connection import Connection

    # Messages go out on a copy of stdout; fd 1 then points at the log, so whatever native code
    # prints can never corrupt them.
    out = Connection(os.dup(1), readable=False)
    os.dup2(2, 1)
    inbox = Connection(0, writable=False)
    send_lock = threading.Lock()

    def send(message: tuple) -> None:
        with send_lock:
            out.send(message)

    try:
        decision = decide_and_apply(args.weight_repack)
        print(REPORT_PREFIX + json.dumps(decision), file=sys.stderr, flush=True)
        from llama_cpp import Llama, LogitsProcessorList

        llm = Llama(
            model_path=args.model, n_ctx=args.n_ctx, n_threads=args.n_threads, seed=0, verbose=False
        )
    except Exception as exc:  # a file llama.cpp cannot load: said by the parent as a model error
        send(("load_error", f"{type(exc).__name__}: {exc}"))
        return 1
    n_ctx = keep_the_context_asked_for(llm)
    send(("ready", {"n_ctx": n_ctx, "weight_repack": decision}))

    import numpy as np

    eos = llm.token_eos()
    cancelled: set[int] = set()
    chats: queue.Queue = queue.Queue()

    def read_loop() -> None:
        while True:
            try:
                message = inbox.recv()
            except (EOFError, OSError):
                os._exit(0)  # the run's process is gone: so is this one, mid-generation or not
            kind = message[0]
            if kind == "tokenize":  # answered here, beside a generation (llama.cpp's vocab is read-only)
                _, rid, text = message
                tokens = llm.tokenize(text.encode("utf-8"), add_bos=False, special=True)
                send(("result", rid, len(tokens)))
            elif kind == "cancel":
                cancelled.add(message[1])
            elif kind == "chat":
                chats.put(message)
            elif kind == "close":
                chats.put(None)
                return

    threading.Thread(target=read_loop, name="inbox", daemon=True).start()
    # Every generation on this one thread: llama.cpp's OpenMP build keeps a spinning thread team per
    # calling thread, so calls from several threads leave idle teams spinning.
    while True:
        message = chats.get()
        if message is None:
            break
        _, rid, kwargs = message

        def stop_when_cancelled(_input_ids, scores, rid=rid):
            # the chat API has no stopping hook; forcing end-of-sequence ends it at the next token
            if rid in cancelled:
                scores[:] = -np.inf
                scores[eos] = 0.0
            return scores

        try:
            result = llm.create_chat_completion(**kwargs, logits_processor=LogitsProcessorList([stop_when_cancelled]))
            send(("result", rid, result))
        except ValueError as exc:
            if "exceed context window" in str(exc):
                send(("error", rid, "context_overflow", overflow_message(str(exc), n_ctx)))
            else:
                send(("error", rid, "value_error", str(exc)))
        except Exception as exc:  # noqa: BLE001 - reported to the sample, the worker goes on
            send(("error", rid, "exception", f"{type(exc).__name__}: {exc}"))
        cancelled.discard(rid)
    llm.close()
    return 0


# --------------------------------------------------------------------------- server
def server(args: argparse.Namespace) -> int:
    decision = decide_and_apply(args.weight_repack)
    # the launching run reads this line back from the log for its records (REPORT_PREFIX)
    print(REPORT_PREFIX + json.dumps(decision), file=sys.stderr, flush=True)
    enforce_the_context_asked_for()
    sys.argv = ["llama_cpp.server", *args.server_args]
    from llama_cpp.server.__main__ import main as serve

    serve()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.models.llama_child")
    sub = parser.add_subparsers(dest="role", required=True)
    w = sub.add_parser("worker")
    w.add_argument("--model", required=True)
    w.add_argument("--n-ctx", type=int, default=0)
    w.add_argument("--n-threads", type=int, required=True)
    w.add_argument("--weight-repack", choices=WEIGHT_REPACK_CHOICES, default="auto")
    w.add_argument("--parent", type=int)
    s = sub.add_parser("server")
    s.add_argument("--weight-repack", choices=WEIGHT_REPACK_CHOICES, default="auto")
    s.add_argument("--parent", type=int)
    s.add_argument("server_args", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    if args.role == "server" and args.server_args[:1] == ["--"]:
        args.server_args = args.server_args[1:]
    _die_with_parent(args.parent)
    _crash_reports_to_stderr()
    return worker(args) if args.role == "worker" else server(args)


if __name__ == "__main__":
    sys.exit(main())
