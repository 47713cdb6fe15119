"""Datasets, addressed as ``NAME[:SPLIT][@VERSION]``."""

from __future__ import annotations

import importlib

from harness.datasets.base import DATASETS, Dataset, DatasetInfo, Sample, parse_spec
from harness.errors import DatasetError

_DATASET_MODULES = ("harness.datasets.fanoutqa", "harness.datasets.hotpotqa")


def load_dataset(spec: str, data_path: str | None = None) -> Dataset:
    for module in _DATASET_MODULES:
        importlib.import_module(module)
    name, split, version = parse_spec(spec)
    if name not in DATASETS:
        raise DatasetError(f"unknown dataset {name!r} (known: {', '.join(DATASETS.names())})")
    loader = DATASETS.get(name)
    split = split or loader.default_split
    version = version or loader.default_version
    if split not in loader.splits:
        raise DatasetError(f"unknown split {split!r} for {name} (known: {', '.join(loader.splits)})")
    if version not in loader.versions:
        raise DatasetError(f"unknown version {version!r} for {name} (known: {', '.join(loader.versions)})")
    return loader().load(split, version, data_path)


__all__ = ["Dataset", "DatasetInfo", "Sample", "load_dataset", "parse_spec"]
