"""Secrets are masked in messages, logs and files; URLs are recorded without credentials."""

from __future__ import annotations

import base64
import json
import logging

from harness.records import JsonlAppender, write_json_atomic
from harness.redact import (
    MASK,
    RedactingFilter,
    redact,
    redact_data,
    register_secret,
    register_url_credentials,
    strip_credentials,
    url_credential_problem,
)


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


def test_known_keys_are_masked_however_short_but_only_as_whole_words(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "k3Y")
    assert redact("Incorrect API key provided: k3Y.") == f"Incorrect API key provided: {MASK}."
    assert redact("k3Yz and xk3Y are other words") == "k3Yz and xk3Y are other words"
    assert redact("url: http://h/v1?key=k%33Y") == f"url: http://h/v1?key={MASK}"  # a query key, by its shape


def test_url_credentials_are_masked_in_every_form_a_request_carries_them():
    register_url_credentials("http://yuki-user:s%40fe%2Fpw!@h:8/v1,http://h2/v1?access_token=t0k")
    basic = base64.b64encode(b"yuki-user:s@fe/pw!").decode()
    for text in ("s@fe/pw!", "s%40fe%2Fpw!", "s%40fe%2Fpw%21", f"Authorization: Basic {basic}", "t0k"):
        shown = redact(text)
        assert MASK in shown and "pw" not in shown and "t0k" not in shown and basic not in shown, shown
    # unknown ones by their shape: a Basic header that decodes to user:pass, a URL's user:pass@ and key parameters
    other = base64.b64encode(b"someone:else").decode()
    assert redact(f"got Basic {other}") == f"got Basic {MASK}"
    assert redact("Basic settings kept") == "Basic settings kept"
    assert redact("see http://bo:b-pw@host/v1?sig=abc&x=1") == f"see http://{MASK}@host/v1?sig={MASK}&x=1"


def test_strip_credentials_drops_key_parameters_and_keeps_the_rest():
    url = "http://u:p@h:8/v1?api_key=K&x=1&access_token=T&X-Amz-Signature=S&apikey=A"
    assert strip_credentials(url) == "http://h:8/v1?x=1"
    assert strip_credentials("http://h/v1?x=1") == "http://h/v1?x=1"
    assert url_credential_problem("http://h/v1?key=K") == "a key in its query (key)"
    assert "user or password" in url_credential_problem("http://tok@h/v1")
    assert url_credential_problem("http://h/v1?model=x") is None


def test_files_stay_valid_json_when_a_short_key_looks_like_a_value(monkeypatch, tmp_path):
    # masked in the strings, not in the JSON text: `"limit": 1` would become `"limit": [REDACTED]`
    monkeypatch.setenv("OPENAI_API_KEY", "1")
    write_json_atomic(tmp_path / "r.json", {"limit": 1, "error": "key 1 refused", "1": "x"})
    assert json.loads((tmp_path / "r.json").read_text()) == {"limit": 1, "error": f"key {MASK} refused", MASK: "x"}
    assert redact_data({"k": ['say "1"']}) == {"k": [f'say "{MASK}"']}
