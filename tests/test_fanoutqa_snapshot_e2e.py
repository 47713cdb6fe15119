"""FanOutQA's own path, unchanged, over a snapshot fetched from the MediaWiki API: a question file in
FanOutQA's dev format whose evidence (pageid, revid, title) the API builder fetches at those
revisions from a local server answering like api.php with real article text, then evidence-provided
with the real local model, and the ceiling."""

import pytest
import json

from conftest import run_harness
from test_snapshot import FakeWikipedia

QUESTION = {
    "id": "physics-0001",
    "question": "Who taught Aristotle, and in which city was Albert Einstein born?",
    "answer": {"Aristotle": "Plato", "Albert Einstein": "Ulm"},
    "categories": ["test"],
    "decomposition": [
        {"id": "a", "question": "Who taught Aristotle?", "answer": "Plato", "depends_on": [], "decomposition": [],
         "evidence": {"pageid": 308, "revid": 5001, "title": "Aristotle", "url": "https://en.wikipedia.org/wiki/Aristotle"}},
        {"id": "b", "question": "Where was Einstein born?", "answer": "Ulm", "depends_on": [], "decomposition": [],
         # the dataset names the page by another title; the API reports the real one, and pageid finds it
         "evidence": {"pageid": 736, "revid": 5002, "title": "Einstein", "url": "https://en.wikipedia.org/wiki/Einstein"}},
    ],
}  # fmt: skip


@pytest.mark.slow
def test_fanoutqa_evidence_provided_over_api_snapshot(tmp_path):
    data = tmp_path / "fanout-dev.json"
    data.write_text(json.dumps([QUESTION]))
    snap = tmp_path / "api.db"
    with FakeWikipedia() as fake:
        proc = run_harness(
            "snapshot",
            "build",
            "--kind",
            "api",
            "--from",
            str(data),
            "--out",
            str(snap),
            "--api-url",
            fake.url,
            "--rate-limit",
            "0",
            "--cache-dir",
            str(tmp_path / "cache"),
        )
        assert proc.returncode == 0, proc.stderr
        assert sorted(r["params"]["oldid"] for r in fake.requests) == ["5001", "5002"]

    out = tmp_path / "run"
    proc = run_harness(
        "run",
        "--setting",
        "evidence-provided",
        "--dataset",
        "fanoutqa:dev",
        "--data-path",
        str(data),
        "--snapshot",
        str(snap),
        "--out",
        str(out),
        "--max-tokens",
        "32",
        "--context-size",
        "2048",
    )
    assert proc.returncode == 0, proc.stderr
    sample = json.loads((out / "samples.jsonl").read_text())
    ev = sample["extra"]["evidence"]
    assert ev["evidence_pages"] == ["Albert Einstein", "Aristotle"]
    assert ev["cut"] and ev["prompt_tokens"] <= 2048 - 520
    prompt = sample["messages"][0]["content"]
    assert "<title>Aristotle</title>" in prompt and prompt.endswith("[Question]: " + QUESTION["question"])
    results = json.loads((out / "results.json").read_text())
    assert results["dataset"]["name"] == "fanoutqa" and results["snapshot"]["metadata"]["builder"] == "api"

    proc = run_harness(
        "ceiling",
        "--dataset",
        "fanoutqa:dev",
        "--data-path",
        str(data),
        "--snapshot",
        str(snap),
        "--context-sizes",
        "1024,4096,65536",
        "--out",
        str(tmp_path / "c.json"),
    )
    assert proc.returncode == 0, proc.stderr
    rows = json.loads((tmp_path / "c.json").read_text())["rows"]
    # with everything packed, both keys and both values (Plato, Ulm) are in the evidence
    assert rows[-1]["loose"] == 1.0 and rows[-1]["cut"] == 0
    assert rows[0]["loose"] <= rows[1]["loose"] <= rows[-1]["loose"]
