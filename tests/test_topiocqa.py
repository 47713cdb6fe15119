"""TopiOCQA: loader, question representations, official reader metrics (against their restatement in
tests/reference_topiocqa.py, on hand-built and generated cases), conversational agent (end to end on the
real embedded model)."""

import json
import random
from collections import Counter

import pytest
import sacrebleu
from conftest import run_harness
from reference_topiocqa import topiocqa_aggregate, topiocqa_turn

from harness.datasets.conversation import format_history
from harness.datasets import load_dataset
from harness.scoring.metrics import score_answers
from harness.scoring import topiocqa_metrics
from harness.scoring.topiocqa_metrics import sentence_bleu, topiocqa


@pytest.fixture(scope="module")
def dev():
    return load_dataset("topiocqa:dev")


# --- loader --------------------------------------------------------------------------------------
def test_loader_counts_ids_groups(dev):
    assert len(dev.samples) == 2514
    assert len({s.raw["Conversation_no"] for s in dev.samples}) == 205
    assert len({s.id for s in dev.samples}) == 2514
    assert dev.info.license == "CC BY-NC-SA 4.0" and dev.metrics == ["topiocqa"]
    first = dev.samples[0]
    assert first.id == "1_1" and first.question == "where does the man with the golden gun take place"
    assert first.answer == "Britain"
    assert first.needed_titles == ["The Man with the Golden Gun (film)"]
    assert first.evidence == [{"title": "The Man with the Golden Gun (film)"}]
    assert first.groups == {"turn_type": ["first"], "is_nq": ["true"]}
    kinds = Counter(s.groups["turn_type"][0] for s in dev.samples)
    assert kinds == {"first": 205, "topic-continuation": 1400, "topic-shift": 909}
    assert Counter(s.groups["is_nq"][0] for s in dev.samples) == {"false": 2350, "true": 164}
    by_id = dev.by_id()
    for s in dev.samples:  # a shift means the Topic differs from the previous turn's
        if s.raw["Turn_no"] > 1:
            prev = by_id[f"{s.raw['Conversation_no']}_{s.raw['Turn_no'] - 1}"]
            expected = "topic-shift" if prev.raw["Topic"] != s.raw["Topic"] else "topic-continuation"
            assert s.groups["turn_type"] == [expected]


def test_additional_answers_become_a_reference_list(tmp_path, dev):
    rec = dict(dev.samples[0].raw, Additional_answers=[{"Answer": "in Britain"}, {"Answer": "UK"}])
    path = tmp_path / "dev_with_additional.json"
    path.write_text(json.dumps([rec]))
    ds = load_dataset("topiocqa:dev", str(path))
    assert ds.samples[0].answer == ["Britain", "in Britain", "UK"]
    assert ds.info.version.endswith("+file")


def test_history_formats_on_a_real_third_turn(dev):
    s = dev.by_id()["1_3"]
    assert format_history(s, "original") == "is this a movie?"
    assert format_history(s, "original", include_question=False) == ""
    assert format_history(s, "all-history") == (
        "where does the man with the golden gun take place [SEP] Britain [SEP] who are the actors?"
        " [SEP] Christopher Lee, Joseph Wiseman, Britt Ekland [SEP] is this a movie?"
    )
    assert format_history(s, "all-history", style="fid") == (
        "question 1: where does the man with the golden gun take place answer 1: Britain"
        " question 2: who are the actors? answer 2: Christopher Lee, Joseph Wiseman, Britt Ekland"
        " question 3: is this a movie?"
    )
    assert format_history(s, "all-history", style="prompt", include_question=False) == (
        "Q1: where does the man with the golden gun take place\nA1: Britain\n"
        "Q2: who are the actors?\nA2: Christopher Lee, Joseph Wiseman, Britt Ekland"
    )
    with pytest.raises(ValueError):
        format_history(s, "rewritten")


# --- metric --------------------------------------------------------------------------------------
CASES = [
    (["Britain"], "Britain"),
    (["Britain"], "The Britain."),
    (["Christopher Lee, Joseph Wiseman, Britt Ekland"], "Christopher Lee and Britt Ekland"),
    (["Yes"], "no"),
    (["Yes"], ""),
    ([""], ""),
    (["the"], "a"),  # both normalize to nothing: F1 1, EM 1
    (["Britain", "in Britain", "UK"], "Britain"),
    (["Britain", "in Britain", "UK"], "UK"),
    (["1962", "in 1962", "the year 1962"], "1962 film"),
    (["a b", "c", "b"], "b"),
]


@pytest.mark.parametrize("gold,pred", CASES)
def test_metric_matches_official(gold, pred):
    from harness.scoring.topiocqa_metrics import turn_score

    assert turn_score(gold, pred) == pytest.approx(topiocqa_turn(gold, pred))


# hostile pieces: articles in every case and glued to punctuation, non-ASCII punctuation (a word
# boundary for re, kept by the normalisation), combining accents, superscripts, ligatures, Unicode
# spaces and separators str.split() breaks on, empty strings
PIECES = [
    "Britain", "britain", "UK", "U.K.", "u.s.", "1962", "1,000", "3.5", "film", "Lee", "Christopher", "and",
    "the", "The", "THE", "a", "A", "an", "An", "the-end", "a.b", "an'", "'the'", "(an)", "_the_", "the_",
    "\u2014the\u2014", "\u00aba\u00bb", "a\u2014b", "x_y", "th\u00e9", "caf\u00e9", "cafe\u0301", "a\u0301",
    "\u00b2", "a\u00b2", "\u00bd", "\ufb01lm", "\u0130stanbul", "stra\u00dfe", "yes", "no", "Yes.", "", "!?",
]  # fmt: skip
SEPARATORS = [" ", " ", " ", "  ", "\t", "\n", "", "-", ", ", "\u00a0", "\u2003", "\u3000", "\x1c", "\x85"]


def _phrase(rng: random.Random) -> str:
    parts = [rng.choice(PIECES) for _ in range(rng.randint(0, 5))]
    out = ""
    for part in parts:
        out += part + rng.choice(SEPARATORS)
    return out if rng.random() < 0.8 else out.strip()


def _prediction(rng: random.Random, golds: list[str]) -> str:
    """Often one of the references, reworded a little; otherwise a new phrase."""
    if rng.random() < 0.35:
        return _phrase(rng)
    base = rng.choice(golds)
    edit = rng.randrange(6)
    if edit == 0:
        return base
    if edit == 1:
        return base.upper() if rng.random() < 0.5 else base.lower()
    if edit == 2:
        return rng.choice(["the ", "a ", "An ", "The. "]) + base + rng.choice(["", ".", "!", " the"])
    if edit == 3:
        words = base.split()
        return " ".join(words[:-1] if words else words)
    if edit == 4:
        return base + rng.choice(SEPARATORS) + rng.choice(PIECES)
    return rng.choice(golds) + " " + base


def generated_turns(seed: int, n: int) -> list[tuple[list[str], str]]:
    """n seeded turns: 1 to 4 references (repeats and near-repeats among them), one prediction."""
    rng = random.Random(seed)
    turns = []
    for _ in range(n):
        golds = [_phrase(rng) for _ in range(rng.choice([1, 1, 2, 3, 4]))]
        if len(golds) > 1 and rng.random() < 0.3:
            golds[-1] = golds[0] if rng.random() < 0.5 else golds[0].upper()
        turns.append((golds, _prediction(rng, golds)))
    return turns


N_GENERATED = 4000


def test_turn_score_equals_the_reference_on_generated_cases():
    """Every generated turn scores exactly (==, bit for bit) what the reference definition gives."""
    from harness.scoring.topiocqa_metrics import turn_score

    turns = generated_turns(27, N_GENERATED)
    multi = sum(1 for golds, _ in turns if len(golds) > 1)
    assert multi > N_GENERATED // 3  # the leave-one-out rule is exercised, not only single references
    values = set()
    for golds, pred in turns:
        ours, expected = turn_score(golds, pred), topiocqa_turn(golds, pred)
        assert ours == expected, (golds, pred)
        values.add((expected["em"], expected["f1"]))
    assert len(values) > 100  # partial credit of many kinds, not only 0 and 1


def test_turn_score_needs_a_reference():
    from harness.scoring.topiocqa_metrics import turn_score

    with pytest.raises(ValueError):
        topiocqa_turn([], "x")
    with pytest.raises(ValueError):
        turn_score([], "x")


def test_metric_aggregate_breakdown_and_bleu(dev):
    qs = dev.samples[:4]
    answers = [
        {"id": "1_1", "answer": "Britain"},
        {"id": "1_2", "answer": "Christopher Lee and Britt Ekland"},
        {"id": "1_3", "answer": "no"},
    ]  # 1_4 unanswered: counts 0, as the official aggregate_scores does
    out = topiocqa(qs, answers, only_answered=False)
    preds = {a["id"]: a["answer"] for a in answers}
    ref = topiocqa_aggregate([([q.answer], preds.get(q.id)) for q in qs])
    assert ref["turns"] == 4
    assert out["aggregate"]["em"] == pytest.approx(ref["em"])
    assert out["aggregate"]["f1"] == pytest.approx(ref["f1"])
    assert {k: v for k, v in out["raw"]["1_4"].items() if k != "bleu_corpus_stats"} == {
        "em": 0.0,
        "f1": 0.0,
        "bleu": 0.0,
    }
    # its part of the corpus BLEU: an empty hypothesis against the original answer's 13a tokens
    assert out["raw"]["1_4"]["bleu_corpus_stats"] == [0, len(qs[3].answer.split()), 0, 0, 0, 0, 0, 0, 0, 0]
    # BLEU is sacrebleu's own sentence BLEU (max over references)
    bleu = sacrebleu.sentence_bleu("Christopher Lee and Britt Ekland", [qs[1].answer]).score
    assert out["raw"]["1_2"]["bleu"] == pytest.approx(bleu) and 0 < bleu < 100
    assert out["raw"]["1_1"]["bleu"] == pytest.approx(100.0)
    assert sentence_bleu("UK", ["Britain", "UK"]) == pytest.approx(
        max(sacrebleu.sentence_bleu("UK", [g]).score for g in ["Britain", "UK"])
    )
    assert out["aggregate"]["bleu_corpus"] == pytest.approx(
        sacrebleu.corpus_bleu(["Britain", "Christopher Lee and Britt Ekland", "no", ""], [[q.answer for q in qs]]).score
    )
    scores = score_answers(dev, qs, answers)
    assert set(scores["breakdown"]) == {"turn_type", "is_nq"}
    assert scores["breakdown"]["turn_type"]["first"]["n"] == 1


def test_aggregate_in_the_official_order(dev):
    """evaluate_reader.py aggregate_scores: ``total / turns * 100``. 23 of 80 real turns right: that is
    28.749999999999996, printed 28.7 by the official script; ``100 * total / turns`` (this harness
    before) made it 28.75, printed 28.8. The streamed aggregate computes the same."""
    qs = dev.samples[:80]
    answers = [{"id": q.id, "answer": q.answer} for q in qs[:23]]
    answers += [{"id": q.id, "answer": "purple elephants"} for q in qs[23:]]
    out = topiocqa(qs, answers, only_answered=False)
    preds = {a["id"]: a["answer"] for a in answers}
    ref = topiocqa_aggregate([([q.answer], preds.get(q.id)) for q in qs])
    assert sum(r["em"] for r in out["raw"].values()) == 23
    assert out["aggregate"]["em"] == ref["em"] == 23 / 80 * 100  # exactly, not approximately
    assert round(out["aggregate"]["em"], 1) == 28.7 and f"{out['aggregate']['em']:.1f}" == "28.7"
    assert out["aggregate"]["f1"] == ref["f1"]
    streamed = topiocqa_metrics._aggregate_topiocqa(list(out["raw"].values()), len(qs))
    assert streamed["em"] == out["aggregate"]["em"] and streamed["f1"] == out["aggregate"]["f1"]


# --- end to end ----------------------------------------------------------------------------------
def _run(tmp_path, name, *extra):
    out = tmp_path / name
    proc = run_harness(
        "run", "--dataset", "topiocqa:dev", "--agent", "conversational", "--setting", "closed-book",
        "--limit", "3", "--max-tokens", "24", "--out", str(out), *extra,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    return samples, json.loads((out / "results.json").read_text())


@pytest.mark.slow
def test_conversational_end_to_end_real_model(tmp_path):
    samples, results = _run(tmp_path, "all")
    by_id = {s["id"]: s for s in samples}
    assert sorted(by_id) == ["1_1", "1_2", "1_3"]
    third = by_id["1_3"]["messages"][0]["content"]
    assert "[Conversation so far]:\nQ1: where does the man with the golden gun take place\nA1: Britain\n" in third
    assert "A2: Christopher Lee, Joseph Wiseman, Britt Ekland" in third
    assert third.endswith("[Question]: is this a movie?")
    assert "[Conversation so far]" not in by_id["1_1"]["messages"][0]["content"]
    assert all(s["model_calls"] == 1 for s in samples)
    assert results["scores"]["meta"]["metrics"] == ["topiocqa"]
    assert {"em", "f1", "bleu"} <= set(results["scores"]["topiocqa"])
    assert set(results["scores"]["breakdown"]) == {"turn_type", "is_nq"}

    cfg = tmp_path / "run.yaml"
    cfg.write_text("agent:\n  history: original\n")  # the strategy's knob, in its YAML section
    samples, results = _run(tmp_path, "orig", "--config", str(cfg))
    third = {s["id"]: s for s in samples}["1_3"]["messages"][0]["content"]
    assert "Britain" not in third and "Conversation so far" not in third
    assert third.endswith("[Question]: is this a movie?")


@pytest.mark.slow
def test_conversational_open_book_real_model(tmp_path):
    """TopiOCQA open-book: history in the first prompt, then real (forced-first) search calls."""
    import json as _json
    import subprocess
    import sys
    from pathlib import Path

    fixtures = Path(__file__).parent / "fixtures"
    snap = tmp_path / "physics.db"
    build = subprocess.run(
        [sys.executable, "-m", "harness", "snapshot", "build", "--from",
         str(fixtures / "wikipedia_en_science_physics_10.json"), "--out", str(snap)],
        capture_output=True, text=True,
    )  # fmt: skip
    assert build.returncode == 0, build.stderr
    out = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "harness", "run", "--dataset", "topiocqa:dev", "--setting", "open-book",
         "--agent", "conversational-open-book", "--snapshot", str(snap), "--sample-id", "1_3",
         "--max-tokens", "32", "--agent-arg", "max_rounds=2", "--out", str(out)],
        capture_output=True, text=True,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    sample = _json.loads((out / "samples.jsonl").read_text())
    first = sample["messages"][0]["content"]
    assert "[Conversation so far]:" in first and "Q1:" in first and "A2:" in first
    assert sample["messages"][1]["tool_calls"][0]["function"]["name"] == "search"
    assert sample["messages"][2]["role"] == "tool"
    assert sample["extra"]["evidence_recall"]["needed"]  # the turn's Topic page
    results = _json.loads((out / "results.json").read_text())
    assert results["agent"]["knobs"]["history"] == "all-history" and "topiocqa" in str(
        results["scores"]["meta"]["metrics"]
    )
