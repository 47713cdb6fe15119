"""Plugins from outside the repository, strategy knobs, settings per strategy, and run-key stability.

Fast: the scripted backend answers, in process (``harness.cli.main``). The end-to-end runs of all
four plugin kinds on the local model are in ``test_readme_plugins.py``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import harness
from harness.cli import main
from harness.execution.record import results_dict
from harness.strategy import AGENTS, Knobs, knob

FIXTURES = Path(__file__).parent / "fixtures"

STRATEGY = '''
from harness.strategy import Agent, Knobs, SampleResult, knob


class Shout(Agent):
    """Asks the question in capitals."""

    settings = ("closed-book",)

    class Knobs(Knobs):
        suffix: str = knob("!", "appended to the question")

    async def solve(self, sample, ctx):
        messages = [{"role": "user", "content": sample.question.upper() + self.knobs.suffix}]
        response = await ctx.generate(messages)
        return SampleResult(answer=response.content, messages=messages + [response.as_message()])
'''


def read(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]


def cli(capsys, *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    return code, capsys.readouterr().err


@pytest.fixture
def plugin_dir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "shout.py").write_text(STRATEGY, encoding="utf-8")
    return tmp_path


BASE = ["run", "--model", "scripted/echo", "--dataset", "qampari:sample", "--limit", "2"]


def test_a_strategy_from_a_bare_file(plugin_dir, capsys):
    code, err = cli(capsys, *BASE, "--agent", "shout.py:Shout", "--agent-arg", "suffix=?", "--out", "a")
    assert code == 0, err
    r = read(plugin_dir / "a" / "results.json")
    assert r["agent"]["name"] == "Shout" and r["agent"]["knobs"] == {"suffix": "?"}
    assert r["agent"]["plugin"]["source"] == "file" and len(r["agent"]["plugin"]["sha256"]) == 64
    sample = lines(plugin_dir / "a" / "samples.jsonl")[0]
    assert sample["messages"][0]["content"].endswith("?") and sample["messages"][0]["content"].isupper()
    assert sample["answer"] == sample["messages"][0]["content"]  # scripted/echo: the last user line

    # the same command resumes; an edited plugin is another run, refused in the same directory
    code, err = cli(capsys, *BASE, "--agent", "shout.py:Shout", "--agent-arg", "suffix=?", "--out", "a")
    assert code == 0 and "0 of 2 samples to do" in err
    (plugin_dir / "shout.py").write_text(STRATEGY.replace("upper()", "lower()"), encoding="utf-8")
    code, err = cli(capsys, *BASE, "--agent", "shout.py:Shout", "--agent-arg", "suffix=?", "--out", "a")
    assert code == 2 and "holds a run with a different configuration" in err
    err = " ".join(err.split())
    # what differs (the file, by path, and nothing else), and the two ways on
    assert ": the strategy file shout.py: its content changed (sha256 " in err and "; " not in err.split("): ")[1]
    assert "choose another --out for this configuration, or run the configuration a holds (a/config.json)" in err


def test_a_refused_run_directory_names_every_field_that_differs(plugin_dir, capsys):
    code, err = cli(capsys, *BASE, "--agent", "shout.py:Shout", "--max-tokens", "30", "--out", "a")
    assert code == 0, err
    argv = [*BASE, "--agent", "shout.py:Shout", "--agent-arg", "suffix=?", "--max-tokens", "31", "--temperature", "0.5"]
    code, err = cli(capsys, *argv, "--out", "a")
    err = " ".join(err.split())
    assert code == 2, err
    changes = err.split("): ", 1)[1].split(". To go on")[0].split("; ")
    assert sorted(changes) == sorted(
        ['generation.max_tokens 30 -> 31', 'generation.temperature 0.0 -> 0.5', 'knob suffix "!" -> "?"']
    )
    # another strategy and dataset: said as such, not as each of their facts
    code, err = cli(capsys, "run", "--model", "scripted/echo", "--dataset", "hotpotqa:dev", "--limit", "1",
                    "--max-tokens", "30", "--out", "a")  # fmt: skip
    changes = " ".join(err.split()).split("): ", 1)[1].split(". To go on")[0].split("; ")
    assert code == 2 and changes == ['dataset "qampari:sample" -> "hotpotqa:dev"', 'strategy "Shout" -> "closed-book"']


def test_a_strategy_from_a_module_reference(plugin_dir, capsys, monkeypatch):
    package = plugin_dir / "myplugins"
    package.mkdir()
    (package / "__init__.py").write_text("", encoding="utf-8")
    (package / "loud.py").write_text(STRATEGY, encoding="utf-8")
    monkeypatch.syspath_prepend(str(plugin_dir))
    code, err = cli(capsys, *BASE, "--agent", "myplugins.loud:Shout", "--out", "m")
    assert code == 0, err
    plugin = read(plugin_dir / "m" / "results.json")["agent"]["plugin"]
    assert plugin["source"] == "module" and plugin["ref"] == "myplugins.loud:Shout" and len(plugin["sha256"]) == 64


NOT_AGENT = "class Shout:\n    pass\n"
NO_SETTINGS = STRATEGY.replace('settings = ("closed-book",)', "")
WRONG_SETTING = STRATEGY.replace('("closed-book",)', '("closed-book", "telepathy")')
BROKEN = "import not_a_module_anywhere\n"


@pytest.mark.parametrize(
    "source, args, expected",
    [
        (STRATEGY, ["--agent", "missing.py:Shout"], "agent missing.py:Shout: missing.py not found"),
        (STRATEGY, ["--agent", "cache:Shout"], "unknown agent 'cache:Shout'"),  # not a reference: no dot
        (STRATEGY, ["--agent", "folder.py:Shout"], "folder.py is a folder, not a Python file"),
        (STRATEGY, ["--agent", "shout.py:Whisper"], "shout.py defines no 'Whisper'"),
        (NOT_AGENT, ["--agent", "shout.py:Shout"], "not a strategy (a subclass of harness.strategy.Agent)"),
        (NO_SETTINGS, ["--agent", "shout.py:Shout"], "settings must name at least one of"),
        (WRONG_SETTING, ["--agent", "shout.py:Shout"], "(got 'telepathy')"),
        (BROKEN, ["--agent", "shout.py:Shout"], "importing shout.py failed: ModuleNotFoundError"),
        (STRATEGY, ["--agent", "shout.py:Shout", "--setting", "open-book"], "does not implement --setting open-book"),
        (STRATEGY, ["--agent", "shout.py:Shout", "--agent-arg", "volume=3"], "--agent-arg volume: agent Shout has no such knob (its knobs: suffix)"),
        (STRATEGY, ["--agent", "shout.py:Shout", "--agent-arg", "suffix"], "expected KEY=VALUE"),
        (STRATEGY, ["--setting", "open-book", "--agent", "closed-book"], "agent closed-book does not implement --setting open-book (it implements: closed-book)"),
        (STRATEGY, ["--agent", "open-book-native", "--agent-arg", "max_rounds=0"], "--agent-arg max_rounds: input should be greater than or equal to 1 (got 0)"),
        (STRATEGY, ["--agent", "no-such-agent"], "unknown agent 'no-such-agent' (known: closed-book,"),
        (STRATEGY, ["--metrics", "shout.py:STRATEGY_TEXT"], "shout.py defines no 'STRATEGY_TEXT'"),
        (STRATEGY, ["--dataset", "shout.py:Shout"], "not a dataset loader"),
        (STRATEGY, ["--model", "shout.py:Shout/x"], "not a model backend"),
        (STRATEGY, ["--model", "nope/x"], "unknown model backend 'nope'"),
    ],
)  # fmt: skip
def test_bad_plugins_and_knobs_are_one_line_before_any_model_call(plugin_dir, capsys, source, args, expected):
    (plugin_dir / "shout.py").write_text(source, encoding="utf-8")
    (plugin_dir / "folder.py").mkdir(exist_ok=True)
    code, err = cli(capsys, *BASE, *args, "--out", "bad")
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith("error: ") and expected in err
    assert not (plugin_dir / "bad").exists()  # refused before anything was written


def test_an_old_knob_flag_gets_a_hint(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["run", "--max-rounds", "3"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "strategy knobs are set with --agent-arg, e.g. --agent-arg max_rounds=VALUE" in err


def test_yaml_agent_section_sets_strategy_and_knobs(plugin_dir, capsys):
    (plugin_dir / "run.yaml").write_text(
        "agent:\n  name: shout.py:Shout\n  suffix: '...'\nmodel: scripted/echo\ndataset: qampari:sample\nlimit: 1\n",
        encoding="utf-8",
    )
    code, err = cli(capsys, "run", "--config", "run.yaml", "--out", "y")
    assert code == 0, err
    assert read(plugin_dir / "y" / "results.json")["agent"]["knobs"] == {"suffix": "..."}
    # a flag adds to the YAML section's knobs and overrides it
    code, err = cli(capsys, "run", "--config", "run.yaml", "--agent-arg", "suffix=!!", "--out", "y2")
    assert code == 0, err
    assert read(plugin_dir / "y2" / "results.json")["agent"]["knobs"] == {"suffix": "!!"}


def test_without_setting_a_strategy_runs_in_its_own(plugin_dir, capsys):
    """--agent open-book-text alone is an open-book run (its first setting), not closed-book."""
    from harness.execution.config import build_config
    from harness.strategy import resolve_agent

    entry, setting = resolve_agent("open-book-text", None)
    assert setting == "open-book" and entry.name == "open-book-text"
    assert resolve_agent(None, None)[1] == "closed-book"
    assert build_config({"agent": "open-book-text"}).setting is None  # resolved by the run, recorded resolved


# run-key stability ----------------------------------------------------------------------------------
STORED = FIXTURES / "run_key" / "qampari-closed-book-scripted"
STORED_COMMAND = ["--model", "scripted/answer=Paris", "--dataset", "qampari:sample", "--limit", "2"]


def test_a_run_made_by_this_release_resumes(tmp_path, capsys, monkeypatch):
    """The run directory in fixtures was made by this release (``harness run`` + STORED_COMMAND):
    the same command must find it, with the same run key, and have nothing left to do."""
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path / "cache"))
    run_dir = tmp_path / "run"
    shutil.copytree(STORED, run_dir)
    stored = read(run_dir / "results.json")
    code, err = cli(capsys, "run", *STORED_COMMAND, "--out", str(run_dir))
    assert code == 0, err
    assert "0 of 2 samples to do" in err
    assert read(run_dir / "results.json")["config_hash"] == stored["config_hash"]


def _run(tmp_path, **options):
    return results_dict(harness.run(  # the JSON written
        model="scripted/answer=Paris", dataset="qampari:sample", limit=2, show_progress=False,
        cache_path=str(tmp_path / "cache.sqlite"), **options,
    ))  # fmt: skip


def test_a_knob_added_with_its_neutral_value_keeps_the_run_key(tmp_path, monkeypatch):
    closed_book = AGENTS.get("closed-book")
    first = _run(tmp_path, out=str(tmp_path / "run"))

    class WithNewKnob(closed_book.Knobs):
        polite: bool = knob(False, "say please (added later)", neutral=False)

    monkeypatch.setattr(closed_book, "Knobs", WithNewKnob)
    resumed = _run(tmp_path, out=str(tmp_path / "run"))
    assert resumed["config_hash"] == first["config_hash"]
    assert resumed["invocations"][-1]["attempted"] == 0  # nothing redone
    assert resumed["agent"]["knobs"]["polite"] is False  # recorded all the same

    # set away from its neutral value, the knob is part of the key: another run
    other = _run(tmp_path, out=str(tmp_path / "other"), agent_args={"polite": True})
    assert other["config_hash"] != first["config_hash"]


def test_knobs_and_defaults_are_hashed_by_value(tmp_path, monkeypatch):
    closed_book = AGENTS.get("closed-book")
    first = _run(tmp_path, out=str(tmp_path / "run"))

    class WithoutNeutral(closed_book.Knobs):
        polite: bool = knob(False, "added without a neutral value")

    monkeypatch.setattr(closed_book, "Knobs", WithoutNeutral)
    assert _run(tmp_path, out=str(tmp_path / "b"))["config_hash"] != first["config_hash"]

    class ChangedDefault(Knobs):
        polite: bool = knob(True, "neutral False, but the default moved", neutral=False)

    monkeypatch.setattr(closed_book, "Knobs", ChangedDefault)
    assert _run(tmp_path, out=str(tmp_path / "c"))["config_hash"] != first["config_hash"]


def test_run_key_ignores_how_the_default_strategy_was_named(tmp_path):
    """--agent closed-book is the closed-book setting's default: the same run as naming neither."""
    first = _run(tmp_path, out=str(tmp_path / "run"))
    named = _run(tmp_path, out=str(tmp_path / "run"), agent="closed-book", setting="closed-book")
    assert named["config_hash"] == first["config_hash"]


def test_export_refuses_a_strategy_outside_its_setting(tmp_path):
    from harness.errors import HarnessError
    from harness.analysis.export import check_strategy_implements

    check_strategy_implements(tmp_path, "open-book-text", ["open-book"], "open-book")
    with pytest.raises(HarnessError, match="does not implement the open-book setting"):
        check_strategy_implements(tmp_path, "closed-book", ["closed-book"], "open-book")
    # a run recorded before strategies declared settings: checked against the declaration now
    with pytest.raises(HarnessError, match="agent closed-book does not implement the open-book setting"):
        check_strategy_implements(tmp_path, "closed-book", None, "open-book")


def test_plugins_are_listed(plugin_dir, capsys):
    code = main(["list", "agents", "-v"])
    out = capsys.readouterr().out
    assert code == 0
    assert "open-book-native  [builtin] (settings: open-book)" in out
    assert "--agent-arg max_rounds (int, default 20)" in out
    for kind, name in (("metrics", "set-f1"), ("backends", "scripted"), ("datasets", "qampari")):
        assert main(["list", kind]) == 0
        assert f"{name}  [builtin]" in capsys.readouterr().out


METRIC_PLUGIN = """
from pydantic import Field

from harness.scoring.metrics import MetricOptions, declare


class WordOptions(MetricOptions):
    unit: str = Field("words", description="what is counted")


@declare(accepts=("list_of_str", "entity_list"), options=WordOptions)
def words(questions, answers, only_answered, options=None, unit="words"):
    \"\"\"Words per answer.\"\"\"
    return {"raw": {q.id: {"n": 1} for q in questions}}
"""


def test_a_plugin_file_is_listed_as_a_builtin_is(plugin_dir, capsys):
    import hashlib

    sha = hashlib.sha256((plugin_dir / "shout.py").read_bytes()).hexdigest()[:12]
    assert main(["list", "agents", "-v", "shout.py:Shout", "closed-book"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"shout.py:Shout  [file shout.py, sha256 {sha}] (settings: closed-book)  Asks the question in capitals."
    assert out[1] == "    --agent-arg suffix (str, default '!'): appended to the question"
    assert out[2].startswith("closed-book  [builtin] (settings: closed-book)  ") and len(out) == 3
    (plugin_dir / "words.py").write_text(METRIC_PLUGIN, encoding="utf-8")
    assert main(["list", "metrics", "-v", "words.py:words"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("words.py:words  [file words.py, sha256 ") and out[0].endswith("(scored as words)  Words per answer.")
    assert out[1:] == [
        "    scores golds: list_of_str, entity_list; answers: any",
        "    --metric-option words.py:words.unit (str, default 'words'): what is counted",
        "    numbers: unbounded",  # it declares no kinds: each number unbounded (no Wilson, no clipping)
    ]
    # a name that cannot be loaded is an error when named, and a name needs its kind
    code, err = cli(capsys, "list", "agents", "-v", "missing.py:Shout")
    assert code == 2 and "agent missing.py:Shout: missing.py not found" in err
    code, err = cli(capsys, "list", "shout.py:Shout")
    assert code == 2 and "not a kind" in err


def test_help_lists_registry_names(capsys):
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "strategy: closed-book, conversational," in out and "backends: anthropic, llamacpp-server, local," in out
    assert "datasets: fanoutqa, hotpotqa, qampari, quest, topiocqa" in out


def test_the_api_works_inside_a_running_event_loop(tmp_path):
    """A notebook cell runs inside an event loop: harness.run must not need asyncio.run there."""
    import asyncio

    async def notebook_cell():
        return _run(tmp_path, out=str(tmp_path / "nb"))

    results = asyncio.run(notebook_cell())
    assert results["counts"]["finished"] == 2 and results["model"]["scripted"] is True
    before = (tmp_path / "nb" / "results.json").read_bytes()
    scores = harness.score(str(tmp_path / "nb"), metrics=["em-f1"], save=False, drop_other_metrics=True)
    assert scores["meta"]["metrics"] == ["em-f1"]
    assert (tmp_path / "nb" / "results.json").read_bytes() == before  # save=False: nothing rewritten
    answers = [{"id": s, "answer": "Paris"} for s in results["sample_ids"]]
    direct = harness.score(dataset="qampari:sample", generations=answers, metrics="set-f1")
    assert direct["meta"]["n_answered"] == 2
