"""Hamming distance by bit sampling: the `LshFamily` of bit strings (seeds 002).

An item is a string of N bits (a SimHash, a perceptual image hash), given as a batch
of packed rows: an (n, N/8) uint8 array, most significant bit first, as the hex the
user sends reads.  Bit sampling hashes a string to bit h(i) for i = 1 .. r in each of
b bands, h drawn uniformly with replacement by the seed: two strings at Hamming
distance d agree in a sampled bit with probability exactly 1 - d/N, the seeds' row
probability, so a band collides with probability (1 - d/N)**r and the S-curve the
tuner draws is the one the index has (without replacement a band would collide less
often than the curve says).

The signature is the string itself, one bit a position (N positions, in the engine's
uint16 rows): every sampled bit is one of its positions, so the band keys are
MinHash's keyed hash of each band's sampled positions (`signature.band_keys`) and a
stored signature gives its postings back; and the number of positions two
signatures agree in is N - d, so the estimate the engine ranks candidates by is the
distance itself, exact, and only candidates within the bar are checked.  The exact
measure is the popcount of the XOR of the packed strings."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import numpy.typing as npt

from streamdedup.sketch.family import Bar, ByAgreeing, Measure
from streamdedup.sketch.hashing import U64
from streamdedup.sketch.signature import Signatures, band_keys

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
class BitSampling(ByAgreeing):
    """`LshFamily[BitRows, Bits]`: N-bit strings, `bands` bands of `rows` bits sampled
    with replacement; Hamming distance, `distance <= max_distance`."""

    num_bits: int
    bands: int
    rows: int
    seed: int
    name: str = "hamming"
    measure: Measure = "distance"

    @property
    def num_perm(self) -> int:
        """The signature's positions: one a bit."""
        return self.num_bits

    @cached_property
    def positions(self) -> npt.NDArray[np.intp]:
        """h: the bits each band samples, (bands * rows,), uniform with replacement."""
        rng = np.random.default_rng([self.seed, _POSITIONS_SALT])
        return rng.integers(0, self.num_bits, size=self.bands * self.rows).astype(np.intp)

    def signatures(self, batch: BitRows) -> Signatures:
        """(n, N) uint16, each 0 or 1: the bits of each row."""
        return np.unpackbits(batch, axis=1).astype(np.uint16)

    def band_keys(self, sigs: Signatures) -> U64:
        return band_keys(sigs[:, self.positions], self.bands, self.rows, self.seed)

    @cached_property
    def estimates(self) -> npt.NDArray[np.float64]:  # type: ignore[override]
        """The score of a of N bits agreeing: -(N - a), the distance, negated."""
        agreeing = np.arange(self.num_bits + 1, dtype=np.int64)
        out: npt.NDArray[np.float64] = (agreeing - self.num_bits).astype(np.float64)
        return out

    def margin(self, threshold: float) -> float:
        """None needed: the estimate is the distance.  (Half a bit: any rounding of a
        score cannot drop a candidate at the bar.)"""
        return 0.5

    def exact(self, a: Bits, b: Bits) -> float:
        return float(hamming(a, b))

    def bar(self, threshold: float) -> Bar:
        """`threshold` is the largest distance that is a duplicate, in bits."""
        return Bar(threshold, self.measure)
