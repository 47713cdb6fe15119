"""The retrieve-read strategies end to end with the real local model (SmolLM2-135M) over passage
indexes of real text: HotpotQA dev's paragraphs, the QUEST train rows' attribution text, TopiOCQA
turns over real Wikipedia articles. Small K and --max-tokens keep each run short."""

import json
from pathlib import Path

import pytest
from conftest import assert_ran, run_harness

from harness.agents.retrieve_classify import judge
from harness.agents.retrieve_read_each import parse_answers, union
from harness.datasets import load_dataset

FIXTURES = Path(__file__).parent / "fixtures"


def ok(*args):
    proc = run_harness(*args)
    assert proc.returncode == 0, proc.stderr
    return proc


def samples(run_dir):
    return [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]


def results(run_dir):
    return json.loads((run_dir / "results.json").read_text())


@pytest.fixture(scope="module")
def hotpot(tmp_path_factory):
    path = tmp_path_factory.mktemp("rr") / "hotpot.db"
    ok(
        "snapshot",
        "build",
        "--from",
        str(FIXTURES / "hotpot_dev_distractor_first100.json"),
        "--out",
        str(path),
        "--quiet",
    )
    ok("index", "build", str(path), "--kind", "bm25", "--quiet")
    return path


def run_hotpot(snapshot, out, *args, evidence_only=True):
    """evidence_only: the snapshot records that it holds HotpotQA's contexts (one built from HotpotQA's
    own file); a subset written as plain records is a whole source by its metadata."""
    space = ["--search-space", "evidence-only"] if evidence_only else []
    proc = run_harness(
        "run", "--setting", "retrieve-read", "--dataset", "hotpotqa:dev", "--snapshot", str(snapshot),
        *space, "--out", str(out), "--max-tokens", "16", *args,
    )  # fmt: skip
    assert_ran(proc, out)  # 0, or 4 where every reading abstained (retrieve-read-each)
    return proc


def check_retrieval(s, k):
    r = s["extra"]["retrieval"]
    assert r["retriever"] == "bm25" and r["passages"] == "words100" and r["k"] == k
    assert 0 < r["n_retrieved"] == len(r["hits"]) <= k
    scores = [h["score"] for h in r["hits"]]
    assert scores == sorted(scores, reverse=True) and all(h["passage_id"] and h["title"] for h in r["hits"])
    titles = {h["title"].casefold() for h in r["hits"]}
    rec = s["extra"]["evidence_recall"]
    assert rec["found"] == [t for t in rec["needed"] if t.casefold() in titles]
    return r["hits"]


@pytest.mark.slow
def test_joint_packs_the_retrieved_passages(hotpot, tmp_path):
    out = tmp_path / "joint"
    run_hotpot(hotpot, out, "--limit", "2", "--agent-arg", "retrieval_k=3")
    for s in samples(out):
        hits = check_retrieval(s, 3)
        prompt = s["messages"][0]["content"]
        assert prompt.startswith("*** BEGIN DATA ***\n\n<document>\n<title>")
        assert prompt.endswith(f"[Question]: {s['question']}")  # no history: the question itself
        ev = s["extra"]["evidence"]
        assert ev["chunks_packed"] == ev["chunks_total"] == len(hits) and not ev["cut"]
        assert ev["packed_passages"] == [h["passage_id"] for h in hits]
        # the documents appear in rank order
        positions = [prompt.index(f"<title>{h['title']}</title>") for h in hits]
        assert positions == sorted(positions) and prompt.count("<document>") == len(hits)
        assert s["messages"][1]["role"] == "assistant" and s["answer"] == s["messages"][1]["content"]
        assert s["answer"].strip()
    r = results(out)
    assert r["setting"] == "retrieve-read" and r["agent"]["name"] == "retrieve-read-joint"
    assert r["agent"]["knobs"]["retrieval_k"] == 3 and r["agent"]["retrieval_k_default"]["value"] == 15
    assert r["agent"]["knobs"]["retriever"] == "bm25" and r["agent"]["index"]["bm25"]["options"]["k1"] == 0.9
    assert r["retrieval"]["evidence_recall_n"] == 2 and r["retrieval"]["evidence_cut"] == 0
    assert {"em", "f1"} <= set(r["scores"]["em-f1"]) and "acc" in r["scores"]["fanoutqa-string"]

    # a context too small for all 15 default passages: what did not fit is recorded as cut
    small = tmp_path / "small"
    run_hotpot(hotpot, small, "--limit", "1", "--context-size", "1024")
    s = samples(small)[0]
    ev = s["extra"]["evidence"]
    assert ev["cut"] and 0 < ev["chunks_packed"] < ev["chunks_total"] == 15
    assert ev["prompt_tokens"] <= 1024 - 520 and s["messages"][0]["content"].count("<document>") == ev["chunks_packed"]


@pytest.mark.slow
def test_each_reads_passages_alone_and_unions(hotpot, tmp_path):
    out = tmp_path / "each"
    run_hotpot(hotpot, out, "--agent", "retrieve-read-each", "--limit", "2", "--agent-arg", "retrieval_k=2")
    for s in samples(out):
        hits = check_retrieval(s, 2)
        readings = s["extra"]["readings"]
        assert [x["passage_id"] for x in readings] == [h["passage_id"] for h in hits]
        msgs = s["messages"]
        assert len(msgs) == 2 * len(readings)  # one request per passage, each recorded
        for reading, (user, assistant) in zip(readings, zip(msgs[::2], msgs[1::2])):
            assert user["content"].count("<document>") == 1 and f"<title>{reading['title']}</title>" in user["content"]
            assert "output only: NO ANSWER" in user["content"]
            assert assistant["content"] == reading["output"]
            assert (reading["answers"], reading["abstained"]) == parse_answers(reading["output"])
        assert s["answer"] == "\n".join(union([x["answers"] for x in readings]))
    assert results(out)["agent"]["abstain_answer"] == "NO ANSWER"


def test_parse_union_judge():
    assert parse_answers("- Paris\n2. Lyon\n\n") == (["Paris", "Lyon"], False)
    assert parse_answers("NO ANSWER.") == ([], True)
    assert parse_answers("no answer - the document is about cats") == ([], True)
    assert parse_answers("") == ([], True)
    assert union([["Paris", "lyon"], ["  paris ", "Lyon", "Nice"]]) == ["Paris", "lyon", "Nice"]
    assert (judge("Yes."), judge("no, it is not"), judge("Maybe")) == (True, False, None)


@pytest.mark.slow
def test_classify_keeps_the_entities_judged_relevant(tmp_path):
    snap = tmp_path / "quest.db"
    ok("snapshot", "build", "--from", str(FIXTURES / "quest_train_sample_attribution_pages.jsonl"), "--out", str(snap), "--quiet")  # fmt: skip
    # no page index yet: refused before the model starts, with the command that builds it
    out = tmp_path / "classify"
    args = (
        "run", "--setting", "retrieve-read", "--agent", "retrieve-classify", "--dataset", "quest:train-sample",
        "--snapshot", str(snap), "--sample-id", "quest-train-sample-0001", "--agent-arg", "retrieval_k=3",
        "--max-tokens", "4", "--out", str(out),
    )  # fmt: skip
    proc = run_harness(*args)
    assert proc.returncode == 2 and f"harness index build {snap} --kind bm25 --passages page" in proc.stderr
    ok("index", "build", str(snap), "--kind", "bm25", "--passages", "page", "--quiet")
    ok(*args)
    s = samples(out)[0]
    judgments = s["extra"]["judgments"]
    assert len(judgments) == 3 and [j["rank"] for j in judgments] == [1, 2, 3]
    assert [j["passage_id"] for j in judgments] == [h["passage_id"] for h in s["extra"]["retrieval"]["hits"]]
    for j, user, assistant in zip(judgments, s["messages"][::2], s["messages"][1::2]):
        assert user["content"].startswith(f"Query: {s['question']}\n\nDocument: {j['title']} ")
        assert f"({j['title']})" in user["content"] and assistant["content"] == j["reply"]
        assert j["kept"] == (judge(j["reply"]) is True) and j["doc_tokens"] <= 384
    kept = [j["title"] for j in judgments if j["kept"]]
    assert s["answer"] == "\n".join(kept)
    r = results(out)
    assert r["agent"]["knobs"]["passage_kind"] == "page" and r["agent"]["knobs"]["classify_doc_tokens"] == 384
    assert r["scores"]["raw"][0]["quest"]["n_predicted"] == len(kept)  # the quest metric scored the kept titles
    gold = load_dataset("quest:train-sample").by_id()["quest-train-sample-0001"].answer
    assert s["extra"]["evidence_recall"]["needed"] == gold  # the QUEST docs, checked against the hits


@pytest.mark.slow
def test_classify_over_words_passages_ranks_entities_by_their_best_passage(hotpot, tmp_path):
    out = tmp_path / "classify-hotpot"
    run_hotpot(hotpot, out, "--agent", "retrieve-classify", "--agent-arg", "passage_kind=words100", "--limit", "1",
               "--agent-arg", "retrieval_k=2", "--max-tokens", "4")  # fmt: skip
    s = samples(out)[0]
    judgments = s["extra"]["judgments"]
    assert len(judgments) == 2 and len({j["title"] for j in judgments}) == 2
    # each entity's document is its whole page (here: one HotpotQA paragraph), not one passage
    from harness.wiki_snapshot.store import Snapshot

    with Snapshot.open(hotpot) as snap:
        for j, user in zip(judgments, s["messages"][::2]):
            page = snap.resolve_title(j["title"])
            assert f"Document: {j['title']} {page.text}" in user["content"] or j["doc_truncated"]
    assert s["answer"] == "\n".join(j["title"] for j in judgments if j["kept"])


@pytest.mark.slow
def test_rewritten_conversational_question(tmp_path):
    """TopiOCQA turn 119_10 ("which period did he exist?") over real articles: the model rewrites
    the question first; the rewrite is recorded, retrieves, and is what the reader sees."""
    snap = tmp_path / "articles.db"
    ok("snapshot", "build", "--from", str(FIXTURES / "wikipedia_en_science_physics_10.json"), "--out", str(snap), "--quiet")  # fmt: skip
    ok("index", "build", str(snap), "--kind", "bm25", "--quiet")
    out = tmp_path / "rw"
    ok(
        "run", "--setting", "retrieve-read", "--dataset", "topiocqa:dev", "--snapshot", str(snap),
        "--sample-id", "119_10", "--agent-arg", "question_representation=rewritten", "--agent-arg", "retrieval_k=2",
        "--max-tokens", "24", "--out", str(out),
    )  # fmt: skip
    s = samples(out)[0]
    rewrite = s["extra"]["rewrite"]
    assert rewrite["question"] == "which period did he exist?" and rewrite["rewritten"].strip()
    first = s["messages"][0]["content"]
    assert first.startswith("[Conversation so far]:\nQ1: ") and first.endswith("Output only the rewritten question.")
    assert s["messages"][1]["role"] == "assistant"
    assert s["extra"]["retrieval"]["query"] == rewrite["rewritten"]
    assert s["messages"][2]["content"].endswith(f"[Question]: {rewrite['rewritten']}")
    assert s["extra"]["evidence_recall"]["needed"] == ["Aristotle"]
    r = results(out)
    assert r["agent"]["knobs"]["question_representation"] == "rewritten" and r["agent"]["rewrite_prompt"]["sha256"]
    assert r["model_calls"] == 2


@pytest.mark.slow
def test_joint_with_the_dense_retriever(hotpot_dense_snapshot, tmp_path):
    snap = hotpot_dense_snapshot
    out = tmp_path / "dense"
    run_hotpot(
        snap, out, "--agent-arg", "retriever=dense", "--limit", "1", "--agent-arg", "retrieval_k=2", evidence_only=False
    )
    s = samples(out)[0]
    r = s["extra"]["retrieval"]
    assert r["retriever"] == "dense" and len(r["hits"]) == 2 and all(-1 <= h["score"] <= 1 for h in r["hits"])
    assert results(out)["agent"]["index"]["dense"]["model"] == "all-MiniLM-L6-v2"
