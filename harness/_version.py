"""The harness's version, apart from the package's ``__init__`` so that modules recording it import
only this (the package itself imports the API, which imports them)."""

__version__ = "0.1.0"
