"""QAMPARI (Amouyal et al., 2022): open-domain questions with many answers, in the official JSONL
format of samsam3232/qampari (one question per line: ``qid``, ``question_text``, ``answer_list`` =
[{"answer_text", "aliases", "aid", "proof": [{"proof_text", "found_in_url", "pid"}], ...}]).

The ``qid`` suffix after the last ``__`` names the question type (``wikidata_simple``,
``wikidata_comp``, ``wikidata_intersection``, ``wikitables_simple``, ``wikitables_comp``), used as
the score breakdown group. Dev/test are not shipped: download them from the official repository and
pass ``--data-path``. The ``sample`` split (13 real questions converted to the official format, see
data/qampari/SOURCE.md) ships so the loader and metric run offline.
"""

from __future__ import annotations

from pathlib import Path

from harness.datasets.answers import QampariAnswer
from harness.datasets.base import DATASETS, Dataset, DatasetLoader, Sample, jsonl_records, shipped_file
from harness.datasets.packed import PackedRecord
from harness.errors import DatasetError

OFFICIAL_URL = "https://github.com/samsam3232/qampari (dev_data.jsonl / test_data.jsonl)"


def question_type(qid: str) -> str:
    """``"7445__wikidata_comp"`` -> ``"wikidata_comp"``; ``"unknown"`` when the qid has no suffix."""
    return qid.rsplit("__", 1)[1] if "__" in qid else "unknown"


@DATASETS.register("qampari")
class Qampari(DatasetLoader):
    name = "qampari"
    splits = ("sample", "dev", "test")
    default_split = "sample"
    versions = ("v1",)
    default_version = "v1"
    license = "CC BY-SA 4.0 (QAMPARI data; the shipped sample: CC0 + MIT, see SOURCE.md)"
    metrics = ["set-f1"]
    # correct: QAMPARI's question-level success, F1 >= 0.5 (samsam3232/qampari@dd9fe313
    # models/evaluation/reader_metrics.py, its ``f1_above`` share)
    correct = "set-f1:f1>=0.5"
    answer_types = ("entity_list",)
    answer_hint = QampariAnswer
    answer_doc = (  # what a gold answer is (docs/datasets.md)
        'every entity that answers the question, each `{"answer_text", "aliases"}`: an answer names an entity'
        " by any of its aliases"
    )

    def load(self, split: str, version: str, data_path: str | None = None) -> Dataset:
        if data_path:
            path = Path(data_path)
        elif split == "sample":
            path = shipped_file("qampari", "qampari_sample.jsonl")
        else:
            raise DatasetError(
                f"qampari:{split} is not shipped: download the official {split}_data.jsonl from "
                f"{OFFICIAL_URL} and pass --data-path FILE"
            )
        samples = []
        with jsonl_records(path) as records:
            for i, rec in enumerate(records):
                where = f"{path}: question #{i + 1}"
                try:
                    qid, question = str(rec["qid"]), rec["question_text"]
                    # aliases as given: the official scorer never credits an answer with none (set-f1's
                    # ``alias_fallback`` option matches those by answer_text instead)
                    answers = [
                        {"answer_text": a["answer_text"], "aliases": list(a.get("aliases") or [])}
                        for a in rec["answer_list"]
                    ]
                    proofs = [p for a in rec["answer_list"] for p in (a.get("proof") or [])]
                except (KeyError, TypeError):
                    raise DatasetError(f"{where}: needs qid, question_text and answer_list[].answer_text") from None
                needed = []
                for p in proofs:
                    url = p.get("found_in_url") if isinstance(p, dict) else None
                    if url:
                        needed.append(url.rsplit("/wiki/", 1)[-1].replace("_", " "))
                samples.append(
                    Sample(
                        id=qid,
                        question=question,
                        answer=answers,
                        raw=PackedRecord.parsed(rec),
                        needed_titles=list(dict.fromkeys(needed)),
                        groups={"type": [question_type(qid)]},
                    )
                )
        return self.dataset(split, version, path, data_path, samples, has_answers=True)
