"""Hamming distance by bit sampling: the `LshFamily` of bit strings (seeds 002).

An item is a string of N bits (a SimHash, a perceptual image hash), given as a batch
of packed rows: an (n, N/8) uint8 array, most significant bit first, as the hex the
user sends reads.  Row i of the signature is bit h(i) of the item, h drawn uniformly
with replacement from the N positions by the seed: two items at Hamming distance d
agree in a row with probability exactly 1 - d/N, the seeds' row probability, so a
band of r rows collides with probability (1 - d/N)**r and the S-curve the tuner
draws is the one the index has.  Sampling with replacement keeps the rows
independent; without it a band would collide less often than the curve says.

The signature keeps one bit a position in the engine's uint16 rows (what every family
stores, ranks and bands alike); the band keys are the keyed hash of each band's rows
that MinHash uses (`signature.band_keys`).  The estimate of the distance from a
signature is N (1 - a/K) for a of K rows agreeing, on the score scale (-distance),
strictly rising with a; the exact measure is the popcount of the XOR."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import numpy.typing as npt

from streamdedup.sketch.family import Bar, Measure
from streamdedup.sketch.hashing import U64
from streamdedup.sketch.signature import Signatures, Sketches, band_keys

Bits = npt.NDArray[np.uint8]  # one item: N/8 bytes, most significant bit first
BitRows = npt.NDArray[np.uint8]  # a batch: (n, N/8)

_POSITIONS_SALT = 0x6269_7473_616D_706C  # b"bitsampl": positions apart from band keys


def hamming(a: Bits, b: Bits) -> int:
    """The number of bits in which two packed bit strings differ."""
    return int(np.bitwise_count(np.bitwise_xor(a, b)).sum())


def hamming_rows(mine: Bits, others: BitRows) -> npt.NDArray[np.int64]:
    """`hamming` of one packed string against each row of `others`, in one pass."""
    out: npt.NDArray[np.int64] = np.bitwise_count(np.bitwise_xor(others, mine)).sum(
        axis=1, dtype=np.int64
    )
    return out


@dataclass(frozen=True)
class BitSampling:
    """`LshFamily[BitRows, Bits]`: `num_perm` sampled bits of N-bit strings, banded
    `bands` x `rows`; Hamming distance, `distance <= max_distance`."""

    num_bits: int
    num_perm: int
    bands: int
    rows: int
    seed: int
    name: str = "hamming"
    measure: Measure = "distance"

    @cached_property
    def positions(self) -> npt.NDArray[np.intp]:
        """h(0) .. h(K-1): the sampled bit positions, uniform with replacement."""
        rng = np.random.default_rng([self.seed, _POSITIONS_SALT])
        return rng.integers(0, self.num_bits, size=self.num_perm).astype(np.intp)

    def sketch(self, batch: BitRows) -> Sketches:
        sigs = self.signatures(batch)
        return Sketches(sigs, self.band_keys(sigs).astype(">u8").tobytes())

    def signatures(self, batch: BitRows) -> Signatures:
        """(n, K) uint16, each 0 or 1: the sampled bits of each row."""
        p = self.positions
        picked = batch[:, p >> 3] >> (7 - (p & 7)).astype(np.uint8)
        return (picked & 1).astype(np.uint16)

    def band_keys(self, sigs: Signatures) -> U64:
        return band_keys(sigs, self.bands, self.rows, self.seed)

    def estimate(self, sig: Signatures, others: Signatures) -> npt.NDArray[np.float64]:
        return self._of_agreeing((others == sig).sum(axis=1, dtype=np.int64))

    def estimate_table(self) -> npt.NDArray[np.float64]:
        return self._of_agreeing(np.arange(self.num_perm + 1, dtype=np.int64))

    def estimate_rows(self, sigs: Signatures, others: Signatures) -> npt.NDArray[np.float64]:
        return self._of_agreeing((others == sigs[:, None, :]).sum(axis=2, dtype=np.int64))

    def _of_agreeing(self, agreeing: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
        """The score (-distance) estimated from a of K rows agreeing: -N (1 - a/K)."""
        out: npt.NDArray[np.float64] = -self.num_bits * (1.0 - agreeing / self.num_perm)
        return out

    def margin(self, threshold: float) -> float:
        """Four standard deviations of the estimate at the bar, in bits: the estimate
        N (1 - a/K) of an item at distance d has sd N sqrt(p (1 - p) / K), p = 1 - d/N."""
        p = 1.0 - min(max(threshold, 0.0), self.num_bits) / self.num_bits
        return 4.0 * self.num_bits * math.sqrt(p * (1.0 - p) / self.num_perm) + 1.0

    def exact(self, a: Bits, b: Bits) -> float:
        return float(hamming(a, b))

    def bar(self, threshold: float) -> Bar:
        """`threshold` is the largest distance that is a duplicate, in bits."""
        return Bar(threshold, self.measure)
