"""Progress without a terminal (logs, nohup, CI; issue 14): one line to stderr every 10% of the samples
or every 30 s, and one at the end, with done, failed, rate, ETA and the running headline score when
samples are scored as they finish. A terminal keeps the live display."""

from __future__ import annotations

import asyncio
import io
import re

import pytest

from harness.execution.config import build_config
from harness.datasets import load_dataset
from harness.models.scripted import register_script, unregister_script
from harness.execution.progress import Progress
from harness.execution.runner import Run


@pytest.fixture
def gold_for_autozam():
    """Answers the gold items of the Autozam question, nothing right elsewhere; fails one question."""
    dataset = load_dataset("qampari:sample", None)
    gold = {s.question: "\n".join(a["answer_text"] for a in s.answer) for s in dataset.samples}

    def fn(messages, tools, tool_choice, params):
        prompt = messages[-1]["content"]
        question = next(q for q in gold if q in prompt)
        if "Autozam" in question:
            return gold[question]
        if question == dataset.samples[1].question:
            raise KeyError("a crash")
        return "nothing"

    register_script("progress-lines", fn)
    yield "scripted/progress-lines"
    unregister_script("progress-lines")


def test_lines_without_a_terminal(gold_for_autozam, tmp_path, capsys):
    config = build_config(
        {
            "model": gold_for_autozam,
            "dataset": "qampari:sample",
            "out": str(tmp_path / "run"),
            "cache": False,
            "stream_scoring": "on",
            "max_connections": 1,
        }
    )
    results = asyncio.run(Run(config, show_progress=True).execute())  # capsys: stderr is no terminal
    lines = [x for x in capsys.readouterr().err.splitlines() if x.startswith("progress: ")]
    # 13 samples: a line every 2 (ceil of 10%), and the last at the end
    assert [int(re.match(r"progress: (\d+)/13 ", x).group(1)) for x in lines] == [2, 4, 6, 8, 10, 12, 13]
    last = lines[-1]
    assert "1 failed" in last and "took " in last and ("/s" in last or "/min" in last)
    assert "ETA " in lines[0]
    raw = [r["set-f1"]["f1"] for r in results.scores.raw if r["question_id"] != results.sample_ids[1]]
    mean = sum(raw) / len(raw)
    assert 0 < mean < 1
    assert last.endswith(f"set-f1.f1 {mean:.3f} (mean of 12 scored)"), last


def test_a_line_every_interval_while_nothing_finishes():
    stream = io.StringIO()

    async def main():
        with Progress(5, enabled=True, stream=stream, every_s=0.05) as progress:
            await asyncio.sleep(0.18)
            progress.advance(ok=True)

    asyncio.run(main())
    lines = stream.getvalue().splitlines()
    assert len(lines) >= 3 and lines[0].startswith("progress: 0/5 samples done, 0 failed")
    assert "ETA unknown" in lines[0] and "score" not in lines[0]  # no scores streamed: no headline
    assert lines[-1].startswith("progress: 1/5 ")


def test_a_terminal_keeps_the_live_display_and_quiet_prints_nothing():
    class Tty(io.StringIO):
        def isatty(self):
            return True

    progress = Progress(5, enabled=True, stream=Tty())
    assert progress.enabled and not progress.lines
    stream = io.StringIO()
    with Progress(5, enabled=False, stream=stream) as quiet:
        quiet.advance(ok=True)
    assert stream.getvalue() == ""


def test_the_headline_is_a_running_mean_equal_to_the_metric_s_own_aggregate():
    """A progress line's headline, where it is the mean of one per-question value (fanoutqa-string's
    acc.loose, em-f1's em), is summed as samples are scored, no row kept, and equals the metric's own
    aggregate of the rows to the last bit; a metric whose aggregate is something else keeps rows."""
    import random

    from harness.execution.progress import Progress
    from harness.scoring.metrics import METRICS
    from harness.scoring.values import mean_values

    rng = random.Random(3)
    rouge = {k: {"precision": 0.5, "recall": 0.5, "fscore": 0.5} for k in ("rouge1", "rouge2", "rougeL")}
    fan, em = Progress(500, enabled=False), Progress(500, enabled=False)
    fan_rows, em_rows = [], []
    for _ in range(500):
        row = {"acc": rng.choice([0.0, 1.0, rng.random(), 1 / 3]), "rouge": rouge}
        fan.add_scores({"fanoutqa-string": row, "em-f1": {"em": 1.0}})
        fan_rows.append(row)
        em_row = {"em": float(rng.random() < 0.3), "f1": rng.random()}
        em.add_scores({"em-f1": em_row})
        em_rows.append(em_row)
    official = METRICS.get("fanoutqa-string").aggregation.rows(fan_rows, len(fan_rows))
    assert fan.headline() == ("fanoutqa-string.acc.loose", official["acc"]["loose"])
    assert em.headline() == ("em-f1.em", mean_values(em_rows)["em"])
    assert not fan._rows and not em._rows  # nothing held per sample

    undefined = Progress(2, enabled=False)  # a None value: the mean has none, as mean_values says
    undefined.add_scores({"em-f1": {"em": 1.0}})
    undefined.add_scores({"em-f1": {"em": None}})
    assert undefined.headline() is None
