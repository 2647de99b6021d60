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
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from streamdedup.config import IndexParams
from streamdedup.engine import rows_family
from streamdedup.engine.compressed import decompress_text
from streamdedup.engine.rows_family import NoTable
from streamdedup.engine.similarity import ExactPart, Items, Kept, KeptTable, SketchedPart
from streamdedup.models import DistanceVerdict, Document, Verdict
from streamdedup.sketch.bitsampling import BitRows, BitSampling
from streamdedup.sketch.family import Bar
from streamdedup.sketch.jaccard import Choices

TAG = b"b"  # leads a bit string's canonical bytes


@dataclass(frozen=True)
class BitItems:
    """A batch's bit strings as canonical bytes (`TAG` + N/8 bytes; b"": none)."""

    raw: list[bytes]

    def without(self, resent: set[int]) -> BitItems:
        return BitItems([(b"" if i in resent else r) for i, r in enumerate(self.raw)])


@dataclass(frozen=True)
class BitPart:
    """A sub-batch's bit strings, (n, N/8) uint8: what exact checks measure."""

    rows: BitRows

    def of(self, j: int) -> npt.NDArray[np.uint8]:
        row: npt.NDArray[np.uint8] = self.rows[j]
        return row


class HammingBits:
    """`SimilarityFamily`: N-bit strings; bit sampling, Hamming distance <= d."""

    def __init__(self, params: IndexParams) -> None:
        self.params = params
        self.width = params.bits // 8
        self.lsh = BitSampling(params.bits, params.bands, params.rows, params.seed)

    # -- preparing

    def canonical(self, docs: Sequence[Document]) -> BitItems:
        return BitItems([b"" if d.item is None else TAG + d.item for d in docs])

    def sketch(self, items: Items, part: slice, exact: bool) -> SketchedPart:
        raw = items.raw[part]
        blank = bytes(self.width + 1)
        have = np.fromiter(map(len, raw), dtype=np.int64, count=len(raw)) > 0
        joined = b"".join(r if r else blank for r in raw)
        rows = np.frombuffer(joined, dtype=np.uint8).reshape(len(raw), self.width + 1)[:, 1:]
        rows = np.ascontiguousarray(rows)
        sizes = np.where(have, self.params.bits, 0).astype(np.int64)
        return SketchedPart(sizes, self.lsh.sketch(rows), BitPart(rows) if exact else None)

    # -- verifying

    def kept_own(self, part: ExactPart, j: int) -> Kept:
        assert isinstance(part, BitPart)
        return bytes(part.rows[j])

    def kept_own_many(self, part: ExactPart, picks: list[int]) -> list[Kept]:
        assert isinstance(part, BitPart)
        rows: list[bytes] = part.rows[picks].view(f"V{self.width}").ravel().tolist()
        return rows

    def kept_stored(self, stored: bytes) -> Kept:
        return decompress_text(stored)[len(TAG) :]

    def exact_stored(self, stored: bytes) -> npt.NDArray[np.uint8]:
        return np.frombuffer(self.kept_stored(stored), dtype=np.uint8)

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
            distances, mine, sets, ranked, est, bar, margin, max_checks, start, best, best_sim
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
            distances, mines, sets, ranked, est, at, bar, margin, max_checks, state, first
        )

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


__all__ = ["HammingBits", "distances"]
