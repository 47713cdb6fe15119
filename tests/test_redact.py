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
    registered_secrets,
    restore_registered,
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


def test_a_user_name_beside_a_password_is_no_secret_and_roles_are_never_masked():
    """``http://user:pw@host``: only the password (and the Basic pair) is a secret; masking the user
    name rewrote every transcript's ``"role": "user"`` (a whole run's rows, found by the slow tier)."""
    register_url_credentials("http://user:pw-9d2k@h:8/v1")
    assert redact("the user said pw-9d2k") == f"the user said {MASK}"
    message = {"role": "user", "content": "the user said pw-9d2k"}
    assert redact_data(message) == {"role": "user", "content": f"the user said {MASK}"}
    # a token given as the user name (no password) is the credential
    register_url_credentials("http://tok3n-only@h:8/v1")
    assert redact("sent tok3n-only") == f"sent {MASK}"
    # a secret that is a role word is masked everywhere but in a role
    register_secret("assistant")
    shown = redact_data([{"role": "assistant", "content": "assistant"}, {"name": "assistant"}])
    assert shown == [{"role": "assistant", "content": MASK}, {"name": MASK}]


def test_registered_secrets_are_restored_whole(monkeypatch):
    before = registered_secrets()
    register_secret("zq-once-9f")
    assert redact("zq-once-9f") == MASK
    restore_registered(before)
    assert redact("zq-once-9f") == "zq-once-9f"  # the cached masker is not reused


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


def test_a_key_base64_encoded_is_masked_at_every_alignment_with_and_without_bearer(monkeypatch, tmp_path):
    key = "sk-proj-B64EchoedKey0123456789abcdef"
    monkeypatch.setenv("OPENAI_API_KEY", key)
    shown = []
    for prefix in ("", "Bearer ", "x", "xy", "Authorization: Bearer ", '{"authorization": "Bearer '):
        for encode in (base64.b64encode, base64.urlsafe_b64encode):
            for suffix in ("", '"}', "!"):
                encoded = encode((prefix + key + suffix).encode()).decode()
                text = redact(f"the server said: {encoded}")
                assert MASK in text and encoded not in text, (prefix, text)
                shown.append(text)
                # what is left of the encoding decodes to no part of the key longer than 3 characters
                rest = text.rsplit(" ", 1)[1].replace(MASK, " ").split()
                for piece in rest:
                    for cut in range(4):
                        try:
                            decoded = base64.b64decode(piece[cut:] + "==", altchars=b"-_").decode("latin-1")
                        except ValueError:
                            continue
                        assert not any(key[i : i + 4] in decoded for i in range(len(key) - 3)), (piece, decoded)
    # in files, through the same masking (values, keys' JSON forms)
    echoed = base64.b64encode(f"Bearer {key}".encode()).decode()
    write_json_atomic(tmp_path / "a.json", {"answer": f"you sent {echoed}"})
    assert echoed not in (tmp_path / "a.json").read_text() and MASK in (tmp_path / "a.json").read_text()


def test_a_short_key_base64_encoded_is_masked_in_its_bearer_form_only(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "k3Y")
    for prefix in (b"", b"Authorization: ", b"x-"):
        echoed = base64.b64encode(prefix + b"Bearer k3Y").decode()
        shown = redact(echoed)
        head = shown.split(MASK)[0]
        assert MASK in shown and b"Bearer" not in base64.b64decode(head + "=" * (-len(head) % 4) or ""), shown
    ordinary = base64.b64encode(b"an ordinary line of text, k3Y apart").decode()
    assert redact(ordinary) == ordinary  # the key's own 4 base64 characters are too short to mask alone


def test_a_fragment_is_refused_stripped_and_masked():
    assert "a fragment" in url_credential_problem("http://h:8/v1#token=T0k3n")
    assert "a fragment" in url_credential_problem("http://h:8/v1#")
    assert strip_credentials("http://u:p@h:8/v1?x=1&api_key=K#token=T0k3n") == "http://h:8/v1?x=1"
    assert strip_credentials("http://h:8/v1#sk-bare") == "http://h:8/v1"
    assert redact("see http://h/v1#token=T0k3n&x=1") == f"see http://h/v1#token={MASK}&x=1"
    register_url_credentials("http://h:8/v1#sk-fragment-only-key")  # no name=value: the whole fragment
    assert redact("echo sk-fragment-only-key") == f"echo {MASK}"
