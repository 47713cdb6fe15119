"""Import a library with optional heavy packages hidden, so its probing for them costs nothing.

spaCy's thinc imports torch when it is installed (it is, for the dense retriever), and nltk (under
rouge-score's stemmer) imports scikit-learn and scipy: together seconds and hundreds of MB that a
lemmatizer and a Porter stemmer never use. While the import runs, the hidden names map to None in
``sys.modules`` (so ``import torch`` raises ImportError, which those probes handle); afterwards the
entries are removed, so later code can still import the packages. A package that is already
imported is left alone. Not for use while another thread may import the hidden packages.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

SPACY_OPTIONAL = ("torch", "tensorflow", "mxnet", "cupy", "jax")
NLTK_OPTIONAL = ("sklearn", "scipy", "numpy.distutils")


@contextmanager
def hidden(names: tuple[str, ...]) -> Iterator[None]:
    added = [name for name in names if name not in sys.modules]
    for name in added:
        sys.modules[name] = None  # type: ignore[assignment]
    try:
        yield
    finally:
        for name in added:
            if sys.modules.get(name, 0) is None:
                del sys.modules[name]
