"""docs/plugins.md (writing a strategy, a metric, a dataset and a backend), executed as written: its files are
written to a temporary directory, its commands run there (``harness`` as ``python -m harness``;
``pip install .`` into a temporary target that only these commands see), on the embedded local
model. Then the runs are checked: all four plugins were used, from files and from the installed
package's entry points, with their identities recorded."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "plugins.md"
BLOCK = re.compile(r"```(\w+)\n(.*?)```", re.S)


def readme_blocks() -> list[tuple[str, str]]:
    """The plugins page's code blocks, in order (the tutorial's files and commands)."""
    return BLOCK.findall(PAGE.read_text(encoding="utf-8"))


def test_the_plugins_page_has_every_kind_of_block():
    blocks = readme_blocks()
    files = [body.splitlines()[0] for kind, body in blocks if body.startswith("# file: ")]
    assert files == [
        "# file: answer_twice.py",
        "# file: answer_length.py",
        "# file: capitals.py",
        "# file: brief_local.py",
        "# file: scripted_replies.py",
        "# file: pyproject.toml",
    ]
    assert sum(1 for kind, _ in blocks if kind == "bash") == 3
    assert sum(1 for _, body in blocks if body.startswith("# run: python")) == 1


def run_readme(work: Path) -> list[subprocess.CompletedProcess]:
    site = work.parent / "site"
    env = {
        **os.environ,
        "HARNESS_CACHE_DIR": str(work.parent / "cache"),
        "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)]),
    }
    (work / "tests").symlink_to(ROOT / "tests")  # the fixture a snapshot is built from, as in a checkout
    done = []
    for kind, body in readme_blocks():
        first = body.splitlines()[0]
        if first.startswith("# file: "):
            (work / first[len("# file: ") :]).write_text(body, encoding="utf-8")
            continue
        if first.startswith("# run: python"):
            commands = [[sys.executable, "-c", body]]
        elif kind == "bash":
            commands = []
            for line in body.splitlines():
                argv = shlex.split(line)
                if argv[:2] == ["pip", "install"]:  # into a target only these commands see
                    argv = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                            "--target", str(site), *argv[2:]]  # fmt: skip
                elif argv[0] == "harness":
                    argv = [sys.executable, "-m", "harness", *argv[1:]]
                commands.append(argv)
        else:
            continue
        for argv in commands:
            proc = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True, timeout=900)
            assert proc.returncode == 0, f"{shlex.join(argv[:6])}...\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
            done.append(proc)
    return done


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    work = tmp_path_factory.mktemp("readme") / "work"
    work.mkdir()
    return work, run_readme(work)


def results(path: Path) -> dict:
    return json.loads((path / "results.json").read_text(encoding="utf-8"))


def samples(path: Path) -> list[dict]:
    return [json.loads(line) for line in (path / "samples.jsonl").read_text(encoding="utf-8").splitlines()]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_scripted_model_section_runs_as_written(tmp_path, monkeypatch):
    """"Testing a strategy without a model": its script file drives the tutorial's strategy and the
    built-in open-book strategy's tool calls, from the CLI, in process (no model: fast)."""
    from harness.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "tests").symlink_to(ROOT / "tests")
    blocks = readme_blocks()
    for _, body in blocks:
        first = body.splitlines()[0]
        if first in ("# file: answer_twice.py", "# file: capitals.py", "# file: scripted_replies.py"):
            (tmp_path / first[len("# file: ") :]).write_text(body, encoding="utf-8")
    (commands,) = [body for kind, body in blocks if kind == "bash" and "scripted/scripted_replies.py" in body]
    for line in commands.splitlines():
        argv = shlex.split(line)
        assert argv[0] == "harness" and main(argv[1:]) == 0, line

    r = results(tmp_path / "runs" / "scripted")
    assert r["model"]["script"] == {
        "name": "scripted_replies.py:reply",
        "source": "file",
        "identity": f"file:reply@{sha256(tmp_path / 'scripted_replies.py')}",
        "file": "scripted_replies.py",
        "sha256": sha256(tmp_path / "scripted_replies.py"),
    }
    for s in samples(tmp_path / "runs" / "scripted"):  # the strategy's loop: answer, revise once
        assert [m["role"] for m in s["messages"]] == ["user", "assistant"] * 2 and s["model_calls"] == 2
        assert s["answer"] == "Switzerland\nAustria"
    assert {row["question_id"]: row["set-f1"]["f1"] for row in r["scores"]["raw"]} == {"cap-1": 1.0, "cap-2": 0.0}

    tools = samples(tmp_path / "runs" / "scripted-tools")
    for s in tools:  # the open-book loop: a search tool call, its result, the answer
        assert [m["role"] for m in s["messages"]] == ["user", "assistant", "tool", "assistant"]
        (call,) = s["messages"][1]["tool_calls"]
        assert call["function"]["name"] == "search" and json.loads(call["function"]["arguments"]) == {"query": "Ed Wood"}
        assert s["extra"]["searches"][0]["found_title"] == "Ed Wood" and s["answer"] == "yes"
    r = results(tmp_path / "runs" / "scripted-tools")
    assert r["agent"]["protocol"] == "native" and r["scores"]["agent"]["searches"] == 1.0


@pytest.mark.slow
def test_plugins_from_files_run_end_to_end(executed):
    work, _ = executed
    run = work / "runs" / "from-files"
    r = results(run)
    assert r["counts"] == {**r["counts"], "selected": 2, "finished": 2, "failed": 0}
    assert r["agent"]["plugin"] == {
        "name": "AnswerTwice",
        "source": "file",
        "ref": "answer_twice.py:AnswerTwice",
        "file": "answer_twice.py",
        "sha256": sha256(work / "answer_twice.py"),
    }
    assert r["agent"]["knobs"] == {"revisions": 2} and r["agent"]["settings"] == ["closed-book"]
    assert r["model"]["plugin"]["sha256"] == sha256(work / "brief_local.py")
    assert r["model"]["backend"] == "BriefLocal" and r["model"]["model"] == "smollm2"
    assert r["dataset"]["plugin"]["sha256"] == sha256(work / "capitals.py")
    assert r["dataset"]["spec"] == "capitals.py:Capitals:dev@v1" and r["dataset"]["sha256"] == sha256(
        work / "capitals.py"
    )
    assert set(r["scores"]["meta"]["metrics"]) == {"answer_length", "set-f1"}
    assert r["scores"]["meta"]["metric_info"]["answer_length"]["plugin"]["source"] == "file"
    for s in samples(run):
        # the strategy's loop as written: question, answer, then 2 x (revise request, answer)
        assert [m["role"] for m in s["messages"]] == ["user", "assistant"] * 3
        assert s["model_calls"] + s["cache_hits"] == 3
    words = {row["question_id"]: row["answer_length"]["words"] for row in r["scores"]["raw"]}
    assert words == {s["id"]: len(s["answer"].split()) for s in samples(run)}


@pytest.mark.slow
def test_plugins_from_an_installed_package_run_end_to_end(executed):
    work, procs = executed
    listing = next(p.stdout for p in procs if "answer-twice" in p.stdout and "[" in p.stdout)
    assert re.search(r"^answer-twice  \[entry point \(harness-capitals-plugin 0\.1\.0\)\]", listing, re.M)
    assert re.search(r"^closed-book  \[builtin\]", listing, re.M)
    r = results(work / "runs" / "from-package")
    identity = {"source": "entry-point", "package": "harness-capitals-plugin", "version": "0.1.0"}
    assert r["agent"]["plugin"] == {"name": "answer-twice", "ref": "answer_twice:AnswerTwice", **identity}
    assert r["model"]["plugin"] == {"name": "brief-local", "ref": "brief_local:BriefLocal", **identity}
    assert r["dataset"]["plugin"] == {"name": "capitals", "ref": "capitals:Capitals", **identity}
    assert r["dataset"]["spec"] == "capitals:dev@v1"
    assert set(r["scores"]["meta"]["metrics"]) == {"answer-length", "set-f1"}
    # the same strategy code and model as the file run, decoding greedily, with revisions=1 (its default)
    # where the file run asked for 2: each transcript is the file run's first two rounds, word for word
    # (their final answers may differ: the file run revised once more)
    files = results(work / "runs" / "from-files")
    assert r["run_id"] != files["run_id"]  # another plugin identity: another run
    assert r["agent"]["knobs"] == {"revisions": 1} and files["agent"]["knobs"] == {"revisions": 2}
    package_rows, file_rows = samples(work / "runs" / "from-package"), samples(work / "runs" / "from-files")
    assert [s["id"] for s in package_rows] == [s["id"] for s in file_rows]
    for package_row, file_row in zip(package_rows, file_rows):
        assert package_row["messages"] == file_row["messages"][:4]
        assert package_row["answer"] == package_row["messages"][-1]["content"]


@pytest.mark.slow
def test_the_python_api_runs_and_rescores(executed):
    work, procs = executed
    r = results(work / "runs" / "from-python")
    assert r["agent"]["knobs"] == {"revisions": 0}
    printed = procs[-1].stdout.splitlines()
    assert printed[0].startswith("{'revisions': 0} {'words': ")
    # harness.score re-scored the metric asked for into results.json, kept the other, and returned the same numbers
    assert r["scores"]["meta"]["metrics"] == ["answer-length", "set-f1"] and r["scores"]["meta"]["kept_metrics"] == [
        "answer-length"
    ]
    assert float(printed[1]) == r["scores"]["set-f1"]["f1"]
