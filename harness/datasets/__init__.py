"""Datasets, addressed as ``NAME[:SPLIT][@VERSION]``; NAME is a loader name (``harness list
datasets``: built in, or an installed package's ``harness.datasets`` entry point) or a reference,
``FILE.py:Loader`` / ``package.module:Loader``."""

from __future__ import annotations

from harness.datasets.base import DATASETS, Dataset, DatasetInfo, Sample, check_questions, from_file, parse_spec
from harness.errors import DatasetError, HarnessError


def load_dataset(spec: str, data_path: str | None = None) -> Dataset:
    """``spec`` may be a recorded one (``DatasetInfo.spec()``): ``fanoutqa:dev@nov23+file`` with
    the run's ``data_path`` loads the same dataset again."""
    name, split, version = parse_spec(spec)
    if from_file(spec) and not data_path:
        raise DatasetError(f"dataset {spec.strip()} was read from a file: give that file (--data-path)")
    try:
        entry = DATASETS.resolve(name)
    except DatasetError:
        raise
    except HarnessError as exc:
        raise DatasetError(str(exc)) from None
    loader = entry.obj
    if not getattr(loader, "name", None):
        loader.name = entry.name
    split = split or loader.default_split
    version = version or loader.default_version
    if split not in loader.splits:
        raise DatasetError(f"unknown split {split!r} for {name} (known: {', '.join(loader.splits)})")
    if version not in loader.versions:
        raise DatasetError(f"unknown version {version!r} for {name} (known: {', '.join(loader.versions)})")
    dataset = loader().load(split, version, data_path)
    check_questions(dataset)
    if entry.source in ("file", "module"):
        dataset.info.ref = entry.ref  # the spec names the reference, so re-scoring finds the loader
    dataset.info.plugin = entry.record()
    return dataset


__all__ = ["Dataset", "DatasetInfo", "Sample", "load_dataset", "parse_spec"]
