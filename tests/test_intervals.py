"""Honest numbers at the edges (issue 23): Wilson intervals for shares (differential against statsmodels),
bounded means clipped to their range, ``n/a`` with the reason where there is no spread to estimate (all
values equal, one cluster) wherever a number is printed, Newcombe's interval for a paired difference of
shares, and permutation tests that swap what their interval resamples (whole clusters)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from conftest import loaded_run
from statsmodels.stats.proportion import confint_proportions_2indep, proportion_confint

from harness.analysis.compare import compare_runs, format_comparison
from harness.datasets import load_dataset
from harness.scoring import stats
from harness.scoring.metrics import score_answers
from harness.scoring.results import summary_lines
from harness.scoring.topiocqa_metrics import topiocqa
from harness.scoring.display import kind_of

SIZES = (1, 2, 3, 4, 5, 7, 10, 13, 20, 37, 50, 80, 100, 250, 1000)


def wilson_ref(k, n):
    return list(proportion_confint(k, n, alpha=0.05, method="wilson"))


# ---------------------------------------------------------------------------- Wilson vs statsmodels
def test_wilson_is_statsmodels_on_many_k_and_n():
    for n in SIZES:
        ks = range(n + 1) if n <= 100 else sorted({0, 1, 2, n // 3, n // 2, n - 2, n - 1, n})
        for k in ks:
            assert stats.wilson_interval(k, n) == pytest.approx(wilson_ref(k, n), abs=1e-12), (k, n)
            if n <= 80 and k % 3 == 0 or k in (0, n):  # the same through mean_ci, and x100
                x = [1.0] * k + [0.0] * (n - k)
                e = stats.mean_ci(x, bounds=(0.0, 1.0), share=True)
                assert e["method"] == "wilson" and e["ci95"] == pytest.approx(wilson_ref(k, n), abs=1e-12)
                scaled = stats.mean_ci(x, scale=100, bounds=(0.0, 100.0), share=True)["ci95"]
                assert scaled == pytest.approx([100 * v for v in wilson_ref(k, n)], abs=1e-10)
    # an effective (non-integer) size, as the clustered share uses
    assert stats.wilson_interval(2.5, 7.3) == pytest.approx(wilson_ref(2.5, 7.3), abs=1e-12)


def test_the_issue_s_shares_stay_in_0_1_and_0_of_n_is_not_certainty():
    e = stats.mean_ci([1] * 19 + [0], bounds=(0, 1), share=True)  # Wald: [0.852, 1.048]
    assert e["ci95"] == pytest.approx([0.7639, 0.9911], abs=1e-4) and e["ci95"][1] < 1
    assert e["stderr"] == pytest.approx(0.05)  # the standard error of the mean is unchanged
    e = stats.mean_ci([1] + [0] * 79, bounds=(0, 1), share=True)  # Wald: [-0.012, 0.037]
    assert e["ci95"] == pytest.approx([0.0022, 0.0675], abs=1e-4)
    e = stats.mean_ci([0] * 20, bounds=(0, 1), share=True)  # Wald: ± 0 [0, 0]
    assert e["ci95"] == pytest.approx([0.0, 0.1611], abs=1e-4) and e["ci95"][0] == 0.0
    assert e["stderr"] is None and e["note"] == "all 20 values equal: no spread to estimate"
    e = stats.mean_ci([1] * 20, bounds=(0, 1), share=True)
    assert e["ci95"][1] == 1.0 and e["ci95"][0] == pytest.approx(1 - 0.1611, abs=1e-4)
    one = stats.mean_ci([1], bounds=(0, 1), share=True)
    assert one["ci95"] == pytest.approx(wilson_ref(1, 1)) and one["note"] == "one value: no spread to estimate"


def test_a_bounded_mean_that_is_no_share_is_clipped_and_says_so():
    x = [0.9, 1.0, 1.0, 0.95, 1.0]
    e = stats.mean_ci(x, bounds=(0, 1))
    assert e["method"] == "analytic-clipped" and e["ci95"][1] == 1.0
    assert e["ci95"][0] == pytest.approx(0.97 - stats.Z95 * stats.mean_ci(x)["stderr"])
    assert stats.mean_ci(x)["ci95"][1] > 1  # unbounded: the plain normal interval
    assert stats.mean_ci([0.2, 0.5, 0.4], bounds=(0, 1))["method"] == "analytic"  # nothing clipped
    # bounds from the declared kind: TopiOCQA's x100 scores on [0, 100], others on [0, 1], a count
    # never below 0, a metric that cannot be resolved none
    assert kind_of("topiocqa.em").bounds == (0.0, 100.0) and kind_of("topiocqa.em").times == 100.0
    assert kind_of("topiocqa.bleu").bounds == (0.0, 100.0) and kind_of("topiocqa.bleu").times == 1.0
    assert kind_of("em-f1.f1").bounds == (0.0, 1.0)
    assert kind_of("agent.searches").bounds == (0.0, math.inf)
    assert kind_of("no-such-metric.pred").bounds is None
    e = stats.mean_ci([37.5, 100.0, 100.0, 90.0], bounds=(0.0, 100.0))
    assert e["ci95"][1] == 100.0 and e["method"] == "analytic-clipped"


def test_no_spread_is_n_a_with_the_reason():
    flat = stats.mean_ci([0.5] * 20, bounds=(0, 1))
    assert (flat["stderr"], flat["ci95"], flat["note"]) == (None, None, "all 20 values equal: no spread to estimate")
    assert stats.mean_ci([0.5])["note"] == "one value: no spread to estimate"
    for x, share in (([1, 0, 1, 1, 0], True), ([0.2, 0.9, 0.4, 0.4, 1.0], False)):  # one cluster: no interval
        e = stats.mean_ci(x, clusters=["c"] * 5, bounds=(0, 1), share=share)
        assert e["stderr"] is None and e["ci95"] is None and e["note"] == "one cluster: no between-cluster spread"
    same = stats.mean_ci([0.2, 0.6, 0.4, 0.4], clusters=list("aabb"))  # both clusters average 0.4
    assert same["stderr"] is None and same["note"] == "all 2 clusters have the same mean: no between-cluster spread"
    boot = stats.bootstrap(stats.weighted_mean([0.3] * 10), 10)[0]
    assert boot["stderr"] is None and boot["ci95"] is None and "no spread" in boot["note"]
    boot = stats.bootstrap(stats.weighted_mean(np.arange(10.0)), 10, clusters=["c"] * 10)[0]
    assert boot["stderr"] is None and boot["note"] == "one cluster: no between-cluster spread"


def test_a_clustered_share_uses_the_design_effect():
    x = [1, 1, 1, 0, 0, 0, 1, 0, 1, 1, 1, 1]
    clusters = list("aaabbbcccddd")
    e = stats.mean_ci(x, clusters=clusters, bounds=(0, 1), share=True)
    p, n = 8 / 12, 12
    var = stats.mean_ci(x, clusters=clusters)["stderr"] ** 2  # the cluster-robust variance of the mean
    n_eff = p * (1 - p) / var
    assert e["method"] == "wilson-clustered" and e["n_effective"] == pytest.approx(n_eff) and n_eff < n
    assert e["ci95"] == pytest.approx(wilson_ref(p * n_eff, n_eff), abs=1e-12)
    assert e["ci95"][1] - e["ci95"][0] > np.subtract(*reversed(wilson_ref(8, 12)))  # wider than i.i.d.
    # no spread at all: the design effect cannot be estimated, so the worst case (each cluster one answer)
    zero = stats.mean_ci([0] * 12, clusters=list("aaaaaabbbccd"), bounds=(0, 1), share=True)
    assert zero["n_effective"] == pytest.approx(144 / (36 + 9 + 4 + 1))
    assert zero["ci95"] == pytest.approx(wilson_ref(0, 144 / 50), abs=1e-12) and zero["stderr"] is None


# ---------------------------------------------------------------------------- coverage by simulation
def test_wilson_covers_95_percent():
    """1,000 simulated runs at p = 0.2, n = 50 (Wald: 94%; its exact Wilson coverage is 95.07%), and
    clustered: 30 conversations of 5 questions, intra-cluster correlation 0.3."""
    from scipy.stats import binom

    rng = np.random.default_rng(2)
    p, n = 0.2, 50
    hits = [stats.mean_ci(x, bounds=(0, 1), share=True)["ci95"] for x in rng.binomial(1, p, size=(1000, n))]
    covered = np.mean([lo <= p <= hi for lo, hi in hits])
    assert 0.93 <= covered <= 0.97, covered
    inside = [k for k in range(n + 1) if stats.wilson_interval(k, n)[0] <= p <= stats.wilson_interval(k, n)[1]]
    exact = float(binom.pmf(inside, n, p).sum())
    assert 0.945 <= exact <= 0.955, exact

    p, g, m, rho = 0.3, 30, 5, 0.3
    shares = rng.beta(p * (1 - rho) / rho, (1 - p) * (1 - rho) / rho, size=(1000, g))
    runs = (rng.random((1000, g, m)) < shares[..., None]).astype(float).reshape(1000, -1)
    labels = np.repeat(np.arange(g), m)
    intervals = [stats.mean_ci(x, clusters=labels, bounds=(0, 1), share=True)["ci95"] for x in runs]
    covered = np.mean([lo <= p <= hi for lo, hi in intervals])
    assert 0.93 <= covered <= 0.97, covered


# ---------------------------------------------------------------------------- paired difference of shares
def test_newcombe_paired_interval():
    # Fagerland, Lydersen & Laake (2017), ch. 8, Cavo et al. (2012): estimate -0.0621 (95% CI -0.1186 to -0.0046)
    assert stats.newcombe_paired_interval(59, 16, 6, 80) == pytest.approx([-0.1186, -0.0046], abs=5e-5)
    rng = np.random.default_rng(3)
    checked = 0
    for _ in range(4000):
        both, only_a, only_b, neither = (int(v) for v in rng.integers(0, 25, size=4))
        n = both + only_a + only_b + neither
        if n == 0:
            continue
        lo, hi = stats.newcombe_paired_interval(both, only_a, only_b, neither)
        assert -1 <= lo <= (only_b - only_a) / n <= hi <= 1
        assert stats.newcombe_paired_interval(both, only_b, only_a, neither) == pytest.approx([-hi, -lo])
        ka, kb, cross = both + only_a, both + only_b, both * neither - only_a * only_b
        if ka * (n - ka) * kb * (n - kb) == 0 or 0 <= cross <= n / 2:  # no correlation term: the independent form
            ref = confint_proportions_2indep(kb, n, ka, n, method="newcomb", compare="diff")
            assert [lo, hi] == pytest.approx([float(v) for v in ref], abs=1e-12)
            checked += 1
    assert checked > 200
    lo, hi = stats.newcombe_paired_interval(6, 0, 0, 14)  # 20 concordant questions: 0, but not certainly
    assert lo == pytest.approx(-hi) and hi > 0.1


def _hotpot(right):
    ds = load_dataset("hotpotqa:dev")
    qs = ds.samples[:20]
    answers = [{"id": q.id, "answer": str(q.answer) if right(i) else "wrong"} for i, q in enumerate(qs)]
    return ds, score_answers(ds, qs, answers, ["em-f1"])


def test_compare_gives_a_difference_of_shares_newcombe_s_interval():
    ds, a = _hotpot(lambda i: i < 6)
    _, b = _hotpot(lambda i: 3 <= i < 12)
    result = compare_runs([loaded_run("a", a, ds), loaded_run("b", b, ds)])
    em = result["metrics"]["em-f1.em"]
    assert [r["method"] for r in em["runs"]] == ["wilson", "wilson"]
    d = em["diffs"][0]
    # right in both: 3, only in a: 3, only in b: 6, in neither: 8
    assert d["ci95"] == pytest.approx(stats.newcombe_paired_interval(3, 3, 6, 8))
    assert d["interval"] == "newcombe paired score"
    assert d["test"] == "McNemar exact" and d["p_mc_error"] is None
    same = compare_runs([loaded_run("a", a, ds), loaded_run("a2", a, ds)])["metrics"]["em-f1.em"]["diffs"][0]
    assert same["diff"] == 0 and same["ci95"][1] > 0.1  # not [0, 0]
    assert same["ci95"][0] == pytest.approx(-same["ci95"][1])


# ---------------------------------------------------------------------------- tests resample clusters
def test_the_swap_test_swaps_whole_clusters():
    """20 clusters of 10 questions, each cluster wholly better in one run: 12 for b, 8 for a. Swapping
    questions one by one sees 40 net questions of 200 (tiny p); swapping clusters sees 12 of 20."""
    g, m = 20, 10
    clusters = np.repeat(np.arange(g), m)
    better_b = np.repeat(np.arange(g) < 12, m)
    rows_a = [{"hit": int(not b), "pred": 1} for b in better_b]
    rows_b = [{"hit": int(b), "pred": 1} for b in better_b]

    def micro(rows):
        return sum(r["hit"] for r in rows) / sum(r["pred"] for r in rows)

    single = stats.swap_test(rows_a, rows_b, micro)
    whole = stats.swap_test(rows_a, rows_b, micro, clusters)
    assert single["p"] < 0.01 and whole["p"] > 0.3  # the exact per-cluster p is P(|Bin(20, 1/2) - 10| >= 2) = 0.50
    assert whole["test"] == "paired swap permutation of whole clusters" and whole["units"] == g
    assert whole["p_mc_error"] == pytest.approx(math.sqrt(whole["p"] * (1 - whole["p"]) / whole["permutations"]))
    vectors = lambda rows: [[r["hit"], r["pred"]] for r in rows]  # noqa: E731
    summed = stats.swap_test_sums(vectors(rows_a), vectors(rows_b), lambda t: t[0] / t[1], clusters)
    assert summed["p"] == whole["p"]  # the fast path swaps the same clusters
    flips = stats.sign_flip_test(np.where(better_b, 1.0, -1.0), clusters)
    assert flips["unit"] == "cluster" and flips["p"] > 0.3


def test_compare_swaps_whole_conversations_and_prints_the_monte_carlo_error():
    """TopiOCQA's corpus BLEU (no mean) over 18 conversations: both runs right on 4, run b alone on 6,
    run a alone on 3. Per turn the swap test says p = 0.005; per conversation, what its interval
    resamples, p = 0.23."""
    ds = load_dataset("topiocqa:dev")
    qs = ds.samples[:200]
    convs = sorted({q.raw["Conversation_no"] for q in qs})
    both, only_b, only_a = set(convs[:4]), set(convs[4:10]), set(convs[10:13])

    def run(path, good):
        answers = [
            {"id": q.id, "answer": (q.answer if isinstance(q.answer, str) else q.answer[0])}
            if q.raw["Conversation_no"] in good
            else {"id": q.id, "answer": "no idea"}
            for q in qs
        ]
        return loaded_run(path, score_answers(ds, qs, answers, ["topiocqa"]), ds)

    a, b = run("a", both | only_a), run("b", both | only_b)
    result = compare_runs([a, b])
    d = result["metrics"]["topiocqa.bleu_corpus"]["diffs"][0]
    assert d["test"] == "paired swap permutation of whole clusters" and d["test_detail"]["units"] == len(convs)
    assert d["p"] > 0.1 and not d["significant"]
    assert d["p_mc_error"] == pytest.approx(math.sqrt(d["p"] * (1 - d["p"]) / 1000))
    per_row, finish = topiocqa.aggregation.sums  # the same numbers, swapped turn by turn (as before)
    by_id = [sorted(run.scores["raw"], key=lambda r: r["question_id"]) for run in (a, b)]
    turns = [[per_row(r["topiocqa"]) for r in rows] for rows in by_id]
    per_turn = stats.swap_test_sums(*turns, lambda t: finish(t)["bleu_corpus"])
    assert per_turn["p"] < 0.01 and per_turn["test"] == "paired swap permutation"
    em = result["metrics"]["topiocqa.em"]["diffs"][0]
    assert em["test_detail"]["unit"] == "cluster"
    text = format_comparison(result)
    assert f"p = {d['p']:.4g} ± {d['p_mc_error']:.2g}, Holm p = {d['p_holm']:.4g} (paired swap permutation of whole" in text


# ---------------------------------------------------------------------------- n/a wherever it is printed
def test_one_conversation_is_n_a_everywhere_it_is_printed(tmp_path):
    """TopiOCQA --limit 10: one conversation. Every number says n/a and why, never ± 0.0000."""
    from harness.analysis.leaderboard import build_leaderboard, format_markdown
    from harness.analysis.report import _scores_section

    ds = load_dataset("topiocqa:dev")
    qs = ds.samples[:10]
    assert len({q.raw["Conversation_no"] for q in qs}) == 1
    answers = [{"id": q.id, "answer": q.answer if i % 3 else "no idea"} for i, q in enumerate(qs)]
    scores = score_answers(ds, qs, answers)
    for key in ("topiocqa.em", "topiocqa.f1", "topiocqa.bleu", "topiocqa.bleu_corpus"):
        e = scores["uncertainty"][key]
        assert e["stderr"] is None and e["ci95"] is None and e["note"] == "one cluster: no between-cluster spread"
    (line,) = summary_lines(scores)
    assert "± 0.0000" not in line and f"bleu {scores['topiocqa']['bleu']:.4f} ± n/a " in line
    assert line.endswith("(n/a: one cluster: no between-cluster spread)")

    run = loaded_run(tmp_path / "r", scores, ds)
    html = _scores_section(run.results)
    assert "one cluster: no between-cluster spread" in html and ">n/a<" in html and ">0.0000<" not in html
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "results.json").write_text(json.dumps(run.results.model_dump(mode="json")))
    board = build_leaderboard(tmp_path)
    row = board.to_json()["rows"][0]
    assert row["uncertainty_note"]["topiocqa.bleu"] == "one cluster: no between-cluster spread"
    assert f"{scores['topiocqa']['bleu']:.4f} ± n/a" in format_markdown(board)

    other = [{"id": q.id, "answer": "no idea" if i % 2 else q.answer} for i, q in enumerate(qs)]
    result = compare_runs([run, loaded_run("s", score_answers(ds, qs, other), ds)])
    text = format_comparison(result)
    d = result["metrics"]["topiocqa.bleu_corpus"]["diffs"][0]
    assert d["ci95"] is None and d["note"] == "one cluster: no between-cluster spread"
    assert "± n/a (one cluster: no between-cluster spread)" in text and "[n/a: one cluster" in text


def test_a_share_of_0_of_20_prints_its_wilson_interval():
    """EM is a share: Wilson's interval at 0 of 20; F1 a bounded mean: with no spread, no interval."""
    ds, scores = _hotpot(lambda i: False)
    (line,) = summary_lines(scores)
    assert line.startswith("em-f1: em 0.0000 ± n/a [0.0000, 0.1611] f1 0.0000 ± n/a f1_precision")
    ds, scores = _hotpot(lambda i: i > 0)
    assert summary_lines(scores)[0].startswith("em-f1: em 0.9500 ± 0.0500 [0.7639, 0.9911]")


def test_qampari_threshold_shares_get_wilson_at_0_of_n_and_n_of_n():
    """set-f1's F1>=0.5 and recall>=0.8 are shares of questions (the means of the indicators f1>=0.5,
    recall>=0.8): Wilson like every other share, at 0/n and n/n too (bootstrapped, every resample gave
    one value: no interval at all), equal to statsmodels; a question at F1 exactly 0.5 counts."""
    ds = load_dataset("qampari:sample")
    qs = ds.samples[:12]
    texts = [[a["answer_text"] for a in q.answer] for q in qs]
    for answers, k in (
        (["no idea"] * 12, 0),  # 0/12
        (texts, 12),  # 12/12
        # two right answers of 5 (F1 0.571, recall 0.4), and of 6 for the fifth question: F1 exactly 0.5 counts
        ([t[:2] if i < 7 else ["no idea"] for i, t in enumerate(texts)], 7),
    ):
        scores = score_answers(ds, qs, [{"id": q.id, "answer": a} for q, a in zip(qs, answers)], ["set-f1"])
        for key, expected in (("f1_ge_0.5", k), ("recall_ge_0.8", k if k in (0, 12) else 0)):
            entry = scores["uncertainty"][f"set-f1.{key}"]
            assert scores["set-f1"][key] == expected / 12
            assert entry["method"] == "wilson" and entry["n"] == 12, entry
            assert entry["ci95"] == pytest.approx(wilson_ref(expected, 12), abs=1e-12)
    rows = [{"f1": 0.5, "recall": 0.8}, {"f1": 0.49, "recall": 0.79}]
    from harness.scoring.uncertainty import leaf

    assert [leaf(r, ("f1>=0.5",)) for r in rows] == [1.0, 0.0]
    assert [leaf(r, ("recall>=0.8",)) for r in rows] == [1.0, 0.0]


def test_an_interval_that_excludes_0_beside_p_above_005_says_where_each_comes_from():
    """Five real HotpotQA questions, each answered better by B (a word of the answer against nothing
    right): the bootstrap interval of the F1 difference excludes 0, the exact sign-flip test gives
    p = 2/32 = 0.0625. compare says which procedure each comes from (console and table notes);
    where they agree nothing is added."""
    from harness.analysis.compare import comparison_grid, disagreement_note

    ds = load_dataset("hotpotqa:dev")
    qs = [q for q in ds.samples if len(str(q.answer).split()) >= 2][:5]
    a = score_answers(ds, qs, [{"id": q.id, "answer": "no idea"} for q in qs], ["em-f1"])
    b = score_answers(ds, qs, [{"id": q.id, "answer": str(q.answer).split()[0]} for q in qs], ["em-f1"])
    result = compare_runs([loaded_run("a", a, ds), loaded_run("b", b, ds)])
    d = result["metrics"]["em-f1.f1"]["diffs"][0]
    assert d["ci95"][0] > 0 and d["p"] == pytest.approx(2 / 32) and d["test"] == "sign-flip permutation (exact)"
    note = disagreement_note(d)
    assert note.startswith("the interval excludes 0 while p = 0.0625 >= 0.05")
    assert "percentile bootstrap that resamples the questions" in note and "sign-flip permutation test" in note
    assert note in format_comparison(result, headline_only=False)
    assert any(note in line for line in comparison_grid(result, headline_only=False).notes)
    # the other way round: an interval around 0 beside p < 0.05
    flipped = {**d, "ci95": [-0.01, 0.2], "p": 0.03}
    assert disagreement_note(flipped).startswith("the interval includes 0 while p = 0.03 < 0.05")
    assert disagreement_note({**d, "p": 0.01}) is None and disagreement_note({**d, "ci95": [-0.1, 0.2]}) is None
