"""A loopback fake of the providers' batch endpoints (and their one-request endpoints, for comparison).

OpenAI: ``POST /v1/files`` (multipart, purpose batch), ``GET /v1/files/ID/content``, ``POST /v1/batches``,
``GET /v1/batches`` (list), ``GET /v1/batches/ID``, ``POST /v1/batches/ID/cancel``, ``POST /v1/chat/completions``,
``POST /v1/responses`` (a batch's endpoint either of the two, every line's ``url`` the same).
Anthropic: ``POST /v1/messages/batches``, ``GET /v1/messages/batches`` (list), ``GET /v1/messages/batches/ID``, ``GET .../ID/results``,
``POST .../ID/cancel``, ``POST /v1/messages``, ``POST /v1/messages/count_tokens``.

The model answers ``answer-<sha1 of the last user text>[:10]`` with fixed usage, so an answer names the
question it answers. A batch is ``in_progress`` for ``finish_after`` polls (or while ``hold`` is
clear), then ends as the next of ``outcomes`` says (completed by default; expired, failed,
cancelled; vanished: polls answer 404). ``poll_failures``: the next this-many polls answer 503. ``line_error(batch_number, line_number, custom_id)`` may return (status, message) for
a per-request error. ``batch_endpoints=False``: a server without them (404). ``block_create``: the create call records the batch, then waits for the
event before it answers (a kill in that window); ``block_before_create``: the first create call
waits until released, then is lost unrecorded (a kill before the batch exists). ``list_faults``:
what the next list calls (``GET /v1/batches``, ``GET /v1/messages/batches``) meet, one each: an HTTP
status (answered in the provider's error shape), ``"timeout"`` (the answer comes after
``fault_sleep`` seconds) or ``"drop"`` (the connection closed unanswered). ``create_faults``:
statuses the next create calls answer with after creating the batch (a gateway's 502 or 504 for a
call the API went on with). Lists are newest first, paged by ``after`` (OpenAI, at most 100 a page)
or ``after_id`` (Anthropic, at most 1000), with ``first_id``, ``last_id`` and ``has_more``, each
batch with its ``created_at`` (OpenAI: Unix seconds; Anthropic: RFC 3339) and Anthropic's with its
``request_counts``, as the providers' list replies are
(https://platform.openai.com/docs/api-reference/batch/list,
https://docs.anthropic.com/en/api/listing-message-batches). ``results_transform(provider, data)`` may replace a
results file's bytes (OpenAI output/error files, Anthropic results) as served: bytes, or an iterable of
byte chunks streamed chunked without a Content-Length (so the fake need not hold them);
``results_encoding`` names the Content-Encoding of what it returns. Counters: ``creates``,
``uploads``, ``polls``, ``lists``.

A failed request is written in each provider's own shape (``openai_error_line``, ``anthropic_error_line``,
``vllm_result_line``), and ``vllm_main`` stands in for the ``vllm`` executable (``write_vllm_stand_in``):
``vllm run-batch`` writes vLLM's output lines, ``vllm serve`` answers like vLLM's server (its refusal of
tool_choice "auto" without a tool-call parser, its words for a prompt over ``--max-model-len``).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import threading
import time
import uuid
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Iterable
from urllib.parse import parse_qs, urlsplit

USAGE = (100, 10)


def answer_for(text: str) -> str:
    return "answer-" + hashlib.sha1(text.encode()).hexdigest()[:10]


def last_user_text(messages: list[dict[str, Any]]) -> str:
    for m in reversed(messages):
        if m.get("role") == "user":
            content = m.get("content")
            if isinstance(content, list):  # Anthropic blocks
                return "".join(b.get("text", "") for b in content if isinstance(b, dict))
            return content or ""
    return ""


def completion(body: dict[str, Any], usage=USAGE) -> dict[str, Any]:
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": 0,
        "model": body.get("model"),
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": answer_for(last_user_text(body.get("messages", [])))},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": usage[0], "completion_tokens": usage[1], "total_tokens": sum(usage)},
    }


def responses_reply(body: dict[str, Any], usage=USAGE) -> dict[str, Any]:
    """A Responses API reply (the shape of the recorded ones in tests/fixtures/recorded/openai/)."""
    text = answer_for(last_user_text([i for i in body.get("input", []) if "role" in i]))
    return {
        "id": "resp_fake",
        "object": "response",
        "created_at": 0,
        "status": "completed",
        "error": None,
        "incomplete_details": None,
        "model": body.get("model"),
        "output": [
            {"id": "msg_fake", "type": "message", "role": "assistant", "status": "completed",
             "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]},
        ],
        "usage": {"input_tokens": usage[0], "input_tokens_details": {"cached_tokens": 0}, "output_tokens": usage[1],
                  "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": sum(usage)},
    }  # fmt: skip


OPENAI_ENDPOINTS = {"/v1/chat/completions": completion, "/v1/responses": responses_reply}


def message(params: dict[str, Any], usage=USAGE) -> dict[str, Any]:
    return {
        "id": "msg_fake",
        "type": "message",
        "role": "assistant",
        "model": params.get("model"),
        "content": [{"type": "text", "text": answer_for(last_user_text(params.get("messages", [])))}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": usage[0], "output_tokens": usage[1]},
    }


ANTHROPIC_ERROR_TYPES = {400: "invalid_request_error", 429: "rate_limit_error", 500: "api_error", 529: "overloaded_error"}
# OpenAI's error object ``type`` per status (https://platform.openai.com/docs/guides/error-codes)
OPENAI_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 429: "rate_limit_error"}


# ------------------------------------------------------------------------------- per-provider error lines
def openai_error_line(i: int, custom_id: str, status: int, text: str) -> dict[str, Any]:
    """A request that failed with an HTTP error, in an OpenAI Batch API error file: the reply's status
    and its error body under ``response`` (https://platform.openai.com/docs/guides/batch, "output and
    error files": ``{"id", "custom_id", "response": {"status_code", "request_id", "body"}, "error"}``)."""
    kind = OPENAI_ERROR_TYPES.get(status, "server_error")
    body = {"error": {"message": text, "type": kind, "param": None, "code": None}}
    response = {"status_code": status, "request_id": f"q{i}", "body": body}
    return {"id": f"batch_req_{i}", "custom_id": custom_id, "response": response, "error": None}


def anthropic_error_line(custom_id: str, status: int, text: str) -> dict[str, Any]:
    """An errored request in Message Batches results: ``result.type`` errored, the API's error object
    (https://docs.anthropic.com/en/docs/build-with-claude/batch-processing, "Retrieving batch results")."""
    kind = ANTHROPIC_ERROR_TYPES.get(status, "api_error")
    error = {"type": "error", "error": {"type": kind, "message": text}}
    return {"custom_id": custom_id, "result": {"type": "errored", "error": error}}


# vLLM's texts (the same as in harness/models/model_facts.yaml's vllm: section, with their sources)
VLLM_AUTO_TOOL_CHOICE_REFUSED = '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'


def vllm_overflow_text(length: int, limit: int) -> str:
    """vllm/v1/engine/input_processor.py _validate_prompt_len at 009daaeebfb0ce2813f970f2173ea9c8eee09092."""
    return (
        f"The decoder prompt (length {length}) is longer than the maximum model length of {limit}. "
        "Make sure that `max_model_len` is no smaller than the number of text tokens."
    )


def vllm_error_response(status: int, text: str) -> dict[str, Any]:
    """vLLM's ErrorResponse (vllm/entrypoints/openai/engine/protocol.py at 040a2cc2a6295ea9c313d86526ff90a103eacb3e:
    ``{"error": {message, type, param, code}}``, code the HTTP status), what its server answers with."""
    kind = "BadRequestError" if status == 400 else "InternalServerError"
    return {"error": {"message": text, "type": kind, "param": None, "code": status}}


def vllm_result_line(
    custom_id: str,
    body: dict[str, Any] | None = None,
    failure: tuple[int, str] | None = None,
    style: str = "error_response",
) -> dict[str, Any]:
    """One line of ``vllm run-batch``'s output file (vllm/entrypoints/openai/run_batch.py, run_request and
    make_error_request_output, at 0056ae7b2144abbc7b4916a43491c154567e0b76): a reply under
    ``response.body``; a failure leaves ``response.body`` null and puts the error in the line's
    ``error``: the ErrorResponse object (``style`` error_response) or, for an exception, its text
    (``style`` exception, status 400)."""
    line_id, request_id = f"vllm-{uuid.uuid4().hex}", f"vllm-batch-{uuid.uuid4().hex}"
    if failure is None:
        response = {"status_code": 200, "request_id": request_id, "body": body}
        return {"id": line_id, "custom_id": custom_id, "response": response, "error": None}
    status, text = failure
    if style == "exception":
        status, error = 400, text
    else:
        error = vllm_error_response(status, text)
    response = {"status_code": status, "request_id": request_id, "body": None}
    return {"id": line_id, "custom_id": custom_id, "response": response, "error": error}


def prompt_words(body: dict[str, Any]) -> int:
    """The stand-in's prompt length: words in every message (a tokenizer's count, roughly)."""
    return sum(len(str(m.get("content") or "").split()) for m in body.get("messages", []))


def vllm_chat_reply(flags: list[str], body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """What a vLLM server started with ``flags`` answers to one chat completion: the 400 of tool_choice
    "auto" without --enable-auto-tool-choice and --tool-call-parser (vllm/entrypoints/openai/serving_chat.py
    at 003fe5932dc9e1b331347894d3cbc5ddfe89e9eb), the 400 of a prompt over --max-model-len, else a
    completion: a ``search`` call on the first turn with tools, then an answer."""
    tools_on = "--enable-auto-tool-choice" in flags and "--tool-call-parser" in flags
    if body.get("tools") and body.get("tool_choice", "auto") == "auto" and not tools_on:
        return 400, vllm_error_response(400, VLLM_AUTO_TOOL_CHOICE_REFUSED)
    if "--max-model-len" in flags:
        limit = int(flags[flags.index("--max-model-len") + 1])
        if prompt_words(body) > limit:
            return 400, vllm_error_response(400, vllm_overflow_text(prompt_words(body), limit))
    reply = completion(body)
    if body.get("tools") and not any(m.get("role") == "tool" for m in body.get("messages", [])):
        function = {"name": "search", "arguments": json.dumps({"query": "Paris"})}
        call = {"id": "call_1", "type": "function", "function": function}
        reply["choices"][0]["message"] = {"role": "assistant", "content": None, "tool_calls": [call]}
        reply["choices"][0]["finish_reason"] = "tool_calls"
    return 200, reply


def vllm_tokenize(body: dict[str, Any]) -> dict[str, Any]:
    """``POST /tokenize``: one token a word (vLLM answers count, max_model_len, tokens)."""
    tokens = list(range(len(str(body.get("prompt", "")).split())))
    return {"count": len(tokens), "max_model_len": 4096, "tokens": tokens}


def start_workers(record: str) -> None:
    """Two workers that outlive a stand-in left alone, as vLLM's engine processes would: one in its
    process group that ignores SIGTERM, one in a session of its own; the stand-in's pid, then
    theirs, written to ``record`` (whole, once all run)."""
    import subprocess

    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"
    pids = [os.getpid()]
    for own_session in (False, True):
        pids.append(subprocess.Popen([sys.executable, "-c", code], start_new_session=own_session).pid)
    with open(record + ".tmp", "w") as f:
        f.write(json.dumps(pids))
    os.replace(record + ".tmp", record)


def vllm_main(args: list[str]) -> int:
    """The stand-in ``vllm``: its argv is appended (JSON) to $FAKE_VLLM_ARGV, then ``run-batch`` (errors in
    $FAKE_VLLM_ERROR_STYLE; $FAKE_VLLM_OVERFLOW_LONGEST fails the longest prompt as over the context;
    $FAKE_VLLM_WORKERS: it starts workers first (``start_workers``); $FAKE_VLLM_HANG: then never ends)
    or ``serve``."""
    if os.environ.get("FAKE_VLLM_ARGV"):
        with open(os.environ["FAKE_VLLM_ARGV"], "a") as log:
            log.write(json.dumps(args) + "\n")
    if args[0] == "run-batch" and os.environ.get("FAKE_VLLM_WORKERS"):
        start_workers(os.environ["FAKE_VLLM_WORKERS"])
    if args[0] == "run-batch" and os.environ.get("FAKE_VLLM_HANG"):
        time.sleep(600)
    if args[0] == "run-batch":
        source, target = args[args.index("-i") + 1], args[args.index("-o") + 1]
        style = os.environ.get("FAKE_VLLM_ERROR_STYLE", "error_response")  # or exception
        with open(source) as f:
            lines = [json.loads(text) for text in f if text.strip()]
        flags = list(args)
        if os.environ.get("FAKE_VLLM_OVERFLOW_LONGEST") and "--max-model-len" not in flags:
            # a max_model_len just under the batch's longest prompt: that one request fails
            flags += ["--max-model-len", str(max(prompt_words(x["body"]) for x in lines) - 1)]
        with open(target, "w") as out:
            for line in lines:
                assert line["url"] == "/v1/chat/completions" and line["method"] == "POST"
                status, reply = vllm_chat_reply(flags, line["body"])
                failure = None if status == 200 else (status, reply["error"]["message"])
                result = vllm_result_line(line["custom_id"], reply if failure is None else None, failure, style)
                out.write(json.dumps(result) + "\n")
        return 0
    if args[0] == "serve":
        return _vllm_serve(args)
    return 2


def _vllm_serve(args: list[str]) -> int:
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    model, port = args[1], int(args[args.index("--port") + 1])
    # as vLLM: ``args.api_key or [envs.VLLM_API_KEY]`` (vllm/entrypoints/openai/api_server.py build_app)
    key = args[args.index("--api-key") + 1] if "--api-key" in args else os.environ.get("VLLM_API_KEY") or None

    class Handler(BaseHTTPRequestHandler):
        def _send(self, status: int, payload: Any) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if key and self.headers.get("Authorization") != f"Bearer {key}":
                return self._send(401, {"error": "Unauthorized"})
            if self.path == "/v1/models":
                card = {"id": model, "object": "model", "owned_by": "vllm", "root": model, "max_model_len": 4096}
                return self._send(200, {"object": "list", "data": [card]})
            if self.path == "/version":
                return self._send(200, {"version": "0.0.0-stand-in"})
            self._send(404, {"error": "not found"})

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
            if self.path == "/v1/chat/completions":
                return self._send(*vllm_chat_reply(args, body))
            if self.path == "/tokenize":
                return self._send(200, vllm_tokenize(body))
            self._send(404, {"error": "not found"})

        def log_message(self, *a):
            pass

    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()
    return 0


STAND_IN = """#!{python}
import sys
sys.path.insert(0, {tests!r})
from fake_batch import vllm_main
sys.exit(vllm_main(sys.argv[1:]))
"""


def write_vllm_stand_in(bin_dir) -> str:
    """An executable ``vllm`` in ``bin_dir`` running ``vllm_main`` (put ``bin_dir`` first on PATH)."""
    from pathlib import Path

    bin_dir = Path(bin_dir)
    bin_dir.mkdir(parents=True, exist_ok=True)
    script = bin_dir / "vllm"
    script.write_text(STAND_IN.format(python=sys.executable, tests=str(Path(__file__).resolve().parent)))
    script.chmod(0o755)
    return str(script)


class FakeBatchServer:
    def __init__(
        self,
        *,
        finish_after: int = 1,
        outcomes: list[str] | None = None,
        line_error: Callable[[int, int, str], tuple[int, str] | None] | None = None,
        hold: bool = False,
        block_create: bool = False,
        block_before_create: bool = False,
        usage: tuple[int, int] = USAGE,
        batch_endpoints: bool = True,
        refuses: tuple[str, ...] = (),
    ):
        self.finish_after = finish_after
        # Anthropic sampling parameters refused as the API does, one request or a batch line at a time
        self.refuses = refuses
        self.outcomes = list(outcomes or [])
        self.line_error = line_error
        self.released = threading.Event()
        if not hold:
            self.released.set()
        self.create_gate = threading.Event()
        if not block_create:
            self.create_gate.set()
        self.before_create_gate = threading.Event()
        self.lose_next_create = block_before_create
        self.list_faults: list[int | str] = []
        self.create_faults: list[int] = []
        self.fault_sleep = 3.0
        self.usage = usage
        self.batch_endpoints = batch_endpoints  # False: a compatible server that has none (404)
        self.poll_failures = 0  # the next this-many polls answer 503
        self.results_transform: Callable[[str, bytes], bytes | Iterable[bytes]] | None = None
        self.results_encoding: str | None = None
        self.result_files: set[str] = set()  # the ids of OpenAI output and error files
        self.lock = threading.Lock()
        self.files: dict[str, bytes] = {}
        self.batches: dict[str, dict[str, Any]] = {}
        self.creates = self.uploads = self.polls = self.chat_calls = self.lists = 0
        self.batch_sizes: list[int] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _reply(self, status: int, payload: Any, raw: Any = None, encoding: str | None = None) -> None:
                data = raw if raw is not None else json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/jsonl" if raw is not None else "application/json")
                if encoding:
                    self.send_header("Content-Encoding", encoding)
                if isinstance(data, bytes):
                    self.send_header("Content-Length", str(len(data)))
                    try:
                        self.end_headers()
                        self.wfile.write(data)
                    except (BrokenPipeError, ConnectionResetError):  # the client is gone (killed)
                        self.close_connection = True
                    return
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                try:
                    for chunk in data:
                        if chunk:
                            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    self.wfile.write(b"0\r\n\r\n")
                except (BrokenPipeError, ConnectionResetError):  # the client stopped reading
                    self.close_connection = True

            def _body(self) -> bytes:
                length = int(self.headers.get("Content-Length") or 0)
                return self.rfile.read(length) if length else b""

            def do_GET(self):
                fault = outer.list_fault(self.path)
                if fault == "drop":
                    self.close_connection = True  # closed unanswered
                    return
                status, payload, raw = outer.get(self.path, fault if isinstance(fault, int) else None)
                encoding = None
                if raw is not None and outer.results_transform is not None and outer.is_results(self.path):
                    raw, encoding = outer.results_transform(outer.provider_of(self.path), raw), outer.results_encoding
                self._reply(status, payload, raw, encoding)

            def do_POST(self):
                status, payload = outer.post(self.path, self.headers, self._body())
                self._reply(status, payload)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self):
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.released.set()
        self.create_gate.set()
        self.before_create_gate.set()
        self.httpd.shutdown()
        self.httpd.server_close()

    def release(self) -> None:
        self.released.set()

    # ------------------------------------------------------------------ routing
    def is_results(self, target: str) -> bool:
        path = urlsplit(target).path
        m = re.fullmatch(r"/v1/files/([^/]+)/content", path)
        return path.endswith("/results") or (m is not None and m.group(1) in self.result_files)

    def provider_of(self, target: str) -> str:
        return "anthropic" if urlsplit(target).path.startswith("/v1/messages") else "openai"

    def list_fault(self, target: str) -> int | str | None:
        """A list call: counted, and the next of ``list_faults`` taken ("timeout": slept here)."""
        if urlsplit(target).path not in ("/v1/batches", "/v1/messages/batches") or not self.batch_endpoints:
            return None
        with self.lock:
            self.lists += 1
            fault = self.list_faults.pop(0) if self.list_faults else None
        if fault == "timeout":
            time.sleep(self.fault_sleep)
            return None
        return fault

    def get(self, target: str, fault: int | None = None):
        parts = urlsplit(target)
        path = parts.path
        if path in ("/v1/models", "/models"):
            return 200, {"object": "list", "data": []}, None
        m = re.fullmatch(r"/v1/files/([^/]+)/content", path)
        if m:
            with self.lock:
                data = self.files.get(m.group(1))
            return (200, None, data) if data is not None else (404, {"error": {"message": "no such file"}}, None)
        if not self.batch_endpoints and "batches" in path:
            return 404, {"error": {"message": "Not Found"}}, None
        if path in ("/v1/batches", "/v1/messages/batches"):
            provider = "openai" if path == "/v1/batches" else "anthropic"
            if fault is not None:
                return fault, self.error_body(provider, fault, "fake list failure"), None
            query = parse_qs(parts.query)
            with self.lock:  # newest first
                listed = [self.public(b) for b in reversed(self.batches.values()) if b["provider"] == provider]
            after = query.get("after" if provider == "openai" else "after_id", [None])[0]
            if after:
                ids = [b["id"] for b in listed]
                listed = listed[ids.index(after) + 1 :] if after in ids else []
            limit = min(int(query.get("limit", ["20"])[0]), 100 if provider == "openai" else 1000)
            page = listed[:limit]
            reply = {"data": page, "has_more": len(listed) > limit, "first_id": page[0]["id"] if page else None,
                     "last_id": page[-1]["id"] if page else None}  # fmt: skip
            return 200, ({"object": "list", **reply} if provider == "openai" else reply), None
        m = re.fullmatch(r"/v1/(messages/)?batches/([^/]+)(/results)?", path)
        if m:
            with self.lock:
                batch = self.batches.get(m.group(2))
                if batch is None:
                    return 404, {"error": {"type": "not_found_error", "message": "no such batch"}}, None
                if m.group(3):
                    return 200, None, batch.get("results", b"")
                self.polls += 1
                if self.poll_failures > 0:
                    self.poll_failures -= 1
                    return 503, {"error": {"message": "fake outage"}}, None
                if batch["outcome"] == "vanished" and batch["polls"] + 1 >= self.finish_after:
                    return 404, {"error": {"type": "not_found_error", "message": "no such batch"}}, None
                self.advance(batch)
                return 200, self.public(batch), None
        return 404, {"error": {"message": f"no route {path}"}}, None

    def post(self, target: str, headers, raw: bytes):
        path = urlsplit(target).path
        if not self.batch_endpoints and ("batches" in path or path == "/v1/files"):
            return 404, {"error": {"message": "Not Found"}}
        if path == "/v1/files":
            return self.upload(headers, raw)
        body = json.loads(raw or b"{}")
        if path in OPENAI_ENDPOINTS:
            with self.lock:
                self.chat_calls += 1
            return 200, OPENAI_ENDPOINTS[path](body, self.usage)
        if path == "/v1/messages":
            with self.lock:
                self.chat_calls += 1
            refused = self.refused(body)
            if refused:
                return 400, {"type": "error", "error": {"type": "invalid_request_error", "message": refused}}
            return 200, message(body, self.usage)
        if path == "/v1/messages/count_tokens":
            return 200, {"input_tokens": len(last_user_text(body.get("messages", [])).split()) + 3}
        if path in ("/v1/batches", "/v1/messages/batches"):
            return self.create(path, body)
        m = re.fullmatch(r"/v1/(messages/)?batches/([^/]+)/cancel", path)
        if m:
            return self.cancel(m.group(2))
        return 404, {"error": {"message": f"no route {path}"}}

    # ------------------------------------------------------------------ OpenAI files
    def upload(self, headers, raw: bytes):
        boundary = re.search(r"boundary=([^;]+)", headers.get("Content-Type", "")).group(1).strip('"')
        fields: dict[str, bytes] = {}
        for part in raw.split(b"--" + boundary.encode()):
            head, sep, content = part.partition(b"\r\n\r\n")
            name = re.search(rb'name="([^"]+)"', head)
            if sep and name:
                fields[name.group(1).decode()] = content.rsplit(b"\r\n", 1)[0]
        if fields.get("purpose") != b"batch" or "file" not in fields:
            return 400, {"error": {"message": "purpose must be batch, with a file"}}
        with self.lock:
            self.uploads += 1
            file_id = f"file-{len(self.files) + 1}"
            self.files[file_id] = fields["file"]
        return 200, {"id": file_id, "object": "file", "purpose": "batch", "bytes": len(fields["file"])}

    @staticmethod
    def error_body(provider: str, status: int, text: str) -> dict[str, Any]:
        """An API error body in the provider's shape (see ``openai_error_line``, ``anthropic_error_line``)."""
        if provider == "anthropic":
            return {"type": "error", "error": {"type": ANTHROPIC_ERROR_TYPES.get(status, "api_error"), "message": text}}
        kind = OPENAI_ERROR_TYPES.get(status, "server_error")
        return {"error": {"message": text, "type": kind, "param": None, "code": None}}

    def add_foreign(self, provider: str, n: int, requests: int = 1) -> None:
        """``n`` batches of someone else's (no harness key), created now: listed before the older ones."""
        with self.lock:
            for _ in range(n):
                number = len(self.batches) + 1000
                batch_id = f"{'msgbatch' if provider == 'anthropic' else 'batch'}_other_{number}"
                self.batches[batch_id] = {
                    "id": batch_id, "provider": provider, "number": number, "polls": 0,
                    "lines": [{"custom_id": f"other-{i}", "params": {}, "body": {}} for i in range(requests)],
                    "status": "in_progress", "outcome": "completed", "metadata": {}, "input_file_id": None,
                    "endpoint": "/v1/chat/completions", "created_at": time.time(),
                }  # fmt: skip

    # ------------------------------------------------------------------ batches
    def create(self, path: str, body: dict[str, Any]):
        provider = "anthropic" if path.startswith("/v1/messages") else "openai"
        with self.lock:
            lose, self.lose_next_create = self.lose_next_create, False
        if lose:
            self.before_create_gate.wait()
            return 503, self.error_body(provider, 503, "lost before the API had it")
        with self.lock:
            if provider == "openai":
                data = self.files.get(body.get("input_file_id"))
                endpoint = body.get("endpoint")
                if data is None or body.get("completion_window") != "24h" or endpoint not in OPENAI_ENDPOINTS:
                    return 400, {"error": {"message": "bad batch request"}}
                lines = [json.loads(x) for x in data.decode().splitlines() if x.strip()]
                if any(x.get("method") != "POST" or x.get("url") != endpoint for x in lines):
                    return 400, {"error": {"message": "bad line"}}
            else:
                lines = body.get("requests") or []
                if any(not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", x.get("custom_id", "")) for x in lines):
                    return 400, {"error": {"type": "invalid_request_error", "message": "bad custom_id"}}
            self.creates += 1
            number = self.creates
            batch_id = f"{'msgbatch' if provider == 'anthropic' else 'batch'}_{number}"
            outcome = self.outcomes[number - 1] if number - 1 < len(self.outcomes) else "completed"
            self.batches[batch_id] = {
                "id": batch_id,
                "provider": provider,
                "number": number,
                "lines": lines,
                "polls": 0,
                "status": "validating" if provider == "openai" else "in_progress",
                "outcome": outcome,
                "metadata": body.get("metadata") or {},
                "input_file_id": body.get("input_file_id"),
                "endpoint": body.get("endpoint"),
                "created_at": time.time(),
            }
            self.batch_sizes.append(len(lines))
            public = self.public(self.batches[batch_id])
            fault = self.create_faults.pop(0) if self.create_faults else None
        self.create_gate.wait()
        if fault is not None:
            return fault, self.error_body(provider, fault, "fake gateway failure")
        return 200, public

    def cancel(self, batch_id: str):
        with self.lock:
            batch = self.batches.get(batch_id)
            if batch is None:
                return 404, {"error": {"message": "no such batch"}}
            batch["outcome"] = "cancelled"
            batch["status"] = "cancelling" if batch["provider"] == "openai" else "canceling"
            return 200, self.public(batch)

    def advance(self, batch: dict[str, Any]) -> None:
        """One poll: still running, or ended as its outcome says (called under the lock)."""
        if batch.get("ended"):
            return
        batch["polls"] += 1
        if batch["outcome"] != "cancelled" and (not self.released.is_set() or batch["polls"] < self.finish_after):
            batch["status"] = "in_progress"
            return
        (self.end_openai if batch["provider"] == "openai" else self.end_anthropic)(batch)
        batch["ended"] = True

    def end_openai(self, batch: dict[str, Any]) -> None:
        outcome = batch["outcome"]
        output, errors = [], []
        for i, line in enumerate(batch["lines"]):
            cid = line["custom_id"]
            if outcome in ("expired", "cancelled"):
                code = "batch_expired" if outcome == "expired" else "batch_cancelled"
                errors.append({"id": f"r{i}", "custom_id": cid, "response": None, "error": {"code": code, "message": f"request {outcome}"}})
                continue
            failure = self.line_error(batch["number"], i, cid) if self.line_error else None
            if failure:
                errors.append(openai_error_line(i, cid, *failure))
            else:
                reply = OPENAI_ENDPOINTS[batch["endpoint"]](line["body"], self.usage)
                response = {"status_code": 200, "request_id": f"q{i}", "body": reply}
                output.append({"id": f"r{i}", "custom_id": cid, "response": response, "error": None})
        if outcome == "failed":
            batch["status"] = "failed"
            batch["errors"] = {"object": "list", "data": [{"code": "invalid_request", "message": "fake validation failure"}]}
            return
        batch["status"] = outcome
        for key, lines in (("output_file_id", output), ("error_file_id", errors)):
            if lines:
                file_id = f"file-{len(self.files) + 1}"
                self.files[file_id] = "".join(json.dumps(x) + "\n" for x in lines).encode()
                self.result_files.add(file_id)
                batch[key] = file_id

    def end_anthropic(self, batch: dict[str, Any]) -> None:
        outcome = batch["outcome"]
        results = []
        for i, line in enumerate(batch["lines"]):
            cid = line["custom_id"]
            if outcome in ("expired", "cancelled"):
                results.append({"custom_id": cid, "result": {"type": "expired" if outcome == "expired" else "canceled"}})
                continue
            failure = ("failed",) if outcome == "failed" else (self.line_error(batch["number"], i, cid) if self.line_error else None)
            if not failure and self.refused(line["params"]):
                failure = (400, self.refused(line["params"]))
            if failure:
                status, text = (500, "fake failure") if outcome == "failed" else failure
                results.append(anthropic_error_line(cid, status, text))
            else:
                results.append({"custom_id": cid, "result": {"type": "succeeded", "message": message(line["params"], self.usage)}})
        batch["status"] = "ended"
        batch["results"] = "".join(json.dumps(x) + "\n" for x in results).encode()
        kinds = [x["result"]["type"] for x in results]
        batch["counts"] = {k: kinds.count(k) for k in ("succeeded", "errored", "expired", "canceled")}

    def refused(self, params: dict[str, Any]) -> str | None:
        """The API's 400 message for a refused sampling parameter the request carries (anthropic_api.REFUSED_PARAM)."""
        sent = [p for p in self.refuses if p in params]
        return f"`{sent[0]}` is deprecated for this model." if sent else None

    def public(self, batch: dict[str, Any]) -> dict[str, Any]:
        n = len(batch["lines"])
        if batch["provider"] == "openai":
            return {
                "id": batch["id"],
                "object": "batch",
                "endpoint": batch["endpoint"],
                "input_file_id": batch["input_file_id"],
                "completion_window": "24h",
                "status": batch["status"],
                "output_file_id": batch.get("output_file_id"),
                "error_file_id": batch.get("error_file_id"),
                "errors": batch.get("errors"),
                "metadata": batch["metadata"],
                "created_at": int(batch["created_at"]),
                "request_counts": {"total": n, "completed": 0, "failed": 0},
            }
        ended = batch["status"] == "ended"
        return {
            "id": batch["id"],
            "type": "message_batch",
            "processing_status": batch["status"],
            "created_at": datetime.fromtimestamp(batch["created_at"], timezone.utc).isoformat().replace("+00:00", "Z"),
            "request_counts": {"processing": 0 if ended else n, "succeeded": 0, "errored": 0, "canceled": 0,
                               "expired": 0, **(batch.get("counts") or {})},
            "results_url": f"{self.url}/v1/messages/batches/{batch['id']}/results" if ended else None,
        }
