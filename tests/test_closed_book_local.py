"""End to end on the real embedded model (SmolLM2-135M GGUF in its worker process) on real FanOutQA questions."""

import pytest
import json

from conftest import run_harness

from harness.datasets import load_dataset
from harness.scoring.fanoutqa_metrics import score_fanoutqa

# FanOutQA's closed-book prompt, as in the paper (appendix H.4) and its benchmark code.
PAPER_PROMPT = (
    "Answer the following question, and output only your answer. If the answer is a list, output one on"
    " each line. Current date: 11-20-2023.\n\n[Question]: {question}"
)


def read_samples(run_dir):
    """Samples in dataset order: the runner appends them as they finish, in any order."""
    samples = [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]
    order = {q.id: i for i, q in enumerate(load_dataset("fanoutqa:dev@nov23").samples)}
    return sorted(samples, key=lambda s: order[s["id"]])


@pytest.mark.slow
def test_closed_book_run_real_model(tmp_path):
    out = tmp_path / "run"
    proc = run_harness("run", "--limit", "3", "--out", str(out), "--max-tokens", "48")
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr

    samples = read_samples(out)
    dataset = load_dataset("fanoutqa:dev@nov23")
    assert [s["id"] for s in samples] == [q.id for q in dataset.samples[:3]]
    for sample, question in zip(samples, dataset.samples[:3]):
        user, assistant = sample["messages"]
        assert user == {"role": "user", "content": PAPER_PROMPT.format(question=question.question)}
        assert assistant["role"] == "assistant" and assistant["content"] == sample["answer"]
        assert sample["answer"].strip(), "the real model produced no text"
        assert sample["usage"]["prompt_tokens"] > 20 and 0 < sample["usage"]["completion_tokens"] <= 48
        assert sample["model_calls"] == 1
        assert sample["truncated_output"] == (sample["finish_reason"] == "length")

    results = json.loads((out / "results.json").read_text())
    assert results["status"] == "complete"
    assert results["dataset"]["version"] == "nov23"
    assert results["dataset"]["sha256"] == dataset.info.sha256
    assert results["model"]["backend"] == "local" and results["model"]["context_size"] == 8192
    assert results["generation"]["temperature"] == 0.0
    assert len(results["agent"]["prompt_sha256"]) == 64
    assert results["counts"] == {
        "selected": 3,
        "finished": 3,
        "failed": 0,
        "pending": 0,
        "truncated_output": sum(s["truncated_output"] for s in samples),
    }
    assert results["tokens"]["completion"] == sum(s["usage"]["completion_tokens"] for s in samples)
    # The run's scores are the official-shape scores of exactly these answers.
    expected = score_fanoutqa(
        [{"id": q.id, "answer": q.answer} for q in dataset.samples[:3]],
        [{"id": s["id"], "answer": s["answer"]} for s in samples],
    )
    assert results["scores"]["fanoutqa-string"] == {"acc": expected["acc"], "rouge": expected["rouge"]}
    assert [r["question_id"] for r in results["scores"]["raw"]] == [q.id for q in dataset.samples[:3]]
    assert results["scores"]["meta"]["metric_info"]["fanoutqa-string"]["normalizer"]["model_version"]


@pytest.mark.slow
def test_rescore_run_and_score_generations_file(tmp_path):
    out = tmp_path / "run"
    assert run_harness("run", "--limit", "2", "--out", str(out), "--max-tokens", "16").returncode == 0
    before = json.loads((out / "results.json").read_text())["scores"]

    proc = run_harness("score", str(out))
    assert proc.returncode == 0, proc.stderr
    after = json.loads((out / "results.json").read_text())["scores"]
    assert after == before  # the same scoring path: the same numbers

    # The official submission format: answers for 2 questions, the other 308 count as 0.
    gens = tmp_path / "gens.jsonl"
    dataset = load_dataset("fanoutqa:dev@2026")
    q0, q1 = dataset.samples[:2]
    gens.write_text(
        json.dumps({"id": q0.id, "answer": str(q0.answer)})
        + "\n"
        + json.dumps({"id": q1.id, "answer": "no idea"})
        + "\n"
    )
    proc = run_harness(
        "score", "--dataset", "fanoutqa:dev@2026", "--generations", str(gens), "--out", str(tmp_path / "s.json")
    )
    assert proc.returncode == 0, proc.stderr
    scores = json.loads((tmp_path / "s.json").read_text())
    assert len(scores["raw"]) == 310
    assert scores["meta"]["dataset"] == "fanoutqa:dev@2026"
    raw = [r["fanoutqa-string"] for r in scores["raw"]]
    assert raw[1]["acc"] == 0 and raw[2]["acc"] == 0
    assert scores["fanoutqa-string"]["acc"]["loose"] == raw[0]["acc"] / 310


@pytest.mark.slow
def test_closed_book_through_llamacpp_server_openai_protocol(tmp_path):
    """The OpenAI-protocol path for real: llama.cpp's server launched as a child, the openai client."""
    out = tmp_path / "run"
    proc = run_harness(
        "run",
        "--model",
        "llamacpp-server/smollm2",
        "--limit",
        "3",
        "--out",
        str(out),
        "--max-tokens",
        "48",
        "--max-connections",
        "2",
    )
    assert proc.returncode == 0, proc.stderr
    samples = read_samples(out)
    dataset = load_dataset("fanoutqa:dev")
    assert sorted(s["id"] for s in samples) == sorted(q.id for q in dataset.samples[:3])
    by_id = dataset.by_id()
    for sample in samples:
        assert sample["messages"][0]["content"] == PAPER_PROMPT.format(question=by_id[sample["id"]].question)
        assert sample["messages"][1]["content"] == sample["answer"] and sample["answer"].strip()
        assert 0 < sample["usage"]["completion_tokens"] <= 48
    results = json.loads((out / "results.json").read_text())
    assert results["model"]["backend"] == "llamacpp-server"
    assert results["model"]["context_size"] == 8192
    assert results["model"]["base_url"].startswith("http://127.0.0.1:")
    assert results["scores"]["raw"] and results["counts"]["finished"] == 3


@pytest.mark.slow
def test_response_cache_answers_a_repeat_run(tmp_path):
    first = tmp_path / "a"
    second = tmp_path / "b"
    args = ["run", "--limit", "2", "--max-tokens", "24"]
    assert run_harness(*args, "--out", str(first)).returncode == 0
    assert run_harness(*args, "--out", str(second)).returncode == 0
    a, b = read_samples(first), read_samples(second)
    assert [s["answer"] for s in a] == [s["answer"] for s in b]
    assert all(s["model_calls"] == 0 and s["cache_hits"] == 1 for s in b)
    results = json.loads((second / "results.json").read_text())
    assert results["invocations"][0]["model_calls"] == 0
    # the cache lives outside the run and holds no secrets
    cache_files = list((tmp_path / "cache").glob("responses.sqlite*"))
    assert cache_files


def test_overflow_message_names_the_context_in_force():
    from harness.models.llama_child import overflow_message

    text = overflow_message("Requested tokens (83) exceed context window of 256", 16)
    assert text == "prompt of 83 tokens does not fit the context of 16 tokens (with room for an answer)"
    assert overflow_message("something else", 16) == "something else"


@pytest.mark.slow
def test_a_context_below_llama_cpps_padding_is_the_one_enforced(tmp_path):
    """llama.cpp pads the context to a multiple of 256 while llama-cpp-python's token buffer has
    the size asked for: a prompt (or prompt + answer) between the two failed inside numpy ("could not
    broadcast"). Now the size asked for is the context: over it, a context_overflow of the sample;
    within it, an answer cut at the context."""
    import asyncio

    from harness.errors import ContextOverflowError
    from harness.models import BackendOptions, GenerationParams, create_backend

    out = tmp_path / "tiny"
    proc = run_harness(
        "run", "--model", "local/smollm2", "--dataset", "qampari:sample", "--limit", "1", "--context-size", "16",
        "--out", str(out),
    )  # fmt: skip
    assert proc.returncode == 4 and "Traceback" not in proc.stderr  # its one question failed: nothing answered
    failure = json.loads((out / "failures.jsonl").read_text())
    assert failure["error_type"] == "context_overflow", failure
    assert failure["error"].endswith("tokens does not fit the context of 16 tokens (with room for an answer)")
    assert not (out / "errors.log").exists()  # no code exception
    assert json.loads((out / "results.json").read_text())["model"]["context_size"] == 16

    backend = create_backend("local/smollm2", BackendOptions(context_size=100))
    question = [{"role": "user", "content": "Name every country in Europe and its capital city, one per line. " * 3}]
    too_long = [{"role": "user", "content": question[0]["content"] * 2}]

    async def go():
        try:
            await backend.start()
            assert backend.context_size() == 100  # llama.cpp itself holds 256
            answer = await backend.generate(question, GenerationParams(max_tokens=200))
            with pytest.raises(ContextOverflowError, match="does not fit the context of 100 tokens"):
                await backend.generate(too_long, GenerationParams(max_tokens=8))
            return answer
        finally:
            await backend.close()

    answer = asyncio.run(go())
    usage = answer.usage
    assert 60 < usage.prompt_tokens < 100 and usage.prompt_tokens + usage.completion_tokens <= 100
    assert answer.finish_reason == "length"  # cut where the context ends, not at max_tokens 200
