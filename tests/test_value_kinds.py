"""A value's kind is declared, never inferred (issue 41): each leaf of a metric's aggregate is a share
of questions, a count, money, a bounded mean on a stated scale or unbounded; the interval follows the
declaration (Wilson only for shares), and a leaf whose values have no spread says ``± n/a`` whatever
its kind. Checked at the edges of each kind against statsmodels (Wilson: ``proportion_confint``; the
normal interval of a mean: ``DescrStatsW.zconfint_mean``; clustered: OLS with cluster-robust errors)."""

from __future__ import annotations

import numpy as np
import pytest
from statsmodels.api import OLS
from statsmodels.stats.proportion import proportion_confint
from statsmodels.stats.weightstats import DescrStatsW

from harness.datasets import load_dataset
from harness.scoring.metrics import METRICS, score_answers
from harness.scoring.results import summary_lines

HOTPOT = load_dataset("hotpotqa:dev")


def wilson_ref(k, n):
    return list(proportion_confint(k, n, alpha=0.05, method="wilson"))


def normal_ref(x):
    """The normal interval of a mean (z = 1.96, sample SD / sqrt(n)), as statsmodels computes it."""
    return list(DescrStatsW(np.asarray(x, dtype=float)).zconfint_mean(alpha=0.05))


def clustered_ref(x, clusters):
    """The cluster-robust standard error of a mean (G/(G-1) small-sample factor) and its normal interval."""
    fit = OLS(np.asarray(x, dtype=float), np.ones(len(x))).fit(
        cov_type="cluster", cov_kwds={"groups": np.unique(clusters, return_inverse=True)[1]}, use_t=False
    )
    return float(fit.bse[0]), [float(v) for v in fit.conf_int(alpha=0.05)[0]]


def agent_row(qid, cost=0.0, searches=0, calls=1):
    """A sample row as strategies write it (``samples.jsonl``): what the agent metric reads."""
    return {
        "id": qid,
        "status": "ok",
        "answer": "x",
        "extra": {"searches": [{"query": f"q{i}", "found_title": f"q{i}"} for i in range(searches)]},
        "model_calls": calls,
        "cache_hits": 0,
        "usage": {"prompt_tokens": 100, "completion_tokens": 10},
        "cost_usd": cost,
    }


def agent_scores(rows):
    qs = HOTPOT.samples[: len(rows)]
    rows = {q.id: {**r, "id": q.id} for q, r in zip(qs, rows)}
    answers = [{"id": q.id, "answer": "x"} for q in qs]
    return score_answers(HOTPOT, qs, answers, ["agent"], sample_rows=rows)


def hotpot_em_f1(n, right):
    qs = HOTPOT.samples[:n]
    answers = [{"id": q.id, "answer": str(q.answer) if right(i) else "wrong"} for i, q in enumerate(qs)]
    return score_answers(HOTPOT, qs, answers, ["em-f1"])


# ---------------------------------------------------------------------------- the three cases
def test_a_free_model_s_cost_is_money_not_a_share():
    """Ten questions on a local model, every cost 0: no spread, so ± n/a and no interval (it printed
    ``cost 0.0000 [0.0000, 0.2775]``: all zeros taken for a 0/1 share and given Wilson's interval)."""
    scores = agent_scores([agent_row("x") for _ in range(10)])
    e = scores["uncertainty"]["agent.cost"]
    assert e["kind"] == "money" and e["ci95"] is None and e["stderr"] is None
    assert e["note"] == "all 10 values equal: no spread to estimate"
    (line,) = summary_lines(scores)
    assert " cost 0.0000 ± n/a " in line and "0.2775" not in line


def test_search_counts_of_0_or_1_are_a_count_not_capped_at_1():
    """Nine questions searched once, one never: a mean count 0.9, its normal interval (statsmodels)
    running above 1 (a share's Wilson interval ended below 1: [0.596, 0.982])."""
    searches = [1] * 9 + [0]
    scores = agent_scores([agent_row("x", searches=s) for s in searches])
    e = scores["uncertainty"]["agent.searches"]
    assert e["kind"] == "count" and e["method"] == "analytic"
    assert e["ci95"] == pytest.approx(normal_ref(searches), abs=1e-12) and e["ci95"][1] > 1
    many = [0, 1, 0, 0, 1, 0, 0, 0, 0, 0]  # a lower bound below 0 is cut at 0: a count is never negative
    e = agent_scores([agent_row("x", searches=s) for s in many])["uncertainty"]["agent.searches"]
    assert normal_ref(many)[0] < 0 and e["ci95"] == pytest.approx([0.0, normal_ref(many)[1]], abs=1e-12)
    assert e["method"] == "analytic-clipped"


def test_an_all_zero_f1_has_no_interval_and_em_keeps_wilson():
    """Every answer wrong: F1 (a bounded mean) has no spread, ± n/a and no interval (it got Wilson's
    [0, 0.278] at n = 10, wider than a run scoring 0.107); EM, a share, keeps its Wilson interval."""
    scores = hotpot_em_f1(10, lambda i: False)
    f1, em = scores["uncertainty"]["em-f1.f1"], scores["uncertainty"]["em-f1.em"]
    assert f1["kind"] == "mean" and f1["ci95"] is None and f1["stderr"] is None
    assert em["kind"] == "share" and em["method"] == "wilson" and em["ci95"] == pytest.approx(wilson_ref(0, 10))
    (line,) = summary_lines(scores)
    assert line.startswith("em-f1: em 0.0000 ± n/a [0.0000, 0.2775] f1 0.0000 ± n/a ")


# ---------------------------------------------------------------------------- each kind at its edges
def interval(kind, column, clusters=None):
    from harness.scoring.uncertainty import leaf_interval

    return leaf_interval(kind, column, clusters, kind.times)


EDGES = {  # name: (values, clusters)
    "all zeros": ([0.0] * 20, None),
    "all ones": ([1.0] * 20, None),
    "one question": ([1.0], None),
    "one cluster": ([1.0, 0.0, 1.0, 1.0, 0.0], ["c"] * 5),
}


@pytest.mark.parametrize("edge", list(EDGES))
def test_a_share_at_its_edges_is_statsmodels_wilson(edge):
    from harness.scoring.kinds import share

    values, clusters = EDGES[edge]
    e = interval(share(), values, clusters)
    assert e["stderr"] is None  # no spread: ± n/a, whatever the kind
    if edge == "one cluster":
        assert e["ci95"] is None and e["note"] == "one cluster: no between-cluster spread"
    else:  # Wilson's interval needs no spread: 0 of 20 is [0, 0.161], not certainty
        k = int(sum(values))
        assert e["method"] == "wilson" and e["ci95"] == pytest.approx(wilson_ref(k, len(values)), abs=1e-12)
    x100 = interval(share(100.0), values, clusters)  # a percentage: the same interval x100
    assert x100["ci95"] == (None if e["ci95"] is None else pytest.approx([100 * v for v in e["ci95"]], abs=1e-10))


@pytest.mark.parametrize("make", ["mean", "mean x100", "count", "money", "unbounded"])
@pytest.mark.parametrize("edge", list(EDGES))
def test_any_other_kind_with_no_spread_says_n_a_and_has_no_interval(make, edge):
    from harness.scoring import kinds
    from harness.scoring.results import interval_text

    kind = {
        "mean": kinds.mean(),
        "mean x100": kinds.mean(100.0, per_question=1.0),
        "count": kinds.count("searches"),
        "money": kinds.money(),
        "unbounded": kinds.unbounded(),
    }[make]
    values, clusters = EDGES[edge]
    e = interval(kind, values, clusters)
    assert e["stderr"] is None and e["ci95"] is None and e["method"].startswith("analytic")
    assert interval_text(e) == f" ± n/a ({e['note']})" and e["note"]


def test_a_share_with_spread_is_wilson_and_clustered_uses_the_design_effect():
    from harness.scoring.kinds import share

    x = [1.0] * 7 + [0.0] * 13
    e = interval(share(), x)
    assert e["ci95"] == pytest.approx(wilson_ref(7, 20), abs=1e-12)
    assert e["stderr"] == pytest.approx(float(DescrStatsW(np.asarray(x)).std_mean), abs=1e-12)
    clusters = list("aaaabbbbccccddddeeee")
    e = interval(share(), x, clusters)
    se, _ = clustered_ref(x, clusters)
    n_eff = 0.35 * 0.65 / se**2
    assert e["method"] == "wilson-clustered" and e["stderr"] == pytest.approx(se, abs=1e-12)
    assert e["ci95"] == pytest.approx(wilson_ref(0.35 * min(n_eff, 20), min(n_eff, 20)), abs=1e-12)


def test_means_counts_money_and_unbounded_are_the_normal_interval_within_their_range():
    from harness.scoring import kinds

    f1 = [0.2, 0.5, 0.0, 1.0, 0.7, 0.4, 0.9]
    assert interval(kinds.mean(), f1)["ci95"] == pytest.approx(normal_ref(f1), abs=1e-12)  # inside [0, 1]
    high = [1.0, 1.0, 0.9, 1.0, 0.95]  # clipped at the perfect score, and says so
    e = interval(kinds.mean(), high)
    assert e["method"] == "analytic-clipped" and e["ci95"] == pytest.approx([normal_ref(high)[0], 1.0], abs=1e-12)
    e = interval(kinds.mean(100.0, per_question=1.0), f1)  # TopiOCQA's x100 F1: the interval x100
    assert e["ci95"] == pytest.approx([100 * v for v in normal_ref(f1)], abs=1e-9) and e["value"] == pytest.approx(
        100 * sum(f1) / len(f1)
    )
    tokens = [120.0, 4000.0, 350.0, 90.0, 15000.0]  # a count and money: never below 0, no ceiling
    for kind in (kinds.count("tokens"), kinds.money()):
        e = interval(kind, tokens)
        assert normal_ref(tokens)[0] < 0 and e["ci95"] == pytest.approx([0.0, normal_ref(tokens)[1]], abs=1e-9)
    signed = [-1.5, 0.3, 2.0, -0.2, 0.8]  # unbounded: the plain normal interval
    e = interval(kinds.unbounded(), signed)
    assert e["method"] == "analytic" and e["ci95"] == pytest.approx(normal_ref(signed), abs=1e-12)
    clusters = list("aabbcdd")  # cluster-robust, as statsmodels' OLS with clustered errors
    se, ci = clustered_ref(f1, clusters)
    e = interval(kinds.mean(), f1, clusters)
    assert e["stderr"] == pytest.approx(se, abs=1e-12) and e["ci95"] == pytest.approx(ci, abs=1e-12)


def test_values_that_contradict_the_declaration_get_no_interval_and_say_why():
    from harness.scoring import kinds

    e = interval(kinds.share(), [1.0, 0.5, 0.0])
    assert e["method"] == "none" and e["ci95"] is None and "not all 0 or 1" in e["reason"]
    e = interval(kinds.mean(), [0.5, 1.5])
    assert e["method"] == "none" and "outside" in e["reason"]
    e = interval(kinds.count(), [2.0, -1.0])
    assert e["method"] == "none" and "outside" in e["reason"]


# ---------------------------------------------------------------------------- built-ins declare every number
def test_every_builtin_number_has_its_declared_kind():
    from harness.scoring.display import kind_of

    def kinds(*keys):
        return {k: kind_of(k).name for k in keys}

    assert set(kinds("em-f1.em", "fanoutqa-string.acc.strict", "set-f1.f1_ge_0.5", "set-f1.recall_ge_0.8",
                     "llm-judge.llm_judge", "llm-judge.by_judge.openai/gpt-4.1").values()) == {"share"}  # fmt: skip
    assert set(kinds("em-f1.f1", "fanoutqa-string.acc.loose", "fanoutqa-string.rouge.rougeL.fscore", "set-f1.f1",
                     "quest.f1", "topiocqa.em", "topiocqa.f1", "topiocqa.bleu", "topiocqa.bleu_corpus",
                     "agent.evidence_recall", "agent.hops_answered").values()) == {"mean"}  # fmt: skip
    assert kinds("agent.searches", "agent.rounds", "agent.tokens", "topiocqa.turns", "agent.cost", "bleurt.bleurt") == {
        "agent.searches": "count", "agent.rounds": "count", "agent.tokens": "count", "topiocqa.turns": "count",
        "agent.cost": "money", "bleurt.bleurt": "unbounded",
    }  # fmt: skip
    assert kind_of("topiocqa.turns").total and not kind_of("agent.searches").total
    assert (kind_of("topiocqa.em").scale, kind_of("topiocqa.em").times) == (100.0, 100.0)
    assert (kind_of("topiocqa.bleu").scale, kind_of("topiocqa.bleu").times) == (100.0, 1.0)


def test_builtins_are_registered_once_as_metric_objects():
    """The registry's table alone names the built-ins (no second registration by decorator), and each
    is a Metric carrying its declaration, display facts and kinds, as a plugin's is."""
    from harness.scoring.metrics import Metric

    for name in METRICS.names():
        metric = METRICS.get(name)
        assert isinstance(metric, Metric) and metric.display.headline, name
        assert METRICS.resolve(name).source == "builtin"
    assert METRICS._registered == {}  # noqa: SLF001 - nothing registered itself besides the table
    assert METRICS.get("agent").display.lower_is_better == ("cost", "tokens", "rounds")


# ---------------------------------------------------------------------------- plugins
def hits(questions, answers, only_answered, options=None):
    """1 where the answer is the gold's text."""
    by_id = {a["id"]: a["answer"] for a in answers}
    return {"raw": {q.id: {"hit": float(by_id.get(q.id) == str(q.answer))} for q in questions}}


def plugin_scores(metric, right):
    qs = HOTPOT.samples[:20]
    answers = [{"id": q.id, "answer": str(q.answer) if right(i) else "wrong"} for i, q in enumerate(qs)]
    METRICS.register("kinds-test")(metric)
    try:
        return score_answers(HOTPOT, qs, answers, ["kinds-test"])
    finally:
        METRICS.unregister("kinds-test")


def test_a_plugin_that_declares_nothing_is_unbounded():
    """Its 0/1 values are not taken for a share: the normal interval, and none at all 0 of 20."""

    def bare(questions, answers, only_answered, options=None):
        return hits(questions, answers, only_answered, options)

    e = plugin_scores(bare, lambda i: i < 7)["uncertainty"]["kinds-test.hit"]
    x = [1.0] * 7 + [0.0] * 13
    assert e["kind"] == "unbounded" and e["method"] == "analytic"
    assert e["ci95"] == pytest.approx(normal_ref(x), abs=1e-12)
    e = plugin_scores(bare, lambda i: False)["uncertainty"]["kinds-test.hit"]
    assert e["ci95"] is None and e["stderr"] is None and e["note"] == "all 20 values equal: no spread to estimate"


def test_a_plugin_declares_its_shares_and_the_older_scales_still_read():
    from harness.scoring.kinds import share
    from harness.scoring.metrics import declare

    declared = declare(kinds={"hit": share()})(lambda *a, **k: hits(*a, **k))
    e = plugin_scores(declared, lambda i: i < 7)["uncertainty"]["kinds-test.hit"]
    assert e["kind"] == "share" and e["ci95"] == pytest.approx(wilson_ref(7, 20), abs=1e-12)
    e = plugin_scores(declared, lambda i: False)["uncertainty"]["kinds-test.hit"]
    assert e["ci95"] == pytest.approx(wilson_ref(0, 20), abs=1e-12)
    # the older declare(scale=...): a bounded mean on that scale; scales={leaf: None}: unbounded
    older = declare(scale=100.0, scales={"calls": None})(lambda *a, **k: hits(*a, **k))
    assert older.kind_of("hit").name == "mean" and older.kind_of("hit").scale == 100.0
    assert older.kind_of("calls").name == "unbounded"
    with pytest.raises(ValueError, match="not both"):
        declare(kinds={"hit": share()}, scale=1.0)


def test_a_plugin_written_with_attributes_keeps_working():
    """A bare function carrying the attributes set by hand before the Metric (``discrete_values``,
    ``aggregate_rows``), and one set on the Metric a decorator made, fill the Metric's fields."""
    from harness.scoring.metrics import as_metric, declare

    def legacy(questions, answers, only_answered, options=None):
        return hits(questions, answers, only_answered, options)

    legacy.discrete_values = True
    legacy.aggregate_rows = lambda rows, n: {"hit": sum(r["hit"] for r in rows) / n}
    metric = as_metric(legacy)
    assert metric.aggregation.discrete and metric.aggregation.rows is legacy.aggregate_rows
    decorated = declare()(lambda *a, **k: hits(*a, **k))
    decorated.discrete_values = True
    assert decorated.aggregation.discrete
    assert plugin_scores(legacy, lambda i: i < 5)["kinds-test"] == {"hit": 0.25}


# ---------------------------------------------------------------------------- epochs change what a share is
def test_under_the_mean_of_epochs_a_share_is_a_mean_of_each_question_s_share():
    """Two epochs, the mean reducer: a question's EM is its share of the epochs right (0.5: one of
    two), so the number is a bounded mean (analytic); under max (pass@2) each question is 0 or 1
    again, a share (Wilson). compare reads the runs' kinds the same way."""
    from conftest import loaded_run

    from harness.analysis.compare import compare_runs
    from harness.execution.scoring import score_records

    qs = HOTPOT.samples[:10]
    records = [  # question i right in epoch 1 when i < 6, in epoch 2 when i < 3
        {"id": q.id, "epoch": e, "answer": str(q.answer) if i < (6 if e == 1 else 3) else "wrong"}
        for e in (1, 2)
        for i, q in enumerate(qs)
    ]
    mean_run = score_records(HOTPOT, qs, records, metrics=["em-f1"], epochs=2, reducer="mean")
    em = mean_run["uncertainty"]["em-f1.em"]
    shares = [1.0] * 3 + [0.5] * 3 + [0.0] * 4
    assert em["kind"] == "mean" and em["method"] == "analytic"
    assert em["ci95"] == pytest.approx(normal_ref(shares), abs=1e-12)
    best = score_records(HOTPOT, qs, records, metrics=["em-f1"], epochs=2, reducer="max")["uncertainty"]["em-f1.em"]
    assert best["kind"] == "share" and best["ci95"] == pytest.approx(wilson_ref(6, 10), abs=1e-12)
    run = loaded_run("m", mean_run, HOTPOT)
    d = compare_runs([run, run])["metrics"]["em-f1.em"]
    assert d["runs"][0]["method"] == "analytic" and d["diffs"][0]["test"].startswith("sign-flip")


def test_registering_one_function_twice_is_one_registration():
    def twice(questions, answers, only_answered, options=None):
        return hits(questions, answers, only_answered, options)

    try:
        first = METRICS.register("kinds-twice")(twice)
        assert METRICS.register("kinds-twice")(twice) is first is METRICS.get("kinds-twice")
        with pytest.raises(ValueError, match="registered twice"):
            METRICS.register("kinds-twice")(lambda *a, **k: None)
        with pytest.raises(ValueError, match="is built in"):
            METRICS.register("em-f1")(twice)
    finally:
        METRICS.unregister("kinds-twice")
