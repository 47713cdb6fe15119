"""QUEST (Malaviya et al., ACL 2023): entity-seeking queries with implicit set operations, in the
official JSONL format of google-research/language/quest: one query per line, ``query``, ``docs``
(the gold Wikipedia entity titles), ``original_query``, ``scores``, ``metadata`` {template,
domain, ...}.

``quest:train-sample`` ships 80 real train rows (see data/quest/SOURCE.md). ``val``/``test`` need
``--data-path`` (download https://storage.googleapis.com/gresearch/quest/{val,test}.jsonl).
QUEST rows have no id; the harness names them ``quest-{split}-{index:04d}`` in file order.
"""

from __future__ import annotations

from pathlib import Path

from harness.datasets.answers import QuestAnswer
from harness.datasets.base import DATASETS, Dataset, DatasetLoader, Sample, jsonl_records, shipped_file
from harness.datasets.packed import PackedRecord
from harness.errors import DatasetError


@DATASETS.register("quest")
class Quest(DatasetLoader):
    name = "quest"
    splits = ("train-sample", "train", "val", "test")
    default_split = "train-sample"
    versions = ("v1",)
    default_version = "v1"
    license = "CC BY 4.0"
    metrics = ["quest"]
    # correct: QUEST's run_eval.py (google-research/language@cd31d413) has no per-query verdict, only mean
    # P/R/F1; its answers are entity sets as QAMPARI's, so QAMPARI's F1 >= 0.5 on QUEST's own exact titles
    correct = "quest:f1>=0.5"
    answer_types = ("list_of_str",)
    answer_hint = QuestAnswer
    answer_doc = (  # what a gold answer is (docs/datasets.md)
        "the Wikipedia titles of every entity that answers the query (a set: order does not matter)"
    )

    def load(self, split: str, version: str, data_path: str | None = None) -> Dataset:
        if data_path:
            path = Path(data_path)
        elif split == "train-sample":
            path = shipped_file("quest", "train_sample.jsonl")
        else:
            raise DatasetError(
                f"quest:{split} is not shipped: download https://storage.googleapis.com/gresearch/quest/"
                f"{split}.jsonl and pass --data-path FILE"
            )
        samples = []
        with jsonl_records(path) as records:
            for i, rec in enumerate(records):
                try:
                    query, docs = rec["query"], list(rec["docs"])
                    meta = rec.get("metadata") or {}
                    template, domain = meta.get("template"), meta.get("domain")
                except (KeyError, TypeError, AttributeError):
                    raise DatasetError(f"{path}: query #{i + 1} needs query, docs and metadata") from None
                groups = {}
                if template:
                    groups["template"] = [template]
                if domain:
                    groups["domain"] = [domain]
                samples.append(
                    Sample(
                        id=f"quest-{split}-{i:04d}",
                        question=query,
                        answer=docs,
                        raw=PackedRecord.parsed(rec),
                        needed_titles=docs,
                        groups=groups,
                    )
                )
        return self.dataset(
            split, version, path, data_path, samples, has_answers=bool(samples) and all(s.answer for s in samples)
        )
