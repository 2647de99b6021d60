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
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from streamdedup.config import IndexParams
from streamdedup.engine import rows_family
from streamdedup.engine.compressed import decompress_text
from streamdedup.engine.rows_family import NoTable
from streamdedup.engine.similarity import ExactPart, Items, Kept, KeptTable, SketchedPart
from streamdedup.models import DistanceVerdict, Document, Verdict
from streamdedup.sketch.families import lsh_of
from streamdedup.sketch.family import Bar, LshFamily
from streamdedup.sketch.jaccard import Choices
from streamdedup.sketch.projections import VectorRows, cosine_rows, euclidean_rows

TAG = b"v"  # leads a vector's canonical bytes


@dataclass(frozen=True)
class VectorItems:
    """A batch's vectors as canonical bytes (`TAG` + 4 D bytes; b"": none)."""

    raw: list[bytes]

    def without(self, resent: set[int]) -> VectorItems:
        return VectorItems([(b"" if i in resent else r) for i, r in enumerate(self.raw)])


@dataclass(frozen=True)
class VectorPart:
    """A sub-batch's vectors, (n, D) float32: what exact checks measure."""

    rows: VectorRows

    def of(self, j: int) -> npt.NDArray[np.float32]:
        row: npt.NDArray[np.float32] = self.rows[j]
        return row


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


class VectorFamily:
    """`SimilarityFamily`: D-dimensional float32 vectors; random hyperplanes and the
    cosine (`metric` cosine), or p-stable projections and the L2 distance
    (`metric` euclidean)."""

    def __init__(self, params: IndexParams) -> None:
        self.params = params
        self.dim = params.dim
        self.lsh: LshFamily[Any, Any] = lsh_of(params)
        self.measure = cosines if params.metric == "cosine" else distances

    # -- preparing

    def canonical(self, docs: Sequence[Document]) -> VectorItems:
        return VectorItems([b"" if d.item is None else TAG + d.item for d in docs])

    def sketch(self, items: Items, part: slice, exact: bool) -> SketchedPart:
        raw = items.raw[part]
        width = 4 * self.dim + len(TAG)
        blank = bytes(width)
        have = np.fromiter(map(len, raw), dtype=np.int64, count=len(raw)) > 0
        joined = b"".join(r if r else blank for r in raw)
        packed = np.frombuffer(joined, dtype=np.uint8).reshape(len(raw), width)[:, len(TAG) :]
        rows = np.ascontiguousarray(packed).view("<f4").reshape(len(raw), self.dim)
        sizes = np.where(have, self.dim, 0).astype(np.int64)
        return SketchedPart(sizes, self.lsh.sketch(rows), VectorPart(rows) if exact else None)

    # -- verifying

    def kept_own(self, part: ExactPart, j: int) -> Kept:
        assert isinstance(part, VectorPart)
        return bytes(part.rows[j].data)

    def kept_own_many(self, part: ExactPart, picks: list[int]) -> list[Kept]:
        assert isinstance(part, VectorPart)
        rows: list[bytes] = part.rows[picks].view(f"V{4 * self.dim}").ravel().tolist()
        return rows

    def kept_stored(self, stored: bytes) -> Kept:
        return decompress_text(stored)[len(TAG) :]

    def exact_stored(self, stored: bytes) -> npt.NDArray[np.float32]:
        return np.frombuffer(self.kept_stored(stored), dtype="<f4")

    def kept_size(self, kept: Kept) -> int:
        return max(1, len(kept) // 8)

    def table(self) -> NoTable:
        return NoTable()

    def choose(
        self,
        mine: Kept,
        sets: tuple[dict[int, Kept], ...],
        ranked: list[int],
        est: npt.NDArray[np.float64],
        bar: Bar,
        margin: float,
        max_checks: int,
        start: int,
        best: int,
        best_sim: float,
        table: KeptTable | None,
    ) -> tuple[int, float, int, bool]:
        return rows_family.choose_ranked(
            self.measure, mine, sets, ranked, est, bar, margin, max_checks, start, best, best_sim
        )

    def choose_all(
        self,
        mines: list[Kept],
        sets: tuple[dict[int, Kept], ...],
        ranked: npt.NDArray[np.int64],
        est: npt.NDArray[np.float64],
        at: npt.NDArray[np.int64],
        bar: Bar,
        margin: float,
        max_checks: int,
        state: Choices,
        first: int,
        table: KeptTable | None,
    ) -> int:
        return rows_family.choose_all(
            self.measure, mines, sets, ranked, est, at, bar, margin, max_checks, state, first
        )

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
