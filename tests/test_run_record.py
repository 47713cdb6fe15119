"""The typed run record (issue 21): what a run writes validates against `harness schema` (checked by
jsonschema, an independent validator), older formats still read, and a results.json that breaks the
schema is refused by every reader in one line naming the file and the field, exit 2."""

from __future__ import annotations

import io
import json
import shutil
from contextlib import redirect_stdout
from pathlib import Path

import jsonschema
import pytest

import harness
from harness.cli import main
from harness.errors import HarnessError
from harness.execution.record import RunResults, SampleRow, json_schema, read_results
from harness.models.scripted import register_script, unregister_script

FIXTURES = Path(__file__).parent / "fixtures"
FORMAT2_RUN = FIXTURES / "run_key" / "qampari-closed-book-scripted"  # written by the harness before format 3


def printed_schema(name: str) -> dict:
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["schema", name]) == 0
    return json.loads(out.getvalue())


def validator(name: str) -> jsonschema.Draft202012Validator:
    schema = printed_schema(name)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


@pytest.fixture
def failing_script():
    """Answers 'Paris', except for questions mentioning 'film': a code exception (a failed sample)."""

    def reply(messages, tools, tool_choice, params):
        if "film" in messages[-1]["content"].lower():
            raise RuntimeError("this question breaks the script")
        return "Paris"

    register_script("record-fails-some", reply)
    yield "scripted/record-fails-some"
    unregister_script("record-fails-some")


@pytest.fixture
def run_dir(tmp_path, failing_script):
    out = tmp_path / "run"
    harness.run(
        model=failing_script, dataset="qampari:sample", limit=6, epochs=2, temperature=0.7, seed=3,
        out=str(out), show_progress=False, cache=False,
    )  # fmt: skip
    return out


def test_what_a_run_writes_validates_against_the_printed_schemas(run_dir):
    results = json.loads((run_dir / "results.json").read_text())
    assert results["results_format"] == 3
    validator("results").validate(results)
    rows = validator("samples")
    lines = [json.loads(x) for name in ("samples.jsonl", "failures.jsonl") for x in (run_dir / name).read_text().splitlines()]
    statuses = {r["status"] for r in lines}
    assert statuses == {"ok", "error"}, "the run should have both answered and failed samples"
    for line in lines:
        rows.validate(line)
    validator("config").validate(json.loads((run_dir / "config.json").read_text())["config"])
    validator("config").validate(results["config"])


def test_the_schemas_catch_what_is_wrong():
    """The printed schemas are not vacuous: a wrong type or a missing required field fails them."""
    results, rows, config = validator("results"), validator("samples"), validator("config")
    good = json.loads((FORMAT2_RUN / "results.json").read_text())
    results.validate(good)
    for path, value in ((("counts", "finished"), "many"), (("status",), "done"), (("dataset", "n_total"), -1)):
        bad = json.loads(json.dumps(good))
        node = bad
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
        assert not results.is_valid(bad), path
    assert not results.is_valid({k: v for k, v in good.items() if k != "run_id"})
    assert not rows.is_valid({"id": "q", "status": "maybe"})
    assert not rows.is_valid({"status": "ok"})
    assert not config.is_valid({"max_connections": 0})
    assert not config.is_valid({"no_such_option": 1})


def test_the_typed_record_reads_what_the_runner_wrote(run_dir):
    record = read_results(run_dir)
    assert record.counts.questions == 6 and record.counts.epochs == 2
    assert record.counts.finished + record.counts.failed + record.counts.pending == record.counts.selected == 12
    assert record.counts.failed >= 1 and set(record.failures) <= {f"{i}@2" for i in record.sample_ids} | set(record.sample_ids)
    assert all(f.type == "exception" for f in record.failures.values())
    assert record.config.epochs == 2 and record.config.generation.seed == 3
    assert record.scores is not None and "set-f1" in record.scores.metrics()
    assert record.agent_name == "closed-book" and record.context_size == 4096
    for line in (run_dir / "samples.jsonl").read_text().splitlines():
        row = SampleRow.model_validate_json(line)
        assert row.status == "ok" and row.outcome == "answered" and row.answer == "Paris"


def test_a_format_2_results_file_still_reads_everywhere(tmp_path, capsys):
    run = tmp_path / "old"
    shutil.copytree(FORMAT2_RUN, run)
    record = read_results(run)
    assert record.results_format == 2 and record.scores is not None and record.scores.raw
    assert main(["report", str(run), "--out", str(tmp_path / "r.html")]) == 0
    assert main(["leaderboard", str(tmp_path), "--out", str(tmp_path / "board.json")]) == 0
    board = json.loads((tmp_path / "board.json").read_text())
    assert board["warnings"] == [] and board["rows"][0]["run_id"] == record.run_id
    assert main(["compare", str(run), str(run)]) == 0
    # re-scoring writes this harness's format, validated
    assert main(["score", str(run)]) == 0
    rewritten = json.loads((run / "results.json").read_text())
    assert rewritten["results_format"] == 3
    validator("results").validate(rewritten)
    assert read_results(run).scores.raw == record.scores.raw


def test_a_format_1_results_file_reads_with_its_scores_upgraded(tmp_path):
    data = json.loads((FORMAT2_RUN / "results.json").read_text())
    data.pop("results_format")
    scores = data["scores"]
    flat = {"meta": scores["meta"], "raw": [], "breakdown": {}}  # format 1: one flat namespace
    for name in scores["meta"]["metrics"]:
        flat.update(scores[name])
    data["scores"] = flat
    data["config"]["retired_option"] = True  # a field a later harness dropped
    (tmp_path / "results.json").write_text(json.dumps(data))
    record = read_results(tmp_path)
    assert record.results_format == 1 and record.legacy_config == {"retired_option": True}
    assert record.scores.metrics()["set-f1"]["f1"] == scores["set-f1"]["f1"]


BREAKS = [
    (("counts", "finished"), "many", "counts.finished"),
    (("status",), "done", "status"),
    (("config", "max_connections"), 0, "config.max_connections"),
    (("model", "context_size"), "big", "model.context_size"),
    (("scores", "raw"), "rows", "scores.raw"),
]


@pytest.mark.parametrize("path, value, field", BREAKS, ids=[b[2] for b in BREAKS])
def test_every_reader_refuses_a_broken_results_file_naming_the_field(tmp_path, capsys, path, value, field):
    run = tmp_path / "broken"
    shutil.copytree(FORMAT2_RUN, run)
    data = json.loads((run / "results.json").read_text())
    data["results_format"] = 3
    node = data
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    (run / "results.json").write_text(json.dumps(data))
    good = tmp_path / "good"
    shutil.copytree(FORMAT2_RUN, good)
    commands = [
        ["score", str(run)],
        ["report", str(run)],
        ["compare", str(good), str(run)],
        ["power", str(run), "--metric", "f1", "--delta", "0.1"],
        ["export", "fanoutqa-submission", str(run), "--out", str(tmp_path / "sub")],
    ]
    for argv in commands:
        capsys.readouterr()
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code
        err = capsys.readouterr().err
        lines = [x for x in err.splitlines() if x.strip()]
        assert code == 2 and len(lines) == 1, (argv, code, err)
        assert str(run / "results.json") in lines[0] and f"field {field}" in lines[0], (argv, lines[0])
    # the leaderboard keeps the other runs and says which file and field it skipped
    assert main(["leaderboard", str(tmp_path), "--out", str(tmp_path / "board.json")]) == 0
    board = json.loads((tmp_path / "board.json").read_text())
    assert len(board["rows"]) == 1 and len(board["skipped"]) == 1
    assert board["skipped"][0]["path"] == str(run) and f"field {field}" in board["skipped"][0]["reason"]


def test_a_results_file_of_a_newer_format_is_refused(tmp_path):
    data = json.loads((FORMAT2_RUN / "results.json").read_text())
    data["results_format"] = 4
    (tmp_path / "results.json").write_text(json.dumps(data))
    with pytest.raises(HarnessError, match="results format 4"):
        harness.read_results(tmp_path)


def test_the_results_model_names_every_top_level_key_a_run_writes(run_dir):
    """No key of results.json escapes the typed record: format 3 forbids unknown top-level keys."""
    data = json.loads((run_dir / "results.json").read_text())
    assert set(data) <= set(RunResults.model_fields)
    data["surprise"] = 1
    with pytest.raises(Exception, match="surprise"):
        RunResults.model_validate(data)


def test_the_schema_command_writes_a_file_and_refuses_unknown_names(tmp_path, capsys):
    assert main(["schema", "results", "--out", str(tmp_path / "s.json")]) == 0
    assert json.loads((tmp_path / "s.json").read_text()) == json_schema("results")
    with pytest.raises(SystemExit) as exc:
        main(["schema", "nonsense"])
    assert exc.value.code == 2


def test_a_strategy_summarizes_its_own_records_and_declares_the_shared_ones(tmp_path):
    """results.json ``retrieval`` is what the strategy's summarize() says of its records, ``outcome`` is
    a row field, and the report renders a shared record kind only when the strategy declared it."""
    from harness.strategy import AGENTS, Agent, SampleResult, register_agent

    class Counting(Agent):
        settings = ("closed-book",)
        records = ("evidence_recall",)

        async def solve(self, sample, ctx):
            reply = await ctx.generate([{"role": "user", "content": sample.question}])
            extra = {"evidence_recall": {"recall": 0.5, "found": ["A"], "needed": ["A", "B"]},
                     "searches": [{"query": "undeclared", "found_title": "Nowhere"}], "mine": 7}  # fmt: skip
            return SampleResult(reply.content, [], extra, outcome="gave_up" if "film" in sample.question else "answered")

        def summarize(self, extras):
            return {"mine_total": sum(e["mine"] for e in extras)}

    register_agent("record-counting")(Counting)
    try:
        out = tmp_path / "run"
        harness.run(model="scripted/answer=Paris", dataset="qampari:sample", limit=6, agent="record-counting",
                    out=str(out), show_progress=False, cache=False)  # fmt: skip
        record = read_results(out)
        assert record.retrieval == {"mine_total": 7 * 6}
        assert record.agent.records == ["evidence_recall"]
        rows = [SampleRow.model_validate_json(x) for x in (out / "samples.jsonl").read_text().splitlines()]
        assert sum(record.outcomes.values()) == 6 and record.outcomes == {
            o: sum(1 for r in rows if r.outcome == o) for o in {r.outcome for r in rows}
        }
        assert main(["report", str(out)]) == 0
        html = (out / "report.html").read_text()
        assert "evidence recall 0.5000" in html  # declared: rendered
        assert "<b>Searches</b>" not in html and "undeclared" in html  # not declared: shown as the strategy's own data
    finally:
        AGENTS.unregister("record-counting")


def test_a_strategy_naming_an_unknown_record_kind_is_refused():
    from harness.errors import ConfigError
    from harness.strategy import AGENTS, Agent, register_agent

    class Odd(Agent):
        settings = ("closed-book",)
        records = ("thoughts",)

        async def solve(self, sample, ctx): ...

    register_agent("record-odd")(Odd)
    try:
        with pytest.raises(ConfigError, match="records must name shared record kinds"):
            AGENTS.resolve("record-odd")
    finally:
        AGENTS.unregister("record-odd")
