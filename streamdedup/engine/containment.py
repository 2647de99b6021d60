"""Containment (`--metric containment`, on `text` or `set`), a `SimilarityFamily`
(engine/similarity.py): a new item is a duplicate of an earlier one it lies inside,
|A n B| / |A| >= T -- an excerpt of an earlier page, a digest's part, a customer's
basket inside another's.

What an item becomes is the Jaccard family's of its kind (engine/jaccard_text.py,
engine/jaccard_sets.py): the same canonical bytes, stored form and element hashes,
under the public key for the signature and the secret key for the exact set.  The
signature and band keys are MinHash's, banded per size class
(sketch/containment.py); an exact check measures the containment of the new item's
secretly keyed set in each candidate's, all of an item's candidates in one numpy
pass (`containments`).  A kept set is its sorted distinct hashes, little-endian."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from streamdedup.config import IndexParams
from streamdedup.engine.jaccard_sets import JaccardSets
from streamdedup.engine.jaccard_text import JaccardText, distinct
from streamdedup.engine.rows_family import RowsChecks
from streamdedup.engine.similarity import ExactPart, Kept
from streamdedup.sketch.containment import MinHashContainment


def containments(mine: bytes, theirs: list[bytes]) -> list[float]:
    """|A n B| / |A| of one kept set A against each of several B: every B's values
    looked up in the sorted A at once by binary search (each B is distinct, so the
    hits of a B count the values the two share), summed per B."""
    a = np.frombuffer(mine, dtype="<u8")
    if not len(a):
        return [0.0] * len(theirs)
    sizes = np.fromiter((len(t) // 8 for t in theirs), dtype=np.int64, count=len(theirs))
    shared = np.zeros(len(theirs), dtype=np.int64)
    full = np.flatnonzero(sizes)  # (an empty B shares nothing; `reduceat` needs none)
    if len(full):
        values = np.frombuffer(b"".join(theirs), dtype="<u8")
        at = np.minimum(np.searchsorted(a, values), len(a) - 1)  # (A is sorted)
        hits = (a[at] == values).astype(np.int64)
        starts = (np.cumsum(sizes) - sizes)[full]
        shared[full] = np.add.reduceat(hits, starts)
    out: list[float] = (shared / len(a)).tolist()
    return out


class Containment(RowsChecks):
    """The containment half shared by texts and sets: MinHash per size class, and
    exact checks of sorted distinct hashes (`containments`)."""

    measure = staticmethod(containments)  # (a class attribute: pickled families keep it)
    params: IndexParams
    exact_stored: Callable[[bytes], npt.NDArray[np.uint64]]  # (the item kind's)

    def _containment_lsh(self) -> MinHashContainment:
        p = self.params
        return MinHashContainment(p.num_perm, p.seed, p.threshold)

    def kept_own(self, part: ExactPart, j: int) -> Kept:
        return bytes(distinct(part.of(j)).astype("<u8").tobytes())

    def kept_own_many(self, part: ExactPart, picks: list[int]) -> list[Kept]:
        return [self.kept_own(part, j) for j in picks]

    def kept_stored(self, stored: bytes) -> Kept:
        return bytes(self.exact_stored(stored).astype("<u8").tobytes())


class ContainmentText(Containment, JaccardText):  # type: ignore[misc]
    """`SimilarityFamily`: texts, shingled by `params.shingle`; containment."""

    def __init__(self, params: IndexParams) -> None:
        super().__init__(params)
        self.lsh = self._containment_lsh()  # type: ignore[assignment]


class ContainmentSets(Containment, JaccardSets):  # type: ignore[misc]
    """`SimilarityFamily`: sets of strings or integers; containment."""

    def __init__(self, params: IndexParams) -> None:
        super().__init__(params)
        self.lsh = self._containment_lsh()  # type: ignore[assignment]


__all__ = ["ContainmentSets", "ContainmentText", "containments"]
