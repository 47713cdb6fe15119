"""Dataset interface: a loader is one file with one registered class."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, ClassVar

from harness.datasets.answers import GoldAnswer
from harness.datasets.packed import PackedList, PackedRecord, pack_list, pack_record, pack_sublist
from harness.errors import DatasetError
from harness.records import parse_json, read_input_text
from harness.records import read_json as records_read_json
from harness.registry import Registry, split_reference


@dataclass
class Sample:
    """One question of a dataset. ``answer`` is its gold answer, typed ``GoldAnswer``
    (``harness.datasets.answers``): on each dataset one shape (``DatasetLoader.answer_hint``,
    ``answer_types``, ``answer_doc``; the table "What a gold answer is" in docs/datasets.md), None
    where the split has no answers (test sets)."""

    id: str
    question: str
    answer: GoldAnswer
    # The dataset's own record, untouched: a dict of JSON values is kept as a PackedRecord (a read-only
    # Mapping over its compact JSON, zlib-compressed: a FanOutQA dev record 0.8 KB instead of ~7 KB of
    # dicts; harness.datasets.packed). Each read decodes it whole: .unpack() once for several keys.
    raw: Mapping[str, Any] = field(default_factory=dict)
    # Pages given to the model in the evidence-provided setting: {"title", "pageid"?, "revid"?}. This and the
    # next two lists of JSON values are kept as PackedLists (read-only Sequences equal to the list: FanOutQA
    # dev's evidence ~0.2 KB of bytes instead of ~3 KB of dicts); .unpack() gives a list (to mutate, to write).
    evidence: Sequence[dict[str, Any]] = field(default_factory=list)
    # Pages a system needs to find (evidence recall): FanOutQA decomposition titles, HotpotQA supporting facts.
    needed_titles: Sequence[str] = field(default_factory=list)
    # The gold evidence pages, as ``evidence`` entries: those that answer the question (see
    # DatasetLoader.gold_evidence); empty where the dataset marks none. The oracle-evidence strategy packs them.
    # Entries that are evidence's own (the same objects) are held as positions into it.
    gold_evidence: Sequence[dict[str, Any]] = field(default_factory=list)
    # Groups for score breakdowns, e.g. {"category": ["Sports", "Statistics"]} or {"template": ["_ or _"]};
    # a PackedRecord, as raw.
    groups: Mapping[str, list[str]] = field(default_factory=dict)
    # Conversations: the previous turns, question then gold answer, ``[q1, a1, q2, a2, ...]``
    # (rendered by ``harness.datasets.conversation.format_history``); empty for single-turn datasets.
    history: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        # Each kept as compact JSON where JSON gives it back exactly, else as given (harness.datasets.packed):
        # a read-only Mapping / Sequence, equal to the dict / list, decoded on each read (several reads: unpack()).
        if not isinstance(self.raw, PackedRecord):
            self.raw = pack_record(self.raw)
        if not isinstance(self.groups, PackedRecord):
            self.groups = pack_record(self.groups)
        if not isinstance(self.needed_titles, PackedList) and self.needed_titles is not self.answer:
            self.needed_titles = pack_list(self.needed_titles)  # (QUEST's are its answer: held there already)
        evidence, gold = self.evidence, self.gold_evidence
        if not isinstance(evidence, PackedList):
            self.evidence = pack_list(evidence)
        if not isinstance(gold, PackedList):  # entries that are evidence's (the same objects): positions in it
            self.gold_evidence = pack_sublist(gold, evidence, self.evidence)


@dataclass
class DatasetInfo:
    name: str
    split: str
    version: str
    path: str
    sha256: str
    license: str
    has_answers: bool
    ref: str | None = None  # the loader's FILE.py:NAME / module:NAME when it was loaded from one
    plugin: dict[str, Any] = field(default_factory=dict)  # its registry entry (plugins: identity)

    def spec(self) -> str:
        """``NAME:SPLIT@VERSION``; VERSION ends in ``+file`` when read from --data-path, and
        ``load_dataset(spec, data_path)`` reads such a spec back (a loader given as a reference is
        named by it, so the spec finds it again)."""
        return f"{self.ref or self.name}:{self.split}@{self.version}"


@dataclass
class Dataset:
    info: DatasetInfo
    samples: list[Sample]
    metrics: list[str]  # default metrics for this dataset
    # Questions that are not independent (the turns of one conversation): the sample field
    # (``Sample.groups`` or ``Sample.raw`` key) whose value is a question's cluster in the error bars.
    cluster_by: str | None = None
    # the answer types of its golds (harness.datasets.answers.ANSWER_TYPES); None: read from the values
    answer_types: tuple[str, ...] | None = None
    gold_evidence: str | None = None  # what its samples' gold evidence pages are (DatasetLoader.gold_evidence)
    correct: str | None = None  # which answers are correct by default (DatasetLoader.correct)

    def by_id(self) -> dict[str, Sample]:
        return {s.id: s for s in self.samples}


class DatasetLoader:
    """Subclasses set the class attributes and implement ``load``."""

    name: ClassVar[str]
    splits: ClassVar[tuple[str, ...]]
    default_split: ClassVar[str]
    versions: ClassVar[tuple[str, ...]]
    default_version: ClassVar[str]
    license: ClassVar[str]
    metrics: ClassVar[list[str]]
    cluster_by: ClassVar[str | None] = None  # default clustering of the error bars (see Dataset)
    # the answer types of its golds (harness.datasets.answers.ANSWER_TYPES), checked against each metric's
    # declaration before a run; None: read from the gold values
    answer_types: ClassVar[tuple[str, ...] | None] = None
    # its golds' Python type (Sample.answer; harness.datasets.answers: QampariAnswer, ...) and what
    # they are, in words: docs/datasets.md's table of gold answers; None / "": not said
    answer_hint: ClassVar[Any] = None
    answer_doc: ClassVar[str] = ""
    # {setting: strategy} run in that setting unless --agent names one (else the setting's own)
    default_agents: ClassVar[dict[str, str]] = {}
    # what the samples' gold evidence pages (Sample.gold_evidence) are; None: the dataset marks none
    gold_evidence: ClassVar[str | None] = None
    # the score a paper reports for it (``METRIC.LEAF`` keys); empty: its first metric's headline
    # (harness.scoring.display)
    headline: ClassVar[tuple[str, ...]] = ()
    # which answers count as correct where a metric asks (calibration, per-correct, outcomes) and its
    # ``correct`` option is ``auto``: METRIC:LEAF, the dataset's own rule (harness.scoring.correct);
    # None: it has none, and ``auto`` is refused in one line
    correct: ClassVar[str | None] = None

    def load(self, split: str, version: str, data_path: str | None = None) -> Dataset:
        raise NotImplementedError

    def dataset(
        self, split: str, version: str, path: Path, data_path: str | None, samples: list[Sample], has_answers: bool
    ) -> Dataset:
        """Wrap loaded samples with the facts every results file records."""
        info = DatasetInfo(
            name=self.name,
            split=split,
            version=version if not data_path else f"{version}+file",
            path=str(path),
            sha256=sha256_file(path),
            license=self.license,
            has_answers=has_answers,
        )
        return Dataset(
            info=info,
            samples=samples,
            metrics=list(self.metrics),
            cluster_by=self.cluster_by,
            answer_types=tuple(self.answer_types) if self.answer_types is not None else None,
            gold_evidence=self.gold_evidence,
            correct=self.correct,
        )


def shipped_file(*parts: str) -> Path:
    """A data file vendored under harness/datasets/data/."""
    return Path(str(resources.files("harness.datasets").joinpath("data", *parts)))


def read_json(path: Path) -> Any:
    return records_read_json(path, "dataset file", error=DatasetError)


def read_jsonl(path: Path) -> list[dict]:
    return list(_jsonl_items(read_input_text(path, "dataset file", error=DatasetError).splitlines(), path))


def _jsonl_items(lines: list[str], path: Path) -> Iterator[dict]:
    for n in range(len(lines)):
        line, lines[n] = lines[n], ""  # each line dropped once parsed
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DatasetError(f"{path}:{n + 1}: not valid JSON ({exc.msg})") from None
        if not isinstance(rec, dict):
            raise DatasetError(f"{path}:{n + 1}: expected a JSON object per line")
        yield rec


_WS = re.compile(r"[ \t\n\r]*")  # JSON's whitespace (as json.decoder skips it)


class Records:
    """A dataset file's records, parsed one at a time as a loader walks them::

        with json_records(path) as records:
            for rec in records:
                samples.append(Sample(..., raw=rec))

    Each record's dicts are dropped once its Sample is built (``Sample.raw`` keeps the record packed),
    so loading never holds the whole file as Python objects (~4.5x its JSON, and the process keeps
    that memory). The errors are those of reading the file whole: where the loader refuses a record
    (raises inside the block), the rest of the file is parsed first, so a file that is not valid JSON
    further on is reported as such, as before."""

    def __init__(self, items: Iterator[Any]):
        self._items = items

    def __iter__(self) -> Iterator[Any]:
        return self._items

    def __enter__(self) -> Records:
        return self

    def __exit__(self, kind, exc, tb) -> bool:
        if kind is not None and issubclass(kind, Exception):
            for _ in self._items:  # raises the file's JSON error, if it has one
                pass
        return False


def json_records(path: Path, what: str = "questions") -> Records:
    """The items of a file holding a JSON list (``read_json``'s, one at a time); a file that is valid
    JSON but no list: ``{path}: expected a JSON list of {what}``."""
    text = read_input_text(path, "dataset file", error=DatasetError)
    start = _WS.match(text).end()
    if not text.startswith("[", start):
        parse_json(text, path, "dataset file", DatasetError)  # not JSON: its error
        raise DatasetError(f"{path}: expected a JSON list of {what}")
    return Records(_list_items(text, start + 1, path))


def jsonl_records(path: Path) -> Records:
    """The records of a JSONL file (``read_jsonl``'s, one at a time)."""
    return Records(_jsonl_items(read_input_text(path, "dataset file", error=DatasetError).splitlines(), path))


def _list_items(text: str, idx: int, path: Path) -> Iterator[Any]:
    """The items of the JSON list whose "[" ends before ``idx``, parsed by json's own scanner one at a
    time. Anything unexpected (a syntax error) hands over to ``json.loads`` of the whole text, whose
    error is the one reported."""
    decoder = json.JSONDecoder()  # what json.loads uses
    n, closed = 0, False
    idx = _WS.match(text, idx).end()
    if text.startswith("]", idx):
        idx, closed = idx + 1, True
    while not closed:
        try:
            item, idx = decoder.raw_decode(text, idx)
        except json.JSONDecodeError:
            break
        idx = _WS.match(text, idx).end()
        sep = text[idx : idx + 1]
        if sep not in (",", "]"):
            break
        idx, closed = _WS.match(text, idx + 1).end(), sep == "]"
        yield item
        n += 1
    if closed and _WS.match(text, idx).end() == len(text):
        return
    whole = parse_json(text, path, "dataset file", DatasetError)  # raises: the text is not JSON
    yield from whole[n:]  # (never reached: both parse with the same scanner)


def check_questions(dataset: Dataset) -> None:
    """Every sample asks a question in text: a ``null`` (or a number) would reach the model as "None"
    ("3"), so it is refused at load, naming the file and the sample, whatever loader read it."""
    for n, sample in enumerate(dataset.samples, 1):
        question = sample.question
        if isinstance(question, str) and question.strip():
            continue
        got = "null" if question is None else ("empty" if isinstance(question, str) else f"a {type(question).__name__}")
        raise DatasetError(
            f"{dataset.info.path}: question #{n} (id {sample.id}): the question is {got}, expected text"
        )


def _check_loader(obj: Any, ref: str) -> None:
    if not (isinstance(obj, type) and issubclass(obj, DatasetLoader)):
        raise DatasetError(f"dataset {ref}: not a dataset loader (a subclass of harness.datasets.base.DatasetLoader)")
    missing = [
        a
        for a in ("splits", "default_split", "versions", "default_version", "license", "metrics")
        if not hasattr(obj, a)
    ]
    if missing:
        raise DatasetError(f"dataset {ref}: the loader does not set {', '.join(missing)}")


DATASETS: Registry[type[DatasetLoader]] = Registry(
    "dataset",
    builtins={
        "fanoutqa": "harness.datasets.fanoutqa:FanOutQA",
        "hotpotqa": "harness.datasets.hotpotqa:HotpotQA",
        "qampari": "harness.datasets.qampari:Qampari",
        "quest": "harness.datasets.quest:Quest",
        "topiocqa": "harness.datasets.topiocqa:TopiOCQA",
    },
    validate=_check_loader,
)

FILE_SUFFIX = "+file"  # a version read from --data-path (DatasetLoader.dataset adds it)
_SPEC = re.compile(
    r"^(?P<name>[A-Za-z0-9_\-]+)(?::(?P<split>[A-Za-z0-9_\-]+))?(?:@(?P<version>[A-Za-z0-9_.\-]+)(?:\+file)?)?$"
)
_REST = re.compile(r"^(?::(?P<split>[A-Za-z0-9_\-]+))?(?:@(?P<version>[A-Za-z0-9_.\-]+)(?:\+file)?)?$")


def parse_spec(spec: str) -> tuple[str, str | None, str | None]:
    """``NAME[:SPLIT][@VERSION]`` -> (name, split, version); NAME may be a loader reference
    (``FILE.py:Loader:dev@v1``). A recorded spec's ``@VERSION+file`` (see ``DatasetInfo.spec``)
    parses to VERSION: the file itself comes from ``data_path``."""
    text = spec.strip()
    ref = split_reference(text)
    if ref is not None:
        m = _REST.match(ref[1])
        if m:
            return ref[0], m["split"], m["version"]
    m = _SPEC.match(text)
    if not m:
        raise DatasetError(f"dataset {spec!r} must look like NAME[:SPLIT][@VERSION], e.g. fanoutqa:dev@nov23")
    return m["name"], m["split"], m["version"]


def from_file(spec: str) -> bool:
    """Whether a spec names a dataset that was read from --data-path (``@VERSION+file``)."""
    return spec.strip().endswith(FILE_SUFFIX)


def sha256_file(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
