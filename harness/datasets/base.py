"""Dataset interface: a loader is one file with one registered class."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, ClassVar

from harness.errors import DatasetError
from harness.registry import Registry


@dataclass
class Sample:
    id: str
    question: str
    answer: Any  # the reference; None where the split has no answers (test sets)
    raw: dict[str, Any] = field(default_factory=dict)  # the dataset's own record, untouched
    # Pages given to the model in the evidence-provided setting: {"title", "pageid"?, "revid"?}.
    evidence: list[dict[str, Any]] = field(default_factory=list)
    # Pages a system needs to find (evidence recall): FanOutQA decomposition titles, HotpotQA supporting facts.
    needed_titles: list[str] = field(default_factory=list)
    # Groups for score breakdowns, e.g. {"category": ["Sports", "Statistics"]} or {"template": ["_ or _"]}.
    groups: dict[str, list[str]] = field(default_factory=dict)


@dataclass
class DatasetInfo:
    name: str
    split: str
    version: str
    path: str
    sha256: str
    license: str
    has_answers: bool

    def spec(self) -> str:
        """``NAME:SPLIT@VERSION``; VERSION ends in ``+file`` when read from --data-path, and
        ``load_dataset(spec, data_path)`` reads such a spec back."""
        return f"{self.name}:{self.split}@{self.version}"


@dataclass
class Dataset:
    info: DatasetInfo
    samples: list[Sample]
    metrics: list[str]  # default metrics for this dataset

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
        return Dataset(info=info, samples=samples, metrics=list(self.metrics))


def shipped_file(*parts: str) -> Path:
    """A data file vendored under harness/datasets/data/."""
    return Path(str(resources.files("harness.datasets").joinpath("data", *parts)))


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DatasetError(f"dataset file not found: {path}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DatasetError(f"{path}: not valid JSON ({exc})") from None
    except OSError as exc:  # a directory, an unreadable file
        raise DatasetError(f"{path}: cannot read ({exc.strerror})") from None


def read_jsonl(path: Path) -> list[dict]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DatasetError(f"dataset file not found: {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DatasetError(f"{path}: cannot read ({exc})") from None
    records = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DatasetError(f"{path}:{n}: not valid JSON ({exc.msg})") from None
        if not isinstance(rec, dict):
            raise DatasetError(f"{path}:{n}: expected a JSON object per line")
        records.append(rec)
    return records


DATASETS: Registry[type[DatasetLoader]] = Registry("dataset")

FILE_SUFFIX = "+file"  # a version read from --data-path (DatasetLoader.dataset adds it)
_SPEC = re.compile(
    r"^(?P<name>[A-Za-z0-9_\-]+)(?::(?P<split>[A-Za-z0-9_\-]+))?(?:@(?P<version>[A-Za-z0-9_.\-]+)(?:\+file)?)?$"
)


def parse_spec(spec: str) -> tuple[str, str | None, str | None]:
    """``NAME[:SPLIT][@VERSION]`` -> (name, split, version). A recorded spec's ``@VERSION+file``
    (see ``DatasetInfo.spec``) parses to VERSION: the file itself comes from ``data_path``."""
    m = _SPEC.match(spec.strip())
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
