"""Jaccard similarity by MinHash: the first `LshFamily` (sketch/family.py).

An item's representation is its set of 64-bit element hashes (a text's shingle
hashes; the next issue's `set` items their elements' hashes), given as a ragged
batch (`ShingleBatch`).  The signature is one-permutation MinHash with optimal
densification, kept to 16 bits a position (`signature.py`), the band keys a keyed
hash of each band's rows, the estimate the corrected share of agreeing positions,
and the exact measure the Jaccard of the sorted distinct hashes (`jaccard.py`).
This module only names those pieces as one family; the compiled kernels behind
them are unchanged, so a batch costs what it cost before the seam."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from streamdedup.sketch.family import Bar, Measure
from streamdedup.sketch.hashing import U64
from streamdedup.sketch.jaccard import exact_jaccard, sorted_distinct
from streamdedup.sketch.shingle import ShingleBatch
from streamdedup.sketch.signature import (
    Signatures,
    Sketches,
    band_keys,
    estimate_jaccard,
    estimate_of_agreeing,
    estimate_rows,
    sketch,
)

Elements = npt.NDArray[np.uint64]  # one item's sorted distinct 64-bit element hashes


def margin(threshold: float, num_perm: int) -> float:
    """How far below the bar an estimate may be and still be checked exactly.
    Estimates have sd sqrt(J(1-J)/K); a candidate four of them below the bar
    (P ~ 3e-5 for a true match) is not worth an exact check.  One definition for
    the engine and the backfill, which must choose the same candidates."""
    return 4.0 * math.sqrt(threshold * (1.0 - threshold) / num_perm) + 0.01


@dataclass(frozen=True)
class MinHashJaccard:
    """`LshFamily[ShingleBatch, Elements]`: MinHash signatures of `num_perm`
    positions banded `bands` x `rows`, all seeded by `seed`; Jaccard, similarity
    >= threshold."""

    num_perm: int
    bands: int
    rows: int
    seed: int
    name: str = "jaccard"
    measure: Measure = "similarity"

    def sketch(self, batch: ShingleBatch) -> Sketches:
        return sketch(batch, self.num_perm, self.seed, self.bands, self.rows)

    def band_keys(self, sigs: Signatures) -> U64:
        return band_keys(sigs, self.bands, self.rows, self.seed)

    def estimate(self, sig: Signatures, others: Signatures) -> npt.NDArray[np.float64]:
        return estimate_jaccard(sig, others)

    def estimate_table(self) -> npt.NDArray[np.float64]:
        return estimate_of_agreeing(np.arange(self.num_perm + 1, dtype=np.int64), self.num_perm)

    def estimate_rows(self, sigs: Signatures, others: Signatures) -> npt.NDArray[np.float64]:
        return estimate_rows(sigs, others)

    def margin(self, threshold: float) -> float:
        return margin(threshold, self.num_perm)

    def exact(self, a: Elements, b: Elements) -> float:
        return exact_jaccard(a, b)

    def bar(self, threshold: float) -> Bar:
        return Bar(threshold, self.measure)

    @staticmethod
    def elements(hashes: U64) -> Elements:
        """The exact representation of an item from its element hashes (any order,
        repeats allowed): sorted and distinct."""
        return sorted_distinct(hashes)
