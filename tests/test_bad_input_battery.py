"""Every sub-command × every path option given a bad path, and every numeric option given 0, -1, nan
and a huge value: one line naming the option (or the path) and the problem, exit 2, no traceback,
nothing written. Cases where the value is legitimate are listed in ACCEPTED (and not run).

The numeric options are read from the parser itself, so an option added later is covered without
editing this file. Every run points at a dead loopback URL: a case that wrongly passes validation
cannot reach a model (and then fails the test on its message)."""

from __future__ import annotations

import argparse
import json
import os
import stat
from pathlib import Path

import pytest
from fault_server import FaultServer
from hostile_fs import deadline, make_device, unblock_fifo

from harness.cli import build_parser, main

DEAD_URL = "http://127.0.0.1:9/v1"
PHYSICS = Path(__file__).parent / "fixtures" / "wikipedia_en_science_physics_10.json"


# ---------------------------------------------------------------------------- the world
@pytest.fixture(scope="module")
def world(tmp_path_factory, hotpot_snapshot):
    """Real inputs the bad one replaces: a snapshot, a finished run, a generations file."""
    base = tmp_path_factory.mktemp("battery-world")
    run_dir = base / "finished-run"
    with FaultServer() as server:
        code = main(
            ["run", "--model", "openai/m", "--base-url", server.url, "--dataset", "hotpotqa:dev", "--limit", "1"]
            + ["--out", str(run_dir), "--no-cache", "--cache-path", str(base / "c.sqlite")]
        )
    assert code == 0
    gens = base / "gens.jsonl"
    gens.write_text(json.dumps({"id": json.loads((run_dir / "samples.jsonl").read_text())["id"], "answer": "x"}) + "\n")
    cache = base / "page-cache"  # a FanOutQA page cache, for snapshot build --titles
    cache.mkdir()
    (cache / "12-dated.md").write_text("A page.\n")
    return {"snapshot": str(hotpot_snapshot), "run_dir": str(run_dir), "generations": str(gens), "page_cache": str(cache)}


def bases(world, out: Path) -> dict[str, list[str]]:
    """A command line per sub-command that is valid but for the option under test."""
    run = ["--model", "openai/m", "--base-url", DEAD_URL, "--dataset", "hotpotqa:dev", "--limit", "1"]
    snap = world["snapshot"]
    return {
        "run": ["run", *run, "--out", str(out / "run")],
        "ablate": ["ablate", "--context-sizes", "1024", "--setting", "evidence-provided", "--snapshot", snap, *run]
        + ["--out", str(out / "ablation")],
        "score": ["score", "--dataset", "hotpotqa:dev", "--generations", world["generations"]],
        "score RUN_DIR": ["score", world["run_dir"]],
        "ceiling": ["ceiling", "--context-sizes", "1024", "--dataset", "hotpotqa:dev", "--limit", "1"]
        + ["--snapshot", snap],
        "snapshot build": ["snapshot", "build", "--from", str(PHYSICS), "--out", str(out / "new.db"), "--quiet"],
        "snapshot build --overwrite": ["snapshot", "build", "--from", str(PHYSICS), "--overwrite", "--quiet"],
        "snapshot build cache": ["snapshot", "build", "--from", world["page_cache"], "--kind", "fanoutqa-cache"]
        + ["--out", str(out / "cache.db"), "--quiet"],
        "snapshot info": ["snapshot", "info"],
        "snapshot search": ["snapshot", "search", snap, "Physics"],
        "leaderboard": ["leaderboard", str(Path(world["run_dir"]).parent)],
        "export": ["export", "fanoutqa-submission", world["run_dir"], "--out", str(out / "submission")]
        + ["--name", "X", "--authors", "A", "--citation", "", "--type", "OTHER"],
        "report": ["report", world["run_dir"]],
        "index build": ["index", "build", snap, "--kind", "bm25", "--quiet"],
        "index info": ["index", "info"],
        "index search": ["index", "search", snap, "Physics"],
        "retrieval-eval": ["retrieval-eval", "--dataset", "hotpotqa:dev", "--snapshot", snap, "--limit", "1"],
        "compare": ["compare", world["run_dir"], world["run_dir"]],
        "table": ["table", world["run_dir"]],
        "power": ["power", world["run_dir"], "--metric", "em-f1.em", "--delta", "0.1"],
        "search serve": ["search", "serve", snap],
    }


def invoke(argv: list[str], capsys, timeout: int = 60) -> tuple[int, str]:
    capsys.readouterr()
    try:
        with deadline(timeout):
            code = main(argv)
    except SystemExit as exc:  # argparse
        code = exc.code
    return code, capsys.readouterr().err


def listing(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if "cache" not in p.parts}


def assert_one_line_exit_2(code, err, *needles):
    assert "Traceback" not in err, err
    lines = [x for x in err.splitlines() if x.strip()]
    assert code == 2, (code, err)
    assert len(lines) == 1, err
    assert lines[0].startswith("error: "), lines[0]
    assert any(n in lines[0] for n in needles), (needles, lines[0])


# ---------------------------------------------------------------------------- numbers
def numeric_options() -> list[tuple[str, str, str]]:
    """(sub-command, option, int|float) for every numeric option of every sub-command."""
    found = []

    def walk(parser, prefix):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, [*prefix, name])
            elif action.option_strings and getattr(action.type, "__name__", None) in ("int", "float"):
                found.append((" ".join(prefix), action.option_strings[-1], action.type.__name__))

    walk(build_parser(), [])
    return found


HUGE = {"int": "1" + "0" * 30, "float": "1e308"}
# legitimate values: 0 means "greedy", "none", "no reserve", "no rate limit", ...
ACCEPTED = {
    (cmd, opt, "0")
    for cmd in ("run", "ablate", "ceiling")
    for opt in ("--temperature", "--seed", "--max-cost", "--retry-max-wait")
} | {
    ("snapshot build", "--rate-limit", "0"),
    ("run", "--search-rate-limit", "0"),
    ("ablate", "--search-rate-limit", "0"),
    ("index build", "--bm25-k1", "0"),
    ("index build", "--bm25-b", "0"),
    ("index build", "--bm25-delta", "0"),
    ("search serve", "--port", "0"),  # a free port
}


NUMERIC_CASES = [
    (cmd, opt, value)
    for cmd, opt, kind in numeric_options()
    for value in ("0", "-1", "nan", HUGE[kind])
    if (cmd, opt, value) not in ACCEPTED
]


def test_the_battery_covers_every_sub_command():
    commands = {cmd for cmd, _, _ in numeric_options()}
    assert {"run", "ablate", "ceiling", "snapshot build", "index build", "export", "retrieval-eval"} <= commands
    assert len(NUMERIC_CASES) > 150


@pytest.mark.parametrize("cmd, option, value", NUMERIC_CASES, ids=lambda x: str(x)[:12])
def test_numeric_option_out_of_range(cmd, option, value, world, tmp_path, capsys):
    base = bases(world, tmp_path)[cmd]
    before = listing(tmp_path)
    code, err = invoke([*base, f"{option}={value}"], capsys)
    assert_one_line_exit_2(code, err, option)
    assert listing(tmp_path) == before


# ---------------------------------------------------------------------------- strategy knobs
def numeric_knobs() -> list[tuple[str, str, str]]:
    """(strategy, knob, int|float) for every numeric knob of every built-in strategy."""
    from harness.strategy import AGENTS

    found = []
    for name in AGENTS.names():
        for knob, info in AGENTS.get(name).Knobs.model_fields.items():
            kinds = [k for k in ("int", "float") if k in str(info.annotation) or getattr(info.annotation, "__name__", "") == k]
            if kinds:
                found.append((name, knob, kinds[0]))
    return found


# legitimate zeros: "offer no similar titles", "no answer reserve", BM25 parameters
KNOB_ZERO_OK = {"max_similar", "evidence_reserve", "bm25_k1", "bm25_b", "bm25_delta"}
KNOB_CASES = [
    (agent, knob, value)
    for agent, knob, kind in numeric_knobs()
    for value in ("0", "-1", "nan", HUGE[kind])
    if not (value == "0" and knob in KNOB_ZERO_OK)
]


def test_the_knob_battery_covers_the_strategies():
    agents = {agent for agent, _, _ in numeric_knobs()}
    assert {"open-book-native", "open-book-text", "evidence-provided", "retrieve-read-each", "retrieve-classify"} <= agents
    assert len(KNOB_CASES) > 100


@pytest.mark.parametrize("agent, knob, value", KNOB_CASES, ids=lambda x: str(x)[:16])
def test_numeric_knob_out_of_range(agent, knob, value, world, tmp_path, capsys):
    base = bases(world, tmp_path)["run"]
    before = listing(tmp_path)
    code, err = invoke([*base, "--agent", agent, "--agent-arg", f"{knob}={value}"], capsys)
    assert_one_line_exit_2(code, err, f"--agent-arg {knob}:")
    assert listing(tmp_path) == before


# ---------------------------------------------------------------------------- paths
@pytest.fixture
def bad_paths(tmp_path):
    d = tmp_path / "bad"
    d.mkdir()
    os.mkfifo(d / "fifo")
    os.mkfifo(d / "fifo.txt")
    device = make_device(d / "null")
    (d / "link-to-device").symlink_to(device)  # as /dev/stdout is a link to a terminal or a pipe
    (d / "a-directory").mkdir()
    (d / "a-directory.txt").mkdir()
    (d / "empty.json").write_bytes(b"")
    (d / "empty.txt").write_bytes(b"")
    (d / "latin1.json").write_bytes(b"\xff\xfe caf\xe9 \x00\x81")
    (d / "latin1.txt").write_bytes(b"\xff\xfe caf\xe9 \x00\x81")
    (d / "wrong.json").write_text("this is prose, not the format this option reads\n")
    (d / "wrong.txt").write_text("a template with a field nobody fills: {nope}\n")
    (d / "a-file").write_text("x")
    paths = {
        "dir": d / "a-directory",
        "missing": d / "missing.json",
        "empty": d / "empty.json",
        "non-utf8": d / "latin1.json",
        "wrong-format": d / "wrong.json",
        "unwritable": d / "a-file" / "below-a-file" / "out.json",
        "a-file": d / "a-file",
        # prompt templates are .txt files
        "dir.txt": d / "a-directory.txt",
        "missing.txt": d / "missing.txt",
        "empty.txt": d / "empty.txt",
        "non-utf8.txt": d / "latin1.txt",
        "wrong-format.txt": d / "wrong.txt",
        # not regular files: an output there would be replaced by a rename, an input read would block or never end
        "fifo": d / "fifo",
        "fifo.txt": d / "fifo.txt",
        "device": device,
        "link-to-device": d / "link-to-device",
        "dev-zero": Path("/dev/zero"),
    }
    yield paths
    for fifo in (d / "fifo", d / "fifo.txt"):
        unblock_fifo(fifo)


IN_FILE = ("dir", "missing", "empty", "non-utf8", "wrong-format")
OUT_FILE = ("dir", "unwritable")
OUT_DIR = ("a-file", "unwritable")
PATH_CASES = [
    *[("run", "--data-path", k) for k in IN_FILE],
    *[("run", "--config", k) for k in ("dir", "missing", "non-utf8", "wrong-format")],  # empty YAML = no options
    *[("run", "--prompt-template", k + ".txt") for k in IN_FILE],
    *[("run", "--cache-path", k) for k in ("dir", "non-utf8", "wrong-format", "unwritable")],
    *[("run", "--price-table", k) for k in IN_FILE],
    *[("run", "--snapshot", k) for k in IN_FILE],
    *[("run", "--bleurt-checkpoint", k) for k in ("missing", "a-file")],
    *[("run", "--out", k) for k in ("a-file", "non-utf8", "unwritable")],
    *[("ablate", "--data-path", k) for k in IN_FILE],
    *[("ablate", "--snapshot", k) for k in IN_FILE],
    *[("ablate", "--out", k) for k in OUT_DIR],
    *[("ablate", "--config", k) for k in ("dir", "missing", "non-utf8", "wrong-format")],
    *[("score", "--generations", k) for k in ("dir", "missing", "non-utf8", "wrong-format")],
    *[("score", "--data-path", k) for k in IN_FILE],
    *[("score", "--out", k) for k in OUT_FILE],
    *[("score", "--bleurt-checkpoint", k) for k in ("missing", "a-file")],
    *[("score", "RUN_DIR", k) for k in ("a-file", "missing", "dir")],
    *[("ceiling", "--data-path", k) for k in IN_FILE],
    *[("ceiling", "--snapshot", k) for k in IN_FILE],
    *[("ceiling", "--out", k) for k in OUT_FILE],
    *[("snapshot build", "--from", k) for k in ("dir", "missing", "empty", "non-utf8", "wrong-format")],
    *[("snapshot build", "--out", k) for k in OUT_FILE],
    *[("snapshot info", "SNAPSHOT", k) for k in IN_FILE],
    *[("snapshot search", "SNAPSHOT", k) for k in IN_FILE],
    *[("leaderboard", "ROOT", k) for k in ("a-file", "missing")],
    *[("leaderboard", "--out", k) for k in OUT_FILE],
    *[("export", "RUN_DIR", k) for k in ("a-file", "missing", "dir")],
    *[("export", "--out", k) for k in OUT_DIR],
    *[("export", "--metadata", k) for k in IN_FILE],
    *[("report", "RUN_DIR", k) for k in ("a-file", "missing", "dir")],
    *[("report", "--out", k) for k in OUT_FILE],
    *[("index build", "SNAPSHOT", k) for k in IN_FILE],
    *[("index info", "SNAPSHOT", k) for k in IN_FILE],
    *[("index search", "SNAPSHOT", k) for k in IN_FILE],
    *[("retrieval-eval", "--data-path", k) for k in IN_FILE],
    *[("retrieval-eval", "--snapshot", k) for k in IN_FILE],
    *[("retrieval-eval", "--out", k) for k in OUT_FILE],
    *[("retrieval-eval", "--out-dir", k) for k in OUT_DIR],
    *[("compare", "RUN", k) for k in ("a-file", "missing", "dir", "empty", "wrong-format")],
    *[("compare", "--out", k) for k in OUT_FILE],
    *[("compare", "--plot", k) for k in OUT_FILE],
    *[("power", "RUN", k) for k in ("a-file", "missing", "dir", "empty", "wrong-format")],
    *[("power", "--paired-with", k) for k in ("a-file", "missing", "dir")],
    *[("power", "--out", k) for k in OUT_FILE],
    *[("table", "RUN", k) for k in ("a-file", "missing", "dir", "empty", "wrong-format")],
    *[("table", "--out", k) for k in OUT_FILE],
]
# Not regular files (issue 22): a FIFO or /dev/zero as every input (the open would block, the read never
# end), a device, a FIFO or a link to a device (/dev/stdout) as every output (the atomic rename would
# replace it with a file): refused at once, before any work, and left as they were.
SPECIAL_IN = ("fifo", "dev-zero")
SPECIAL_OUT = ("fifo", "device", "link-to-device")
SPECIAL_OUT_DIR = ("fifo", "device")
SPECIAL_PATH_CASES = [
    *[("run", option, k) for option in ("--data-path", "--config", "--price-table", "--snapshot") for k in SPECIAL_IN],
    ("run", "--prompt-template", "fifo.txt"),
    *[("run", "--cache-path", k) for k in ("fifo", "device")],
    *[("run", "--out", k) for k in SPECIAL_OUT_DIR],
    *[("ablate", option, k) for option in ("--data-path", "--snapshot", "--config") for k in SPECIAL_IN],
    *[("ablate", "--out", k) for k in SPECIAL_OUT_DIR],
    *[("score", option, k) for option in ("--generations", "--data-path") for k in SPECIAL_IN],
    *[("score", "--out", k) for k in SPECIAL_OUT],
    ("score", "RUN_DIR", "fifo"),
    *[("score RUN_DIR", "--data-path", k) for k in SPECIAL_IN],
    *[(cmd, "--bleurt-checkpoint", "fifo") for cmd in ("run", "score")],
    *[("ceiling", option, k) for option in ("--data-path", "--snapshot") for k in SPECIAL_IN],
    *[("ceiling", "--out", k) for k in SPECIAL_OUT],
    *[("snapshot build", "--from", k) for k in SPECIAL_IN],
    *[("snapshot build", "--out", k) for k in SPECIAL_OUT],
    *[("snapshot build --overwrite", "--out", k) for k in SPECIAL_OUT],
    *[("snapshot build cache", "--titles", k) for k in SPECIAL_IN],
    *[("snapshot info", "SNAPSHOT", k) for k in SPECIAL_IN],
    *[("snapshot search", "SNAPSHOT", k) for k in SPECIAL_IN],
    ("leaderboard", "ROOT", "fifo"),
    *[("leaderboard", "--out", k) for k in SPECIAL_OUT],
    ("export", "RUN_DIR", "fifo"),
    *[("export", "--out", k) for k in SPECIAL_OUT_DIR],
    *[("export", "--metadata", k) for k in SPECIAL_IN],
    ("report", "RUN_DIR", "fifo"),
    *[("report", "--out", k) for k in SPECIAL_OUT],
    *[(cmd, "SNAPSHOT", k) for cmd in ("index build", "index info", "index search") for k in SPECIAL_IN],
    *[("retrieval-eval", option, k) for option in ("--data-path", "--snapshot") for k in SPECIAL_IN],
    *[("retrieval-eval", "--out", k) for k in SPECIAL_OUT],
    *[("retrieval-eval", "--out-dir", k) for k in SPECIAL_OUT_DIR],
    *[("compare", "RUN", k) for k in SPECIAL_IN],
    *[("compare", option, k) for option in ("--out", "--plot") for k in SPECIAL_OUT],
    *[("power", "RUN", k) for k in SPECIAL_IN],
    ("power", "--paired-with", "fifo"),
    *[("power", "--out", k) for k in SPECIAL_OUT],
    *[("table", "RUN", k) for k in SPECIAL_IN],
    *[("table", "--out", k) for k in SPECIAL_OUT],
]
PATH_CASES += SPECIAL_PATH_CASES
# positionals: where the argument stands in the base command line
POSITIONAL = {
    ("score", "RUN_DIR"): ("score RUN_DIR", 1),
    ("snapshot info", "SNAPSHOT"): ("snapshot info", 2),
    ("snapshot search", "SNAPSHOT"): ("snapshot search", 2),
    ("leaderboard", "ROOT"): ("leaderboard", 1),
    ("export", "RUN_DIR"): ("export", 2),
    ("report", "RUN_DIR"): ("report", 1),
    ("index build", "SNAPSHOT"): ("index build", 2),
    ("index info", "SNAPSHOT"): ("index info", 2),
    ("index search", "SNAPSHOT"): ("index search", 2),
    ("compare", "RUN"): ("compare", 1),
    ("power", "RUN"): ("power", 1),
    ("table", "RUN"): ("table", 1),
}


@pytest.mark.parametrize("cmd, option, kind", PATH_CASES, ids=lambda x: str(x))
def test_bad_path(cmd, option, kind, world, bad_paths, tmp_path, capsys):
    path = str(bad_paths[kind])
    if (cmd, option) in POSITIONAL:
        name, index = POSITIONAL[(cmd, option)]
        argv = list(bases(world, tmp_path)[name])
        if index < len(argv) and not argv[index].startswith("-"):
            argv[index] = path
        else:
            argv.insert(index, path)
    else:
        argv = [*bases(world, tmp_path)[cmd], option, path]
    if cmd == "score" and option == "--data-path":
        argv = ["score", "--dataset", "hotpotqa:dev", "--generations", world["generations"], option, path]
    before = listing(tmp_path)
    code, err = invoke(argv, capsys, timeout=30)
    assert_one_line_exit_2(code, err, option, path)
    assert listing(tmp_path) == before, "a failed command left files behind"
    assert stat.S_ISFIFO(os.stat(bad_paths["fifo"]).st_mode), "the FIFO was replaced"
    assert stat.S_ISCHR(os.stat(bad_paths["device"]).st_mode), "the device was replaced"
    assert bad_paths["link-to-device"].is_symlink(), "the link to a device was replaced"


# every command that writes one file, with the option naming it
WRITERS = {
    "leaderboard": ("--out", ".json"),
    "score": ("--out", ".json"),
    "compare --out": ("--out", ".json"),
    "compare --plot": ("--plot", ".png"),
    "table": ("--out", ".md"),
    "report": ("--out", ".html"),
    "ceiling": ("--out", ".json"),
    "snapshot build --overwrite": ("--out", ".db"),
}


@pytest.mark.parametrize("writer", WRITERS)
def test_an_output_symlink_is_written_through(writer, world, tmp_path, capsys):
    """A symlink to a regular file (an output kept elsewhere): the file it points at is replaced
    atomically, the link stays a link to it; nothing is left beside either."""
    option, suffix = WRITERS[writer]
    real_dir, link_dir = tmp_path / "real", tmp_path / "links"
    real_dir.mkdir()
    link_dir.mkdir()
    real = real_dir / f"kept{suffix}"
    real.write_bytes(b"old contents")
    link = link_dir / f"out{suffix}"
    link.symlink_to(real)
    cmd = writer.split(" --")[0] if writer.startswith("compare") else writer
    code, err = invoke([*bases(world, tmp_path)[cmd], option, str(link)], capsys, timeout=300)
    assert code == 0, err
    assert link.is_symlink() and link.resolve() == real.resolve()
    assert real.read_bytes() != b"old contents" and real.stat().st_size > 0
    if suffix == ".json":
        json.loads(real.read_text())
    assert sorted(p.name for p in real_dir.iterdir()) == [real.name], "temp files left beside the target"
    assert sorted(p.name for p in link_dir.iterdir()) == [link.name], "temp files left beside the link"


def test_export_file_name_cannot_leave_the_out_folder(world, tmp_path, capsys):
    for name in ("../../escaped", "/abs/path", "sub/dir", "..", ".hidden", "a\x00b"):
        code, err = invoke([*bases(world, tmp_path)["export"], "--file-name", name], capsys)
        assert_one_line_exit_2(code, err, "--file-name")
    assert not list(tmp_path.rglob("escaped*"))


def test_compare_and_power_refuse_runs_they_cannot_compare(world, tmp_path, capsys):
    """No shared question, an unknown metric, another dataset, one run only: one line, exit 2."""
    import shutil

    run = Path(world["run_dir"])
    results = json.loads((run / "results.json").read_text())
    other = tmp_path / "other-questions"
    shutil.copytree(run, other)
    changed = json.loads(json.dumps(results))
    for row in changed["scores"]["raw"]:
        row["question_id"] = "not-" + row["question_id"]
    (other / "results.json").write_text(json.dumps(changed))
    code, err = invoke(["compare", str(run), str(other)], capsys)
    assert_one_line_exit_2(code, err, "share no scored question")
    code, err = invoke(["compare", str(run), str(run), "--metric", "nope"], capsys)
    assert_one_line_exit_2(code, err, "metric 'nope'")
    code, err = invoke(["compare", str(run)], capsys)
    assert_one_line_exit_2(code, err, "at least two runs")
    elsewhere = tmp_path / "other-dataset"
    shutil.copytree(run, elsewhere)
    changed = json.loads(json.dumps(results))
    changed["dataset"]["spec"] = "fanoutqa:dev@nov23"
    (elsewhere / "results.json").write_text(json.dumps(changed))
    code, err = invoke(["compare", str(run), str(elsewhere)], capsys)
    assert_one_line_exit_2(code, err, "--allow-mismatch")
    code, err = invoke(["power", str(run), "--metric", "nope", "--delta", "0.1"], capsys)
    assert_one_line_exit_2(code, err, "--metric nope")
    code, err = invoke(["power", str(run), "--metric", "em-f1.em", "--delta", "0.1"], capsys)
    assert_one_line_exit_2(code, err, "no standard error")  # one question


# ---------------------------------------------------------------------------- sample selection
SELECTION_CASES = {
    "unknown field": (["--sample-filter", "colour=red"], "--sample-filter", "its fields: type"),
    "unknown value": (["--sample-filter", "type=nope"], "--sample-filter type=nope", "its values: unknown"),
    "no =": (["--sample-filter", "type"], "--sample-filter", "FIELD=VALUE"),
    "empty value": (["--sample-filter", "type="], "--sample-filter", "FIELD=VALUE"),
    "nothing left": (["--sample-id", "explore1__wikidata_simple", "--sample-filter", "type=wikidata_comp"], "--sample-filter", "matches"),
    "stratify unknown field": (["--stratify-by", "colour"], "--stratify-by", "its fields: type"),
    "stratify without limit": (["--stratify-by", "type"], "--stratify-by", "needs --limit"),
    "shuffle seed alone": (["--shuffle-seed", "3"], "--shuffle-seed", "without --shuffle"),
    "shuffle seed negative": (["--shuffle", "--shuffle-seed", "-1"], "--shuffle-seed", "greater than"),
    "only failed, no run": (["--only-failed"], "--only-failed", "holds no run yet"),
}


@pytest.mark.parametrize("case", SELECTION_CASES)
def test_bad_sample_selection(case, world, tmp_path, capsys):
    """Checked before any model call (the model is a dead URL): one line naming the option and the
    known fields or values, exit 2, nothing written."""
    extra, option, needle = SELECTION_CASES[case]
    base = [x for x in bases(world, tmp_path)["run"]]
    base[base.index("--dataset") + 1] = "qampari:sample"
    if "--stratify-by" in extra and "needs --limit" in needle:
        i = base.index("--limit")
        del base[i : i + 2]
    before = listing(tmp_path)
    code, err = invoke([*base, *extra], capsys)
    assert_one_line_exit_2(code, err, option)
    assert needle in err, err
    assert listing(tmp_path) == before, "a refused selection left files behind"


# ---------------------------------------------------------------------------- name lists
# A list that names nothing would select everything (every sample, the default metrics) without a word.
NAME_LIST_CASES = [
    (cmd, option, value)
    for cmd, option in (
        ("run", "--metrics"),
        ("run", "--sample-id"),
        ("ablate", "--sample-id"),
        ("score", "--metrics"),
        ("score RUN_DIR", "--metrics"),
        ("ceiling", "--sample-id"),
        ("retrieval-eval", "--sample-id"),
    )
    for value in (",", " , ,", "")
]


@pytest.mark.parametrize("cmd, option, value", NAME_LIST_CASES, ids=str)
def test_an_empty_name_list_is_refused(cmd, option, value, world, tmp_path, capsys):
    before = listing(tmp_path)
    code, err = invoke([*bases(world, tmp_path)[cmd], f"{option}={value}"], capsys)
    assert_one_line_exit_2(code, err, option)
    assert "names nothing" in err, err
    assert listing(tmp_path) == before


# ---------------------------------------------------------------------------- metric declarations
# What a metric scores and needs, and its options (issue 23): refused before the first model call (a
# run's model is a dead URL), before scoring anything, before re-scoring; hotpotqa's golds are text.
METRIC_CASES = {
    "gold type": (["--metrics", "quest"], "metric quest cannot score hotpotqa:dev"),
    "no judge": (["--metrics", "llm-judge"], "metric llm-judge needs --judge MODEL"),
    "judge without key": (["--metrics", "llm-judge", "--judge", "openai/gpt-4o"], "OPENAI_API_KEY is not set"),
    "no checkpoint": (["--metrics", "bleurt"], "metric bleurt needs --bleurt-checkpoint"),
    "option not scored": (["--metric-option", "quest.light=true"], "metric quest is not scored here"),
    "metric without options": (["--metric-option", "em-f1.strict=true"], "metric em-f1 has no options"),
    "unknown option": (["--metrics", "set-f1", "--metric-option", "set-f1.clean=true"], "has no option 'clean'"),
    "bad option value": (["--metrics", "set-f1", "--metric-option", "set-f1.clean_items=2"], "valid boolean"),
    "unknown metric": (["--metric-option", "nope.x=1"], "unknown metric 'nope'"),
    "no value": (["--metric-option", "quest.light"], "NAME.KEY=VALUE"),
    "no key": (["--metric-option", "quest=true"], "NAME.KEY=VALUE"),
}


@pytest.mark.parametrize("cmd", ["run", "ablate", "score", "score RUN_DIR"])
@pytest.mark.parametrize("case", METRIC_CASES)
def test_a_metric_that_cannot_score_is_refused(cmd, case, world, tmp_path, capsys):
    extra, needle = METRIC_CASES[case]
    before = listing(tmp_path)
    run_dir = Path(world["run_dir"]) / "results.json"
    results = run_dir.read_bytes()
    code, err = invoke([*bases(world, tmp_path)[cmd], *extra], capsys)
    assert_one_line_exit_2(code, err, needle)
    assert listing(tmp_path) == before
    assert run_dir.read_bytes() == results, "a refused re-scoring rewrote the run's results"


@pytest.mark.parametrize(
    "option, needle",
    [("mrecall.cap=often", "mrecall.cap: input should be a valid boolean"), ("recall.cap=true", "no metric with options"),
     ("evidence_recall.lcs=fuzzy", "evidence_recall.lcs"), ("mrecall", "NAME.KEY=VALUE")],
)  # fmt: skip
def test_a_bad_retrieval_metric_option_is_refused(option, needle, world, tmp_path, capsys):
    before = listing(tmp_path)
    code, err = invoke([*bases(world, tmp_path)["retrieval-eval"], "--metric-option", option], capsys)
    assert_one_line_exit_2(code, err, needle)
    assert listing(tmp_path) == before


# ---------------------------------------------------------------------------- dataset contents
SHIPPED = Path(__file__).resolve().parents[1] / "harness" / "datasets" / "data"
# dataset -> (shipped file, question key, JSON list or JSONL)
DATASET_FILES = {
    "hotpotqa:dev": (SHIPPED / "hotpotqa" / "hotpot_dev_distractor_first100.json", "question", "json"),
    "qampari:sample": (SHIPPED / "qampari" / "qampari_sample.jsonl", "question_text", "jsonl"),
    "quest:train-sample": (SHIPPED / "quest" / "train_sample.jsonl", "query", "jsonl"),
    "topiocqa:dev": (SHIPPED / "topiocqa" / "topiocqa_dev.json", "Question", "json"),
}


@pytest.mark.parametrize("bad", [None, 3, "  "], ids=["null", "number", "blank"])
@pytest.mark.parametrize("dataset", DATASET_FILES)
def test_a_question_that_is_not_text_is_refused_at_load(dataset, bad, world, tmp_path, capsys):
    """``"question": null`` reached the model as "None": refused while loading, with the file, the
    question's number and its id, even when --limit would not select it."""
    source, key, layout = DATASET_FILES[dataset]
    if layout == "json":
        records = json.loads(source.read_text())[:3]
        records[1][key] = bad
        text = json.dumps(records)
    else:
        records = [json.loads(line) for line in source.read_text().splitlines()[:3]]
        records[1][key] = bad
        text = "".join(json.dumps(r) + "\n" for r in records)
    data = tmp_path / f"data.{layout}"
    data.write_text(text)
    argv = list(bases(world, tmp_path)["run"])
    argv[argv.index("--dataset") + 1] = dataset
    before = listing(tmp_path)
    code, err = invoke([*argv, "--data-path", str(data)], capsys)
    assert_one_line_exit_2(code, err, str(data))
    assert "question #2" in err and "expected text" in err, err
    assert listing(tmp_path) == before


# ---------------------------------------------------------------------------- concurrent writers
def test_a_second_snapshot_build_of_the_same_file_is_refused(world, tmp_path, capsys):
    """Two builds of one --out both reported success and the later silently won: while a build holds
    the file, another is refused with one line (and writes nothing); once it is done, the next runs."""
    from harness.wiki_snapshot.store import Page, SnapshotWriter

    out = tmp_path / "S.db"
    first = SnapshotWriter(out, source="first", options={})
    first.add_page(Page(1, None, "First", "written by the first build", None))
    unreadable = tmp_path / "not-records.json"  # the lock is taken before the source is read
    unreadable.write_text("not JSON")
    for source, overwrite in ((PHYSICS, []), (PHYSICS, ["--overwrite"]), (unreadable, ["--overwrite"])):
        code, err = invoke(["snapshot", "build", "--from", str(source), "--out", str(out), "--quiet", *overwrite], capsys)
        assert_one_line_exit_2(code, err, "another build is writing it")
        assert f"pid {os.getpid()}" in err, err
    unreadable.unlink()
    first.finish()
    from harness.wiki_snapshot.store import Snapshot

    with Snapshot.open(out) as snap:
        assert snap.metadata["source"] == "first" and len(snap) == 1
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "cache") == ["S.db"], "the lock or a partial file was left"
    code, err = invoke(["snapshot", "build", "--from", str(PHYSICS), "--out", str(out), "--quiet", "--overwrite"], capsys)
    assert code == 0, err
    with Snapshot.open(out) as snap:
        assert snap.metadata["source"] != "first"


def test_leaderboard_skips_a_results_file_that_is_a_fifo(world, tmp_path, capsys):
    """A FIFO named results.json under the searched folder is skipped with the reason, never opened."""
    import shutil

    root = tmp_path / "runs"
    shutil.copytree(world["run_dir"], root / "good")
    (root / "fifo-run").mkdir()
    os.mkfifo(root / "fifo-run" / "results.json")
    try:
        code, err = invoke(["leaderboard", str(root)], capsys, timeout=30)
    finally:
        unblock_fifo(root / "fifo-run" / "results.json")
    assert code == 0, err
    assert "results.json: is a FIFO" in err and "skipped" in err, err
