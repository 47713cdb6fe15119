"""The harness's version, the one place it is written: pyproject's ``version`` is read from here
(``[tool.setuptools.dynamic]``), and so are the CLI's ``--version``, each results.json's
``harness.version`` and snapshot metadata. Apart from the package's ``__init__`` so that modules
recording it import only this (the package itself imports the API, which imports them)."""

__version__ = "0.1.0"

# The distribution's name on PyPI (pyproject's ``name``; the import package and the command are
# ``harness``, a name another PyPI project holds): every install hint names it.
DISTRIBUTION = "manyanswer-harness"


def pip_install(extra: str) -> str:
    """The command that installs an optional extra, as every message says it."""
    return f"pip install '{DISTRIBUTION}[{extra}]'"
