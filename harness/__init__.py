"""Evaluation harness for many-answer, many-document QA over Wikipedia."""

from harness import _namespace
from harness._version import __version__

_namespace.install()  # harness.agents, .tools, .prompts, .wiki_snapshot (and their old names, deprecated)

__all__ = ["__version__", "read_results", "run", "runs_df", "samples_df", "score"]


def run(config=None, /, **options):
    """Run (or resume) an evaluation from Python with the CLI's options as keywords; returns the
    run record, as ``read_results`` reads it (``.counts.finished``, ``.scores.metric_values()``, ...).
    ``harness.run(model="local/smollm2", dataset="qampari:sample", limit=3)``. See ``harness.api.run``."""
    from harness.api import run as _run

    return _run(config, **options)


def score(run_dir=None, /, **options):
    """Score saved generations (a run directory, or ``dataset=`` and ``generations=``) without
    calling a model; returns the scores (``harness.scoring.scores.Scores``: ``.metric_values()``,
    ``.as_dict()`` for their JSON). See ``harness.api.score``."""
    from harness.api import score as _score

    return _score(run_dir, **options)


def read_results(path):
    """A run's results (its directory or its results.json) as the typed record
    (``harness.execution.record.RunResults``: ``.counts.finished``, ``.scores.metrics()``, ...);
    a file that breaks the schema raises HarnessError naming the file and the field."""
    from harness.execution.record import read_results as _read

    return _read(path)


def runs_df(*paths):
    """The runs under ``paths`` as a pandas DataFrame, one row per run (needs pandas:
    ``pip install 'manyanswer-harness[analysis]'``). See ``harness.api.runs_df``."""
    from harness.api import runs_df as _runs_df

    return _runs_df(*paths)


def samples_df(*paths):
    """The runs' samples as a pandas DataFrame, one row per question x epoch (needs pandas). See
    ``harness.api.samples_df``."""
    from harness.api import samples_df as _samples_df

    return _samples_df(*paths)
