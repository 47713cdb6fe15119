"""HotpotQA loader and answer metrics; evidence packing; the open-book bookkeeping helpers."""

import pytest

from harness.agents._search import ContextGuard, SearchSession, evidence_recall
from harness.agents.evidence_provided import format_document, pack
from harness.datasets import load_dataset
from harness.scoring.hotpotqa_metrics import exact_match_score, f1_score, normalize_answer
from harness.scoring.metrics import score_answers


def test_hotpotqa_loader_real_file():
    ds = load_dataset("hotpotqa:dev")
    assert len(ds.samples) == 100 and ds.info.version == "distractor-first100"
    first = ds.samples[0]
    assert first.id == "hotpot-dev-000"
    assert first.question == "Were Scott Derrickson and Ed Wood of the same nationality?" and first.answer == "yes"
    assert first.needed_titles == ["Scott Derrickson", "Ed Wood"]
    assert len(first.evidence) == 10 and {"title": "Ed Wood (film)"} in first.evidence


@pytest.mark.parametrize(
    "pred, gold, em, f1",
    [
        ("yes", "yes", 1, 1.0),
        ("no", "yes", 0, 0.0),
        ("Yes.", "yes", 1, 1.0),
        ("yes they were", "yes", 0, 0.0),  # yes/no answers must match exactly
        ("The Chief of Protocol", "Chief of Protocol", 1, 1.0),  # articles dropped
        ("3677 seated", "3,677 seated", 1, 1.0),  # punctuation dropped
        ("Greenwich Village", "Greenwich Village, New York City", 0, 2 * 1 * 0.4 / 1.4),
        ("Animorphs series", "Animorphs", 0, 2 * 0.5 * 1 / 1.5),
        ("", "Animorphs", 0, 0.0),
    ],
)
def test_hotpot_em_f1_cases(pred, gold, em, f1):
    assert exact_match_score(pred, gold) == bool(em)
    assert f1_score(pred, gold)[0] == pytest.approx(f1)


def test_normalize_answer():
    assert normalize_answer("  The  Eiffel-Tower, an icon! ") == "eiffeltower icon"


def test_hotpot_scores_have_both_metric_families():
    ds = load_dataset("hotpotqa:dev")
    qs = ds.samples[:3]
    answers = [{"id": qs[0].id, "answer": "yes"}, {"id": qs[1].id, "answer": "the Chief of Protocol"}]
    scores = score_answers(ds, qs, answers)
    assert scores["em-f1"]["em"] == pytest.approx(2 / 3) and scores["em-f1"]["f1"] == pytest.approx(2 / 3)
    assert set(scores["fanoutqa-string"]) == {"acc", "rouge"}
    assert set(scores["fanoutqa-string"]["acc"]) == {"loose", "strict"}
    unanswered = scores["raw"][2]
    assert unanswered["em-f1"]["em"] == 0 and unanswered["fanoutqa-string"]["acc"] == 0


def words(text):
    return len(text.split())


def test_pack_equals_the_papers_add_until_full_loop():
    ds = load_dataset("hotpotqa:dev")
    chunks = [
        (t, "".join(s))
        for t, s in zip(ds.samples[1].raw["context"]["title"], ds.samples[1].raw["context"]["sentences"])
    ]
    make = lambda docs: f"*** BEGIN DATA ***\n\n{docs}\n*** END DATA ***\n\nQ"  # noqa: E731
    for budget in (5, 60, 150, 400, 10_000):
        # the reference loop: add documents while the whole prompt fits, stop at the first that does not
        kept = []
        for t, c in chunks:
            if words(make("".join(kept) + format_document(t, c))) > budget:
                break
            kept.append(format_document(t, c))
        prompt, k, tokens = pack(chunks, make, words, budget)
        assert k == len(kept) and prompt == make("".join(kept)) and tokens == words(prompt)


class FakeModel:
    def __init__(self, context):
        self.context = context

    def context_size(self):
        return self.context

    def count_tokens(self, text):
        return len(text.split())


def test_context_guard_stop_and_drop_oldest():
    messages = [
        {"role": "user", "content": "q " * 10},
        {"role": "assistant", "content": "<search>x</search>"},
        {"role": "user", "content": "page " * 50},
        {"role": "assistant", "content": "<search>y</search>"},
        {"role": "user", "content": "page " * 50},
    ]
    stop = ContextGuard(FakeModel(120), max_tokens=10, policy="stop")
    assert not stop.ensure([dict(m) for m in messages])
    drop = ContextGuard(FakeModel(120), max_tokens=10, policy="drop-oldest")
    kept = [dict(m) for m in messages]
    assert drop.ensure(kept) and drop.dropped == 1
    assert kept[2]["content"].startswith("[search result removed") and kept[4]["content"] == "page " * 50
    assert ContextGuard(FakeModel(30), max_tokens=10, policy="drop-oldest").ensure([dict(m) for m in messages]) is False


class FakeTool:
    name = "search"

    def __call__(self, query, question):
        from types import SimpleNamespace

        found = "Ed Wood" if query.lower() == "ed wood" else None
        return SimpleNamespace(
            text=f"result for {query}",
            found_title=found,
            whole_page=True,
            fragments=0,
            tokens=3,
            truncated=False,
            similar_titles=[],
        )


class FakeSnapshot:
    def resolve_title(self, title):
        from types import SimpleNamespace

        return SimpleNamespace(title="Ed Wood") if title.lower() in ("ed wood", "edward d. wood jr.") else None


def test_search_session_records_and_malformed_calls():
    session = SearchSession(FakeTool(), "Were they American?", repeat_question=True)
    assert session.call("search", '{"query": "ed wood"}').endswith("[Question]: Were they American?")
    assert session.call("search", "not json").startswith("Error")
    assert session.call("lookup", '{"query": "x"}').startswith("Error")
    assert session.call("search", '{"q": "x"}').startswith("Error")
    record = session.record(FakeSnapshot(), ["Scott Derrickson", "Edward D. Wood Jr."])
    assert record["malformed_tool_calls"] == 3 and len(record["searches"]) == 1
    assert record["evidence_recall"]["recall"] == 0.5 and record["evidence_recall"]["found"] == ["Edward D. Wood Jr."]
    assert evidence_recall(None, [], ["x"])["recall"] is None
