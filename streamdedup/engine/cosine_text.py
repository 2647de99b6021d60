"""Cosine on texts (`--metric cosine --item text`), a `SimilarityFamily`
(engine/similarity.py): a text is the vector of its shingles' counts -- the seeds'
"weighted shingles", where a shingle said twice weighs twice -- signed by SimHash
(sketch/simhash.py) and checked exactly by the cosine of the two count vectors.

What an item becomes is the Jaccard text family's (engine/jaccard_text.py): the same
canonical bytes (the normalised text), the same stored form, the same shingles under
the public key (signature) and the secret key (exact vectors).  The exact
representation of a text is its count vector under the secret key: its distinct
shingle hashes, sorted, and how often each occurs, packed in one bytes object (8 n
bytes of hashes, then 4 n of counts).  The cosine is computed in double precision
from those integer counts, so it is exact up to the keyed hashes' collisions (one in
2^61 a pair of distinct shingles), as the Jaccard of texts is."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt

from streamdedup.config import IndexParams
from streamdedup.engine.jaccard_text import JaccardText, TextItems, stored_hashes
from streamdedup.engine.rows_family import RowsChecks
from streamdedup.engine.similarity import ExactPart, Items, Kept, SketchedPart
from streamdedup.sketch.shingle import ShingleBatch
from streamdedup.sketch.simhash import SimHash

CountVector = tuple[npt.NDArray[np.uint64], npt.NDArray[np.int64]]  # distinct hashes, counts


def count_vector(hashes: npt.NDArray[np.uint64]) -> CountVector:
    """A text's shingle hashes (in text order, repeats included) as its count vector."""
    distinct, counts = np.unique(hashes, return_counts=True)
    return distinct, counts.astype(np.int64)


def packed(vector: CountVector) -> bytes:
    hashes, counts = vector
    return hashes.astype("<u8").tobytes() + counts.astype("<u4").tobytes()


def unpacked(kept: bytes) -> CountVector:
    n = len(kept) // 12
    hashes = np.frombuffer(kept, dtype="<u8", count=n)
    counts = np.frombuffer(kept, dtype="<u4", offset=8 * n).astype(np.int64)
    return hashes, counts


def cosine_of(a: CountVector, b: CountVector) -> float:
    """The cosine of two count vectors, from their integer counts (0 if one is empty)."""
    _, i, j = np.intersect1d(a[0], b[0], assume_unique=True, return_indices=True)
    dot = int((a[1][i] * b[1][j]).sum())
    norms = math.sqrt(float(int((a[1] * a[1]).sum())) * float(int((b[1] * b[1]).sum())))
    return dot / norms if norms else 0.0


def cosines(mine: bytes, theirs: list[bytes]) -> list[float]:
    """The cosines of one packed count vector to each of several."""
    a = unpacked(mine)
    return [cosine_of(a, unpacked(t)) for t in theirs]


class CosineText(RowsChecks, JaccardText):  # type: ignore[misc]
    """`SimilarityFamily`: texts as shingle-count vectors; SimHash, cosine."""

    measure = staticmethod(cosines)  # (a class attribute: pickled families keep it)

    def __init__(self, params: IndexParams) -> None:
        super().__init__(params)
        self.lsh = SimHash(0, params.num_perm, params.bands, params.rows, params.seed)  # type: ignore[assignment]

    def sketch(self, items: Items, part: slice, exact: bool) -> SketchedPart:
        assert isinstance(items, TextItems)
        batch = self.shingler.batch(
            None if items.norm is None else items.norm[part], items.raw[part], exact=exact
        )
        sketches = self.lsh.sketch(batch)
        return SketchedPart(batch.counts, sketches, batch.exact_batch() if exact else None)

    def kept_own(self, part: ExactPart, j: int) -> Kept:
        return packed(count_vector(part.of(j)))

    def kept_own_many(self, part: ExactPart, picks: list[int]) -> list[Kept]:
        assert isinstance(part, ShingleBatch)
        return [packed(count_vector(part.of(j))) for j in picks]

    def kept_stored(self, stored: bytes) -> Kept:
        return packed(self.exact_stored(stored))

    def exact_stored(self, stored: bytes) -> Any:
        return count_vector(stored_hashes(self.shingler, stored))


__all__ = ["CosineText", "cosine_of", "count_vector"]
