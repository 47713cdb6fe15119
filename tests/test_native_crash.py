"""llama.cpp's AMX path (issue 30) and native crashes.

- The weight-repack decision (``--weight-repack auto|on|off``) with the CPU's flags and llama.cpp's
  system info faked, and the parameter path into the ``llama_model_params`` a model is built from.
- The real SmolLM2 answering with the extra buffer types off, in the worker and in the server.
- A model process killed with SIGSEGV mid-run (``local/``'s worker, ``llamacpp-server/``'s server):
  one line naming what died and how, rows already written kept, a rerun that resumes.
- kill -9 of the run leaves no model process behind.

This machine may have no AMX (``grep amx_int8 /proc/cpuinfo``): then the crash itself cannot be
reproduced, and SIGSEGV sent by hand stands in for it.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from conftest import REPO, harness_cmd, run_harness, wait_until

from harness.errors import ModelError, ProcessDiedError, describe_exit
from harness.models import BackendOptions, GenerationParams, create_backend
from harness.models.llama_child import (
    REPORT_PREFIX,
    read_cpu_flags,
    reported_weight_repack,
    resolve_weight_repack,
)
from harness.models.local import ModelWorker

SAPPHIRE_RAPIDS_FLAGS = {"avx2", "avx512f", "avx512_vnni", "amx_bf16", "amx_tile", "amx_int8"}
ZEN4_FLAGS = {"avx2", "avx512f", "avx512_vnni", "avx512_bf16"}
INFO_AMX = "CPU : SSE3 = 1 | AVX2 = 1 | AVX512 = 1 | AMX_INT8 = 1 | REPACK = 1 |"
INFO_NO_AMX = "CPU : SSE3 = 1 | AVX2 = 1 | AVX512 = 1 | REPACK = 1 |"
FRANCE = [{"role": "user", "content": "What is the capital of France? Answer with the city's name only, please."}]


# --------------------------------------------------------------------------- the decision
@pytest.mark.parametrize(
    "flags, info, expected, because",
    [
        (SAPPHIRE_RAPIDS_FLAGS, INFO_AMX, False, "llama.cpp reports AMX_INT8 = 1 and the CPU has amx_int8, amx_tile"),
        (SAPPHIRE_RAPIDS_FLAGS, INFO_NO_AMX, False, "the CPU has amx_int8, amx_tile"),  # a generic build
        (ZEN4_FLAGS, INFO_AMX, False, "llama.cpp reports AMX_INT8 = 1"),
        (ZEN4_FLAGS, INFO_NO_AMX, True, "auto: on, no AMX"),
        (set(), "", True, "auto: on, no AMX"),  # no /proc/cpuinfo (macOS), nothing reported
    ],
)
def test_auto_turns_the_extra_buffers_off_where_amx_would_be_used(flags, info, expected, because):
    use, reason = resolve_weight_repack("auto", flags, info)
    assert use is expected
    assert because in reason


@pytest.mark.parametrize("setting, expected", [("on", True), ("off", False)])
def test_on_and_off_are_obeyed_whatever_the_cpu(setting, expected):
    for flags, info in ((SAPPHIRE_RAPIDS_FLAGS, INFO_AMX), (ZEN4_FLAGS, INFO_NO_AMX)):
        assert resolve_weight_repack(setting, flags, info) == (expected, f"--weight-repack {setting}")


def test_unknown_setting_is_refused():
    with pytest.raises(ValueError, match="auto, on, off"):
        resolve_weight_repack("maybe", set(), "")


def test_cpu_flags_are_read_from_cpuinfo(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nmodel name\t: Xeon\nflags\t\t: fpu avx2 amx_tile amx_int8\n\nprocessor\t: 1\n")
    assert read_cpu_flags(str(cpuinfo)) == {"fpu", "avx2", "amx_tile", "amx_int8"}
    assert read_cpu_flags(str(tmp_path / "missing")) == set()


def test_the_cli_refuses_an_unknown_weight_repack_before_anything_runs(tmp_path):
    proc = run_harness("run", "--weight-repack", "sometimes", "--limit", "1", "--out", str(tmp_path / "r"))
    assert proc.returncode == 2
    assert "invalid choice: 'sometimes'" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "r").exists()


# The decision reaches the llama_model_params the model is built from: in a child process (the patch
# is process-wide), with the CPU's flags and llama.cpp's system info faked, building a vocab-only model.
PARAM_PATH = textwrap.dedent(
    """
    import json, sys
    import llama_cpp
    import harness.models.llama_child as child
    flags, info, setting, model = json.loads(sys.argv[1])
    child.read_cpu_flags = lambda path="/proc/cpuinfo": set(flags)
    llama_cpp.llama_print_system_info = lambda: info.encode()
    decision = child.decide_and_apply(setting)
    llm = llama_cpp.Llama(model_path=model, vocab_only=True, verbose=False)
    print(json.dumps({"decision": decision, "use_extra_bufts": bool(llm.model_params.use_extra_bufts)}))
    """
)


@pytest.mark.parametrize(
    "flags, info, setting, expected",
    [
        (SAPPHIRE_RAPIDS_FLAGS, INFO_AMX, "auto", False),
        (ZEN4_FLAGS, INFO_NO_AMX, "auto", True),
        (ZEN4_FLAGS, INFO_NO_AMX, "off", False),
        (SAPPHIRE_RAPIDS_FLAGS, INFO_AMX, "on", True),
    ],
)
def test_the_decision_reaches_the_model_params(flags, info, setting, expected):
    pytest.importorskip("llama_cpp")
    from harness.models.local import packaged_model_path

    args = json.dumps([sorted(flags), info, setting, str(packaged_model_path("smollm2"))])
    proc = subprocess.run([sys.executable, "-c", PARAM_PATH, args], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["use_extra_bufts"] is expected
    assert out["decision"]["extra_buffer_types"] is expected and out["decision"]["setting"] == setting


def test_llama_cpp_default_is_on_so_the_patch_is_what_turns_it_off():
    pytest.importorskip("llama_cpp")
    code = "import llama_cpp.llama_cpp as l; print(l.llama_model_default_params().use_extra_bufts)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.stdout.strip() == "True", proc.stderr


def test_the_launched_server_gets_the_setting():
    backend = create_backend("llamacpp-server/smollm2", BackendOptions(weight_repack="off", context_size=512))
    argv = backend.command(8123)
    assert argv[1:4] == ["-m", "harness.models.llama_child", "server"]
    assert argv[argv.index("--weight-repack") + 1] == "off"
    assert argv[argv.index("--") + 1 : argv.index("--") + 3] == ["--model", str(backend.path)]


def test_on_and_off_are_other_runs_and_auto_keeps_the_run_key():
    """Repacked kernels round differently (Qwen2.5 Q4_K_M, greedy: 114 vs 179 tokens on 5 questions),
    so an explicit on/off is another run; auto, the default, leaves the key as it was before the knob."""
    from harness.execution.config import build_config

    def config(**extra):
        return build_config({"model": "local/smollm2", **extra})

    plain, auto, on, off = config(), config(weight_repack="auto"), config(weight_repack="on"), config(weight_repack="off")
    assert "weight_repack" not in auto.identity()["backend"]
    assert plain.config_hash() == auto.config_hash()
    assert len({auto.config_hash(), on.config_hash(), off.config_hash()}) == 3
    assert auto.backend.weight_repack == "auto"  # recorded all the same (config.backend)


def test_answers_without_the_extra_buffers_are_cached_apart():
    from harness.models.llama_child import repack_identity

    assert repack_identity(None) == {} and repack_identity({"extra_buffer_types": True}) == {}
    assert repack_identity({"extra_buffer_types": False, "setting": "auto"}) == {"extra_buffer_types": False}
    backend = create_backend("local/smollm2", BackendOptions())
    before = backend.cache_identity()
    backend._weight_repack = {"setting": "auto", "extra_buffer_types": False, "reason": "auto: off"}
    assert backend.cache_identity() == before | {"extra_buffer_types": False}


def test_the_report_line_is_read_back_from_a_log(tmp_path):
    log = tmp_path / "server.log"
    first = {"setting": "auto", "extra_buffer_types": True, "reason": "auto: on, no AMX"}
    second = {"setting": "off", "extra_buffer_types": False, "reason": "--weight-repack off"}
    log.write_text(f"noise\n{REPORT_PREFIX}{json.dumps(first)}\nmore\n{REPORT_PREFIX}{json.dumps(second)}\nend\n")
    assert reported_weight_repack(log) == second  # a log appended to across starts: the last one
    assert reported_weight_repack(tmp_path / "none.log") is None


def test_exit_descriptions():
    assert describe_exit(-11) == "signal 11, SIGSEGV"
    assert describe_exit(-9) == "signal 9, SIGKILL"
    assert describe_exit(3) == "exit code 3"
    error = ProcessDiedError("the thing", 42, -6, "/tmp/x.log")
    assert str(error) == "the thing (pid 42) died of signal 6, SIGABRT; its log: /tmp/x.log"
    error.sample_id = "q1"
    assert error.describe() == "the thing (pid 42) died of signal 6, SIGABRT while answering sample q1; its log: /tmp/x.log"


# --------------------------------------------------------------------------- the worker's pipe, no llama
def _fake_worker(code: str) -> list[str]:
    return [sys.executable, "-c", textwrap.dedent(code)]


def test_a_worker_that_dies_while_loading_is_a_process_died_error(tmp_path):
    worker = ModelWorker(_fake_worker("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"), tmp_path, "w.log")
    with pytest.raises(ProcessDiedError) as info:
        asyncio.run(worker.start(30))
    assert info.value.returncode == -signal.SIGSEGV
    assert "signal 11, SIGSEGV" in str(info.value) and str(tmp_path / "w.log") in str(info.value)


SERVES_THEN_DIES = """
    import os, signal, sys
    from multiprocessing.connection import Connection
    out = Connection(os.dup(1), readable=False); inbox = Connection(0, writable=False)
    out.send(("ready", {"n_ctx": 64, "weight_repack": {"setting": "off"}}))
    while True:
        kind, rid, payload = inbox.recv()
        if kind == "tokenize":
            out.send(("result", rid, len(payload.split())))
        elif payload.get("die"):
            print("about to crash", file=sys.stderr, flush=True)
            os.kill(os.getpid(), signal.SIGSEGV)
        else:
            out.send(("result", rid, {"echo": payload["n"]}))
"""


def test_pending_and_later_requests_fail_with_the_signal_once_the_worker_dies(tmp_path):
    worker = ModelWorker(_fake_worker(SERVES_THEN_DIES), tmp_path, "w.log")

    async def go():
        ready = await worker.start(30)
        assert ready["n_ctx"] == 64
        assert await worker.chat({"n": 1}) == {"echo": 1}
        assert worker.count_tokens("three words here") == 3
        with pytest.raises(ProcessDiedError) as info:
            await worker.chat({"die": True})
        with pytest.raises(ProcessDiedError):  # and every request after it, at once
            await worker.chat({"n": 2})
        with pytest.raises(ProcessDiedError):
            worker.count_tokens("x")
        return info.value

    died = asyncio.run(go())
    assert died.returncode == -signal.SIGSEGV and died.pid == worker.pid
    assert "about to crash" in (tmp_path / "w.log").read_text()
    worker.stop()  # safe after a death; the log is kept
    assert (tmp_path / "w.log").exists()


def test_a_clean_stop_is_not_a_death(tmp_path):
    worker = ModelWorker(_fake_worker(SERVES_THEN_DIES), None, "w.log")

    async def go():
        await worker.start(30)
        worker.stop(grace=0.5)  # the fake ignores "close": killed after the grace period
        with pytest.raises(ModelError) as info:
            await worker.chat({"n": 1})
        assert not isinstance(info.value, ProcessDiedError)

    asyncio.run(go())
    assert worker.process.poll() is not None
    assert not worker.log_path.parent.exists()  # a temporary log folder goes with a clean stop


# --------------------------------------------------------------------------- the real model
@pytest.mark.slow
def test_real_model_answers_with_the_extra_buffers_off():
    pytest.importorskip("llama_cpp")
    backend = create_backend("local/smollm2", BackendOptions(weight_repack="off"))

    async def go():
        try:
            await backend.start()
            tokens = backend.count_tokens(FRANCE[0]["content"])
            response = await backend.generate(FRANCE, GenerationParams(max_tokens=16))
            return tokens, response, backend.describe()
        finally:
            await backend.close()

    tokens, response, info = asyncio.run(go())
    assert tokens >= 9  # the crash hit every prompt of 9+ tokens
    assert "Paris" in response.content
    assert response.usage.prompt_tokens > tokens
    assert info["weight_repack"] == {"setting": "off", "extra_buffer_types": False, "reason": "--weight-repack off"}


@pytest.mark.slow
def test_real_server_answers_with_the_extra_buffers_off(tmp_path):
    pytest.importorskip("llama_cpp")
    backend = create_backend("llamacpp-server/smollm2", BackendOptions(weight_repack="off", context_size=1024))
    backend.log_dir = tmp_path

    async def go():
        try:
            await backend.start()
            response = await backend.generate(FRANCE, GenerationParams(max_tokens=16))
            return response, backend.describe()
        finally:
            await backend.close()

    response, info = asyncio.run(go())
    assert "Paris" in response.content
    assert info["weight_repack"]["extra_buffer_types"] is False
    assert info["weight_repack"]["setting"] == "off"


# --------------------------------------------------------------------------- crashes mid-run
def children_of(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def pid_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def model_process(run: subprocess.Popen) -> int:
    """The harness's child that holds the model (the worker or the launched server)."""
    return wait_until(lambda: next(iter(children_of(run.pid)), None), 120, "the model's process")


@pytest.mark.slow
@pytest.mark.parametrize(
    "model, what",
    [
        ("local/smollm2", "the local model's llama.cpp worker process"),
        ("llamacpp-server/smollm2", "the launched llama.cpp server process"),
    ],
)
def test_sigsegv_mid_run_is_one_line_keeps_the_rows_and_the_rerun_resumes(tmp_path, model, what):
    pytest.importorskip("llama_cpp")
    out = tmp_path / "run"
    args = ["run", "--model", model, "--limit", "3", "--max-tokens", "160", "--max-connections", "1", "--no-cache"]
    args += ["--out", str(out)]
    run = subprocess.Popen(harness_cmd(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        holder = model_process(run)
        first = wait_until(lambda: rows(out / "samples.jsonl"), 180, "the first finished sample")
        os.kill(holder, signal.SIGSEGV)  # what llama.cpp's AMX matmul does on an affected CPU
        killed_at = time.monotonic()
        stdout, stderr = run.communicate(timeout=120)
        noticed_s = time.monotonic() - killed_at
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 3, stderr
    assert noticed_s < 15  # its exit is noticed, not 34 s of connection retries
    assert "Traceback" not in stderr
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, stderr
    line = errors[0]
    assert f"{what} (pid {holder}) died of signal 11, SIGSEGV while answering sample" in line
    log = out / "logs" / ("local-model.log" if model.startswith("local/") else "llama-cpp-server.log")
    assert f"its log: {log}" in line and log.exists()
    assert f"1 of 3 samples are finished and kept in {out}" in line
    assert "run the same command again to resume" in line
    assert not pid_alive(holder)

    kept = rows(out / "samples.jsonl")
    assert kept == first  # the row written before the crash, whole and alone
    failed = rows(out / "failures.jsonl")
    assert failed and all(r["error_type"] == "process_died" for r in failed)
    assert "signal 11, SIGSEGV" in failed[0]["error"]
    results = json.loads((out / "results.json").read_text())
    assert results["status"] == "error"
    assert results["counts"]["finished"] == 1
    assert "signal 11, SIGSEGV" in results["invocations"][-1]["error"]

    rerun = run_harness(*args)
    assert rerun.returncode == 0, rerun.stderr
    assert "2 of 3 samples to do" in rerun.stderr
    final = rows(out / "samples.jsonl")
    assert len(final) == 3 and final[0] == first[0]  # the kept row is not redone
    results = json.loads((out / "results.json").read_text())
    assert results["status"] == "complete" and results["counts"]["finished"] == 3
    assert [i["status"] for i in results["invocations"]] == ["error", "complete"]
    assert results["model"]["weight_repack"]["setting"] == "auto"


@pytest.mark.slow
@pytest.mark.parametrize("model", ["local/smollm2", "llamacpp-server/smollm2"])
def test_kill_9_of_the_run_leaves_no_model_process_behind(tmp_path, model):
    pytest.importorskip("llama_cpp")
    args = ["run", "--model", model, "--limit", "3", "--max-tokens", "400", "--no-cache", "--out", str(tmp_path / "run")]
    run = subprocess.Popen(harness_cmd(*args), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO)
    try:
        worker = model_process(run)
        time.sleep(1.0)  # loading or generating
        run.send_signal(signal.SIGKILL)
        run.wait(timeout=30)
        wait_until(lambda: not pid_alive(worker), 10, "the model process to die with the run")
    finally:
        if run.poll() is None:
            run.kill()
