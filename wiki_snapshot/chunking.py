"""Split a page into chunks of at most N characters, exactly as FanOutQA's baseline retriever does.

Same output as ``fanoutqa.retrieval.chunk_text`` (fanoutqa 1.1.1; tests/test_ranking.py compares them
on real pages): split on the first separator of ``chunk_on``, give every piece its separator back,
greedily merge neighbours while they fit, recurse with the next separator into pieces that are
still too long, and cut plainly every ``max_chunk_size`` characters when no separator is left.
The separator that ends the last piece of a split is dropped again, so joining a page's chunks
gives the page back except where a trailing separator was popped.
"""

from __future__ import annotations

CHUNK_ON = ("\n\n", "\n", ". ", ", ", " ")


def chunk_text(text: str, max_chunk_size: int = 1024, chunk_on: tuple[str, ...] = CHUNK_ON) -> list[str]:
    """Chunks of ``text``, each at most ``max_chunk_size`` characters, preferring earlier separators."""
    return _chunk(text, max_chunk_size, tuple(chunk_on), 0)


def _chunk(text: str, size: int, chunk_on: tuple[str, ...], level: int) -> list[str]:
    if len(text) <= size:
        return [text]
    if level >= len(chunk_on):
        # no separator left: fixed-width slices (the reference recurses once per slice; same result)
        return [text[i : i + size] for i in range(0, len(text), size)] if size > 0 else _no_progress(text)

    sep = chunk_on[level]
    chunks: list[str] = []
    for piece in text.split(sep):
        piece += sep
        if len(piece) > size:
            chunks.extend(_chunk(piece, size, chunk_on, level + 1))
        elif chunks and len(piece) + len(chunks[-1]) <= size:
            chunks[-1] += piece
        else:
            chunks.append(piece)

    if chunks[-1] == sep:  # the text ended with the separator: drop the empty last piece
        chunks.pop()
    chunks[-1] = chunks[-1][: -len(sep)]  # the last piece had no separator of its own
    return chunks


def _no_progress(text: str) -> list[str]:
    # max_chunk_size <= 0 with a non-empty text: the reference recurses without end (RecursionError)
    raise ValueError(f"max_chunk_size must be positive to chunk a non-empty text (got {len(text)} characters)")
