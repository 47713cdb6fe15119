"""Issue 23: each metric declares what it scores (gold and answer types, datasets), what it needs (a
judge, a checkpoint) and its options; `harness run` and `harness score` check all of it before the
first model call. Metric options from the CLI and YAML, recorded and re-scored; golds that are not
text read one way in every metric; counts of dataset questions only; progress on the headline's
scale; TopiOCQA's conversational strategy by default. Runs use scripted backends (no real model)."""

from __future__ import annotations

import io
import json

import pytest

from harness.cli import main
from harness.datasets import load_dataset
from harness.errors import ConfigError, HarnessError
from harness.models.scripted import register_script, unregister_script
from harness.scoring.gold import answer_type, gold_text
from harness.scoring.metrics import (
    METRICS,
    ScoringOptions,
    check_metrics,
    declaration_of,
    declare,
    get_metric,
    score_answers,
    validate_metric_options,
)

QUEST = load_dataset("quest:train-sample")


def cli(argv, capsys) -> tuple[int, str, str]:
    capsys.readouterr()
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, out.err


def one_line(err: str) -> str:
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("error: "), lines[0]
    return lines[0]


@pytest.fixture
def counted():
    """A scripted model that counts its requests and answers "Paris"."""
    calls = []

    def fn(messages, tools, tool_choice, params):
        calls.append(messages[-1]["content"])
        return "Paris"

    register_script("h23-counted", fn)
    yield "scripted/h23-counted", calls
    unregister_script("h23-counted")


def run_argv(model, dataset, out, *extra, limit="3"):
    return ["run", "--model", model, "--dataset", dataset, "--limit", limit, "--no-cache", "--out", str(out), *extra]


# --------------------------------------------------------------------------- refusals before any call
REFUSED = {
    # the cases: a TypeError after 40 samples, a gold split into characters, a judge asked for last
    "quest on fanoutqa": ("fanoutqa:dev", ["--metrics", "quest"], "metric quest cannot score fanoutqa:dev"),
    "quest on hotpotqa": ("hotpotqa:dev", ["--metrics", "quest"], "gold answers include str"),
    "topiocqa on quest": ("quest:train-sample", ["--metrics", "topiocqa"], "include list_of_str"),
    "fanoutqa-string on qampari": ("qampari:sample", ["--metrics", "fanoutqa-string"], "include entity_list"),
    "judge without --judge": ("hotpotqa:dev", ["--metrics", "llm-judge"], "needs --judge MODEL"),
    "judge without its key": (
        "hotpotqa:dev",
        ["--metrics", "llm-judge", "--judge", "openai/gpt-4o-2024-11-20"],
        "--judge openai/gpt-4o-2024-11-20: OPENAI_API_KEY is not set",
    ),
    "bleurt without a checkpoint": ("hotpotqa:dev", ["--metrics", "bleurt"], "needs --bleurt-checkpoint DIR"),
    "unknown option": ("quest:train-sample", ["--metric-option", "quest.lite=true"], "has no option 'lite'"),
    "bad option value": ("quest:train-sample", ["--metric-option", "quest.light=maybe"], "valid boolean"),
    "option of an unknown metric": ("quest:train-sample", ["--metric-option", "nope.x=1"], "unknown metric 'nope'"),
    "option of a metric not scored": (
        "quest:train-sample",
        ["--metric-option", "set-f1.clean_items=true"],
        "metric set-f1 is not scored here (metrics: quest)",
    ),
    "option of a metric without options": (
        "hotpotqa:dev",
        ["--metric-option", "em-f1.x=1"],
        "metric em-f1 has no options",
    ),
    "option without a value": ("quest:train-sample", ["--metric-option", "quest.light"], "NAME.KEY=VALUE"),
    "answer cap too small": ("quest:train-sample", ["--max-answer-chars", "10"], "--max-answer-chars"),
}


@pytest.mark.parametrize("case", REFUSED)
def test_a_doomed_run_is_refused_before_any_model_call(case, counted, tmp_path, capsys):
    dataset, extra, needle = REFUSED[case]
    model, calls = counted
    code, _, err = cli(run_argv(model, dataset, tmp_path / "run", *extra), capsys)
    assert code == 2 and needle in one_line(err), err
    assert calls == [] and not (tmp_path / "run").exists()


def test_score_refuses_before_scoring(tmp_path, capsys):
    gens = tmp_path / "gens.jsonl"
    gens.write_text(json.dumps({"id": "hotpot-dev-000", "answer": "yes"}) + "\n")
    base = ["score", "--dataset", "hotpotqa:dev", "--generations", str(gens)]
    code, _, err = cli([*base, "--metrics", "quest"], capsys)
    assert code == 2 and "metric quest cannot score hotpotqa:dev" in one_line(err)
    code, _, err = cli([*base, "--metrics", "llm-judge"], capsys)
    assert code == 2 and "needs --judge" in one_line(err)
    code, _, err = cli([*base, "--max-answer-chars", "0"], capsys)
    assert code == 2 and "--max-answer-chars" in one_line(err)
    # answers are checked too: a mapping is no list of titles
    qgens = tmp_path / "quest.jsonl"
    qgens.write_text(json.dumps({"id": QUEST.samples[0].id, "answer": {"a": 1}}) + "\n")
    code, _, err = cli(["score", "--dataset", "quest:train-sample", "--generations", str(qgens)], capsys)
    assert code == 2 and "its answers include dict" in one_line(err)


def test_rescoring_a_run_checks_the_new_metrics(counted, tmp_path, capsys):
    model, _ = counted
    out = tmp_path / "run"
    code, _, err = cli(run_argv(model, "hotpotqa:dev", out), capsys)
    assert code == 0, err
    before = (out / "results.json").read_bytes()
    for extra, needle in (
        (["--metrics", "quest"], "metric quest cannot score"),
        (["--metric-option", "quest.light=true"], "metric quest is not scored here"),
    ):
        code, _, err = cli(["score", str(out), *extra], capsys)
        assert code == 2 and needle in one_line(err), err
    assert (out / "results.json").read_bytes() == before


def test_plugin_metrics_declare_or_accept_anything(tmp_path, capsys, counted):
    model, _ = counted
    plugin = tmp_path / "plugin.py"
    plugin.write_text(
        "from harness.scoring.metrics import declare\n\n"
        "def length(questions, answers, only_answered, options=None):\n"
        "    by_id = {a['id']: a['answer'] for a in answers}\n"
        "    return {'raw': {q.id: {'chars': len(str(by_id.get(q.id) or ''))} for q in questions}}\n\n"
        "@declare(accepts=('list_of_str',), needs=('judge',))\n"
        "def titles_only(questions, answers, only_answered, options=None):\n"
        "    return {'raw': {q.id: {'n': 1} for q in questions}}\n"
    )
    # no declaration: it scores any answer (FanOutQA's dicts, numbers, booleans), needs nothing
    code, _, err = cli(run_argv(model, "fanoutqa:dev", tmp_path / "a", "--metrics", f"{plugin}:length"), capsys)
    assert code == 0, err
    assert json.loads((tmp_path / "a" / "results.json").read_text())["scores"]["length"]["chars"] == 5
    code, _, err = cli(run_argv(model, "fanoutqa:dev", tmp_path / "b", "--metrics", f"{plugin}:titles_only"), capsys)
    assert code == 2 and "metric titles_only cannot score fanoutqa:dev" in one_line(err)
    argv = run_argv(model, "quest:train-sample", tmp_path / "b", "--metrics", f"{plugin}:titles_only")
    code, _, err = cli(argv, capsys)
    assert code == 2 and "metric titles_only needs --judge" in one_line(err)


def test_declarations_are_checked_and_listed(capsys):
    with pytest.raises(ValueError, match="unknown answer types"):
        declare(accepts=("strings",))
    with pytest.raises(ValueError, match="not scoring options"):
        declare(needs=("oracle",))
    assert declaration_of(get_metric("quest")).accepts == ("list_of_str",)
    assert declaration_of(get_metric("llm-judge")).needs == ("judge",)
    assert declaration_of(lambda *a, **k: None).accepts is None  # undeclared: anything
    code, out, _ = cli(["list", "metrics", "-v"], capsys)
    assert code == 0
    assert "--metric-option quest.light (bool, default False)" in out
    assert "--metric-option set-f1.clean_items (bool, default False)" in out
    assert "scores golds: list_of_str; answers: str, list_of_str" in out
    assert "needs: --judge MODEL" in out and "needs: --bleurt-checkpoint DIR" in out
    assert "--metric-option mrecall.cap (bool, default False)" in out
    assert "--metric-option evidence_recall.lcs (official|exact, default 'official')" in out


# --------------------------------------------------------------------------- metric options
@pytest.fixture
def bulleted():
    """Answers each QUEST question with its gold titles as "- Title" bullets."""
    gold = {s.question: "\n".join(f"- {t}" for t in s.answer) for s in QUEST.samples}

    def fn(messages, tools, tool_choice, params):
        prompt = messages[-1]["content"]
        return next(answer for question, answer in gold.items() if question in prompt)

    register_script("h23-bullets", fn)
    yield "scripted/h23-bullets"
    unregister_script("h23-bullets")


def test_quest_light_from_the_cli_and_yaml_recorded_and_rescored(bulleted, tmp_path, capsys):
    official = tmp_path / "official"
    code, _, err = cli(run_argv(bulleted, "quest:train-sample", official), capsys)
    assert code == 0, err
    results = json.loads((official / "results.json").read_text())
    assert results["scores"]["quest"]["f1"] == 0.0  # exact titles: "- Title" is no title
    assert results["scores"]["meta"]["options"]["metric_options"] == {"quest": {"light": False}}
    assert results["config"]["metric_options"] == {}

    light = tmp_path / "light"
    code, _, err = cli(run_argv(bulleted, "quest:train-sample", light, "--metric-option", "quest.light=true"), capsys)
    assert code == 0, err
    results = json.loads((light / "results.json").read_text())
    assert results["scores"]["quest"]["f1"] == 1.0
    assert results["config"]["metric_options"] == {"quest": {"light": True}}
    assert results["scores"]["meta"]["options"]["metric_options"] == {"quest": {"light": True}}
    assert results["scores"]["meta"]["metric_info"]["quest"]["title_normalization"] == "light"

    yaml_file = tmp_path / "run.yaml"
    yaml_file.write_text("metric_options:\n  quest: {light: true}\n")
    from_yaml = tmp_path / "yaml"
    code, _, err = cli(run_argv(bulleted, "quest:train-sample", from_yaml, "--config", str(yaml_file)), capsys)
    assert code == 0, err
    assert json.loads((from_yaml / "results.json").read_text())["scores"]["quest"] == results["scores"]["quest"]
    # the same run key: options are scoring, never generation
    assert json.loads((from_yaml / "results.json").read_text())["config_hash"] == results["config_hash"]

    # re-scoring the official run with the option, and back
    code, _, err = cli(["score", str(official), "--metric-option", "quest.light=true"], capsys)
    assert code == 0, err
    rescored = json.loads((official / "results.json").read_text())["scores"]
    assert rescored["quest"]["f1"] == 1.0 and rescored["meta"]["options"]["metric_options"]["quest"] == {"light": True}
    code, _, err = cli(["score", str(official)], capsys)  # the run's own options again
    assert json.loads((official / "results.json").read_text())["scores"]["quest"]["f1"] == 0.0


def test_yaml_and_flags_merge_metric_options(tmp_path):
    from harness.api import build_run_config

    yaml_file = tmp_path / "run.yaml"
    yaml_file.write_text("metric_options:\n  set-f1: {clean_items: true, alias_fallback: true}\n")
    config = build_run_config({"config": str(yaml_file), "metric_options": ["set-f1.alias_fallback=false"]})
    assert config.metric_options == {"set-f1": {"clean_items": True, "alias_fallback": False}}
    assert config.scoring_options().metric_options == config.metric_options
    assert "metric_options" not in config.identity()  # not in the run key


def test_set_f1_options_reach_the_metric():
    q = load_dataset("qampari:sample").samples[0]
    gold = [a["aliases"][0] for a in q.answer if a.get("aliases")]
    answers = [{"id": q.id, "answer": [gold[0], gold[0] + " ", ""]}]
    default = score_answers(load_dataset("qampari:sample"), [q], answers)
    cleaned = score_answers(
        load_dataset("qampari:sample"), [q], answers,
        options=ScoringOptions(metric_options=validate_metric_options({"set-f1": {"clean_items": "true"}})),
    )  # fmt: skip
    assert default["raw"][0]["set-f1"]["n_predicted"] == 3 and cleaned["raw"][0]["set-f1"]["n_predicted"] == 1
    assert cleaned["meta"]["metric_info"]["set-f1"]["clean_items"] is True
    assert default["meta"]["options"]["metric_options"]["set-f1"] == {"clean_items": False, "alias_fallback": False}


def test_validate_metric_options_one_line_errors():
    assert validate_metric_options({"quest": {"light": "yes"}}) == {"quest": {"light": True}}
    for given, needle in (
        ({"quest": {"lite": 1}}, "no option 'lite' (its options: light)"),
        ({"quest": {"light": [1]}}, "--metric-option quest.light: input should be a valid boolean"),
        ({"nope": {"x": 1}}, "unknown metric 'nope'"),
        ({"quest": 3}, "expected a mapping"),
    ):
        with pytest.raises(ConfigError, match=needle.replace("(", r"\(").replace(")", r"\)")):
            validate_metric_options(given)


def test_retrieval_eval_options():
    from types import SimpleNamespace

    from harness.analysis.retrieval_eval import score_question
    from harness.scoring.retrieval_metrics import retrieval_options

    assert retrieval_options({}) == {"mrecall": {"cap": False}, "evidence_recall": {"lcs": "official"}}
    with pytest.raises(ConfigError, match="mrecall.cap: input should be a valid boolean"):
        retrieval_options({"mrecall": {"cap": "often"}})
    with pytest.raises(ConfigError, match="no metric with options named 'recall'"):
        retrieval_options({"recall": {"cap": True}})

    class Snap:
        def resolve_title(self, title):
            return SimpleNamespace(title=title)

    sample = SimpleNamespace(answer=["A", "B", "C"], needed_titles=[])
    hits = [SimpleNamespace(title=t, text="") for t in ("A", "B", "X")]
    official = score_question("quest", sample, hits, [2], Snap())["values"]["mrecall"]["2"]
    capped = score_question("quest", sample, hits, [2], Snap(), retrieval_options({"mrecall": {"cap": True}}))
    assert official == 0.0 and capped["values"]["mrecall"]["2"] == 1.0  # 3 gold > K = 2, both top-2 gold


def test_oversized_answers_are_said_after_the_run(tmp_path, capsys):
    register_script("h23-long", lambda messages, tools, tool_choice, params: "word " * 400)  # 2,000 characters
    try:
        argv = run_argv("scripted/h23-long", "hotpotqa:dev", tmp_path / "run", "--max-answer-chars", "1000")
        code, out, err = cli([*argv, "--max-tokens", "1000"], capsys)
    finally:
        unregister_script("h23-long")
    assert code == 0, err
    assert "3 answers longer than max_answer_chars were scored on their first 1,000 characters" in out
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["config"]["max_answer_chars"] == 1000 and results["scores"]["meta"]["n_oversized_answers"] == 3
    assert results["scores"]["raw"][0]["oversized_answer"] == {"chars": 2000, "scored_chars": 1000}


# --------------------------------------------------------------------------- one reading of golds
def test_booleans_and_numbers_read_alike_in_every_metric():
    fanoutqa = load_dataset("fanoutqa:dev")
    by_id = fanoutqa.by_id()
    boolean, number = by_id["cfe8f23b3e45113c"], by_id["5865c4b3f5b1456b"]
    assert boolean.answer is False and number.answer == 4
    answers = [{"id": boolean.id, "answer": "no"}, {"id": number.id, "answer": "4"}]
    metrics = ["fanoutqa-string", "em-f1", "topiocqa", "set-f1"]
    scores = score_answers(fanoutqa, [boolean, number], answers, metrics)
    for row in scores["raw"]:
        assert row["fanoutqa-string"]["acc"] == 1.0
        assert row["em-f1"]["em"] == 1.0  # "no" was compared with "False"
        assert row["topiocqa"]["em"] == 1.0
        assert row["set-f1"]["f1"] == 1.0
    assert gold_text(False) == "no" and gold_text([True, 2]) == "yes\n2"
    assert gold_text([{"answer_text": "Peru", "aliases": ["Peru"]}]) == "Peru"


def test_answer_types():
    assert [answer_type(v) for v in ("a", 1, 2.5, True, ["a"], [1], {"a": 1}, None)] == [
        "str", "number", "number", "bool", "list_of_str", "list", "dict", None,
    ]  # fmt: skip
    assert answer_type([{"answer_text": "x", "aliases": []}]) == "entity_list"
    assert answer_type(["a", "b"], ("str", "references")) == "references"  # TopiOCQA's alternatives


def test_counts_count_only_dataset_questions():
    qs = QUEST.samples[:3]
    answers = [{"id": q.id, "answer": q.answer} for q in qs[:2]]
    answers += [{"id": "not-in-the-dataset", "answer": "x" * 200_000}, {"id": "another", "answer": "y"}]
    meta = score_answers(QUEST, qs, answers)["meta"]
    assert meta["n_answered"] == 2 and meta["n_questions"] == 3
    assert meta["n_oversized_answers"] == 0  # the oversized one answers no question scored


def test_check_metrics_reads_the_selected_questions():
    fanoutqa = load_dataset("fanoutqa:dev")
    lists = [s for s in fanoutqa.samples if answer_type(s.answer) == "list_of_str"]
    check_metrics(fanoutqa, lists, ["quest"], ScoringOptions())  # those questions are lists of titles
    with pytest.raises(HarnessError, match="cannot score"):
        check_metrics(fanoutqa, fanoutqa.samples, ["quest"], ScoringOptions())
    # a dataset without answers scores nothing: nothing to refuse beyond the names
    assert list(check_metrics(load_dataset("fanoutqa:test"), [], ["llm-judge"], ScoringOptions())) == ["llm-judge"]


# --------------------------------------------------------------------------- progress on the headline's scale
def test_progress_uses_the_headline_scale():
    from harness.execution.progress import Progress

    stream = io.StringIO()
    progress = Progress(4, enabled=True, stream=stream)  # no terminal: lines
    rows = [{"em": 1.0, "f1": 1.0, "bleu": 100.0}, {"em": 0.0, "f1": 0.5, "bleu": 10.0}]
    from harness.scoring.topiocqa_metrics import corpus_stats

    for row, (pred, gold) in zip(rows, [("Britain", "Britain"), ("a b", "a c")]):
        progress.advance(ok=True, scores={"topiocqa": {**row, "bleu_corpus_stats": corpus_stats(pred, gold)}})
    name, value = progress.headline()
    assert name == "topiocqa.em" and value == pytest.approx(50.0)  # the headline's 0-100, not 0.5
    assert "topiocqa.em 50.000 (mean of 2 scored)" in progress.line()

    fan = Progress(2, enabled=False)
    rouge = {k: {"precision": 1.0, "recall": 1.0, "fscore": 1.0} for k in ("rouge1", "rouge2", "rougeL")}
    fan.advance(ok=True, scores={"fanoutqa-string": {"acc": 0.5, "rouge": rouge}})
    assert fan.headline() == ("fanoutqa-string.acc.loose", 0.5)


# --------------------------------------------------------------------------- a dataset's default strategy
def test_topiocqa_runs_the_conversational_strategy_by_default(counted, tmp_path, capsys):
    from harness.strategy import resolve_agent

    assert resolve_agent(None, None, "topiocqa:dev")[0].name == "conversational"
    assert resolve_agent(None, "open-book", "topiocqa")[0].name == "conversational-open-book"
    assert resolve_agent(None, "retrieve-read", "topiocqa:dev")[0].name == "retrieve-read-joint"
    assert resolve_agent("closed-book", None, "topiocqa:dev")[0].name == "closed-book"  # --agent wins
    assert resolve_agent(None, None, "hotpotqa:dev")[0].name == "closed-book"

    model, calls = counted
    code, _, err = cli(run_argv(model, "topiocqa:dev", tmp_path / "run", limit="3"), capsys)
    assert code == 0, err
    (third,) = [prompt for prompt in calls if prompt.endswith("is this a movie?")]  # turn 3
    assert "[Conversation so far]:" in third and "Q1: where does the man with the golden gun take place" in third
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["agent"]["name"] == "conversational" and results["agent"]["chosen_by"] == "dataset default"
    assert results["setting"] == "closed-book"

    calls.clear()
    code, _, err = cli(run_argv(model, "topiocqa:dev", tmp_path / "plain", "--agent", "closed-book"), capsys)
    assert code == 0, err
    assert len(calls) == 3 and not any("Conversation so far" in prompt for prompt in calls)
    agent = json.loads((tmp_path / "plain" / "results.json").read_text())["agent"]
    assert agent["name"] == "closed-book" and agent["chosen_by"] == "agent option"


def test_every_builtin_metric_is_declared():
    builtins = [name for name in METRICS.names() if METRICS.source_of(name) == "builtin"]
    assert len(builtins) == 12 and {"calibration", "citations", "outcomes", "per-correct"} <= set(builtins)
    for name in builtins:
        assert getattr(get_metric(name), "declaration", None) is not None, name
