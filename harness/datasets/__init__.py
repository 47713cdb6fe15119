"""Datasets, addressed as ``NAME[:SPLIT][@VERSION]``."""

from __future__ import annotations

import importlib

from harness.datasets.base import DATASETS, Dataset, DatasetInfo, Sample, from_file, parse_spec
from harness.errors import DatasetError

# name -> the module that registers its loader (imported only when that dataset is used)
DATASET_MODULES = {
    "fanoutqa": "harness.datasets.fanoutqa",
    "hotpotqa": "harness.datasets.hotpotqa",
    "qampari": "harness.datasets.qampari",
    "quest": "harness.datasets.quest",
    "topiocqa": "harness.datasets.topiocqa",
}


def load_dataset(spec: str, data_path: str | None = None) -> Dataset:
    """``spec`` may be a recorded one (``DatasetInfo.spec()``): ``fanoutqa:dev@nov23+file`` with
    the run's ``data_path`` loads the same dataset again."""
    name, split, version = parse_spec(spec)
    if from_file(spec) and not data_path:
        raise DatasetError(f"dataset {spec.strip()} was read from a file: give that file (--data-path)")
    if name in DATASET_MODULES:
        importlib.import_module(DATASET_MODULES[name])
    if name not in DATASETS:
        raise DatasetError(f"unknown dataset {name!r} (known: {', '.join(DATASET_MODULES)})")
    loader = DATASETS.get(name)
    split = split or loader.default_split
    version = version or loader.default_version
    if split not in loader.splits:
        raise DatasetError(f"unknown split {split!r} for {name} (known: {', '.join(loader.splits)})")
    if version not in loader.versions:
        raise DatasetError(f"unknown version {version!r} for {name} (known: {', '.join(loader.versions)})")
    return loader().load(split, version, data_path)


__all__ = ["Dataset", "DatasetInfo", "Sample", "load_dataset", "parse_spec"]
