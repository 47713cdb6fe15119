"""HotpotQA dev (distractor), the first 100 questions: a real multi-document QA set whose evidence
text (991 Wikipedia intro paragraphs) is all here, so open-book and evidence-provided run offline."""

from __future__ import annotations

from pathlib import Path

from harness.datasets.answers import HotpotQAAnswer
from harness.datasets.base import DATASETS, Dataset, DatasetLoader, Sample, json_records, shipped_file
from harness.datasets.packed import PackedRecord
from harness.errors import DatasetError


@DATASETS.register("hotpotqa")
class HotpotQA(DatasetLoader):
    name = "hotpotqa"
    splits = ("dev",)
    default_split = "dev"
    versions = ("distractor-first100",)
    default_version = "distractor-first100"
    license = "CC BY-SA 4.0"
    metrics = ["fanoutqa-string", "em-f1"]
    headline = ("em-f1.em", "em-f1.f1")  # what HotpotQA's official evaluation reports
    # correct: HotpotQA's answer exact match (hotpotqa/hotpot@36358534 hotpot_evaluate_v1.py exact_match_score)
    correct = "em-f1:em"
    answer_types = ("str",)
    answer_hint = HotpotQAAnswer
    answer_doc = (  # what a gold answer is (docs/datasets.md)
        "one short text: a span of the paragraphs, or yes/no for a comparison question"
    )
    gold_evidence = "the supporting facts' pages (of the 10 context paragraphs the evidence-provided setting packs)"

    def load(self, split: str, version: str, data_path: str | None = None) -> Dataset:
        if data_path:
            path = Path(data_path)
        else:
            path = shipped_file("hotpotqa", "hotpot_dev_distractor_first100.json")
        samples = []
        with json_records(path, "questions") as records:
            for i, rec in enumerate(records):
                where = f"{path}: question #{i + 1}"
                try:
                    titles = list(rec["context"]["title"])
                    needed = list(dict.fromkeys(rec["supporting_facts"]["title"]))
                    question, answer = rec["question"], rec["answer"]
                except (KeyError, TypeError):
                    raise DatasetError(
                        f"{where}: needs question, answer, context.title and supporting_facts.title"
                    ) from None
                sample_id = rec.get("_id") or rec.get("id") or f"hotpot-dev-{i:03d}"
                evidence = [{"title": t} for t in titles]
                page = {e["title"]: e for e in evidence}  # a gold page is one of them: the same entry
                samples.append(
                    Sample(
                        id=str(sample_id),
                        question=question,
                        answer=answer,
                        raw=PackedRecord.parsed(rec),
                        evidence=evidence,
                        needed_titles=needed,
                        gold_evidence=[page.get(t) or {"title": t} for t in needed],
                    )
                )
        return self.dataset(split, version, path, data_path, samples, has_answers=True)
