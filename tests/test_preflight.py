"""Validate before spending: everything checkable is checked before the first model request, and
a doomed run exits 2 with one line, having sent nothing and written nothing."""

from __future__ import annotations

import json
import math

import pytest
from fault_server import FaultServer, run_args
from test_hostile_server import pages_args

from harness.cli import main
from harness.execution.config import build_config
from harness.errors import ConfigError
from harness.models import openai_api


def run(argv, capsys) -> tuple[int, str]:
    capsys.readouterr()
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    return code, capsys.readouterr().err


def one_line(err: str) -> str:
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1, err
    return lines[0]


def fault_run(url, out, *extra):
    return run_args(url, out, *extra, limit="2")


@pytest.mark.parametrize(
    "extra, needle",
    [
        (["--metrics", "em-f1,nosuchmetric"], "unknown metric 'nosuchmetric'"),
        (["--setting", "evidence-provided"], "pass --context-size N"),
        (["--cluster-by", "nosuchfield"], "--cluster-by nosuchfield: no question of hotpotqa"),
    ],
)
def test_doomed_runs_send_nothing(tmp_path, capsys, extra, needle, hotpot_snapshot):
    if "evidence-provided" in extra:
        extra = [*extra, "--snapshot", str(hotpot_snapshot)]
    with FaultServer(context_size=None) as server:
        code, err = run(fault_run(server.url, tmp_path / "run", *extra), capsys)
    assert code == 2 and needle in one_line(err), err
    assert server.served == []  # not one chat request
    assert not (tmp_path / "run").exists()


def test_context_size_given_lets_the_same_run_go(tmp_path, capsys, hotpot_snapshot):
    with FaultServer(context_size=None) as server:
        code, err = run(
            fault_run(server.url, tmp_path / "run", *pages_args("evidence-provided", hotpot_snapshot)), capsys
        )
    assert code == 0, err
    record = json.loads((tmp_path / "run" / "samples.jsonl").read_text().splitlines()[0])
    assert record["extra"]["evidence"]["chunks_packed"] > 0


@pytest.mark.parametrize(
    "records, needle",
    [
        ([{"id": "a"}, {"id": "a"}], "duplicate id 'a'"),
        ([{"id": "a"}, {"question": "no id"}], "needs string fields 'id'"),
    ],
)
def test_data_path_ids_are_checked(tmp_path, capsys, records, needle):
    data = [{"question": "Q?", "answer": "A", "decomposition": [], "categories": [], **r} for r in records]
    path = tmp_path / "data.json"
    path.write_text(json.dumps(data))
    code, err = run(["run", "--data-path", str(path), "--out", str(tmp_path / "run"), "--no-cache"], capsys)
    assert code == 2 and needle in one_line(err) and str(path) in err
    assert not (tmp_path / "run").exists()


def test_duplicate_ids_are_refused_for_every_dataset(tmp_path, capsys):
    """QAMPARI's loader does not check ids itself: the runner does, for every dataset."""
    line = {"qid": "q1", "question_text": "Which?", "answer_list": [{"answer_text": "A", "aliases": ["A"]}]}
    path = tmp_path / "dev_data.jsonl"
    path.write_text(json.dumps(line) + "\n" + json.dumps(line) + "\n")
    code, err = run(
        ["run", "--dataset", "qampari:dev", "--data-path", str(path), "--out", str(tmp_path / "r"), "--no-cache"],
        capsys,
    )
    assert code == 2 and "duplicate sample id 'q1'" in one_line(err)


def test_template_that_does_not_render_is_refused(tmp_path, capsys):
    template = tmp_path / "t.txt"
    template.write_text("Answer {question} using {documents}.")  # closed-book fills no {documents}
    code, err = run(
        ["run", "--prompt-template", str(template), "--out", str(tmp_path / "r"), "--limit", "1", "--no-cache"], capsys
    )
    line = one_line(err)
    assert code == 2 and "{documents}" in line and "closed-book" in line
    template.write_text("Answer {question} in {0} words.")
    code, err = run(["run", "--prompt-template", str(template), "--out", str(tmp_path / "r"), "--no-cache"], capsys)
    assert code == 2 and "does not render" in one_line(err)


def test_unreachable_default_endpoint_stops_before_any_sample(tmp_path, capsys, monkeypatch):
    # The default (api.openai.com) is unreachable here too; a dead loopback port keeps the test
    # independent of DNS, and exercises the same path: no --base-url given.
    monkeypatch.setattr(openai_api, "DEFAULT_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-0123456789abcdef")
    code, err = run(["run", "--model", "openai/gpt-4o", "--limit", "1", "--out", str(tmp_path / "r")], capsys)
    assert code == 2 and "cannot reach the server at http://127.0.0.1:9/v1" in one_line(err)
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize(
    "flat, option",
    [
        ({"temperature": math.nan}, "--temperature"),
        ({"temperature": math.inf}, "--temperature"),
        ({"top_p": 0}, "--top-p"),
        ({"max_tokens": 0}, "--max-tokens"),
        ({"context_size": -1}, "--context-size"),
        ({"request_timeout": 0}, "--request-timeout"),
        ({"sample_timeout": math.nan}, "--sample-timeout"),
        ({"max_cost": math.inf}, "--max-cost"),
        ({"seed": -1}, "--seed"),
        ({"base_url": "localhost:8000"}, "--base-url"),
    ],
)
def test_config_refuses_values_that_would_write_invalid_json(flat, option):
    """Same model for flags and YAML: `temperature: .nan` in a config file is refused too."""
    with pytest.raises(ConfigError, match=option):
        build_config(flat)


def test_results_files_are_strict_json(tmp_path):
    from harness.records import write_json_atomic

    write_json_atomic(tmp_path / "x.json", {"a": math.nan, "b": [math.inf, 1.5]})
    text = (tmp_path / "x.json").read_text()
    assert json.loads(text, parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}")) == {
        "a": None,
        "b": [None, 1.5],
    }
