"""Cosine and Euclidean distance on vectors, a `SimilarityFamily` each
(engine/similarity.py), one class since only the measure and the report differ.

An item is a vector of D numbers (`--item vector --dim D`: an embedding, a feature
vector), decoded to D little-endian float32 values (inputs/decode.py): what faiss
and every embedding store keep, and what is measured -- a reported cosine or
distance is the one computed in double precision from those float32 values.  Its
canonical bytes are those 4 D bytes behind a one-byte tag, `b"v"`: their SHA-256 is
its content identity (the same vector twice is an exact copy), and they are what is
stored for exact checks; the tag keeps a stored item from ever starting like a zstd
frame (engine/compressed.py tells the two apart by their first bytes).  Signature
and band keys are the projections' (sketch/projections.py); an exact check measures
all of an item's candidates at once (engine/rows_family.py).

A cosine verdict carries the cosine as its `similarity`; a Euclidean one the
distance as its `distance` and no similarity (DESIGN.md "Items and similarity
families")."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from streamdedup.config import IndexParams
from streamdedup.engine.rows_family import RowPart, RowsChecks, TaggedItems, fixed_rows, untagged
from streamdedup.engine.similarity import ExactPart, Items, Kept, SketchedPart
from streamdedup.models import DistanceVerdict, Document, Verdict
from streamdedup.sketch.families import lsh_of
from streamdedup.sketch.family import LshFamily
from streamdedup.sketch.projections import cosine_rows, euclidean_rows

TAG = b"v"  # leads a vector's canonical bytes


def cosines(mine: bytes, theirs: list[bytes]) -> list[float]:
    """The cosines of one float32 vector to several."""
    x = np.frombuffer(mine, dtype="<f4")
    rows = np.frombuffer(b"".join(theirs), dtype="<f4").reshape(len(theirs), len(x))
    out: list[float] = cosine_rows(x, rows).tolist()
    return out


def distances(mine: bytes, theirs: list[bytes]) -> list[float]:
    """The L2 distances of one float32 vector to several."""
    x = np.frombuffer(mine, dtype="<f4")
    rows = np.frombuffer(b"".join(theirs), dtype="<f4").reshape(len(theirs), len(x))
    out: list[float] = euclidean_rows(x, rows).tolist()
    return out


class VectorFamily(RowsChecks):
    """`SimilarityFamily`: D-dimensional float32 vectors; random hyperplanes and the
    cosine (`metric` cosine), or p-stable projections and the L2 distance
    (`metric` euclidean)."""

    def __init__(self, params: IndexParams) -> None:
        self.params = params
        self.dim = params.dim
        self.lsh: LshFamily[Any, Any] = lsh_of(params)
        self.measure = cosines if params.metric == "cosine" else distances

    # -- preparing

    def canonical(self, docs: Sequence[Document]) -> TaggedItems:
        return TaggedItems.of(docs, TAG)

    def sketch(self, items: Items, part: slice, exact: bool) -> SketchedPart:
        packed, have = fixed_rows(items.raw[part], 4 * self.dim)
        rows = packed.view("<f4")
        sizes = np.where(have, self.dim, 0).astype(np.int64)
        return SketchedPart(sizes, self.lsh.sketch(rows), RowPart(rows) if exact else None)

    # -- verifying

    def kept_own(self, part: ExactPart, j: int) -> Kept:
        assert isinstance(part, RowPart)
        return bytes(part.rows[j].data)

    def kept_own_many(self, part: ExactPart, picks: list[int]) -> list[Kept]:
        assert isinstance(part, RowPart)
        rows: list[bytes] = part.rows[picks].view(f"V{4 * self.dim}").ravel().tolist()
        return rows

    def kept_stored(self, stored: bytes) -> Kept:
        return untagged(stored)

    def exact_stored(self, stored: bytes) -> npt.NDArray[np.float32]:
        return np.frombuffer(self.kept_stored(stored), dtype="<f4")

    # -- reporting

    def reported(self, verdicts: list[Verdict]) -> list[Verdict]:
        if self.params.metric == "cosine":
            return verdicts  # (the engine's measure is the cosine: a similarity)
        return [self.report(v) for v in verdicts]

    def report(self, v: Verdict) -> DistanceVerdict:
        """A Euclidean verdict: the engine's measure (an exact copy's 1.0 marks none)
        as `distance`, no similarity."""
        if v.verdict != "duplicate":
            distance = None
        elif v.exact:
            distance = 0.0
        else:
            distance = float(v.similarity or 0.0)
        return DistanceVerdict(
            v.id, v.verdict, v.duplicate_of, v.cluster, None, v.exact, v.reason, distance
        )


__all__ = ["VectorFamily", "cosines", "distances"]
