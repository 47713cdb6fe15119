"""The harness's version, the one place it is written: pyproject's ``version`` is read from here
(``[tool.setuptools.dynamic]``), and so are the CLI's ``--version``, each results.json's
``harness.version`` and snapshot metadata. Apart from the package's ``__init__`` so that modules
recording it import only this (the package itself imports the API, which imports them)."""

__version__ = "0.1.0"
