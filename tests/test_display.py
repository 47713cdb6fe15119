"""harness.scoring.display: one set of names, scales and headlines for tables, figures, reports."""

from __future__ import annotations

from harness.scoring.display import dataset_headline, display_name, metric_headline, scale_of
from harness.scoring.metrics import METRICS, declare


def test_builtin_names_scales_and_headlines():
    assert dataset_headline("fanoutqa", ["fanoutqa-string"]) == ["fanoutqa-string.acc.loose"]
    assert dataset_headline("hotpotqa", ["fanoutqa-string", "em-f1"]) == ["em-f1.em", "em-f1.f1"]
    assert dataset_headline("qampari", ["set-f1"]) == ["set-f1.f1"]
    assert display_name("fanoutqa-string.rouge.rougeL.fscore") == "ROUGE-L F1"
    assert display_name("quest.f1") == "QUEST F1"
    assert scale_of("topiocqa.f1") == 100.0 and scale_of("set-f1.f1") == 1.0 and scale_of("agent.searches") is None


def test_unknown_dataset_falls_back_to_its_metrics_and_unknown_leaf_reads():
    assert dataset_headline("no-such-dataset", ["no-such-metric", "quest"]) == ["quest.f1"]
    assert display_name("no-such-metric.hit_rate") == "no-such-metric hit rate"


def test_a_plugin_metric_declares_its_own():
    @declare(headline=("hits",), labels={"hits": "Hit rate"}, scale=100.0, scales={"calls": None})
    def plugin_metric(questions, answers, only_answered, options=None):
        return {"aggregate": {}, "raw": {}}

    METRICS.register("display-test-metric")(plugin_metric)
    try:
        assert metric_headline("display-test-metric") == ["display-test-metric.hits"]
        assert display_name("display-test-metric.hits") == "Hit rate"
        assert scale_of("display-test-metric.hits") == 100.0 and scale_of("display-test-metric.calls") is None
    finally:
        METRICS.unregister("display-test-metric")


def test_which_numbers_are_table_columns_is_declared():
    """``declare(detail=...)``: the leaves (or prefixes) that are no table column; no table apart."""
    from harness.scoring.display import is_column

    hidden = ["set-f1.precision", "em-f1.f1_recall", "fanoutqa-string.rouge.rougeL.precision", "agent.cost", "agent.rounds"]
    shown = ["set-f1.f1", "em-f1.f1", "fanoutqa-string.rouge.rougeL.fscore", "agent.searches", "agent.hops_answered"]
    assert [is_column(k) for k in hidden] == [False] * 5 and all(map(is_column, shown))

    @declare(detail=("calls", "by_judge"))
    def plugin_metric(questions, answers, only_answered, options=None):
        return {"aggregate": {}, "raw": {}}

    METRICS.register("display-detail-metric")(plugin_metric)
    try:
        assert not is_column("display-detail-metric.calls") and not is_column("display-detail-metric.by_judge.a.b")
        assert is_column("display-detail-metric.precision")  # a name alone hides nothing: only what is declared
    finally:
        METRICS.unregister("display-detail-metric")
