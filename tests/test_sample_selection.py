"""Sample selection flags (issue 14): --sample-filter FIELD=VALUE, --shuffle (seeded by --shuffle-seed,
else --seed), --stratify-by FIELD with --limit (largest remainder), --only-failed; in the order
sample ids -> filters -> shuffle/stratify -> limit; recorded in results.json, never in the run key."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from harness.cli import main
from harness.execution.config import build_config
from harness.datasets import load_dataset
from harness.errors import ConfigError
from harness.models.scripted import register_script, unregister_script
from harness.execution.runner import Run
from harness.execution.selection import allocate, select_samples
from harness.execution.record import results_dict

QUEST = load_dataset("quest:train-sample", None)  # 80 questions; template and domain fields
QAMPARI = load_dataset("qampari:sample", None)  # 13 questions; type field


def pick(dataset, **options):
    return select_samples(dataset, build_config(options))


def test_filter_one_field_any_value_several_fields_all():
    books = pick(QUEST, sample_filter=["domain=books"])
    assert len(books) == 23 and all(s.groups["domain"] == ["books"] for s in books)
    two = pick(QUEST, sample_filter=["domain=books", "domain=FILMS"])  # values: any case
    assert len(two) == 43
    both = pick(QUEST, sample_filter=["domain=books", "template=_ that are not _"])
    assert both and all(s.groups["domain"] == ["books"] and s.groups["template"] == ["_ that are not _"] for s in both)
    # ids first, then the filter, then the limit
    ids = [s.id for s in QUEST.samples[:10]]
    got = pick(QUEST, sample_ids=ids, sample_filter=["domain=books"], limit=2)
    assert [s.id for s in got] == [s.id for s in QUEST.samples[:10] if s.groups["domain"] == ["books"]][:2]
    # field names under any spelling: TopiOCQA's turn_type as "turn type" or "Turn-Type"
    topiocqa = load_dataset("topiocqa:dev", None)
    shifts = pick(topiocqa, sample_filter=["turn type=topic-shift"])
    assert shifts and all(s.groups["turn_type"] == ["topic-shift"] for s in shifts)
    assert pick(topiocqa, sample_filter=["Turn-Type=topic-shift"]) == shifts


def test_shuffle_is_a_seeded_random_subset():
    first = [s.id for s in QUEST.samples[:10]]
    a = [s.id for s in pick(QUEST, shuffle=True, seed=7, limit=10)]
    assert a != first and len(set(a)) == 10
    assert a == [s.id for s in pick(QUEST, shuffle=True, seed=7, limit=10)], "deterministic"
    assert a == [s.id for s in pick(QUEST, shuffle=True, shuffle_seed=7, seed=0, limit=10)], "--shuffle-seed wins"
    assert a != [s.id for s in pick(QUEST, shuffle=True, seed=8, limit=10)]
    assert a == [s.id for s in pick(QUEST, shuffle=True, seed=7, limit=20)][:10], "a larger --limit extends it"
    books = pick(QUEST, sample_filter=["domain=books"], shuffle=True, limit=5)  # filter before shuffle
    assert len(books) == 5 and all(s.groups["domain"] == ["books"] for s in books)


def test_largest_remainder_allocation():
    assert allocate([50, 30, 20], 10) == [5, 3, 2]
    assert allocate([7, 7, 6], 10) == [4, 3, 3]  # remainders .5/.5/.0: the earlier of the tied strata
    assert allocate([1, 1, 98], 3) == [0, 0, 3]
    assert allocate([3, 2], 9) == [3, 2]  # never more than a stratum holds
    for sizes, n in (([23, 20, 20, 17], 10), ([1, 2, 3, 4, 5], 7), ([13], 4)):
        assert sum(allocate(sizes, n)) == n


def test_stratify_is_proportional_and_deterministic():
    got = pick(QUEST, stratify_by="domain", limit=10)
    assert Counter(s.groups["domain"][0] for s in got) == {"books": 3, "animals": 3, "films": 2, "plants": 2}
    assert [s.id for s in got] == [s.id for s in pick(QUEST, stratify_by="domain", limit=10)]
    # without --shuffle each stratum's first questions, in the dataset's order
    books = [s for s in QUEST.samples if s.groups["domain"] == ["books"]][:3]
    assert [s for s in got if s.groups["domain"] == ["books"]] == books
    shuffled = pick(QUEST, stratify_by="domain", limit=10, shuffle=True, seed=3)
    assert Counter(s.groups["domain"][0] for s in shuffled) == Counter(s.groups["domain"][0] for s in got)
    assert {s.id for s in shuffled} != {s.id for s in got}


@pytest.mark.parametrize(
    "options, needle",
    [
        ({"sample_filter": ["colour=red"]}, "no field 'colour' (its fields: template, domain)"),
        ({"sample_filter": ["domain=cars"]}, "(its values: animals, books, films, plants)"),
        ({"sample_filter": ["domain"]}, "expected FIELD=VALUE"),
        ({"stratify_by": "colour", "limit": 5}, "--stratify-by: quest:train-sample"),
        ({"stratify_by": "domain"}, "needs --limit"),
        ({"shuffle_seed": 3}, "without --shuffle"),
        ({"sample_ids": [QUEST.samples[0].id], "sample_filter": ["domain=books"]}, "no selected sample"),
    ],
)
def test_bad_selection_is_one_line(options, needle):
    assert QUEST.samples[0].groups["domain"] != ["books"]
    with pytest.raises(ConfigError) as info:
        pick(QUEST, **options)
    assert needle in str(info.value) and "\n" not in str(info.value)


def test_a_dataset_without_fields_says_so():
    hotpot = load_dataset("hotpotqa:dev", None)
    with pytest.raises(ConfigError, match="hotpotqa:dev@.* has no group fields"):
        pick(hotpot, sample_filter=["type=bridge"])


STATE: dict = {"fail": set()}


@pytest.fixture
def flaky():
    def fn(messages, tools, tool_choice, params):
        if any(q in messages[-1]["content"] for q in STATE["fail"]):
            raise KeyError("flaky")
        return "nothing"

    register_script("selection-flaky", fn)
    yield "scripted/selection-flaky"
    unregister_script("selection-flaky")


def run(model, out, **options):
    config = build_config({"model": model, "dataset": "qampari:sample", "out": str(out), "cache": False, **options})
    return results_dict(asyncio.run(Run(config, show_progress=False).execute()))  # the JSON written


def test_recorded_in_results_not_in_the_run_key(flaky, tmp_path):
    plain = run(flaky, tmp_path / "a", limit=3)
    chosen = run(flaky, tmp_path / "b", limit=3, shuffle=True, seed=0, sample_filter=["type=unknown"])
    assert plain["config_hash"] == chosen["config_hash"]
    config = chosen["config"]
    assert config["sample_filter"] == ["type=unknown"] and config["shuffle"] is True
    assert config["shuffle_seed"] == 0, "the seed used is recorded (--seed's value)"
    assert chosen["dataset"]["n_selected"] == 3
    ids = {s.id for s in QAMPARI.samples if s.groups["type"] == ["unknown"]}
    assert set(chosen["sample_ids"]) <= ids


def test_only_failed_retries_the_failed_and_starts_nothing_new(flaky, tmp_path, capsys):
    out = tmp_path / "run"
    STATE["fail"] = {QAMPARI.samples[1].question, QAMPARI.samples[3].question}
    first = run(flaky, out, limit=5)
    assert first["counts"]["failed"] == 2
    # a larger --limit with --only-failed: the two failed are retried, the five new ones not started
    STATE["fail"] = {QAMPARI.samples[3].question}
    again = run(flaky, out, limit=10, only_failed=True)
    assert again["invocations"][-1]["attempted_ids"] == [QAMPARI.samples[1].id, QAMPARI.samples[3].id]
    assert again["counts"]["finished"] == 4 and again["counts"]["failed"] == 1 and again["counts"]["pending"] == 5
    assert "retrying 2 failed sample(s); 5 never tried" in capsys.readouterr().err
    STATE["fail"] = set()
    last = run(flaky, out, limit=5, only_failed=True)
    assert last["invocations"][-1]["attempted_ids"] == [QAMPARI.samples[3].id]
    assert last["counts"]["failed"] == 0 and last["config_hash"] == first["config_hash"]
    # nothing failed: one line, exit 0
    argv = ["run", "--model", flaky, "--dataset", "qampari:sample", "--limit", "5", "--no-cache", "--out", str(out)]
    capsys.readouterr()
    assert main([*argv, "--only-failed"]) == 0
    assert f"--only-failed: no failed sample to retry in {out}" in capsys.readouterr().err


def test_only_failed_on_a_directory_without_a_run_is_exit_2(flaky, tmp_path, capsys):
    out = tmp_path / "none"
    argv = ["run", "--model", flaky, "--dataset", "qampari:sample", "--no-cache", "--out", str(out), "--only-failed"]
    assert main(argv) == 2
    err = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
    assert len(err) == 1 and "--only-failed" in err[0] and "holds no run yet" in err[0]
    assert not out.exists() or not any(out.iterdir())
