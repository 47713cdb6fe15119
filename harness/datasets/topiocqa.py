"""TopiOCQA (Adlakha et al., TACL 2022): open-domain conversational QA with topic switching.

The dev split (2,514 turns of 205 conversations, CC BY-NC-SA 4.0: non-commercial) ships as package
data; ``--data-path`` reads another file in the official format (e.g. the train split, or a dev file
with ``Additional_answers``). One sample per turn, id ``"{Conversation_no}_{Turn_no}"``.

The previous turns (``Context``: ``[q1, a1, q2, a2, ...]``) become ``Sample.history``; the question
representations of the paper (section 5.1.2: ``original``, ``all-history``) and the official query
formats are rendered by ``harness.datasets.conversation.format_history``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.datasets.answers import TopiOCQAAnswer
from harness.datasets.base import DATASETS, Dataset, DatasetLoader, Sample, read_json, shipped_file
from harness.datasets.packed import PackedRecord
from harness.errors import DatasetError


def turn_type(previous_topic: str | None, topic: str) -> str:
    """``first`` (no previous turn in the conversation), ``topic-shift`` (the gold passage's page,
    ``Topic``, differs from the previous turn's) or ``topic-continuation`` (same page)."""
    if previous_topic is None:
        return "first"
    return "topic-shift" if topic != previous_topic else "topic-continuation"


def references(rec: dict[str, Any]) -> str | list[str]:
    """The original answer, or ``[original, *additional]`` when the file has ``Additional_answers``
    (the official evaluator's gold list)."""
    extra = rec.get("Additional_answers")
    if not extra:
        return rec["Answer"]
    return [rec["Answer"]] + [x["Answer"] if isinstance(x, dict) else x for x in extra]


@DATASETS.register("topiocqa")
class TopiOCQA(DatasetLoader):
    name = "topiocqa"
    splits = ("dev", "train")  # train only with --data-path
    default_split = "dev"
    versions = ("719c4548",)
    default_version = "719c4548"
    license = "CC BY-NC-SA 4.0"
    metrics = ["topiocqa"]
    # correct: the answer equals a reference (TopiOCQA's EM, McGill-NLP/topiocqa@49b710e9 evaluate_reader.py).
    # With n > 1 references its leave-one-out EM is (n-1)/n >= 0.5 when one matches and 0 when none does,
    # so em >= 0.5; em == 1 would ask for every reference
    correct = "topiocqa:em>=0.5"
    answer_types = ("str", "references")
    answer_hint = TopiOCQAAnswer
    answer_doc = (  # what a gold answer is (docs/datasets.md)
        "the turn's answer text; where the file has `Additional_answers`, `[original, *additional]`: "
        "alternatives, any one of them right"
    )
    # the conversational strategies: each turn asked with the conversation so far (the benchmark's setting)
    default_agents = {"closed-book": "conversational", "open-book": "conversational-open-book"}
    cluster_by = "Conversation_no"  # the turns of one conversation are not independent questions

    def load(self, split: str, version: str, data_path: str | None = None) -> Dataset:
        if data_path:
            path = Path(data_path)
        elif split == "dev":
            path = shipped_file("topiocqa", "topiocqa_dev.json")
        else:
            raise DatasetError(f"topiocqa:{split} is not shipped; pass its file with --data-path")
        records = read_json(path)
        if not isinstance(records, list):
            raise DatasetError(f"{path}: expected a JSON list of turns")
        samples: list[Sample] = []
        seen: set[str] = set()
        last_topic: dict[Any, str] = {}
        # previous turn of the same conversation = the highest Turn_no below this one
        order = sorted(range(len(records)), key=lambda i: _turn_key(records[i], path, i))
        kinds: dict[int, str] = {}
        for i in order:
            rec = records[i]
            conv = rec["Conversation_no"]
            kinds[i] = turn_type(last_topic.get(conv), rec["Topic"])
            last_topic[conv] = rec["Topic"]
        for i, rec in enumerate(records):
            where = f"{path}: turn #{i + 1}"
            try:
                sample_id = f"{rec['Conversation_no']}_{rec['Turn_no']}"
                question, answer, topic = rec["Question"], references(rec), rec["Topic"]
            except (KeyError, TypeError):
                raise DatasetError(
                    f"{where}: needs Conversation_no, Turn_no, Question, Answer, Context and Topic"
                ) from None
            context = rec.get("Context") or []
            if not isinstance(context, list):
                raise DatasetError(f"{where}: Context must be a list (previous questions and answers)")
            if sample_id in seen:
                raise DatasetError(f"{where}: duplicate turn {sample_id}")
            seen.add(sample_id)
            groups = {"turn_type": [kinds[i]]}
            if "is_nq" in rec:
                groups["is_nq"] = [str(bool(rec["is_nq"])).lower()]
            samples.append(
                Sample(
                    id=sample_id,
                    question=question,
                    answer=answer,
                    raw=PackedRecord.parsed(rec),
                    evidence=[{"title": topic}],
                    needed_titles=[topic],
                    groups=groups,
                    history=[str(x) for x in context],
                )
            )
        return self.dataset(split, version, path, data_path, samples, has_answers=True)


def _turn_key(rec: Any, path: Path, i: int) -> tuple[str, int]:
    try:
        return (str(rec["Conversation_no"]), int(rec["Turn_no"]))
    except (KeyError, TypeError, ValueError):
        raise DatasetError(f"{path}: turn #{i + 1}: needs Conversation_no and an integer Turn_no") from None
