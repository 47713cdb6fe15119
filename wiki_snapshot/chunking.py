"""Split a page into chunks of at most N characters, exactly as FanOutQA's baseline retriever does.

Same output as ``fanoutqa.retrieval.chunk_text`` (fanoutqa 1.1.1; tests/test_ranking.py compares them
on real pages): split on the first separator of ``chunk_on``, give every piece its separator back,
greedily merge neighbours while they fit, recurse with the next separator into pieces that are
still too long, and cut plainly every ``max_chunk_size`` characters when no separator is left.
The separator that ends the last piece of a split is dropped again, so joining a page's chunks
gives the page back except where a trailing separator was popped.

The separator given to the last piece of a split is not in the text, and the reference does not
always take all of it off again: when that piece is split further, the separator can end up in two
chunks, and only the last loses it (a page ending in a paragraph of ``max_chunk_size - 1``
characters gives a chunk ending in a "\n" the page does not have). ``chunk_text_sources`` makes the
same chunks and says where each character came from, so such a chunk can still be placed in its page.
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


def chunk_text_sources(
    text: str, max_chunk_size: int = 1024, chunk_on: tuple[str, ...] = CHUNK_ON
) -> list[tuple[str, list[int]]]:
    """``chunk_text``'s chunks, each with the offset in ``text`` of every character (-1 for a
    separator the chunker added that the text does not have there)."""
    return _chunk_sources(text, list(range(len(text))), max_chunk_size, tuple(chunk_on), 0)


def _chunk_sources(text: str, src: list[int], size: int, chunk_on: tuple[str, ...], level: int) -> list:
    # _chunk step for step, carrying a list of source offsets beside each string
    if len(text) <= size:
        return [(text, src)]
    if level >= len(chunk_on):
        if size <= 0:
            _no_progress(text)
        return [(text[i : i + size], src[i : i + size]) for i in range(0, len(text), size)]

    sep = chunk_on[level]
    n = len(sep)
    parts = text.split(sep)
    chunks: list[tuple[str, list[int]]] = []
    at = 0
    for k, part in enumerate(parts):
        end = at + len(part)
        # a separator that followed this part in the text keeps its offsets; the last part's is added
        piece = (part + sep, src[at:end] + (src[end : end + n] if k < len(parts) - 1 else [-1] * n))
        at = end + n
        if len(piece[0]) > size:
            chunks.extend(_chunk_sources(piece[0], piece[1], size, chunk_on, level + 1))
        elif chunks and len(piece[0]) + len(chunks[-1][0]) <= size:
            chunks[-1] = (chunks[-1][0] + piece[0], chunks[-1][1] + piece[1])
        else:
            chunks.append(piece)

    if chunks[-1][0] == sep:
        chunks.pop()
    chunks[-1] = (chunks[-1][0][:-n], chunks[-1][1][:-n])
    return chunks


def _no_progress(text: str) -> list[str]:
    # max_chunk_size <= 0 with a non-empty text: the reference recurses without end (RecursionError)
    raise ValueError(f"max_chunk_size must be positive to chunk a non-empty text (got {len(text)} characters)")
