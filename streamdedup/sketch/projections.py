"""Cosine and Euclidean distance by random projections: the `LshFamily`s of vectors
(seeds 002, "LSH for cosine distance" and "LSH for Euclidean distance").

An item is a vector of D numbers, stored and given as float32 (a batch: an (n, D)
float32 array).  Both families project it on K random Gaussian directions, drawn
from the seed, and keep one 16-bit value a direction as the signature:

- **random hyperplanes** (cosine): the side of the hyperplane the vector lies on,
  sign(r . x) as 0 or 1.  Two vectors at angle theta fall on the same side with
  probability 1 - theta/pi, the row probability; the estimate of a pair agreeing in
  a of K positions is cos(pi (1 - a/K)).
- **p-stable projections** (Euclidean): the bucket floor((r . x + u) / w) of width
  w = `bucket_width` with u uniform in [0, w), kept to its low 16 bits (two buckets
  65,536 apart agree by accident; such a pair is far, and the exact check says so).
  Two vectors at distance c share a bucket with probability p(w / c) below (Datar et
  al. 2004, for Gaussian projections), 1 at c = 0, falling to 0; the estimate is the
  distance whose probability is the share agreeing.

The bands are b x r of the K positions, hashed by MinHash's keyed band hash
(`signature.band_keys`), so a stored signature gives back its postings; ranking
counts agreeing positions, and each family's estimate is a strictly rising function
of that count (`estimate_table`), so the compiled ranking serves them unchanged.
The exact measures are computed in double precision from the float32 values."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import numpy.typing as npt

from streamdedup.sketch.family import Bar, ByAgreeing, Measure
from streamdedup.sketch.hashing import U64
from streamdedup.sketch.signature import Signatures, band_keys

Vector = npt.NDArray[np.float32]  # one item: (D,)
VectorRows = npt.NDArray[np.float32]  # a batch: (n, D)

_PLANES_SALT = 0x6879_7065_7270_6C6E  # b"hyperpln"
_LINES_SALT = 0x7073_7461_626C_6521  # b"pstable!"
_SIGMAS = 4.0  # the margin: estimates this many standard deviations below the bar


def cosine(a: Vector, b: Vector) -> float:
    """The cosine of two vectors, in double precision (0 if either is zero)."""
    return float(cosine_rows(a, b[None, :])[0])


def cosine_rows(mine: Vector, others: VectorRows) -> npt.NDArray[np.float64]:
    """`cosine` of one vector against each row of `others`: products of float32
    values are exact in double precision, and each row's sums are numpy's pairwise
    sums of that row alone -- never BLAS, whose order of summation changes with the
    number of rows, so a pair's cosine would depend on the candidates beside it."""
    x, ys = mine.astype(np.float64), others.astype(np.float64)
    norms = np.sqrt(float((x * x).sum()) * (ys * ys).sum(axis=1))
    dots = (ys * x).sum(axis=1)
    out: npt.NDArray[np.float64] = np.divide(dots, norms, out=np.zeros_like(dots), where=norms > 0)
    return out


def euclidean(a: Vector, b: Vector) -> float:
    """The L2 distance of two vectors, in double precision."""
    return float(euclidean_rows(a, b[None, :])[0])


def euclidean_rows(mine: Vector, others: VectorRows) -> npt.NDArray[np.float64]:
    """`euclidean` of one vector against each row of `others`, each row summed on
    its own (as `cosine_rows`)."""
    d = others.astype(np.float64) - mine.astype(np.float64)
    out: npt.NDArray[np.float64] = np.sqrt((d * d).sum(axis=1))
    return out


def hyperplane_probability(cos: float | npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """The row probability of random hyperplanes at cosine `cos`: 1 - theta/pi."""
    c = np.clip(np.asarray(cos, dtype=np.float64), -1.0, 1.0)
    return np.asarray(1.0 - np.arccos(c) / math.pi)


def pstable_probability(
    distance: float | npt.NDArray[np.float64], width: float
) -> npt.NDArray[np.float64]:
    """The row probability of Gaussian projections cut into buckets of width w at
    distance c (Datar et al. 2004), with t = w / c:
    p = 1 - 2 Phi(-t) - 2 / (sqrt(2 pi) t) (1 - exp(-t**2 / 2)); 1 at c = 0."""
    c = np.asarray(distance, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(c > 0, width / np.where(c > 0, c, 1.0), np.inf)
        tail = _erfc(t / math.sqrt(2.0))  # 2 Phi(-t)
        ramp = 2.0 / (math.sqrt(2.0 * math.pi) * t) * -np.expm1(-(t * t) / 2.0)
        p = np.where(np.isinf(t), 1.0, 1.0 - tail - ramp)
    return np.asarray(np.clip(p, 0.0, 1.0))


def _erfc(x: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    return np.asarray(np.vectorize(math.erfc, otypes=[np.float64])(x))


def _gaussian(seed: int, salt: int, rows: int, dim: int) -> npt.NDArray[np.float32]:
    """(rows, dim) float32 standard normal directions, a pure function of the seed."""
    rng = np.random.default_rng([seed, salt])
    return rng.standard_normal((rows, dim)).astype(np.float32)


def _share_margin(table: npt.NDArray[np.float64], share: float, num_perm: int) -> float:
    """How far below the estimate at agreeing share `share` (the bar's row
    probability) an estimate falls `_SIGMAS` standard deviations of the count lower,
    one position more: the family's margin, in score units."""
    at = share * num_perm
    low = at - _SIGMAS * math.sqrt(num_perm * share * (1.0 - share)) - 1.0
    counts = np.arange(num_perm + 1, dtype=np.float64)
    top = float(np.interp(at, counts, table))
    return max(top - float(table[max(0, math.floor(low))]), 0.0) + 1e-9


@dataclass(frozen=True)
class RandomHyperplanes(ByAgreeing):
    """`LshFamily[VectorRows, Vector]`: the sides of `num_perm` random hyperplanes,
    banded `bands` x `rows`; cosine, similarity >= threshold."""

    dim: int
    num_perm: int
    bands: int
    rows: int
    seed: int
    name: str = "cosine"
    measure: Measure = "similarity"

    @cached_property
    def planes(self) -> npt.NDArray[np.float32]:
        """(D, K): the hyperplanes' normals, one a column."""
        return np.ascontiguousarray(_gaussian(self.seed, _PLANES_SALT, self.num_perm, self.dim).T)

    def signatures(self, batch: VectorRows) -> Signatures:
        """(n, K) uint16: 1 where r . x > 0."""
        return np.asarray(batch @ self.planes > 0, dtype=np.uint16)

    def band_keys(self, sigs: Signatures) -> U64:
        return band_keys(sigs, self.bands, self.rows, self.seed)

    @cached_property
    def estimates(self) -> npt.NDArray[np.float64]:  # type: ignore[override]
        """cos(pi (1 - a/K)): the angle whose row probability is the share agreeing."""
        agreeing = np.arange(self.num_perm + 1, dtype=np.int64)
        out: npt.NDArray[np.float64] = np.cos(math.pi * (1.0 - agreeing / self.num_perm))
        return out

    def margin(self, threshold: float) -> float:
        share = float(hyperplane_probability(threshold))
        return _share_margin(self.estimates, share, self.num_perm)

    def exact(self, a: Vector, b: Vector) -> float:
        return cosine(a, b)

    def bar(self, threshold: float) -> Bar:
        return Bar(threshold, self.measure)


@dataclass(frozen=True)
class PStable(ByAgreeing):
    """`LshFamily[VectorRows, Vector]`: `num_perm` Gaussian projections cut into
    buckets of width `width`, banded `bands` x `rows`; L2 distance <= max_distance."""

    dim: int
    num_perm: int
    bands: int
    rows: int
    seed: int
    width: float
    name: str = "euclidean"
    measure: Measure = "distance"

    @cached_property
    def lines(self) -> npt.NDArray[np.float32]:
        """(D, K): the projections' directions, one a column."""
        return np.ascontiguousarray(_gaussian(self.seed, _LINES_SALT, self.num_perm, self.dim).T)

    @cached_property
    def offsets(self) -> npt.NDArray[np.float64]:
        """(K,) u, uniform in [0, w): where each line's buckets start."""
        rng = np.random.default_rng([self.seed, _LINES_SALT, 1])
        return rng.uniform(0.0, self.width, size=self.num_perm)

    def signatures(self, batch: VectorRows) -> Signatures:
        """(n, K) uint16: the low 16 bits of each projection's bucket number."""
        buckets = np.floor(((batch @ self.lines).astype(np.float64) + self.offsets) / self.width)
        return (buckets.astype(np.int64) & 0xFFFF).astype(np.uint16)

    def band_keys(self, sigs: Signatures) -> U64:
        return band_keys(sigs, self.bands, self.rows, self.seed)

    @cached_property
    def estimates(self) -> npt.NDArray[np.float64]:  # type: ignore[override]
        """The score (negated distance) when a of K positions agree: the distance
        whose row probability is a/K (a = 0 read as half a position, so that every
        estimate is finite), found by bisection on log t, t = w / c."""
        share = np.maximum(np.arange(self.num_perm + 1) / self.num_perm, 0.5 / self.num_perm)
        lo, hi = np.full(share.shape, -30.0), np.full(share.shape, 30.0)
        for _ in range(100):
            mid = (lo + hi) / 2
            below = pstable_probability(self.width / np.exp(mid), self.width) < share
            lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
        distance = np.where(share >= 1.0, 0.0, self.width / np.exp(hi))
        out: npt.NDArray[np.float64] = -distance
        return out

    def margin(self, threshold: float) -> float:
        share = float(pstable_probability(threshold, self.width))
        return _share_margin(self.estimates, share, self.num_perm)

    def exact(self, a: Vector, b: Vector) -> float:
        return euclidean(a, b)

    def bar(self, threshold: float) -> Bar:
        """`threshold` is the largest L2 distance that is a duplicate."""
        return Bar(threshold, self.measure)
