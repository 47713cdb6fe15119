"""Which gold items an answer matched (issue 31): each list metric's ``gold_matches`` follows the
metric's own rule, so the matched items are the metric's own count (FanOutQA's loose accuracy x the
reference strings, set-f1's and quest's ``n_correct``) on the real datasets; the report draws them
per question, matched with the part of the answer quoted, missed ones listed, all escaped."""

from __future__ import annotations

import json

import pytest
from html_tree import parse
from scripted_runs import WRONG, partial_answerer, scripted_run

from harness.analysis.report import write_report
from harness.datasets import load_dataset
from harness.scoring import fanoutqa_metrics, list_metrics, quest_metrics
from harness.scoring.gold import gold_text
from harness.scoring.matches import answer_matches
from harness.scoring.metrics import ScoringOptions


def _every_other(gold):
    """An answer naming every other gold item, a wrong one, and list-style noise."""
    if isinstance(gold, dict):
        return "\n".join(f"- {k}: {v}" for k, v in list(gold.items())[::2]) + "\n1. Nobody, nothing"
    if isinstance(gold, list):
        return "; ".join(gold_text(g) for g in gold[::2]) + ", Nobody"
    return f"I think it is {gold_text(gold)}."


def test_fanoutqa_matches_are_its_loose_accuracy():
    for sample in load_dataset("fanoutqa:dev").samples[:20]:
        for answer in (_every_other(sample.answer), "", None, gold_text(sample.answer)):
            matches = fanoutqa_metrics.gold_matches(sample.answer, answer)
            score = fanoutqa_metrics.answer_in_text(sample.answer, answer).score
            assert sum(m.matched for m in matches) / len(matches) == score, (sample.id, answer)
            for m in matches:  # a matched item names a part of the answer, a missed one none
                assert (m.matched_text is not None) == m.matched
                if m.matched and not m.matched_text.startswith("…"):
                    assert m.matched_text in str(answer)


@pytest.mark.parametrize("options", [{}, {"alias_fallback": True, "clean_items": True}])
def test_set_f1_matches_are_its_n_correct(options):
    samples = load_dataset("qampari:sample").samples + load_dataset("fanoutqa:dev").samples[:30]
    for sample in samples:
        for answer in (_every_other(sample.answer), "", gold_text(sample.answer), ["Nobody", " x "]):
            matches = list_metrics.gold_matches(answer, sample.answer, **options)
            preds, gold = list_metrics._read(answer, sample.answer, options.get("clean_items", False),
                                             options.get("alias_fallback", False))  # fmt: skip
            scored = list_metrics.score_list(preds, gold, alias_fallback=options.get("alias_fallback", False))
            assert sum(m.matched for m in matches) == scored["n_correct"], (sample.id, answer)
            assert len(matches) == len(gold)
            assert all(m.matched_text in preds for m in matches if m.matched)


@pytest.mark.parametrize("normalization", ["none", "light"])
def test_quest_matches_are_its_n_correct(normalization):
    for sample in load_dataset("quest:train-sample").samples:
        gold = list(sample.answer)
        numbered = "\n".join(f"{i}. {t}" for i, t in enumerate(gold[::2], 1)) + "\nNobody"
        for answer in (numbered, "\n".join(gold[1::2]), "", gold):
            matches = quest_metrics.gold_matches(answer, gold, normalization)
            predicted = quest_metrics.titles_from(answer)
            scored = quest_metrics.score_sets(predicted, gold, normalization)
            assert sum(m.matched for m in matches) == scored["n_correct"], (sample.id, answer)
            assert [m.item for m in matches] == list(dict.fromkeys(gold))
            assert all(m.matched_text in predicted for m in matches if m.matched)


def test_answers_are_read_as_the_metrics_read_them():
    """Reasoning removed and the metric's options applied, as in scoring."""
    (sample,) = load_dataset("quest:train-sample").samples[:1]
    first = sample.answer[0]
    answer = f"<think>{sample.answer[1]}</think>- {first}"
    light = ScoringOptions(metric_options={"quest": {"light": True}})
    (found,) = [m for m in answer_matches(["quest", "em-f1"], sample.answer, answer, light)["quest"] if m.matched]
    assert found.item == first and found.matched_text == f"- {first}"  # the thought's title is not credited
    exact = answer_matches(["quest"], sample.answer, answer)["quest"]
    assert not any(m.matched for m in exact)  # "- Title" is no title without the light cleaning


@pytest.fixture(scope="module")
def reported(tmp_path_factory):
    base = tmp_path_factory.mktemp("matches")
    runs = {}
    for name, spec, metrics in (
        ("fanoutqa", "fanoutqa:dev", "fanoutqa-string,set-f1"),
        ("qampari", "qampari:sample", "set-f1"),
        ("quest", "quest:train-sample", "quest"),
    ):
        run = scripted_run(base / name, f"gm-{name}", partial_answerer(spec), spec, 3, "--metrics", metrics)
        write_report(run)
        runs[name] = run
    return runs


@pytest.mark.parametrize("name", ["fanoutqa", "qampari", "quest"])
def test_the_report_shows_each_gold_item_matched_or_missed(reported, name):
    run = reported[name]
    page = parse((run / "report.html").read_text())
    results = json.loads((run / "results.json").read_text())
    raw = {r["question_id"]: r for r in results["scores"]["raw"]}
    metrics = results["scores"]["meta"]["metrics"]
    transcripts = page.find_all("details", "transcript")
    assert len(transcripts) == 3
    for transcript in transcripts:
        scored = raw[transcript.attrs["data-id"]]
        blocks = {b.attrs["data-metric"]: b for b in transcript.find_all("div", "gold-match")}
        assert list(blocks) == metrics
        for metric, block in blocks.items():
            matched, missed = block.find_all("li", "matched"), block.find_all("li", "missed")
            assert int(block.attrs["data-matched"]) == len(matched) and int(block.attrs["data-gold"]) == len(matched) + len(missed)
            if metric == "fanoutqa-string":
                assert len(matched) / (len(matched) + len(missed)) == scored[metric]["acc"]
            else:
                assert len(matched) == scored[metric]["n_correct"]
            assert matched and missed  # every other item given
            assert all(li.find("q", "matched-text").text() for li in matched)
            assert not any(li.find_all("q") for li in missed)
            assert f"{len(matched)} of {len(matched) + len(missed)} gold items matched" in block.text()
    # what is quoted from the answer is text, never markup
    html = (run / "report.html").read_text()
    assert WRONG not in html and "<b>&amp;</b>" not in html
