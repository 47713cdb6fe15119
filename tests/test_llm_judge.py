"""FanOutQA's LLM-as-judge: the official prompt byte for byte, the official B/C/E rule, the 4000-char
trim, caching, a real judge run with the embedded model, and the CLI refusing to run without --judge."""

import ast
import asyncio
import json
from pathlib import Path

import pytest
from conftest import run_harness

from harness.datasets import load_dataset
from harness.datasets.base import Sample
from harness.errors import HarnessError
from harness.models import scripted
from harness.models.scripted import register_script, unregister_script
from harness.scoring import llm_judge
from harness.scoring.metrics import ScoringOptions, get_metric, score_answers

STATE: dict = {}


async def judge(messages, tools, tool_choice, params):
    """Replies STATE["reply"](user_prompt) with fixed token counts, counting requests in flight."""
    STATE["in_flight"] += 1
    STATE["max_in_flight"] = max(STATE["max_in_flight"], STATE["in_flight"])
    try:
        await asyncio.sleep(STATE["delay"])
        return {
            "content": STATE["reply"](messages[-1]["content"]),
            "usage": {"prompt_tokens": 100, "completion_tokens": 5},
        }
    finally:
        STATE["in_flight"] -= 1


@pytest.fixture(autouse=True)
def script():
    """The judge script; its ``requests`` records every request it gets."""
    STATE.update(reply=lambda prompt: "Reasoning...\nB\nB", delay=0.01, in_flight=0, max_in_flight=0)
    yield register_script("judge", judge)
    unregister_script("judge")


def official_llm_module():
    """factuality_system and factuality_prompt from the installed fanoutqa 1.1.1 eval/llm.py, exec'd
    alone (the module imports kani, which is not installed)."""
    fanoutqa = pytest.importorskip("fanoutqa")
    path = Path(fanoutqa.__file__).parent / "eval" / "llm.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    keep = [
        node
        for node in tree.body
        if (isinstance(node, ast.FunctionDef) and node.name == "factuality_prompt")
        or (isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "factuality_system" for t in node.targets))
    ]
    assert len(keep) == 2
    namespace: dict = {}
    exec(compile(ast.Module(body=keep, type_ignores=[]), str(path), "exec"), namespace)  # noqa: S102 - the installed reference's own code
    return namespace


def official_str_answer():
    """fanoutqa/eval/utils.py loaded alone (fanoutqa.eval's __init__ imports bleurt and kani)."""
    import importlib.util

    fanoutqa = pytest.importorskip("fanoutqa")
    spec = importlib.util.spec_from_file_location(
        "_foqa_eval_utils", Path(fanoutqa.__file__).parent / "eval" / "utils.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.str_answer


def test_prompt_equals_official():
    official = official_llm_module()
    assert llm_judge.factuality_system == official["factuality_system"]
    cases = [
        ("Who won?", "Pat Burrell", "I think it was Pat Burrell."),
        ("Q with {braces} and\nnewlines", "a\nb\nc", ""),
        ("ünïcode ✓", "x - 1\ny - 2", "x" * 5000),
    ]
    for case in cases:
        assert llm_judge.factuality_prompt(*case) == official["factuality_prompt"](*case)
    # the messages sent: system, then the user prompt with str_answer(reference)
    str_answer = official_str_answer()

    ref = {"a": [1, 2], "b": True}
    messages = llm_judge.judge_messages("Q?", ref, "ans")
    assert messages == [
        {"role": "system", "content": official["factuality_system"]},
        {"role": "user", "content": official["factuality_prompt"]("Q?", str_answer(ref), "ans")},
    ]
    for value in (ref, ["x", "y"], False, None, 3.5, "s"):
        assert llm_judge.str_answer(value) == str_answer(value)


QUESTIONS = [Sample(id=f"q{i}", question=f"Question number {i}?", answer=[f"ref {i}", "other"]) for i in range(8)]


def score(answers, tmp_path, only_answered=False, **opts):
    options = ScoringOptions(judge="scripted/judge", cache_path=str(tmp_path / "judge.sqlite"), **opts)
    return get_metric("llm-judge")(QUESTIONS, answers, only_answered, options=options)


def test_parsing_rule(tmp_path, script):
    replies = {
        "q0": "Step by step...\nB\nB",
        "q1": "reasoning\nC\nC  \n\n",  # trailing whitespace is stripped
        "q2": "E",
        "q3": "...\nA\nA",
        "q4": "...\nD\nd",
        "q5": "...\nF\nF",
        "q6": "The answer is (b)",  # only the last character counts: ")" -> 0
        "q7": "...\ne",  # lower case counts
    }
    STATE["reply"] = lambda prompt: replies["q" + prompt.split("[Question]: Question number ")[1][0]]
    answers = [{"id": q.id, "answer": f"answer {q.id}"} for q in QUESTIONS]
    result = score(answers, tmp_path)
    expected = {"q0": 1, "q1": 1, "q2": 1, "q3": 0, "q4": 0, "q5": 0, "q6": 0, "q7": 1}
    assert {qid: r["llm_judge"] for qid, r in result["raw"].items()} == expected
    assert {qid: r["judge_output"] for qid, r in result["raw"].items()} == replies
    assert result["aggregate"]["llm_judge"] == pytest.approx(4 / 8)
    for qid, reply in replies.items():
        assert result["raw"][qid]["llm_judge"] == int(reply.strip()[-1].lower() in "bce")
    assert len(script.requests) == 8
    params = script.requests[0]["params"]
    assert params.temperature == 0 and params.seed == 31415
    info = result["info"]
    assert info["calls"] == 8 and info["cache_hits"] == 0
    assert info["judge_prompt_tokens"] == 800 and info["judge_completion_tokens"] == 40
    assert info["reference"] == "fanoutqa eval/llm.py" and len(info["prompt_sha256"]) == 64
    assert info["backend"]["backend"] == "scripted" and info["judge"] == "scripted/judge"
    assert info["backend"]["model"] == "judge" and info["backend"]["scripted"] is True


def test_empty_output_scores_zero(tmp_path):
    STATE["reply"] = lambda prompt: "  \n"
    result = score([{"id": "q0", "answer": "x"}], tmp_path)
    assert result["raw"]["q0"]["llm_judge"] == 0


def test_trim_and_unanswered(tmp_path, script):
    long_answer = "word " * 2000  # 10000 chars
    answers = [{"id": "q0", "answer": long_answer}, {"id": "q1", "answer": "short"}, {"id": "q2", "answer": None}]
    result = score(answers, tmp_path)
    # q2 (None) and q3..q7 (missing) are unanswered: 0, no request
    assert len(script.requests) == 2
    sent = {
        r["messages"][1]["content"].split("[Question]: ")[1][:17]: r["messages"][1]["content"] for r in script.requests
    }
    prompt0 = sent["Question number 0"]
    submission = prompt0.split("[Submission]: ")[1].split("\n************\n[END DATA]")[0]
    assert submission == long_answer[:4000]
    assert prompt0 == llm_judge.factuality_prompt("Question number 0?", "ref 0\nother", long_answer[:4000])
    assert result["info"]["trimmed_to_4000_chars"] == ["q0"]
    for qid in ("q2", "q3", "q7"):
        assert result["raw"][qid] == {"llm_judge": 0, "judge_output": None}
    assert result["aggregate"]["llm_judge"] == pytest.approx(2 / 8)

    # only_answered: the pool is the answered ids (None still counts 0, as unanswered)
    script.requests.clear()
    result = score(answers, tmp_path / "other", only_answered=True)
    assert set(result["raw"]) == {"q0", "q1", "q2"}
    assert result["aggregate"]["llm_judge"] == pytest.approx(2 / 3)


def test_no_answers_no_backend(tmp_path, script):
    result = score([], tmp_path)
    assert script.requests == [] and result["aggregate"]["llm_judge"] == 0
    assert result["info"]["calls"] == 0


def test_cache_means_no_second_request(tmp_path, script):
    answers = [{"id": q.id, "answer": "something"} for q in QUESTIONS[:3]]
    first = score(answers, tmp_path)
    assert len(script.requests) == 3 and first["info"]["calls"] == 3
    second = score(answers, tmp_path)
    assert len(script.requests) == 3, "re-scoring asked the judge again"
    assert second["info"]["calls"] == 0 and second["info"]["cache_hits"] == 3
    assert second["raw"] == first["raw"]
    # a changed answer is a new request
    score([{"id": "q0", "answer": "something else"}], tmp_path)
    assert len(script.requests) == 4


def test_concurrency_bound(tmp_path):
    STATE["delay"] = 0.05
    score([{"id": q.id, "answer": "a"} for q in QUESTIONS], tmp_path, judge_max_connections=3)
    assert STATE["max_in_flight"] == 3


def test_runs_inside_an_event_loop(tmp_path):
    """harness run scores from inside its event loop."""

    async def main():
        return score([{"id": "q0", "answer": "a"}], tmp_path)

    assert asyncio.run(main())["raw"]["q0"]["llm_judge"] == 1


def test_needs_a_judge():
    with pytest.raises(HarnessError, match="--judge"):
        get_metric("llm-judge")(QUESTIONS, [], False, options=ScoringOptions())


@pytest.mark.slow
def test_real_judge_smollm2(tmp_path):
    """The embedded SmolLM2-135M as judge on two FanOutQA dev questions: a weak judge, but a real one."""
    dataset = load_dataset("fanoutqa:dev")
    qs = dataset.samples[:2]
    str_answer = llm_judge.str_answer

    answers = [{"id": qs[0].id, "answer": str_answer(qs[0].answer)}, {"id": qs[1].id, "answer": "I don't know."}]
    options = ScoringOptions(judge="local/smollm2", cache_path=str(tmp_path / "judge.sqlite"))
    scores = score_answers(dataset, qs, answers, ["llm-judge"], options=options)
    assert [r["question_id"] for r in scores["raw"]] == [q.id for q in qs]
    for row in (r["llm-judge"] for r in scores["raw"]):
        assert isinstance(row["judge_output"], str) and row["judge_output"].strip()
        assert row["llm_judge"] == int(row["judge_output"].strip()[-1].lower() in "bce")
    judged = [r["llm-judge"]["llm_judge"] for r in scores["raw"]]
    assert scores["llm-judge"]["llm_judge"] == pytest.approx(sum(judged) / 2)
    info = scores["meta"]["metric_info"]["llm-judge"]
    assert info["calls"] == 2 and info["judge_completion_tokens"] > 0
    assert info["backend"]["model"] == "smollm2"
    again = score_answers(dataset, qs, answers, ["llm-judge"], options=options)
    assert again["meta"]["metric_info"]["llm-judge"]["cache_hits"] == 2
    assert again["raw"] == scores["raw"]


def test_cli_needs_judge(tmp_path):
    dataset = load_dataset("fanoutqa:dev")
    generations = tmp_path / "gen.jsonl"
    generations.write_text(json.dumps({"id": dataset.samples[0].id, "answer": "x"}) + "\n")
    proc = run_harness(
        "score", "--dataset", "fanoutqa:dev", "--generations", str(generations), "--metrics", "llm-judge"
    )
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "--judge" in lines[0], proc.stderr


def official_score_gpt(questions, answers):
    """The installed fanoutqa 1.1.1 ``Scorer`` (eval/scorer.py) with its ``score_gpt`` run as is; its
    ``get_llm_factuality`` (eval/llm.py, which needs kani) replaced by one that records the prompt
    the official ``factuality_prompt`` builds from the answer it is given and replies "B"."""
    import itertools
    import typing
    import warnings

    fanoutqa = pytest.importorskip("fanoutqa")
    path = Path(fanoutqa.__file__).parent / "eval" / "scorer.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    scorer_class = [node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "Scorer"]
    official = official_llm_module()
    str_answer = official_str_answer()
    prompts: dict = {}

    async def get_llm_factuality(question, answer, cache_key=None):
        prompts[question.id] = official["factuality_prompt"](question.question, str_answer(question.answer), answer)
        return "reasoning\nB\nB"

    def batched(iterable, n):  # fanoutqa/utils.py's (that module makes ~/.cache/fanoutqa on import)
        it = iter(iterable)
        while batch := tuple(itertools.islice(it, n)):
            yield batch

    namespace = {"get_llm_factuality": get_llm_factuality, "batched": batched, "asyncio": asyncio}
    namespace.update({name: getattr(typing, name) for name in ("Optional", "Iterable", "Tuple", "Dict")})
    namespace["warnings"] = warnings
    names = ("DevQuestion", "Answer", "AccuracyScore", "RougeScore", "EvaluationScore", "EvaluationSingleScore")
    namespace.update(dict.fromkeys(names, object))  # only in annotations and the other scorers
    namespace.update(RougeScorer=lambda *a, **k: None, BleurtScorer=lambda *a: None, ROUGE_TYPES=())  # made in __init__
    code = compile(ast.Module(body=scorer_class, type_ignores=[]), str(path), "exec")
    exec(code, namespace)  # noqa: S102 - the installed reference's own code
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        asyncio.run(namespace["Scorer"](questions, answers).score_gpt())
    return prompts


def test_list_answers_cut_as_official(tmp_path, script, monkeypatch):
    """scorer.py cuts ``len(answer) > 4000``: a list of fewer than 4000 items is sent whole however long
    its repr (this harness used to cut the written list at 4000 characters), a list of more is cut to
    its first 4000 items; a text at 4000 characters. Real answers: HotpotQA sentences and words."""
    hotpot = json.loads((Path(__file__).parent / "fixtures" / "hotpot_dev_distractor_first100.json").read_text())
    sentences = [s for e in hotpot for para in e["context"]["sentences"] for s in para]
    words = " ".join(sentences).split()
    qs = load_dataset("fanoutqa:dev").samples[:7]
    answers = [
        {"id": qs[0].id, "answer": sentences[:60]},  # 60 items, over 4000 characters written: sent whole
        {"id": qs[1].id, "answer": words[:4001]},  # 4001 items: the first 4000
        {"id": qs[2].id, "answer": words[:4000]},  # 4000 items: whole
        {"id": qs[3].id, "answer": " ".join(words)},  # a text: its first 4000 characters
        {"id": qs[4].id, "answer": sentences[:3]},
        {"id": qs[5].id, "answer": "Pat Burrell"},
    ]
    assert len(str(answers[0]["answer"])) > 4000 and len(answers[0]["answer"]) < 4000
    expected = official_score_gpt(qs, answers)
    monkeypatch.setattr(scripted, "DEFAULT_CONTEXT_SIZE", 100_000)  # 4000 items are 4000 whitespace tokens
    options = ScoringOptions(judge="scripted/judge", cache_path=str(tmp_path / "judge.sqlite"))
    result = get_metric("llm-judge")(qs, answers, False, options=options)
    sent = {}
    for request in script.requests:
        prompt = request["messages"][1]["content"]
        sent[next(q.id for q in qs if f"[Question]: {q.question}\n" in prompt)] = prompt
    assert set(sent) == set(expected) == {a["id"] for a in answers}
    for qid in expected:
        assert sent[qid] == expected[qid], qid
    assert str(answers[0]["answer"]) in sent[qs[0].id]
    assert str(words[:4000]) in sent[qs[1].id] and str(words[:4001]) not in sent[qs[1].id]
    assert result["info"]["trimmed_to_4000_chars"] == [qs[1].id, qs[3].id]
    assert result["raw"][qs[6].id] == {"llm_judge": 0, "judge_output": None}
