"""FanOutQA (Zhu et al., ACL 2024), vendored in both answer versions (CC BY-SA 4.0).

Default version ``nov23``: the answers in the PyPI package fanoutqa 1.1.1, which every score
published so far was computed against, so new numbers stay comparable with the paper and the
leaderboard. ``@2026`` selects the upstream 2026 corrections (82 top-level answers fixed).
"""

from __future__ import annotations

from pathlib import Path

from harness.datasets.answers import FanOutQAAnswer
from harness.datasets.base import (
    DATASETS,
    Dataset,
    DatasetLoader,
    Sample,
    json_records,
    shipped_file,
)
from harness.datasets.packed import PackedRecord
from harness.errors import DatasetError


def fanoutqa_hops(rec: dict) -> list[dict]:
    """The hops of a dev question: the sub-questions of its decomposition that name an evidence page,
    walked depth-first (like fanoutqa's DevQuestion); [] without a decomposition (test files)."""
    found: list[dict] = []

    def walk(subqs):
        for subq in subqs or []:
            if subq.get("evidence"):
                found.append(subq)
            walk(subq.get("decomposition"))

    walk(rec.get("decomposition"))
    return found


def fanoutqa_evidence(rec: dict) -> list[dict]:
    """Evidence pages of a question: test files list them (necessary_evidence); dev files carry them
    on the decomposition's hops (``fanoutqa_hops``). Deduplicated."""
    if rec.get("necessary_evidence"):
        found = list(rec["necessary_evidence"])
    else:
        found = [hop["evidence"] for hop in fanoutqa_hops(rec)]
    seen, unique = set(), []
    for e in found:
        key = e.get("pageid") or e.get("title")
        if key not in seen:
            seen.add(key)
            unique.append({k: e.get(k) for k in ("title", "pageid", "revid", "url")})
    return unique


@DATASETS.register("fanoutqa")
class FanOutQA(DatasetLoader):
    name = "fanoutqa"
    splits = ("dev", "test")
    default_split = "dev"
    versions = ("nov23", "2026")
    default_version = "nov23"
    license = "CC BY-SA 4.0"
    metrics = ["fanoutqa-string"]  # acc (loose/strict) + ROUGE-1/2/L
    # correct: FanOutQA's strict accuracy, every part of the answer found (zhudotexe/fanoutqa@4812790c
    # fanoutqa/eval/scorer.py score_accuracy: ``strict`` counts ``answer_in_text(...).found``)
    correct = "fanoutqa-string:acc==1"
    answer_types = ("str", "number", "bool", "list_of_str", "list", "dict")
    answer_hint = FanOutQAAnswer
    answer_doc = (  # what a gold answer is (docs/datasets.md)
        "the answer as FanOutQA gives it: a text, a number or a yes/no; a list of values, every one needed; "
        'or a mapping of entities to their values (`{"Avatar": 237, ...}`), every key and value needed. None '
        "on the test split"
    )
    gold_evidence = "the decomposition's evidence pages (test: necessary_evidence), the evidence-provided pages"

    def load(self, split: str, version: str, data_path: str | None = None) -> Dataset:
        if data_path:
            path = Path(data_path)
        else:
            path = shipped_file("fanoutqa", version, f"fanout-final-{split}.json")
        has_answers = split != "test"
        samples = []
        seen = set()
        with json_records(path, "questions") as records:
            for i, rec in enumerate(records):
                where = f"{path}: question #{i + 1}"
                if (
                    not isinstance(rec, dict)
                    or not isinstance(rec.get("id"), str)
                    or not isinstance(rec.get("question"), str)
                ):
                    raise DatasetError(f"{where}: needs string fields 'id' and 'question'")
                if rec["id"] in seen:
                    raise DatasetError(f"{where}: duplicate id {rec['id']!r}")
                seen.add(rec["id"])
                if has_answers and "answer" not in rec:
                    raise DatasetError(f"{where}: dev questions need an 'answer'")
                evidence = fanoutqa_evidence(rec)
                samples.append(
                    Sample(
                        id=rec["id"],
                        question=rec["question"],
                        answer=rec.get("answer"),
                        raw=PackedRecord.parsed(rec),
                        evidence=evidence,
                        needed_titles=[e["title"] for e in evidence],
                        gold_evidence=evidence,
                        groups={"category": list(rec.get("categories") or [])},
                    )
                )
        return self.dataset(split, version, path, data_path, samples, has_answers=has_answers)
