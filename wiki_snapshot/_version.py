"""The harness's version, recorded in snapshot and index metadata: ``harness/_version.py``, the one
place it is written (pyproject reads it too), and the one module of the core this library imports."""

from __future__ import annotations

from harness._version import __version__ as HARNESS_VERSION

__all__ = ["HARNESS_VERSION"]
