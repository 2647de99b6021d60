"""The maths half of a similarity family: how an item's representation becomes a
signature and band keys, how a signature estimates the measure, how the measure is
computed exactly, and the threshold rule that decides a candidate (`Bar`).

Why a protocol here and not one function per family in the engine: the seeds
(002) describe one machinery -- a signature whose positions agree with a
probability that rises with similarity, banded b x r into buckets, candidates
verified -- for several notions of similarity (Jaccard by MinHash, cosine by
random hyperplanes, Hamming by bit sampling, Euclidean by p-stable projections).
What differs is only what is below: the engine, the index and the band search
stay one.  Everything here works on whole batches of arrays (a family's
`sketch` takes a batch, never one document), so a family adds no Python per
document to the hot path.  Jaccard over sets of 64-bit element hashes is the first
implementation (`sketch/minhash.py`); the engine side (what a document becomes,
what is stored, how stored items are checked) is `engine/similarity.py`."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypeVar

import numpy as np
import numpy.typing as npt

from streamdedup.sketch.hashing import U64
from streamdedup.sketch.signature import Signatures, Sketches, estimate_of_agreeing

Measure = Literal["similarity", "distance"]

Batch_contra = TypeVar("Batch_contra", contravariant=True)
Rep_contra = TypeVar("Rep_contra", contravariant=True)


@dataclass(frozen=True)
class Bar:
    """The threshold rule of a family: `similarity >= value`, or (a distance family:
    Hamming in bits, Euclidean) `distance <= value`.

    The engine's rules (rank, check, keep the best) are written once, on a *score*
    that is higher for closer items: the similarity itself, or the negated distance.
    A candidate is a match when its score is at least `floor`, and the best match has
    the highest score.  For a similarity family `score` is the identity, so its
    rules and numbers are exactly those of a plain `>= threshold` comparison."""

    value: float
    measure: Measure = "similarity"

    def score(self, x: float) -> float:
        """Higher is closer: `x` for a similarity, `-x` for a distance."""
        return x if self.measure == "similarity" else -x

    def measured(self, score: float) -> float:
        """The inverse of `score`: the similarity or distance a score stands for
        (an estimate in score units reported as a verdict's measure)."""
        return score if self.measure == "similarity" else -score

    @property
    def floor(self) -> float:
        """The least score that meets the bar."""
        return self.score(self.value)

    def meets(self, x: float) -> bool:
        """Whether a measured value (similarity or distance) meets the bar."""
        return self.score(x) >= self.floor

    def better(self, x: float, than: float) -> bool:
        """Whether measured value `x` is strictly closer than `than`."""
        return self.score(x) > self.score(than)


class LshFamily(Protocol[Batch_contra, Rep_contra]):
    """One LSH family and its exact measure, over batches of representations.

    - `Batch_contra`: what `sketch` reads, a whole batch (MinHash: a `ShingleBatch`,
      the ragged array of each item's 64-bit element hashes; a vector family would
      take an (n, D) float32 array).
    - `Rep_contra`: one item's exact representation, what `exact` measures (MinHash: the
      sorted distinct uint64 elements; a vector family: a (D,) float32 row).

    Every implementation must keep these laws (the family tests check them, see
    docs/architecture.md "How a similarity family plugs in"):

    - `sketch(batch).sigs` has shape (n, num_perm), dtype uint16; `sketch(batch).keys`
      is n x bands 8-byte big-endian keys end to end, and equals `band_keys` of those
      signatures (a stored signature gives back its postings);
    - `estimate(sig, others)` rises strictly with the number of positions where the
      rows agree (the compiled ranking sorts by that count) and is on the measure's
      own scale (what `Bar` compares), its error about `margin` at most;
    - `exact(a, b)` is symmetric, and `exact(a, a)` is the closest value (1.0 for
      a non-empty set's Jaccard, 0 for a distance);
    - everything is a pure function of the family's parameters (seed included):
      no secret, no state, picklable."""

    @property
    def name(self) -> str:
        """The `--metric` it answers to ("jaccard")."""
        ...

    @property
    def measure(self) -> Measure:
        """Whether `exact` is a similarity (higher: closer) or a distance."""
        ...

    @property
    def num_perm(self) -> int:
        """K, the signature's positions."""
        ...

    @property
    def bands(self) -> int: ...

    @property
    def rows(self) -> int: ...

    def sketch(self, batch: Batch_contra) -> Sketches:
        """Signatures (n, num_perm) uint16 and band keys (n x bands x 8 bytes,
        big-endian) of a whole batch."""
        ...

    def band_keys(self, sigs: Signatures) -> U64:
        """(n, bands) uint64 bucket keys of signatures (n, num_perm)."""
        ...

    def estimate(self, sig: Signatures, others: Signatures) -> npt.NDArray[np.float64]:
        """The measure estimated from signatures: `sig` (num_perm,) against each row
        of `others` (m, num_perm); (m,) float64."""
        ...

    def estimate_table(self) -> npt.NDArray[np.float64]:
        """(num_perm + 1,) float64: the estimate when a of the K positions agree,
        for a = 0 .. K, value for value `estimate`'s, strictly rising.  The
        estimate is a function of that count alone: what lets one compiled ranking
        (a counting sort by agreeing positions) serve every family."""
        ...

    def estimate_rows(self, sigs: Signatures, others: Signatures) -> npt.NDArray[np.float64]:
        """`estimate` of many at once: row i of `sigs` (n, K) against each of
        `others[i]` (n, m, K); (n, m) float64, value for value `estimate`'s."""
        ...

    def margin(self, threshold: float) -> float:
        """How far below the bar (in score) an estimate may be and the candidate
        still be measured exactly."""
        ...

    def exact(self, a: Rep_contra, b: Rep_contra) -> float:
        """The measure of two items' exact representations."""
        ...

    def bar(self, threshold: float) -> Bar:
        """The threshold rule at `threshold` (a similarity, or a distance)."""
        ...


class ByAgreeing:
    """The parts a family shares whose estimate is a table of its count of agreeing
    positions (`estimates`: K + 1 values, strictly rising; bit sampling, random
    hyperplanes, p-stable projections): `estimate`, `estimate_rows` and
    `estimate_table` read that table, and `sketch` is its `signatures` with their
    `band_keys`.  MinHash computes its estimate in compiled code, apart."""

    estimates: npt.NDArray[np.float64]

    def signatures(self, batch: Any) -> Signatures:
        raise NotImplementedError

    def band_keys(self, sigs: Signatures) -> U64:
        raise NotImplementedError

    def sketch(self, batch: Any) -> Sketches:
        sigs = self.signatures(batch)
        return Sketches(sigs, self.band_keys(sigs).astype(">u8").tobytes())

    def estimate(self, sig: Signatures, others: Signatures) -> npt.NDArray[np.float64]:
        out: npt.NDArray[np.float64] = self.estimates[(others == sig).sum(axis=1, dtype=np.int64)]
        return out

    def estimate_table(self) -> npt.NDArray[np.float64]:
        return self.estimates.copy()

    def estimate_rows(self, sigs: Signatures, others: Signatures) -> npt.NDArray[np.float64]:
        agreeing = (others == sigs[:, None, :]).sum(axis=2, dtype=np.int64)
        out: npt.NDArray[np.float64] = self.estimates[agreeing]
        return out


@dataclass(frozen=True)
class Scale:
    """The ranking's estimates on a family's own scale.

    The compiled ranking (`signature.rank_gathered`, `rank_all`) sorts candidates by
    their number of agreeing positions and reports MinHash's estimate of that count
    (`estimate_of_agreeing`), a strictly rising function of it; every family's
    estimate is one too (`LshFamily.estimate_table`).  So a family's estimate is its
    table at the count the MinHash estimate stands for (`of`), and a cut on the
    family's scale is a cut on MinHash's at the least count that meets it (`cut`):
    one ranking serves every family, and for MinHash itself both are the identity."""

    table: npt.NDArray[np.float64]  # the family's estimate at a = 0 .. K agreeing
    minhash: npt.NDArray[np.float64]  # MinHash's estimate at the same counts
    identity: bool

    @classmethod
    def of_family(cls, family: LshFamily[Any, Any]) -> Scale:
        counts = np.arange(family.num_perm + 1, dtype=np.int64)
        minhash = estimate_of_agreeing(counts, family.num_perm)
        table = family.estimate_table()
        return cls(table, minhash, bool(np.array_equal(table, minhash)))

    def of(self, est: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        """The family's estimates for the ranking's (MinHash) ones: the count each
        stands for, read between the counts' midpoints (a compiled estimate may
        differ from numpy's in its last bit)."""
        if self.identity or not len(est):
            return est
        mids = (self.minhash[1:] + self.minhash[:-1]) / 2
        out: npt.NDArray[np.float64] = self.table[np.searchsorted(mids, est)]
        return out

    def cut(self, floor: float) -> float:
        """The ranking's (MinHash) cut for a cut at `floor` on the family's scale: a
        candidate's family estimate is at least `floor` exactly when its MinHash
        estimate is at least this."""
        if self.identity or floor == -math.inf:
            return floor
        a = int(np.searchsorted(self.table, floor, side="left"))  # least count meeting it
        if a == 0:
            return -math.inf
        if a > len(self.table) - 1:
            return math.inf
        return float((self.minhash[a] + self.minhash[a - 1]) / 2)
