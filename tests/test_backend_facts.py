"""Facts live with their owner: each backend says the longest context its model takes before it is
started (``max_context_size()``), and ``harness ablate`` asks it rather than guessing from the name."""

from __future__ import annotations

import pytest

from harness.analysis.ablate import max_supported_context
from harness.models import BackendOptions, create_backend
from harness.models.gguf import read_gguf_metadata
from harness.models.local import packaged_model_path


def trained_length(model: str) -> int:
    meta = read_gguf_metadata(packaged_model_path(model))
    return int(meta[f"{meta['general.architecture']}.context_length"])


@pytest.mark.parametrize(
    "model, expected",
    [
        ("local/smollm2", lambda: trained_length("smollm2")),
        ("llamacpp-server/smollm2", lambda: trained_length("smollm2")),
        ("openai/gpt-4o-mini", lambda: 128_000),  # OpenAI's documented window
        ("openai/some-server-model", lambda: None),  # not OpenAI's: the backend does not know it
        ("anthropic/claude-sonnet-4-5", lambda: 200_000),  # its facts-table entry
        ("anthropic/claude-not-in-the-table", lambda: None),  # unknown: not guessed from the name
        ("vllm/Qwen/Qwen2.5-0.5B-Instruct", lambda: None),  # the server refuses a length it cannot take
        ("scripted/echo", lambda: None),
    ],
)
def test_every_backend_reports_its_longest_context_before_it_starts(model, expected):
    backend = create_backend(model, BackendOptions())
    assert backend.max_context_size() == expected()
    assert max_supported_context(model) == expected()  # ablate asks the backend, nothing else


def test_a_context_size_option_does_not_change_what_the_model_supports():
    backend = create_backend("local/smollm2", BackendOptions(context_size=512))
    assert backend.max_context_size() == trained_length("smollm2")
