"""The documentation cannot rot: generated pages equal what the code generates now, every command's
help names its docs page, every block marked runnable runs, and the site builds with --strict."""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
RUNNABLE = re.compile(r"<!-- run -->\n```(\w+)\n(.*?)```", re.S)


def load_gen():
    spec = importlib.util.spec_from_file_location("docs_gen", DOCS / "gen.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    return gen


def test_generated_pages_are_current():
    gen = load_gen()
    assert gen.stale() == [], "run python docs/gen.py"
    cli = (DOCS / "cli.md").read_text(encoding="utf-8")
    # the page holds each command's real help: an option of `run` and of `snapshot build`
    assert "## run\n" in cli and "--max-connections" in cli and "## snapshot build\n" in cli


def test_a_changed_option_makes_the_cli_page_stale(monkeypatch):
    gen = load_gen()
    import harness.commands.power as power

    original = power.add_parser

    def with_extra(sub):
        original(sub)
        sub._sub.choices["power"].add_argument("--renamed-option", help="x")

    monkeypatch.setattr(power, "add_parser", with_extra)
    assert gen.stale() == ["docs/cli.md"]


def test_the_schemas_are_the_record_models():
    import json

    from harness.execution.record import SCHEMAS, json_schema

    for name in SCHEMAS:
        assert json.loads((DOCS / "schema" / f"{name}.json").read_text(encoding="utf-8")) == json_schema(name)


def all_parsers(parser, words=()):
    yield words, parser
    for action in parser._actions:
        if action.__class__.__name__ == "_SubParsersAction":
            for name, child in action.choices.items():
                yield from all_parsers(child, (*words, name))


def test_every_command_help_names_its_docs_anchor():
    cli = (DOCS / "cli.md").read_text(encoding="utf-8")
    seen = 0
    for words, parser in all_parsers(build_parser()):
        text = parser.format_help()
        if not words:
            assert "docs: docs/cli.md" in text
            continue
        anchor = "-".join(words)
        assert f"docs: docs/cli.md#{anchor}" in text, words
        assert f'<a id="{anchor}"></a>' in cli, anchor  # the anchor exists on the page
        seen += 1
    assert seen >= 15  # every sub-command and the snapshot/index sub-sub-commands


def test_help_of_one_command_names_its_anchor():
    proc = subprocess.run(
        [sys.executable, "-m", "harness", "retrieval-eval", "--help"], capture_output=True, text=True, cwd=ROOT
    )
    assert proc.returncode == 0 and proc.stdout.rstrip().endswith("docs: docs/cli.md#retrieval-eval")


def runnable_blocks() -> list[tuple[str, str, str]]:
    found = []
    for page in sorted(DOCS.glob("*.md")):
        for kind, body in RUNNABLE.findall(page.read_text(encoding="utf-8")):
            found.append((page.name, kind, body))
    return found


def test_runnable_blocks_exist():
    pages = {page for page, _, _ in runnable_blocks()}
    assert {"getting-started.md", "reproducing.md", "api.md"} <= pages


@pytest.mark.slow  # runs the harness CLI
@pytest.mark.parametrize("page,kind,body", runnable_blocks(), ids=lambda v: v if v.endswith(".md") else "")
def test_runnable_block_runs(page, kind, body, tmp_path):
    """Each marked block in a fresh folder (tests/ linked in, for fixtures), on the scripted backend."""
    (tmp_path / "tests").symlink_to(ROOT / "tests")
    env = {**os.environ, "HARNESS_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": str(ROOT)}
    if kind == "python":
        commands = [[sys.executable, "-c", body]]
    else:
        assert kind == "bash", f"{page}: a runnable block must be bash or python, not {kind}"
        commands = []
        for line in body.splitlines():
            argv = shlex.split(line, comments=True)
            if argv:
                assert argv[0] == "harness", f"{page}: only harness commands run here: {line}"
                commands.append([sys.executable, "-m", "harness", *argv[1:]])
    for argv in commands:
        proc = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, f"{page}: {shlex.join(argv[2:8])}\n{proc.stdout[-1500:]}\n{proc.stderr[-2500:]}"


@pytest.mark.slow  # a whole mkdocs build
def test_the_site_builds_strict(tmp_path):
    if shutil.which("mkdocs") is None and importlib.util.find_spec("mkdocs") is None:
        pytest.skip("mkdocs is not installed (pip install -e '.[docs]'; .ci/run installs it)")
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "site" / "cli" / "index.html").is_file()
    assert "run_async" in (tmp_path / "site" / "api" / "index.html").read_text(encoding="utf-8")


def test_readme_is_a_front_door():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 250
    blocks = re.findall(r"```bash\n(.*?)```", text, re.S)
    assert blocks[0].startswith("python3 -m venv .venv") and "harness run --limit 10" in blocks[0]
    assert "python -m pytest -q -m 'not slow' && python -m pytest -q -m slow" in blocks[1]
    for link in re.findall(r"\]\((docs/[^)#]+)", text):
        assert (ROOT / link).is_file(), link


def test_ci_builds_the_site_then_runs_the_readme_test_command():
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").rstrip("\n").splitlines()
    readme_tests = re.findall(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(encoding="utf-8"), re.S)[1]
    assert ci[-1] == readme_tests.strip()  # the README's line, byte for byte, as the final step
    assert "'.[docs]'" in ci[-2] and "mkdocs build --strict" in ci[-2]
    assert ".ci/wheel_check.sh" in ci[:-2]  # the built wheel, installed outside the clone, before both
