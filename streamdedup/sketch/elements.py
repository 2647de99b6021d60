"""The elements of a `set` item hashed to 64 bits (DESIGN.md "Items and similarity
families": a set of strings or integers, compared by Jaccard).

An element arrives as its canonical bytes (inputs/items.py: a type tag and the
string's UTF-8 or the integer's decimal digits, so "1" and 1 differ); a batch is
those bytes end to end with each element's bounds.  Each is hashed by a keyed
polynomial over its bytes (the same family as a text's character shingles,
`hashing.range_poly_hashes`: one pass for the whole batch, no Python per element),
under the public key for signatures and under the index's secret key for the exact
sets, then spread over 64 bits (`finish_np`)."""

from __future__ import annotations

from functools import cached_property

import numpy as np
import numpy.typing as npt

from streamdedup.sketch.hashing import U64, PowerTable, ShingleKey, finish_np, range_poly_hashes


class ElementHasher:
    """Keyed 64-bit hashes of elements' canonical bytes (one `PowerTable` per key,
    made when first needed: not pickled)."""

    def __init__(self, key: bytes) -> None:
        self.key = key

    def __getstate__(self) -> dict[str, object]:
        return {"key": self.key}

    def __setstate__(self, state: dict[str, object]) -> None:
        self.key = state["key"]  # type: ignore[assignment]

    @cached_property
    def _table(self) -> PowerTable:
        return PowerTable(ShingleKey.of(self.key).chars)

    def hashes(self, joined: bytes, ends: npt.NDArray[np.int64]) -> U64:
        """The hash of each element of `joined`, element i being
        joined[ends[i - 1]:ends[i]] (ends[-1] = 0): non-empty, as the tag makes it."""
        if not len(ends):
            return np.zeros(0, dtype=np.uint64)
        starts = np.concatenate([np.zeros(1, dtype=np.int64), ends[:-1]])
        values = np.frombuffer(joined, dtype=np.uint8)
        return finish_np(range_poly_hashes(values, starts, ends, self._table))
