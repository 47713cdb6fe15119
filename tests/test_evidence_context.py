"""Evidence is never silently dropped (issue 14): an OpenAI-compatible server's context is asked of
the server (llama.cpp's /props and /v1/models meta, vLLM's max_model_len); where nothing reports it
the run is refused before any request; a sample with no evidence packed is a failure
(``no_evidence_packed``), never an answer; failures a rerun cannot fix do not say "rerun to retry".
Real models: SmolLM2 in process and behind llama.cpp's server (llama-cpp-python) through the
OpenAI backend."""

from __future__ import annotations

import asyncio
import json
from http.server import BaseHTTPRequestHandler

import pytest
from conftest import packaged_llama_server, run_harness
from fault_server import FaultServer, LoopbackServer, run_args

from harness.cli import main
from harness.models import BackendOptions, create_backend


def test_context_read_from_what_servers_report():
    from harness.models.openai_compat import context_from_listing, context_from_props

    vllm = {"data": [{"id": "Qwen/Qwen2.5-7B", "root": "Qwen/Qwen2.5-7B", "max_model_len": 32768}]}
    assert context_from_listing(vllm, "Qwen/Qwen2.5-7B") == (32768, "server /v1/models max_model_len")
    llama = {"data": [{"id": "model.gguf", "meta": {"n_vocab": 49152, "n_ctx_train": 8192}}]}
    assert context_from_listing(llama, "anything") == (8192, "server /v1/models meta.n_ctx_train")
    # llama-cpp-python's server: nothing; several models, none of them this one: nothing
    assert context_from_listing({"data": [{"id": "/m.gguf", "object": "model", "owned_by": "me"}]}, "x") == (None, None)
    two = {"data": [{"id": "a", "max_model_len": 1}, {"id": "b", "max_model_len": 2}]}
    assert context_from_listing(two, "c") == (None, None) and context_from_listing(two, "b")[0] == 2
    assert context_from_props({"default_generation_settings": {"n_ctx": 4096}, "total_slots": 1}) == 4096
    assert context_from_props({"detail": "Not Found"}) is None and context_from_props(None) is None


class LlamaCppShapes(LoopbackServer):
    """llama.cpp's server as far as the context goes: /props and /v1/models with meta."""

    def __init__(self, n_ctx: int | None, n_ctx_train: int = 8192):
        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                if self.path == "/props" and n_ctx:
                    body = {"default_generation_settings": {"n_ctx": n_ctx}, "total_slots": 1}
                elif self.path == "/v1/models":
                    body = {"object": "list", "data": [{"id": "m.gguf", "meta": {"n_ctx_train": n_ctx_train}}]}
                else:
                    self.send_response(404)
                    self.end_headers()
                    return
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        super().__init__(Handler)


def _started(model, **options):
    backend = create_backend(model, BackendOptions(**options))
    asyncio.run(backend.start())
    return backend


@pytest.mark.slow
def test_openai_backend_asks_the_server_for_its_context():
    with LlamaCppShapes(n_ctx=2048) as props, LlamaCppShapes(n_ctx=None, n_ctx_train=8192) as meta:
        backend = _started("openai/m", base_url=props.url)
        assert backend.context_size() == 2048  # the slot's window, not the trained 8192
        assert backend.describe()["context_size_source"] == "server /props default_generation_settings.n_ctx"
        assert _started("openai/m", base_url=meta.url).context_size() == 8192
        assert _started("openai/m", base_url=props.url, context_size=1000).context_size() == 1000  # the flag wins
        assert _started("openai/m", base_url=f"{props.url},{meta.url}").context_size() == 2048  # the smallest
    with FaultServer(context_size=3000) as vllm, FaultServer(context_size=None) as silent:
        assert _started("openai/fault-model", base_url=vllm.url).context_size() == 3000
        assert _started("openai/fault-model", base_url=silent.url).context_size() is None
        # one server of the list silent: unknown, not a guess that could overflow it
        assert _started("openai/fault-model", base_url=f"{vllm.url},{silent.url}").context_size() is None
        # a known OpenAI name still falls back to OpenAI's table behind a silent server
        assert _started("openai/gpt-4o", base_url=silent.url).context_size() == 128_000


@pytest.mark.slow
def test_evidence_provided_packs_to_the_servers_context(tmp_path, capsys, hotpot_snapshot):
    out = tmp_path / "run"
    with FaultServer(context_size=2048) as server:
        code = main(run_args(server.url, out, "--setting", "evidence-provided", "--snapshot", str(hotpot_snapshot)))
    assert code == 0, capsys.readouterr().err
    evidence = json.loads((out / "samples.jsonl").read_text())["extra"]["evidence"]
    assert evidence["budget_tokens"] == 2048 - 520 and evidence["chunks_packed"] > 0
    model = json.loads((out / "results.json").read_text())["model"]
    assert model["context_size"] == 2048 and model["context_size_source"] == "server /v1/models max_model_len"


@pytest.mark.slow
def test_openais_size_behind_a_silent_server_is_said_to_be_a_guess(tmp_path, capsys, hotpot_snapshot):
    """openai/gpt-4o behind --base-url: the server may serve any model under that name, so a packing
    run on OpenAI's 128k says so; with the server's own size, or a closed-book run, nothing is said."""

    def run(server, out, *extra):
        args = run_args(server.url, tmp_path / out, *extra)
        args[args.index("openai/fault-model")] = "openai/gpt-4o"
        code = main(args)
        return code, capsys.readouterr().err

    guess = "context size 128000: the model facts table's size for gpt-4o (openai/gpt-4o; the server reports none)"
    with FaultServer(context_size=None) as silent, FaultServer(context_size=4096) as vllm:
        code, err = run(silent, "a", "--setting", "evidence-provided", "--snapshot", str(hotpot_snapshot))
        assert code == 0 and guess in err
        code, err = run(silent, "b")  # closed-book packs nothing
        assert code == 0 and "context size" not in err
        code, err = run(vllm, "c", "--setting", "evidence-provided", "--snapshot", str(hotpot_snapshot))
        assert code == 0 and "context size" not in err


# ------------------------------------------------------------------ real models
def smollm2_server(log_dir):
    return packaged_llama_server("smollm2", log_dir, n_ctx=2048, n_threads=1, startup_timeout=120)


# a budget of 100 tokens: the prompt fits, not one of the sample's documents (the shortest: ~160)
ROOM_FOR_NO_DOCUMENT = ("--context-size", "768", "--agent-arg", "evidence_reserve=668")


def _ep(snapshot, out, *extra):
    return run_harness("run", "--setting", "evidence-provided", "--dataset", "hotpotqa:dev", "--snapshot",
                       str(snapshot), "--limit", "1", "--max-tokens", "8", "--no-cache", "--out", str(out), *extra)  # fmt: skip


def _assert_no_evidence_failure(proc, out):
    assert proc.returncode == 4, proc.stderr  # its one sample failed: no question answered, no scores
    assert not (out / "samples.jsonl").exists() or not (out / "samples.jsonl").read_text().strip()
    failure = json.loads((out / "failures.jsonl").read_text())
    assert failure["error_type"] == "no_evidence_packed" and failure["model_calls"] == 0
    assert "fits the prompt budget of 100 tokens" in failure["error"]
    results = json.loads((out / "results.json").read_text())
    assert results["counts"]["finished"] == 0 and results["failures"][failure["id"]]["type"] == "no_evidence_packed"
    assert "rerun the same command" not in proc.stderr and "a rerun cannot fix" in proc.stderr


@pytest.mark.slow
def test_llamacpp_server_through_openai_backend(hotpot_snapshot, tmp_path):
    with smollm2_server(tmp_path / "logs") as server:
        asyncio.run(server.start())
        model = ["--model", "openai/smollm2", "--base-url", server.base_url]
        # the server reports no context: refused before any request, nothing written
        for setting in ("evidence-provided", "open-book"):
            out = tmp_path / f"refused-{setting}"
            space = ["--search-space", "evidence-only"] if setting == "open-book" else []
            proc = run_harness("run", "--setting", setting, "--dataset", "hotpotqa:dev", "--snapshot",
                               str(hotpot_snapshot), *space, "--limit", "1", "--out", str(out), "--no-cache",
                               *model)  # fmt: skip
            assert proc.returncode == 2 and "pass --context-size N" in proc.stderr, proc.stderr
            assert "internal error" not in proc.stderr and not out.exists()
        # a context the reserve fills: refused before the run
        out = tmp_path / "no-room"
        proc = _ep(hotpot_snapshot, out, *model, "--context-size", "500")
        assert proc.returncode == 2 and "leaves no room for evidence" in proc.stderr, proc.stderr
        assert not out.exists()
        # room for the prompt but not one document: the sample fails, it is not answered blind
        out = tmp_path / "none-packed"
        _assert_no_evidence_failure(_ep(hotpot_snapshot, out, *model, *ROOM_FOR_NO_DOCUMENT), out)


@pytest.mark.slow
def test_local_model_no_evidence_packed(hotpot_snapshot, tmp_path):
    out = tmp_path / "local"
    proc = _ep(hotpot_snapshot, out, "--model", "local/smollm2", *ROOM_FOR_NO_DOCUMENT, "--n-threads", "1")
    _assert_no_evidence_failure(proc, out)


@pytest.mark.slow
def test_missing_evidence_does_not_say_rerun(hotpot_snapshot, tmp_path):
    out = tmp_path / "missing"
    proc = run_harness("run", "--setting", "evidence-provided", "--dataset", "fanoutqa:dev", "--snapshot",
                       str(hotpot_snapshot), "--limit", "2", "--model", "scripted/answer=x", "--out", str(out))  # fmt: skip
    assert proc.returncode == 4  # both failed: no question answered
    assert "missing_evidence" in proc.stderr and "rerun the same command" not in proc.stderr
    assert "2 missing_evidence (a rerun cannot fix: evidence pages missing from the snapshot" in proc.stderr


@pytest.mark.parametrize(
    "types, retry, stuck",
    [
        (["timeout", "model_unavailable"], "rerun the same command to retry them", None),
        (["missing_evidence"], None, "1 missing_evidence (a rerun cannot fix"),
        (["timeout", "no_evidence_packed", "missing_evidence"], "retry the other 1", "1 no_evidence_packed"),
    ],
)
def test_failure_line_says_what_a_rerun_can_fix(types, retry, stuck):
    from harness.commands.run import failure_line

    line = failure_line(len(types), [{"type": t, "error": "e"} for t in types])
    assert line.startswith(f"{len(types)} sample(s) failed (e.g. {types[0]}: e); see failures.jsonl")
    assert (retry is None and "rerun the same" not in line) or (retry is not None and retry in line)
    assert stuck is None or stuck in line


def test_ablation_failure_lines_come_from_each_size_s_failures():
    """A sweep's small sizes fail with no_evidence_packed by design: the console says per size that a
    rerun cannot fix those, and that the timeouts beside them may pass next time."""
    from harness.analysis.ablate import _failure_summary
    from harness.execution.record import FailureNote
    from harness.commands.ablate import ablation_failure_line

    failures = {
        "q1": {"type": "no_evidence_packed", "error": "nothing fits"},
        "q2": {"type": "no_evidence_packed", "error": "nothing fits"},
        "q3": {"type": "timeout", "error": "took 60 s"},
    }
    summary = _failure_summary({k: FailureNote(**v) for k, v in failures.items()})
    assert summary == {"types": {"no_evidence_packed": 2, "timeout": 1}, "example": failures["q1"]}
    assert _failure_summary({}) is None
    line = ablation_failure_line({"context_size": 512, "counts": {"failed": 3}, "failures": summary})
    assert line.startswith("3 sample(s) failed (e.g. no_evidence_packed: nothing fits); see ctx-512/failures.jsonl")
    assert "retry the other 1" in line and "2 no_evidence_packed (a rerun cannot fix" in line
