"""Secrets are masked in messages, logs and files; URLs are recorded without credentials."""

from __future__ import annotations

import json
import logging

from harness.records import JsonlAppender, write_json_atomic
from harness.redact import MASK, RedactingFilter, redact, register_secret, strip_credentials


def test_key_values_from_the_environment_are_masked(monkeypatch):
    monkeypatch.setenv("MY_SERVICE_API_KEY", "plainvalue-without-shape-42")
    assert redact("server said: plainvalue-without-shape-42 is wrong") == f"server said: {MASK} is wrong"
    monkeypatch.setenv("SHORT_TOKEN", "abc")  # too short to mask without mangling ordinary text
    assert redact("abc") == "abc"


def test_secret_shapes_are_masked_even_when_unknown():
    assert redact("Authorization: Bearer abcdef123456XYZ") == f"Authorization: Bearer {MASK}"
    assert redact("key sk-proj-AbCdEf0123456789 rejected") == f"key {MASK} rejected"
    assert redact("sk-ant-api03-AbCdEf0123456789") == MASK
    assert redact('{"api_key": "zzzzzzzzzzzz"}') == f'{{"api_key": "{MASK}"}}'
    assert redact("x-api-key=abcdefghijkl") == f"x-api-key={MASK}"
    # ordinary text is left alone
    for text in ("Bearer of bad news", "task-ordering", "the sk- prefix", "api key missing"):
        assert redact(text) == text


def test_registered_secrets_are_masked_in_files(tmp_path):
    register_secret("hunter2-launched-server-key")
    write_json_atomic(tmp_path / "a.json", {"error": "bad key hunter2-launched-server-key"})
    appender = JsonlAppender(tmp_path / "b.jsonl")
    appender.append({"error": "echo: hunter2-launched-server-key"})
    appender.close()
    for name in ("a.json", "b.jsonl"):
        text = (tmp_path / name).read_text()
        assert "hunter2" not in text and MASK in text
    assert json.loads((tmp_path / "a.json").read_text())["error"] == f"bad key {MASK}"


def test_strip_credentials():
    assert strip_credentials("http://user:pass@host:8000/v1") == "http://host:8000/v1"
    assert strip_credentials("https://tok@example.org/v1?x=1") == "https://example.org/v1?x=1"
    assert strip_credentials("http://[::1]:9/v1") == "http://[::1]:9/v1"
    assert strip_credentials("http://u:p@[::1]:9/v1") == "http://[::1]:9/v1"
    assert strip_credentials(None) is None


def test_log_records_are_masked(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-logged-0123456789abc")
    record = logging.LogRecord(
        "x", logging.WARNING, __file__, 1, "retrying: %s", ("401 sk-logged-0123456789abc",), None
    )
    assert RedactingFilter().filter(record)
    assert "sk-logged" not in record.getMessage() and MASK in record.getMessage()
