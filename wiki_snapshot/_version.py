"""The installed harness distribution's version, recorded in snapshot and index metadata.

Read from the package metadata rather than ``harness.__version__``: this library imports
nothing from ``harness``."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:
    HARNESS_VERSION = version("harness")  # the distribution name in pyproject.toml
except PackageNotFoundError:  # running from a source tree that was never installed
    HARNESS_VERSION = "0+unknown"
