"""harness.scoring.stats against hand-computed values and simulated coverage; the uncertainty section of scores."""

from __future__ import annotations

import math

import numpy as np
import pytest

from conftest import loaded_run

from harness.scoring import stats
from harness.datasets import load_dataset
from harness.scoring.metrics import score_answers
from harness.scoring.results import SECTIONS, metric_aggregates, summary_lines
from harness.scoring.uncertainty import collapse_repeats
from statsmodels.stats.proportion import proportion_confint


# ---------------------------------------------------------------------------- known values
def test_mean_ci_hand_computed():
    # 3 of 5 right: mean 0.6, sample SD sqrt(0.3), SE sqrt(0.3 / 5) = sqrt(0.06)
    e = stats.mean_ci([1, 0, 1, 1, 0])
    assert e["value"] == pytest.approx(0.6)
    assert e["stderr"] == pytest.approx(math.sqrt(0.06)) == pytest.approx(0.244949, abs=1e-6)
    assert e["ci95"] == pytest.approx([0.6 - 1.959964 * 0.244949, 0.6 + 1.959964 * 0.244949], abs=1e-5)
    assert e["method"] == "analytic" and e["n"] == 5
    assert stats.Z95 == pytest.approx(1.959963984540054)
    assert stats.mean_ci([0.5])["stderr"] is None  # one value: no spread to estimate


def test_clustered_mean_ci_hand_computed():
    # clusters {a: 1, 1}, {b: 0, 0}, {c: 1, 0}: mean 0.5, residual sums 1, -1, 0
    # V = G/(G-1) * sum(e_g^2) / n^2 = 3/2 * 2 / 36 = 1/12
    e = stats.mean_ci([1, 1, 0, 0, 1, 0], clusters=["a", "a", "b", "b", "c", "c"])
    assert e["stderr"] == pytest.approx(math.sqrt(1 / 12))
    assert e["method"] == "analytic-clustered" and e["n_clusters"] == 3
    # singleton clusters: the i.i.d. error
    x = [0.2, 0.9, 0.4, 0.4, 1.0]
    assert stats.mean_ci(x, clusters=list("abcde"))["stderr"] == pytest.approx(stats.mean_ci(x)["stderr"])
    # a x100 scale scales the error too
    assert stats.mean_ci(x, scale=100)["stderr"] == pytest.approx(100 * stats.mean_ci(x)["stderr"])


def test_mcnemar_exact_hand_computed():
    # right only in a: 1, only in b: 5 -> p = 2 * P(X <= 1), X ~ Bin(6, 1/2) = 2 * 7/64
    a = [1, 0, 0, 0, 0, 0, 1]
    b = [0, 1, 1, 1, 1, 1, 1]
    r = stats.mcnemar_exact(a, b)
    assert (r["only_a"], r["only_b"]) == (1, 5)
    assert r["p"] == pytest.approx(14 / 64)
    assert stats.mcnemar_exact(a, a)["p"] == 1.0


def test_sign_flip_exact_hand_computed():
    # differences 1, 2, 3: |sum| = 6 reached by all-plus and all-minus of the 8 sign patterns
    r = stats.sign_flip_test([1, 2, 3, 0, 0])
    assert r["p"] == pytest.approx(2 / 8) and r["test"].endswith("(exact)") and r["n_nonzero"] == 3
    assert stats.sign_flip_test([0, 0, 0])["p"] == 1.0  # identical runs
    # Monte Carlo beyond EXACT_MAX, fixed seed: the same p twice; a real shift is detected
    d = np.r_[np.full(30, 0.5), -np.full(5, 0.5)]
    first, second = stats.sign_flip_test(d), stats.sign_flip_test(d)
    assert first == second and first["p"] < 0.001 and "Monte Carlo" in first["test"]


def test_required_n_textbook_values():
    # SD 0.5 (a 50% accuracy), delta 0.05, alpha 0.05, power 0.8: 2 * (0.5 * 2.8016 / 0.05)^2 = 1569.8
    assert stats.required_n(0.5, 0.05) == 1570
    assert stats.required_n(0.5, 0.05, paired=True) == 785
    n = stats.required_n(0.3, 0.03, alpha=0.01, power=0.9)
    assert stats.detectable_delta(0.3, n, alpha=0.01, power=0.9) <= 0.03 < stats.detectable_delta(0.3, n - 1, 0.01, 0.9)


def test_bootstrap_is_reproducible_and_matches_the_analytic_error():
    rng = np.random.default_rng(1)
    x = rng.random(400)
    one = stats.bootstrap(stats.weighted_mean(x), len(x))[0]
    assert one == stats.bootstrap(stats.weighted_mean(x), len(x))[0]  # fixed seed
    assert one["resamples"] >= 1000 and one["value"] == pytest.approx(x.mean())
    assert one["stderr"] == pytest.approx(stats.mean_ci(x)["stderr"], rel=0.1)
    # clusters resampled whole: the counts of one cluster's questions move together
    counts = stats.draw_counts(6, clusters=list("aabbcc"), resamples=50)
    assert (counts[:, 0] == counts[:, 1]).all() and (counts.sum(axis=1) % 2 == 0).all()


# ---------------------------------------------------------------------------- coverage by simulation
def test_analytic_interval_covers_the_true_mean_95_percent():
    rng = np.random.default_rng(7)
    p, n, runs = 0.3, 200, 1000
    covered = 0
    for scores in rng.binomial(1, p, size=(runs, n)):
        lo, hi = stats.mean_ci(scores)["ci95"]
        covered += lo <= p <= hi
    assert 0.93 <= covered / runs <= 0.97, covered


@pytest.mark.slow
def test_bootstrap_interval_of_a_ratio_covers_95_percent():
    """A micro-averaged ratio sum(correct) / sum(predicted): the kind of aggregate that is not a mean."""
    rng = np.random.default_rng(11)
    n, runs = 200, 1000
    true = 0.4 * 3.0 / 3.0  # E[correct] / E[predicted]: predicted ~ 1 + Poisson(2), correct ~ Bin(predicted, 0.4)
    covered = 0
    for seed in range(runs):
        predicted = 1 + rng.poisson(2.0, n)
        correct = rng.binomial(predicted, 0.4)
        e = stats.bootstrap(stats.ratio_of_sums(correct, predicted), n, seed=seed)[0]
        covered += e["ci95"][0] <= true <= e["ci95"][1]
    assert e["resamples"] >= 1000
    assert 0.93 <= covered / runs <= 0.97, covered


# ---------------------------------------------------------------------------- in the scores
@pytest.fixture(scope="module")
def hotpot_scores():
    ds = load_dataset("hotpotqa:dev")
    qs = ds.samples[:40]
    answers = [{"id": q.id, "answer": str(q.answer) if i % 3 else "wrong"} for i, q in enumerate(qs)]
    return score_answers(ds, qs, answers, ["em-f1", "fanoutqa-string"])


def test_every_headline_number_has_an_interval(hotpot_scores):
    u = hotpot_scores["uncertainty"]
    assert "uncertainty" in SECTIONS and "uncertainty" not in metric_aggregates(hotpot_scores)
    em = u["em-f1.em"]
    column = [r["em-f1"]["em"] for r in hotpot_scores["raw"]]
    assert em["method"] == "wilson" and em["value"] == hotpot_scores["em-f1"]["em"]  # a share: 0/1 per question
    assert em["stderr"] == pytest.approx(np.std(column, ddof=1) / math.sqrt(40))
    assert em["ci95"] == pytest.approx(list(proportion_confint(sum(column), 40, method="wilson")), abs=1e-12)
    assert u["fanoutqa-string.acc.loose"]["method"] in ("analytic", "wilson")  # the mean of per-question acc
    strict = u["fanoutqa-string.acc.strict"]  # the share of fully found answers: the mean of acc == 1
    found = [float(r["fanoutqa-string"]["acc"] == 1) for r in hotpot_scores["raw"]]
    assert strict["method"] == "wilson" and strict["per_question"] == ["acc==1"]
    assert strict["value"] == hotpot_scores["fanoutqa-string"]["acc"]["strict"] == pytest.approx(sum(found) / 40)
    assert strict["stderr"] == pytest.approx(np.std(found, ddof=1) / math.sqrt(40))
    assert strict["ci95"][0] <= strict["value"] <= strict["ci95"][1]
    assert hotpot_scores["meta"]["clustering"] == {"by": None}
    line = [x for x in summary_lines(hotpot_scores) if x.startswith("em-f1")][0]
    assert f"em {em['value']:.4f} ± {em['stderr']:.4f} [{em['ci95'][0]:.4f}, {em['ci95'][1]:.4f}]" in line


def test_thresholds_with_a_dot_in_their_name_are_shares_of_an_indicator():
    """set-f1's f1_ge_0.5 (a key with a dot) is the mean of the indicator f1>=0.5: a share's interval."""
    ds = load_dataset("qampari:sample")
    qs = ds.samples[:10]
    answers = [
        {"id": q.id, "answer": "\n".join(a["answer_text"] for a in q.answer[: 1 + i % 3])} for i, q in enumerate(qs)
    ]
    s = score_answers(ds, qs, answers, ["set-f1"])
    e = s["uncertainty"]["set-f1.f1_ge_0.5"]
    assert e["value"] == s["set-f1"]["f1_ge_0.5"] and e["method"] == "wilson" and e["per_question"] == ["f1>=0.5"]
    assert s["uncertainty"]["set-f1.f1"]["method"] == "analytic"


def test_topiocqa_clusters_by_conversation_and_cluster_by_option():
    from harness.errors import HarnessError
    from harness.scoring.metrics import ScoringOptions

    ds = load_dataset("topiocqa:dev")
    qs = ds.samples[:60]
    answers = [{"id": q.id, "answer": q.answer if i % 2 else "no"} for i, q in enumerate(qs)]
    s = score_answers(ds, qs, answers)
    conversations = {q.raw["Conversation_no"] for q in qs}
    clustering = s["meta"]["clustering"]
    assert clustering["by"] == "Conversation_no" and clustering["n_clusters"] == len(conversations)
    em = s["uncertainty"]["topiocqa.em"]
    # declared a x100 mean, not a share: with several references a turn's EM is a leave-one-out average
    assert em["kind"] == "mean" and em["n_clusters"] == len(conversations) and em["scale"] == 100
    assert em["method"] in ("analytic-clustered", "analytic-clustered-clipped")
    assert 0 <= em["ci95"][0] < em["value"] < em["ci95"][1] <= 100
    assert "topiocqa.turns" not in s["uncertainty"]  # a count: no interval
    corpus = s["uncertainty"]["topiocqa.bleu_corpus"]  # a corpus number: bootstrapped from per-turn sums
    assert corpus["method"] == "bootstrap-percentile-clustered" and corpus["n_clusters"] == len(conversations)
    assert corpus["ci95"][0] < s["topiocqa"]["bleu_corpus"] < corpus["ci95"][1]
    off = score_answers(ds, qs, answers, options=ScoringOptions(cluster_by="none"))
    assert off["meta"]["clustering"] == {"by": None} and off["uncertainty"]["topiocqa.em"]["method"] == "analytic"
    assert off["topiocqa"] == s["topiocqa"]  # clustering never changes a score
    with pytest.raises(HarnessError, match="--cluster-by nope"):
        score_answers(ds, qs, answers, options=ScoringOptions(cluster_by="nope"))


def test_repeats_of_a_question_are_averaged_first():
    rows = [
        {"question_id": "q1", "m": {"acc": 1.0}},
        {"question_id": "q2", "m": {"acc": 0.0}},
        {"question_id": "q1", "m": {"acc": 0.0}},
    ]
    assert collapse_repeats(rows) == [
        {"question_id": "q1", "m": {"acc": 0.5}},
        {"question_id": "q2", "m": {"acc": 0.0}},
    ]


def test_compare_treats_a_threshold_share_as_a_share():
    """set-f1's f1_ge_0.5 (a share at a threshold: the mean of the indicator f1>=0.5) is compared as
    every share is: Newcombe's paired interval, McNemar's test; a run against itself: 0, p = 1.
    (A number that is no mean is bootstrapped through its metric's aggregate: tests/test_compare.py's
    micro F1 plugin.)"""
    from harness.analysis.compare import compare_runs

    ds = load_dataset("qampari:sample")
    qs = ds.samples[:30]

    def run(path, k):
        answers = [
            {"id": q.id, "answer": "\n".join(a["answer_text"] for a in q.answer[: k + i % 3])} for i, q in enumerate(qs)
        ]
        scores = score_answers(ds, qs, answers, ["set-f1"])
        return loaded_run(path, scores, ds)

    a, b = run("a", 0), run("b", 2)
    result = compare_runs([a, b])
    e = result["metrics"]["set-f1.f1_ge_0.5"]
    assert e["kind"] == "mean" and e["diffs"][0]["interval"] == "newcombe paired score"
    assert e["diffs"][0]["test"] == "McNemar exact"
    want = b.scores["set-f1"]["f1_ge_0.5"] - a.scores["set-f1"]["f1_ge_0.5"]
    assert e["diffs"][0]["diff"] == pytest.approx(want) and want > 0
    assert e["diffs"][0]["ci95"][0] <= want <= e["diffs"][0]["ci95"][1] and 0 < e["diffs"][0]["p"] <= 1
    same = compare_runs([a, a])["metrics"]["set-f1.f1_ge_0.5"]["diffs"][0]
    assert same["diff"] == 0 and same["p"] == 1


def _topiocqa_answers(qs, seed):
    """Right, half-right, wrong and missing answers on real TopiOCQA turns."""
    rnd = __import__("random").Random(seed)
    out = []
    for q in qs:
        gold = q.answer if isinstance(q.answer, str) else q.answer[0]
        r = rnd.random()
        if r < 0.9:
            out.append(
                {"id": q.id, "answer": gold if r < 0.35 else " ".join(gold.split()[:2]) if r < 0.6 else "no idea"}
            )
    return out


@pytest.mark.slow
def test_corpus_bleu_from_turn_sums_is_sacrebleus_and_its_bootstrap_is_the_row_by_row_one(monkeypatch):
    """TopiOCQA's corpus BLEU, rebuilt from each turn's stored statistics, equals sacrebleu's
    corpus_score on every dev turn (streamed runs and re-scores agree); its bootstrap as one matrix
    product gives the very intervals and paired test of the row-by-row bootstrap it replaces."""
    import sacrebleu

    from harness.analysis.compare import compare_runs
    from harness.scoring import topiocqa_metrics as tm

    ds = load_dataset("topiocqa:dev")
    qs = ds.samples
    answers = _topiocqa_answers(qs, 0)
    out = tm.topiocqa(qs, answers, only_answered=False)
    by_id = {a["id"]: a["answer"] for a in answers}
    want = sacrebleu.corpus_bleu([by_id.get(q.id, "") for q in qs], [[tm.gold_list(q.answer)[0] for q in qs]])
    assert out["aggregate"]["bleu_corpus"] == want.score  # bit for bit
    assert tm._aggregate_topiocqa([out["raw"][q.id] for q in qs], len(qs)) == out["aggregate"]

    sub = qs[:400]

    def run(path, seed):
        scores = score_answers(ds, sub, _topiocqa_answers(sub, seed))
        return loaded_run(path, scores, ds)

    a, b = run("a", 1), run("b", 2)
    fast_interval = a.scores["uncertainty"]["topiocqa.bleu_corpus"]
    assert fast_interval["aggregate"] == "the metric's own, from per-question sums"  # the fast path ran
    with monkeypatch.context() as m:  # the fast compare never swaps rows one by one
        m.setattr(stats, "swap_test", lambda *a, **k: pytest.fail("row-by-row swap test on a sums metric"))
        fast_compare = compare_runs([a, b])["metrics"]["topiocqa.bleu_corpus"]
    from dataclasses import replace

    saved = tm.topiocqa.aggregation
    tm.topiocqa.aggregation = replace(saved, sums=None)  # the generic path: aggregate_rows on each resample's rows
    try:
        slow = score_answers(ds, sub, _topiocqa_answers(sub, 1))["uncertainty"]["topiocqa.bleu_corpus"]
        slow_compare = compare_runs([a, b])["metrics"]["topiocqa.bleu_corpus"]
        assert slow["aggregate"] == "the metric's own (aggregate_rows)"
    finally:
        tm.topiocqa.aggregation = saved
    assert fast_interval["stderr"] == pytest.approx(slow["stderr"], rel=1e-12)
    assert fast_interval["ci95"] == pytest.approx(slow["ci95"], rel=1e-12)
    assert fast_compare["diffs"][0]["p"] == slow_compare["diffs"][0]["p"]
    assert fast_compare["diffs"][0]["ci95"] == pytest.approx(slow_compare["diffs"][0]["ci95"], rel=1e-12)


def test_rows_without_the_corpus_statistics_get_no_made_up_interval():
    """A run scored before the per-turn statistics were kept: its corpus BLEU keeps its value, the
    interval says why there is none, and compare leaves that number out instead of failing."""
    from harness.analysis.compare import compare_runs
    from harness.scoring.metrics import get_metric
    from harness.scoring.uncertainty import compute_uncertainty

    ds = load_dataset("topiocqa:dev")
    qs = ds.samples[:30]
    scores = score_answers(ds, qs, _topiocqa_answers(qs, 3))
    for row in scores["raw"][1:]:
        del row["topiocqa"]["bleu_corpus_stats"]
    scores["raw"][0]["topiocqa"]["bleu_corpus_stats"] = ["x"] * 10  # a hand-edited file: read as none
    old = compute_uncertainty({"topiocqa": get_metric("topiocqa")}, scores)
    e = old["topiocqa.bleu_corpus"]
    assert e["method"] == "none" and e["value"] == scores["topiocqa"]["bleu_corpus"] and "older version" in e["reason"]
    assert old["topiocqa.em"]["method"] == "analytic"  # EM: a x100 mean of per-turn values
    run = loaded_run("old", scores, ds)
    result = compare_runs([run, run])
    assert "topiocqa.bleu_corpus" not in result["metrics"] and "topiocqa.em" in result["metrics"]


def test_breakdowns_are_on_the_headline_s_scale():
    """A group's numbers are the metric's own aggregate of its questions: TopiOCQA's EM x100 and
    corpus BLEU, FanOutQA's loose and strict accuracy (a group of all questions = the headline)."""
    ds = load_dataset("topiocqa:dev")
    qs = ds.samples[:60]
    scores = score_answers(ds, qs, _topiocqa_answers(qs, 4))
    groups = scores["breakdown"]["turn_type"]
    assert sum(g["n"] for g in groups.values()) == len(qs)
    weighted = sum(g["n"] * g["topiocqa"]["em"] for g in groups.values()) / len(qs)
    assert weighted == pytest.approx(scores["topiocqa"]["em"]) and scores["topiocqa"]["em"] > 1
    assert all(g["topiocqa"]["turns"] == g["n"] and "bleu_corpus" in g["topiocqa"] for g in groups.values())
    fq = load_dataset("fanoutqa:dev")
    fqs = [q for q in fq.samples if "History" in q.groups.get("category", [])][:12]
    answers = [{"id": q.id, "answer": str(q.answer) if i % 3 == 0 else "no"} for i, q in enumerate(fqs)]
    history = score_answers(fq, fqs, answers)
    assert history["breakdown"]["category"]["History"]["fanoutqa-string"] == history["fanoutqa-string"]
    from harness.scoring.results import breakdown_lines

    (line,) = [line for line in breakdown_lines(history) if "History" in line]
    acc = history["fanoutqa-string"]["acc"]
    assert f"History (n=12): acc.loose {acc['loose']:.4f} acc.strict {acc['strict']:.4f} rouge1 " in line
    assert line.endswith(f"rougeL {history['fanoutqa-string']['rouge']['rougeL']['fscore']:.4f}")
