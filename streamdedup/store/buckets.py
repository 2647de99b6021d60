"""The band buckets as the layers above the store ask for them, so that none of them
reaches into the postings table: a sealed segment's newest postings of a set of
keys (`newest_postings`, what a segment answers a probe with), and the postings
rebuilt from the stored signatures (`rebuild_postings`, after a changelog restore
brought back the documents without them)."""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable

import numpy as np

from streamdedup.config import IndexParams
from streamdedup.sketch.families import lsh_of
from streamdedup.store.index import Index
from streamdedup.store.keys import docno_of
from streamdedup.store.postings import U64
from streamdedup.store.tables import Tables

REBUILD_CHUNK = 20_000  # signatures per write transaction of `rebuild_postings`


def newest_postings(t: Tables, keys: U64, cap: int) -> dict[int, list[int]]:
    """Band key -> its newest `cap` live docnos, newest first, for the keys (sorted,
    unique) that have any."""
    return t.postings.lookup(keys, cap)


def rebuild_postings(
    index: Index, params: IndexParams, progress: Callable[[], None] | None = None
) -> None:
    """Fill the band buckets from the stored signatures, in document order (so each
    posting list is in arrival order, as the engine builds it), a chunk at a time
    (`progress` is called after each)."""
    after: bytes | None = b""
    while after is not None:
        after = index.write(functools.partial(_posting_chunk, after=after, params=params))
        if progress is not None:
            progress()


def _posting_chunk(
    t: Tables, after: bytes, params: IndexParams, chunk: int = REBUILD_CHUNK
) -> bytes | None:
    docnos: list[bytes] = []
    rows: list[bytes] = []
    for dk, sig in itertools.islice(t.items("sigs", after=after), chunk):
        docnos.append(dk)
        rows.append(sig)
    if not docnos:
        return None
    sigs = np.frombuffer(b"".join(rows), dtype="<u2").reshape(len(rows), -1)
    keys = lsh_of(params).band_keys(sigs).reshape(-1)  # (as the engine banded them)
    numbers = np.array([docno_of(dk) for dk in docnos], dtype=np.uint64)
    t.postings.add(keys.astype(np.uint64), np.repeat(numbers, params.bands))
    return docnos[-1]
