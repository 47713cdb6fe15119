"""--reasoning-effort and --thinking-budget: sent by the backends that send them, checked against the
model's facts, and refused in one line before anything runs where they would be ignored."""

from __future__ import annotations

import pytest

from harness.cli import main
from harness.models import create_backend
from harness.models.base import BackendOptions, GenerationParams

REFUSED = [
    (["--model", "openai/gpt-4o", "--reasoning-effort", "low"], "openai/gpt-4o takes no effort"),
    (["--model", "openai/gpt-5", "--reasoning-effort", "xhigh"], "openai/gpt-5 takes minimal, low, medium, high"),
    (["--model", "openai/gpt-5", "--thinking-budget", "2048"], "Anthropic's extended thinking: anthropic/ only"),
    (["--model", "scripted/echo", "--thinking-budget", "2048"], "scripted/echo does not send it"),
    (["--model", "scripted/echo", "--reasoning-effort", "low"], "scripted/echo does not send it"),
    (["--model", "local/smollm2", "--reasoning-effort", "low"], "local/smollm2 does not send it"),
    (["--model", "anthropic/claude-3-5-haiku", "--thinking-budget", "2048"], "does not think"),
    (["--model", "anthropic/claude-sonnet-4-5", "--reasoning-effort", "low"], "takes no effort"),
]


@pytest.mark.parametrize("args, said", REFUSED)
def test_a_knob_the_model_would_not_get_is_one_line_before_anything_runs(args, said, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    out = tmp_path / "run"
    # no server anywhere: a request or a reachability check would fail with another message
    code = main(["run", *args, "--limit", "1", "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and said in err and len(err.splitlines()) == 1, err
    assert "sk-test" not in err and not out.exists()


def test_vllm_and_compatible_servers_are_sent_the_effort():
    params = GenerationParams(reasoning_effort="high")
    hello = [{"role": "user", "content": "hi"}]
    vllm = create_backend("vllm/openai/gpt-oss-20b", BackendOptions(base_url="http://127.0.0.1:9/v1"))
    vllm.check_params(params)
    assert vllm.request_kwargs(hello, params, None, None)["reasoning_effort"] == "high"
    assert "reasoning_effort" not in vllm.request_kwargs(hello, GenerationParams(), None, None)
    # an unknown model on OpenAI's endpoint is sent what is asked (its probe shows what it refuses)
    create_backend("openai/gpt-9", BackendOptions()).check_params(params)


@pytest.mark.parametrize(
    "url, api", [("https://api.openai.com/v1/", "responses"), ("http://127.0.0.1:9/v1", "chat"), (None, "responses")]
)
def test_openai_base_url_naming_openais_own_endpoint_keeps_the_responses_api(url, api, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    if url:
        monkeypatch.setenv("OPENAI_BASE_URL", url)
    else:
        monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    assert create_backend("openai/gpt-5", BackendOptions()).describe()["api"] == api
