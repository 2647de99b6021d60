"""SimHash of weighted shingles: random hyperplanes over the sparse count vector of a
text's shingles (seeds 002, "cosine distance"; Charikar 2002), the signature of the
cosine family on texts.

A text's vector has one dimension per distinct shingle, its value the shingle's count
(the seeds' "weighted shingles").  A random hyperplane is a random sign s_k(h) for
every shingle hash h, drawn from the hash itself: hyperplane k's bit is 1 when
sum_h count(h) s_k(h) > 0.  Every occurrence of a shingle adds its signs once, so the
sum runs over occurrences as the shingler gives them, repeats included, with no
counting first.  Two texts at angle theta agree in a bit with probability
1 - theta/pi, as random hyperplanes in a dense space do (`RandomHyperplanes`, whose
estimate, margin and band keys this family shares).

The signs of one shingle for K hyperplanes are the bits of K/64 64-bit mixes of its
hash (`fmix64` of the hash and a per-word seed): no table of random vectors, which a
vector of 2^64 dimensions could not have."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from streamdedup.sketch.hashing import U64, fmix64_np
from streamdedup.sketch.projections import RandomHyperplanes
from streamdedup.sketch.shingle import ShingleBatch
from streamdedup.sketch.signature import Signatures

_SIGNS_SALT = 0x7369_6D68_6173_6821  # b"simhash!"
_CHUNK = 1 << 14  # occurrences whose K signs are made at once (16k x 256 bytes)


@dataclass(frozen=True)
class SimHash(RandomHyperplanes):
    """`LshFamily[ShingleBatch, ...]`: hyperplane sides of texts' shingle-count vectors
    (`num_perm` a multiple of 64); cosine, similarity >= threshold."""

    def signatures(self, batch: ShingleBatch) -> Signatures:  # type: ignore[override]
        """(n, K) uint16: 1 where a text's signed sum is positive (an empty text: all 0)."""
        n, k = len(batch.offsets) - 1, self.num_perm
        sums = np.zeros((n, k), dtype=np.int64)
        owner = np.repeat(np.arange(n), np.diff(batch.offsets))
        for lo in range(0, len(batch.hashes), _CHUNK):
            h = batch.hashes[lo : lo + _CHUNK]
            _add_rows(sums, owner[lo : lo + _CHUNK], self.signs(h))
        return np.asarray(sums > 0, dtype=np.uint16)

    def signs(self, hashes: U64) -> npt.NDArray[np.uint8]:
        """(m, K) uint8: 1 where hyperplane k's sign of a shingle hash is +1, else 0."""
        words = self.num_perm // 64
        salts = fmix64_np(np.arange(words, dtype=np.uint64) ^ np.uint64(_SIGNS_SALT ^ self.seed))
        mixed = fmix64_np(hashes[:, None] ^ salts[None, :])  # (m, words)
        bits: npt.NDArray[np.uint8] = np.unpackbits(
            mixed.view(np.uint8).reshape(len(hashes), -1), axis=1
        )
        return bits


def _add_rows(
    sums: npt.NDArray[np.int64], owner: npt.NDArray[np.int64], bits: npt.NDArray[np.uint8]
) -> None:
    """sums[owner[i]] += (2 bits[i] - 1) for every i, a run of one owner at a time
    (occurrences come text by text): a run's +1s summed down its rows, which numpy
    does a row at a time over contiguous memory (a running sum or `reduceat` down
    the rows ran ten times slower)."""
    if not len(owner):
        return
    starts = np.flatnonzero(np.r_[True, owner[1:] != owner[:-1]]).tolist()
    for s, e in zip(starts, [*starts[1:], len(owner)], strict=True):
        sums[owner[s]] += 2 * bits[s:e].sum(axis=0, dtype=np.int64) - (e - s)
