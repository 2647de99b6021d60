"""Containment by MinHash banded per size class (seeds 002; LSH Ensemble, Zhu et al.
2016): the new item A lies inside an earlier item B when |A n B| / |A| >= T.

Containment is not what MinHash estimates, but it bounds what it estimates.  If A
has q elements and B has s, a containment of T is a Jaccard of
T q / (q + s - T q): high when B is about A's size, low when B is much larger.
So items are sorted into size classes -- class c holds sizes [2^c, 2^(c+1)) -- and
for each offset D between the classes of the new item and the earlier one, the
least Jaccard a pair at the bar can have is known, `T / (1 - T + 2^(D + 1))` (A at
the bottom of its class, B at the top of its own).  Each offset gets its own b x r,
the fewest bands that reach the recall target at that Jaccard (`plan`): two bands
of two rows for items of one size, single positions for an item eight times as
large.  Offsets stop where even all K positions as single-row bands cannot reach
the target: beyond that size ratio (8 for T = 0.8 and K = 128) containment is found
by chance, not promised.  As in LSH Ensemble; unlike it, the classes are fixed
powers of two, so the index grows with the stream instead of being partitioned
once for a known collection.

Bucket keys must be computable from a stored signature alone (the engine removes,
seals and restores postings from signatures), so a containment signature is the
item's K MinHash positions followed by one more: its size class.  A band key names
the pair of classes it is for, (class of the new item, class of the earlier one),
and an item carries the keys of both its roles: as a new item looking for larger
earlier ones (its class, its class + D) and as an earlier one waiting for smaller
new ones (its class - D, its class).  The engine looks up and stores the same keys,
so an item also meets items of its own role and class whose bands agree; those are
candidates the exact check rejects, the price of one set of keys for both roles."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import numpy.typing as npt

from streamdedup.sketch.family import Bar, ByAgreeing, Measure
from streamdedup.sketch.hashing import U64, fmix64_np
from streamdedup.sketch.jaccard import summaries_of, values_of
from streamdedup.sketch.lsh import RECALL_TARGET, check_num_perm
from streamdedup.sketch.shingle import ShingleBatch
from streamdedup.sketch.signature import (
    Signatures,
    band_keys,
    estimate_of_agreeing,
    seed_key,
    sketch,
)

Elements = npt.NDArray[np.uint64]  # one item's sorted distinct 64-bit element hashes

# Offsets further below or above than this are never planned (sizes differ by 2^16).
_MAX_OFFSET = 16
# No estimate is close enough to skip a candidate: the ranking counts agreeing
# positions (a Jaccard), which says little of a containment without the sizes.
_NO_CUT = 2.0


@dataclass(frozen=True)
class Pairing:
    """The bands of one class offset: an earlier item `offset` classes above the new
    one's (-1: one class below, as large as T allows), the least Jaccard of a pair at
    the bar with those classes (`jaccard`), and the b x r that reaches the recall
    target there."""

    offset: int
    jaccard: float
    bands: int
    rows: int

    @property
    def recall(self) -> float:
        """The share of pairs at the bar (at `jaccard`) that become candidates."""
        return float(1.0 - (1.0 - self.jaccard**self.rows) ** self.bands)

    @property
    def keys(self) -> int:
        """Bucket keys an item carries for this offset: its bands in both roles
        (once where both roles are one, offset 0)."""
        return self.bands if self.offset == 0 else 2 * self.bands


def least_jaccard(threshold: float, offset: int) -> float:
    """The least Jaccard of a pair at containment `threshold` whose earlier item's
    class is `offset` above the new one's: the new one at the bottom of its class
    (size 2^c), the earlier at the top of its own (just under 2^(c + offset + 1))."""
    return threshold / (1.0 - threshold + 2.0 ** (offset + 1))


def containment_jaccard(
    containment: npt.NDArray[np.float64] | float, size_new: float, size_earlier: float
) -> npt.NDArray[np.float64]:
    """The Jaccard of a pair with containment C, sizes q (new) and s (earlier):
    C q / (q + s - C q)."""
    c = np.asarray(containment, dtype=np.float64)
    out: npt.NDArray[np.float64] = c * size_new / (size_new + size_earlier - c * size_new)
    return out


def plan(threshold: float, num_perm: int, target: float = RECALL_TARGET) -> tuple[Pairing, ...]:
    """The offsets an index of containment `threshold` and K = `num_perm` bands, and
    their b x r: from the lowest class an earlier item at the bar can be in
    (2^(D + 1) > T) up to the last offset whose least Jaccard K single-row bands
    still reach `target` at.  Each offset takes, of every r, the fewest bands that
    reach `target` (b r <= K), and of those the r with the fewest candidates at half
    its least Jaccard."""
    check_num_perm(num_perm)
    if not 0.0 < threshold <= 1.0:
        raise ValueError(f"a containment threshold is in (0, 1], got {threshold}")
    out: list[Pairing] = []
    for offset in range(-_MAX_OFFSET, _MAX_OFFSET + 1):
        if 2.0 ** (offset + 1) <= threshold:
            continue  # (no earlier item that small can hold T of the new one)
        j = least_jaccard(threshold, offset)
        best = _bands_for(j, num_perm, target)
        if best is None:
            break
        out.append(Pairing(offset, j, *best))
    return tuple(out)


def _bands_for(jaccard: float, num_perm: int, target: float) -> tuple[int, int] | None:
    """(b, r): the banding of `plan` at one least Jaccard, or None if none reaches
    `target` within K positions."""
    best: tuple[float, int, int] | None = None
    for rows in range(1, num_perm + 1):
        p = jaccard**rows
        needed = 1.0 if p >= 1.0 else math.log1p(-target) / math.log1p(-p) if p > 0 else math.inf
        if needed * rows > num_perm + 1e-9:
            break  # (more rows need more bands, each wider: none further fits)
        bands = max(1, math.ceil(needed - 1e-9))
        if bands * rows > num_perm:
            continue
        missed = (1.0 - (jaccard / 2) ** rows) ** bands  # (fewer candidates: higher)
        if best is None or (-missed, bands) < (-best[0], best[1]):
            best = (missed, bands, rows)
    return None if best is None else (best[1], best[2])


def size_classes(sizes: npt.NDArray[np.int64]) -> npt.NDArray[np.uint16]:
    """floor(log2(s)) of each size (0 for an empty item), exactly (`frexp` reads
    the exponent, no rounding of a logarithm)."""
    _, exp = np.frexp(np.maximum(np.asarray(sizes, dtype=np.float64), 1.0))
    return (exp - 1).astype(np.uint16)


def distinct_counts(batch: ShingleBatch) -> npt.NDArray[np.int64]:
    """Each item's number of distinct element hashes (its size, the set's own): the
    compiled sort and count of the exact check's sets (`summaries_of`), a fifth of
    the cost of one numpy sort of the batch by item and hash."""
    n = len(batch.offsets) - 1
    sets = summaries_of(batch.hashes, batch.offsets, list(range(n)))
    return np.fromiter((len(values_of(s)) for s in sets), dtype=np.int64, count=n)


def containment(a: Elements, b: Elements) -> float:
    """|A n B| / |A| of two sorted arrays of distinct values (0 for an empty A)."""
    if not len(a):
        return 0.0
    return int(np.count_nonzero(np.isin(a, b, assume_unique=True))) / len(a)


@dataclass(frozen=True)
class MinHashContainment(ByAgreeing):
    """`LshFamily[ShingleBatch, Elements]`: K MinHash positions and the size class
    (the signature: K + 1 positions), banded per class offset by `plan`;
    containment of the new item in an earlier one, similarity >= threshold."""

    minhashes: int  # K
    seed: int
    threshold: float
    name: str = "containment"
    measure: Measure = "similarity"

    @cached_property
    def pairings(self) -> tuple[Pairing, ...]:
        return plan(self.threshold, self.minhashes)

    @cached_property
    def estimates(self) -> npt.NDArray[np.float64]:  # type: ignore[override]
        """MinHash's estimate of the share agreeing (the ranking's own order)."""
        return estimate_of_agreeing(np.arange(self.num_perm + 1, dtype=np.int64), self.num_perm)

    @property
    def num_perm(self) -> int:
        """The signature's positions: K minima and the size class."""
        return self.minhashes + 1

    @property
    def bands(self) -> int:
        """Bucket keys an item carries (every offset's bands, in both roles)."""
        return sum(p.keys for p in self.pairings)

    @property
    def rows(self) -> int:
        return 1  # (each offset has its own; `pairings`)

    def signatures(self, batch: ShingleBatch) -> Signatures:
        minima = sketch(batch, self.minhashes, self.seed, 1, 1).sigs
        classes = size_classes(distinct_counts(batch))
        return np.ascontiguousarray(np.column_stack([minima, classes]), dtype=np.uint16)

    def band_keys(self, sigs: Signatures) -> U64:
        """Each offset's bands of the minima (`signature.band_keys`, a seed of the
        offset's own), named by the item's pair of classes in each role."""
        minima = sigs[:, : self.minhashes]
        own = np.asarray(sigs[:, self.minhashes], dtype=np.int64)
        blocks: list[U64] = []
        for i, p in enumerate(self.pairings):
            bands = band_keys(minima, p.bands, p.rows, seed_key(self.seed, 64 + i))
            roles = [(own, own + p.offset)]  # (as the new item; and as the earlier one:)
            if p.offset:
                roles.append((own - p.offset, own))
            blocks += [
                fmix64_np(bands ^ _pair_tag(new, earlier)[:, None]) for new, earlier in roles
            ]
        if not blocks:
            return np.empty((len(sigs), 0), dtype=np.uint64)
        return np.ascontiguousarray(np.concatenate(blocks, axis=1))

    def margin(self, threshold: float) -> float:
        return _NO_CUT

    def exact(self, a: Elements, b: Elements) -> float:
        """The containment of `a` (the new item) in `b` (an earlier one): not
        symmetric, unlike every other family's measure."""
        return containment(a, b)

    def bar(self, threshold: float) -> Bar:
        return Bar(threshold, self.measure)


def _pair_tag(new: npt.NDArray[np.int64], earlier: npt.NDArray[np.int64]) -> U64:
    """A 64-bit name of each (new class, earlier class) pair."""
    packed = (new.astype(np.uint64) << np.uint64(32)) ^ (
        earlier.astype(np.uint64) & np.uint64(0xFFFFFFFF)
    )
    return fmix64_np(packed ^ np.uint64(0x636F6E7461696E21))  # b"contain!"


__all__ = [
    "MinHashContainment",
    "Pairing",
    "containment",
    "containment_jaccard",
    "distinct_counts",
    "least_jaccard",
    "plan",
    "size_classes",
]
