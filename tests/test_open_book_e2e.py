"""Open-book (both protocols) and evidence-provided end to end with real local models over a snapshot
built from real Wikipedia paragraphs (HotpotQA dev, tests/fixtures)."""

import json

import pytest
from conftest import assert_ran, run_harness


def run_hotpot(hotpot_snapshot, out, *args):
    return run_harness("run", "--dataset", "hotpotqa:dev", "--snapshot", str(hotpot_snapshot), "--search-space", "evidence-only", "--out", str(out), *args)


def samples(run_dir):
    return [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]


def results(run_dir):
    return json.loads((run_dir / "results.json").read_text())


@pytest.mark.slow
def test_evidence_provided_packs_real_pages(hotpot_snapshot, tmp_path):
    out = tmp_path / "ep"
    proc = run_hotpot(hotpot_snapshot, out, "--setting", "evidence-provided", "--limit", "2", "--max-tokens", "24")
    assert proc.returncode == 0, proc.stderr
    for s in samples(out):
        prompt = s["messages"][0]["content"]
        assert prompt.startswith("*** BEGIN DATA ***\n\n<document>\n<title>")
        assert prompt.endswith(f"[Question]: {s['question']}")
        ev = s["extra"]["evidence"]
        assert ev["chunks_packed"] == ev["chunks_total"] >= 10 and not ev["cut"]
        assert ev["prompt_tokens"] <= ev["budget_tokens"] == 8192 - 520
        assert prompt.count("<document>") == ev["chunks_packed"]
        assert s["answer"].strip()
    r = results(out)
    assert r["setting"] == "evidence-provided" and r["retrieval"]["evidence_cut"] == 0
    assert r["snapshot"]["content_hash"] and {"em", "f1"} <= set(r["scores"]["em-f1"])
    assert {"acc", "rouge"} == set(r["scores"]["fanoutqa-string"])

    # A small context cuts the evidence, and says so.
    small = tmp_path / "small"
    proc = run_hotpot(
        hotpot_snapshot,
        small,
        "--setting",
        "evidence-provided",
        "--limit",
        "2",
        "--max-tokens",
        "24",
        "--context-size",
        "1024",
    )
    assert proc.returncode == 0, proc.stderr
    for s in samples(small):
        ev = s["extra"]["evidence"]
        assert ev["cut"] and 0 < ev["chunks_packed"] < ev["chunks_total"]
        assert ev["prompt_tokens"] <= 1024 - 520
    assert results(small)["retrieval"]["evidence_cut"] == 2


@pytest.mark.slow
def test_open_book_native_tool_calls_real_model(hotpot_snapshot, tmp_path):
    out = tmp_path / "native"
    proc = run_hotpot(
        hotpot_snapshot, out, "--setting", "open-book", "--limit", "2", "--max-tokens", "48", "--agent-arg", "max_rounds=3"
    )
    assert_ran(proc, out)  # 0, or 4 where the tiny model never answered
    for s in samples(out):
        msgs = s["messages"]
        assert msgs[0]["content"].startswith(
            "Answer the following question, and output only a function call or your answer."
        )
        call = msgs[1]["tool_calls"][0]
        assert msgs[1]["role"] == "assistant" and call["function"]["name"] == "search"
        query = json.loads(call["function"]["arguments"])["query"]
        assert msgs[2] == {"role": "tool", "tool_call_id": call["id"], "content": msgs[2]["content"]}
        assert s["extra"]["searches"][0]["query"] == query
        tool_reply = msgs[2]["content"]
        assert tool_reply.startswith("<document>\n<title>") or tool_reply.startswith("No page with that title exists.")
        assert s["extra"]["tool_choice_policy"] == "first-forced"
        assert s["outcome"] in ("answered", "max_rounds", "context_full")
        assert s["extra"]["evidence_recall"]["needed"]
    r = results(out)
    assert r["retrieval"]["evidence_recall_n"] == 2 and r["agent"]["protocol"] == "native"
    assert r["agent"]["knobs"]["budget_fraction"] == 0.5 and r["agent"]["knobs"]["chunk_size"] == 1024


@pytest.mark.slow
def test_open_book_native_through_llamacpp_server(hotpot_snapshot, tmp_path):
    out = tmp_path / "server"
    proc = run_hotpot(
        hotpot_snapshot,
        out,
        "--setting",
        "open-book",
        "--model",
        "llamacpp-server/smollm2",
        "--limit",
        "1",
        "--max-tokens",
        "48",
        "--agent-arg", "max_rounds=2",
    )
    assert_ran(proc, out)  # 0, or 4 where the tiny model never answered
    s = samples(out)[0]
    assert s["messages"][1]["tool_calls"][0]["function"]["name"] == "search"
    assert s["messages"][2]["role"] == "tool" and len(s["extra"]["searches"]) >= 1


@pytest.mark.parametrize("repeat", [False, True])
@pytest.mark.slow
def test_open_book_text_protocol_real_model(hotpot_snapshot, tmp_path, repeat):
    """Qwen2.5-Coder-0.5B follows the paper's <search> protocol (SmolLM2-135M does not)."""
    out = tmp_path / "text"
    proc = run_hotpot(
        hotpot_snapshot,
        out,
        "--setting",
        "open-book",
        "--agent",
        "open-book-text",
        "--model",
        "local/qwen2.5-coder-0.5b",
        "--limit",
        "2",
        "--max-tokens",
        "48",
        "--agent-arg", "max_rounds=3",
        *(["--agent-arg", "repeat_question=true"] if repeat else []),
    )
    assert_ran(proc, out)  # 0, or 4 where the tiny model never answered
    found_any = False
    for s in samples(out):
        msgs = s["messages"]
        assert msgs[0]["content"].startswith("You have the ability to search Wikipedia for information.")
        assert msgs[1]["role"] == "assistant" and msgs[1]["content"].startswith("<search>")
        assert msgs[1]["content"].endswith("</search>")
        assert msgs[2]["role"] == "user"
        assert msgs[2]["content"].endswith(f"[Question]: {s['question']}") == repeat
        assert s["extra"]["searches"][0]["query"] == msgs[1]["content"][len("<search>") : -len("</search>")]
        found_any |= any(x["found_title"] for x in s["extra"]["searches"])
        if s["outcome"] == "max_rounds":
            assert s["answer"] is None and s["extra"]["rounds"] == 3
    # Without the reminder the model follows a suggested title to a real page; with it, this tiny
    # model repeats its first query (a real behaviour the records show, not asserted either way).
    assert found_any or repeat, "no search resolved to a real page"
    assert results(out)["agent"]["knobs"]["repeat_question"] is repeat


@pytest.mark.slow
def test_missing_evidence_is_recorded_not_answered(hotpot_snapshot, tmp_path):
    out = tmp_path / "missing"
    proc = run_harness(
        "run",
        "--setting",
        "evidence-provided",
        "--dataset",
        "fanoutqa:dev",
        "--snapshot",
        str(hotpot_snapshot),
        "--limit",
        "1",
        "--out",
        str(out),
    )
    assert proc.returncode == 4  # its one sample failed: no question answered, no scores
    failure = json.loads((out / "failures.jsonl").read_text())
    assert failure["error_type"] == "missing_evidence" and failure["model_calls"] == 0
    assert "1998 Major League Baseball draft" in failure["missing_titles"]
    assert results(out)["counts"]["failed"] == 1


def test_open_book_needs_a_snapshot(tmp_path):
    proc = run_harness("run", "--setting", "open-book", "--limit", "1", "--out", str(tmp_path / "x"))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "--snapshot" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_ceiling_grows_with_context(hotpot_snapshot, tmp_path):
    out = tmp_path / "ceiling.json"
    proc = run_harness(
        "ceiling",
        "--dataset",
        "hotpotqa:dev",
        "--snapshot",
        str(hotpot_snapshot),
        "--limit",
        "8",
        "--context-sizes",
        "700,1024,2048,8192",
        "--out",
        str(out),
    )
    assert proc.returncode == 0, proc.stderr
    assert "| 8192 |" in proc.stdout
    result = json.loads(out.read_text())
    loose = [row["loose"] for row in result["rows"]]
    assert loose == sorted(loose) and loose[0] < loose[-1]
    assert result["rows"][-1]["cut"] == 0 and result["rows"][0]["cut"] > 0
    # rows are the means of the per-sample values (missing evidence would count 0)
    last = [r["sizes"]["8192"]["loose"] for r in result["per_sample"]]
    assert result["rows"][-1]["loose"] == pytest.approx(sum(last) / 8)
    assert result["n_samples"] == 8 and result["reserve_tokens"] == 520
