"""Hamming distance on bit strings, a `SimilarityFamily` (engine/similarity.py).

An item is a string of N bits (`--item bits --bits N`: a SimHash, a perceptual image
hash), decoded to its N/8 bytes (inputs/decode.py).  Its canonical bytes are those
bytes behind a one-byte tag, `b"b"`: their SHA-256 is its content identity, and they
are what is stored for exact checks -- the tag keeps a stored item from ever
starting like a zstd frame (engine/compressed.py tells the two apart by their first
bytes, which a bit string may otherwise have).  Signature and band keys are bit
sampling's (sketch/bitsampling.py); an exact check is the popcount of the XOR, made
for all of an item's candidates at once, in rank order, by the rule every family
keeps (`verify.choose_exact`).

A verdict of this family carries the exact `distance` in bits and the `similarity`
1 - d/N it stands for (`reported`); the engine measures and stores the distance."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from streamdedup.config import IndexParams
from streamdedup.engine.rows_family import RowPart, RowsChecks, TaggedItems, fixed_rows, untagged
from streamdedup.engine.similarity import ExactPart, Items, Kept, SketchedPart
from streamdedup.models import DistanceVerdict, Document, Verdict
from streamdedup.sketch.bitsampling import BitSampling

TAG = b"b"  # leads a bit string's canonical bytes


def distances(mine: bytes, theirs: list[bytes]) -> list[float]:
    """The Hamming distances of one packed string to several."""
    rows = np.frombuffer(b"".join(theirs), dtype=np.uint8).reshape(len(theirs), len(mine))
    out: list[float] = (
        np.bitwise_count(rows ^ np.frombuffer(mine, dtype=np.uint8))
        .sum(axis=1, dtype=np.int64)
        .astype(np.float64)
        .tolist()
    )
    return out


class HammingBits(RowsChecks):
    """`SimilarityFamily`: N-bit strings; bit sampling, Hamming distance <= d."""

    measure = staticmethod(distances)

    def __init__(self, params: IndexParams) -> None:
        self.params = params
        self.width = params.bits // 8
        self.lsh = BitSampling(params.bits, params.bands, params.rows, params.seed)

    # -- preparing

    def canonical(self, docs: Sequence[Document]) -> TaggedItems:
        return TaggedItems.of(docs, TAG)

    def sketch(self, items: Items, part: slice, exact: bool) -> SketchedPart:
        rows, have = fixed_rows(items.raw[part], self.width)
        sizes = np.where(have, self.params.bits, 0).astype(np.int64)
        return SketchedPart(sizes, self.lsh.sketch(rows), RowPart(rows) if exact else None)

    # -- verifying

    def kept_own(self, part: ExactPart, j: int) -> Kept:
        assert isinstance(part, RowPart)
        return bytes(part.rows[j])

    def kept_own_many(self, part: ExactPart, picks: list[int]) -> list[Kept]:
        assert isinstance(part, RowPart)
        rows: list[bytes] = part.rows[picks].view(f"V{self.width}").ravel().tolist()
        return rows

    def kept_stored(self, stored: bytes) -> Kept:
        return untagged(stored)

    def exact_stored(self, stored: bytes) -> npt.NDArray[np.uint8]:
        return np.frombuffer(self.kept_stored(stored), dtype=np.uint8)

    # -- reporting

    def reported(self, verdicts: list[Verdict]) -> list[Verdict]:
        return [self.report(v) for v in verdicts]

    def report(self, v: Verdict) -> DistanceVerdict:
        """A verdict as this family reports it: the engine's measure (a distance in
        bits; an exact copy's 1.0 marks none) as `distance`, and `similarity`
        1 - d/N."""
        if v.verdict != "duplicate":
            distance, similarity = None, None
        elif v.exact:
            distance, similarity = 0.0, 1.0
        else:
            distance = float(v.similarity or 0.0)
            similarity = 1.0 - distance / self.params.bits
        return DistanceVerdict(
            v.id, v.verdict, v.duplicate_of, v.cluster, similarity, v.exact, v.reason, distance
        )


__all__ = ["HammingBits", "distances"]
