"""oracle-evidence: evidence-provided with only the gold pages. Scripted models over the real HotpotQA
snapshot (the supporting-fact pages, not the 10 context paragraphs) and a FanOutQA dev file whose
decomposition names pages of that snapshot; datasets without gold evidence refused before the run."""

from __future__ import annotations

import json
import re

import pytest

from harness.cli import main
from harness.datasets import load_dataset
from harness.models.scripted import register_script, unregister_script

TITLE = re.compile(r"<title>(.*?)</title>")


@pytest.fixture
def recorder():
    """A scripted model that answers "yes" and keeps every request."""
    name = "oracle-recorder"
    script = register_script(name, lambda messages, tools, tool_choice, params: "yes")
    yield f"scripted/{name}", script
    unregister_script(name)


def run(model, snapshot, out, agent, *extra):
    argv = ["run", "--model", model, "--agent", agent, "--snapshot", str(snapshot), "--no-cache",
            "--context-size", "100000", "--out", str(out), *extra]  # fmt: skip
    assert main(argv) == 0
    rows = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    return rows, json.loads((out / "results.json").read_text())


def packed_titles(prompt: str) -> set[str]:
    return set(TITLE.findall(prompt))


def test_hotpotqa_packs_only_the_supporting_pages(recorder, hotpot_snapshot, tmp_path):
    model, script = recorder
    dataset = {s.id: s for s in load_dataset("hotpotqa:dev").samples}
    rows, results = run(model, hotpot_snapshot, tmp_path / "oracle", "oracle-evidence", "--dataset", "hotpotqa:dev",
                        "--limit", "3")  # fmt: skip
    assert len(rows) == 3 and len(script.requests) == 3
    for row, request in zip(rows, script.requests):
        sample = dataset[row["id"]]
        gold = list(dict.fromkeys(sample.raw["supporting_facts"]["title"]))
        assert 2 <= len(gold) < len(sample.raw["context"]["title"]) == 10
        # exactly the gold pages in the prompt, every chunk of them (nothing cut at 100k tokens)
        assert packed_titles(request["messages"][0]["content"]) == set(gold)
        ev = row["extra"]["evidence"]
        assert ev["gold_pages"] == gold and ev["packed_titles"] == ev["evidence_pages"] == sorted(gold)
        assert not ev["cut"] and ev["chunks_packed"] == ev["chunks_total"]
    agent = results["agent"]
    assert agent["name"] == "oracle-evidence" and results["setting"] == "evidence-provided"
    assert agent["pages"] == "gold" and "supporting facts" in agent["gold_evidence"]
    assert agent["records"] == ["evidence"]

    # evidence-provided on the same question packs all 10 context paragraphs
    script.requests.clear()
    rows, _ = run(model, hotpot_snapshot, tmp_path / "all", "evidence-provided", "--dataset", "hotpotqa:dev",
                  "--limit", "1")  # fmt: skip
    assert packed_titles(script.requests[0]["messages"][0]["content"]) == set(dataset[rows[0]["id"]].raw["context"]["title"])


FANOUT = {
    "id": "oracle-0001",
    "question": "Were Scott Derrickson and Ed Wood of the same nationality?",
    "answer": "yes",
    "categories": ["test"],
    "decomposition": [
        {"id": "a", "question": "What nationality was Scott Derrickson?", "answer": "American", "depends_on": [],
         "decomposition": [], "evidence": {"pageid": None, "revid": None, "title": "Scott Derrickson", "url": ""}},
        {"id": "b", "question": "What nationality was Ed Wood?", "answer": "American", "depends_on": [],
         "evidence": None, "decomposition": [
             {"id": "b1", "question": "Who was Ed Wood?", "answer": "a filmmaker", "depends_on": [],
              "decomposition": [], "evidence": {"pageid": None, "revid": None, "title": "Ed Wood", "url": ""}}]},
    ],
}  # fmt: skip


def test_fanoutqa_packs_the_decompositions_evidence(recorder, hotpot_snapshot, tmp_path):
    model, script = recorder
    data = tmp_path / "fanout-dev.json"
    data.write_text(json.dumps([FANOUT]))
    rows, results = run(model, hotpot_snapshot, tmp_path / "run", "oracle-evidence", "--dataset", "fanoutqa:dev",
                        "--data-path", str(data))  # fmt: skip
    gold = ["Scott Derrickson", "Ed Wood"]  # the hops' evidence, the nested one included
    assert packed_titles(script.requests[0]["messages"][0]["content"]) == set(gold)
    ev = rows[0]["extra"]["evidence"]
    assert ev["gold_pages"] == gold and ev["packed_titles"] == sorted(gold) and not ev["cut"]
    assert "decomposition's evidence" in results["agent"]["gold_evidence"]


def test_a_question_without_gold_pages_is_refused(recorder, hotpot_snapshot, tmp_path, capsys):
    model, script = recorder
    data = tmp_path / "fanout-dev.json"
    data.write_text(json.dumps([FANOUT, {**FANOUT, "id": "no-hops", "decomposition": []}]))
    code = main(["run", "--model", model, "--agent", "oracle-evidence", "--dataset", "fanoutqa:dev", "--data-path",
                 str(data), "--snapshot", str(hotpot_snapshot), "--out", str(tmp_path / "run")])  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err == [
        "error: agent oracle-evidence: 1 selected question(s) of fanoutqa:dev@nov23+file have no gold evidence "
        "pages (first: no-hops)"
    ]
    assert not script.requests


@pytest.mark.parametrize("dataset", ["quest:train-sample", "qampari:sample", "topiocqa:dev"])
def test_datasets_without_gold_evidence_are_refused_before_the_run(dataset, recorder, hotpot_snapshot, tmp_path, capsys):
    model, script = recorder
    out = tmp_path / "run"
    code = main(["run", "--model", model, "--agent", "oracle-evidence", "--dataset", dataset, "--snapshot",
                 str(hotpot_snapshot), "--limit", "1", "--out", str(out)])  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith("error: agent oracle-evidence packs the gold evidence pages, and ") and "marks none" in err[0]
    assert not script.requests and not (out / "samples.jsonl").exists()
