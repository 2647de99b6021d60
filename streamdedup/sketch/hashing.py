"""64-bit hashing primitives shared by shingling, signatures and banding.

Shingle hashes are keyed: a polynomial over the prime field F_P, P = 2**61 - 1, whose
base and start value are derived from a key (`ShingleKey`).  An unkeyed polynomial
modulo 2**64 (what this module used to compute) lets anyone build two different strings
with the same hash (Thue-Morse sequences do it for every odd base), and so two documents
with nothing in common that verify as copies.  Over a prime field, two different
strings of at most L digits collide under at most a fraction (L + 1) / P of the
(base, start) keys, so whoever cannot read a random key cannot aim at a collision
(docs/architecture.md, "Exact verification is exact", states the bound).  Exact
verification hashes under the index's random secret key; signatures under the fixed
`PUBLIC_KEY`, so that verdicts do not depend on the secret.

Every hash here is defined twice: on Python ints (the readable reference, used by
tests and by one-off work) and on numpy uint64 arrays (the batch path), which agree
bit for bit.  The compiled kernels (`streamdedup/kernels/shingling.c`) compute the same values.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from streamdedup.config import HASH_KEY_BYTES

U64 = npt.NDArray[np.uint64]

MASK64 = (1 << 64) - 1
P = (1 << 61) - 1  # a Mersenne prime: a product reduces with a shift, a mask and an add


def fmix64(x: int) -> int:
    """MurmurHash3's 64-bit finaliser: a bijective avalanche mix."""
    x &= MASK64
    x ^= x >> 33
    x = (x * 0xFF51AFD7ED558CCD) & MASK64
    x ^= x >> 33
    x = (x * 0xC4CEB9FE1A85EC53) & MASK64
    x ^= x >> 33
    return x


def fmix64_np(x: U64) -> U64:
    """Vectorised `fmix64`; returns a new array."""
    x = x ^ (x >> np.uint64(33))
    x = x * np.uint64(0xFF51AFD7ED558CCD)
    x ^= x >> np.uint64(33)
    x *= np.uint64(0xC4CEB9FE1A85EC53)
    x ^= x >> np.uint64(33)
    return x


@dataclass(frozen=True)
class Poly:
    """One keyed polynomial hash over F_P: a string of digits d_0 .. d_{m-1} (each
    below 2**32, or below P) hashes to start * base**m + sum d_j * base**(m-1-j).
    The start term carries the length, so a string and the same string with leading
    zero digits differ."""

    base: int
    start: int

    def of(self, digits: list[int]) -> int:
        acc = self.start
        for d in digits:
            acc = (acc * self.base + d) % P
        return acc


@dataclass(frozen=True)
class ShingleKey:
    """The secret values of an index's shingle hash, derived from its stored random
    key: one polynomial over a word token's 4-byte digits, one over a shingle's
    token hashes, one over a character shingle's code points."""

    token: Poly
    window: Poly
    chars: Poly

    def word_values(self) -> tuple[int, int, int, int]:
        """What `_kernels.word_shingles` takes of a key."""
        return (self.token.base, self.token.start, self.window.base, self.window.start)

    @classmethod
    def of(cls, key: bytes) -> ShingleKey:
        if len(key) != HASH_KEY_BYTES:
            raise ValueError(f"a shingle key has {HASH_KEY_BYTES} bytes, not {len(key)}")
        raw = hashlib.blake2b(key, digest_size=48, person=b"streamdedup-shk1").digest()
        # 64 random bits reduced mod P (bias below 2**-58); a base of 0 or 1 would
        # make the polynomial ignore the order of its digits, so those two are moved
        v = [int.from_bytes(raw[8 * i : 8 * i + 8], "little") % P for i in range(6)]
        bases = [b if b > 1 else b + 2 for b in v[0::2]]
        return cls(*(Poly(b, s) for b, s in zip(bases, v[1::2], strict=True)))


# The key of the hash signatures are made of: fixed, so that the candidates LSH finds,
# and with them every verdict, are the same in every index built with the same
# parameters and seed.  Collisions under it can be aimed at; they only make candidates,
# which exact verification, under the index's secret key, then measures.
PUBLIC_KEY = bytes(HASH_KEY_BYTES)


SPREAD = 0x9E3779B97F4A7C15  # odd: multiplying by it modulo 2**64 is a bijection


def finish(value: int) -> int:
    """A field value spread over all 64 bits by one odd multiplier (a bijection, so no
    two values meet): exact-set summaries deal hashes by their top bits, which a value
    below 2**61 would leave empty.  The value is already a keyed hash; this only
    moves it, so one multiply does (Knuth's multiplicative hashing)."""
    return (value * SPREAD) & MASK64


def finish_np(values: U64) -> U64:
    """Vectorised `finish`."""
    return values * np.uint64(SPREAD)


# ------------------------------------------------------------------ F_P on numpy arrays

_P = np.uint64(P)
_LOW32 = np.uint64(0xFFFFFFFF)
_LOW29 = np.uint64((1 << 29) - 1)


def reduce_np(x: U64) -> U64:
    """x mod P for x < 2**64 (in place when it can)."""
    x = (x & _P) + (x >> np.uint64(61))
    x -= _P * (x >= _P)
    return x


def mulmod_np(a: U64 | np.uint64, b: U64 | np.uint64) -> U64:
    """a * b mod P for values below P, in 64-bit pieces: with a = a1 * 2**32 + a0 and
    b alike, a * b = a1 b1 2**64 + (a1 b0 + a0 b1) 2**32 + a0 b0, and 2**61 = 1 mod P."""
    a0, a1 = a & _LOW32, a >> np.uint64(32)
    b0, b1 = b & _LOW32, b >> np.uint64(32)
    mid = a1 * b0 + a0 * b1  # < 2**62
    low = a0 * b0  # < 2**64
    out = (a1 * b1) << np.uint64(3)  # 2**64 = 8 mod P; < 2**61
    out += (mid >> np.uint64(29)) + ((mid & _LOW29) << np.uint64(32))
    out += (low & _P) + (low >> np.uint64(61))
    return reduce_np(np.asarray(out, dtype=np.uint64))


def cumsum_mod(x: U64) -> U64:
    """Running sums mod P of values below P, vectorised: sums of 4 fit in 64 bits, so
    each run of 4 is summed at once and the runs' totals recursively."""
    n = len(x)
    if n <= 4:
        out = np.cumsum(x, dtype=np.uint64)
        return reduce_np(out) if n else out
    pad = (-n) % 4
    blocks = np.concatenate([x, np.zeros(pad, dtype=np.uint64)]).reshape(-1, 4)
    within = reduce_np(np.cumsum(blocks, axis=1, dtype=np.uint64))
    before = np.zeros(len(blocks), dtype=np.uint64)
    before[1:] = cumsum_mod(within[:-1, 3].copy())
    within += before[:, None]
    return reduce_np(within).ravel()[:n]


class PowerTable:
    """Cached powers base**i and base**-i mod P of one `Poly`, grown on demand.

    Kept up to `keep` entries between calls so that one outsized document does not pin
    a huge table in memory for the life of a worker.
    """

    def __init__(self, poly: Poly, keep: int = 1 << 22) -> None:
        self.poly = poly
        self.base = poly.base
        self.inverse = pow(poly.base, -1, P)
        self.keep = keep
        self.pw: U64 = np.ones(1, dtype=np.uint64)
        self.ipw: U64 = np.ones(1, dtype=np.uint64)

    def get(self, n: int) -> tuple[U64, U64]:
        if n <= len(self.pw):
            return self.pw, self.ipw
        size = max(n, min(2 * len(self.pw), self.keep))
        pw = _powers(self.base, size)
        ipw = _powers(self.inverse, size)
        if size <= self.keep:
            self.pw, self.ipw = pw, ipw
        return pw, ipw


def _powers(base: int, n: int) -> U64:
    """base**i mod P for i < n by doubling: each step multiplies the known prefix by
    one power (a vectorised multiply, far faster than a running product)."""
    out = np.empty(n, dtype=np.uint64)
    out[0] = 1
    m = 1
    while m < n:
        step = min(m, n - m)
        out[m : m + step] = mulmod_np(out[:step], np.uint64(pow(base, m, P)))
        m += step
    return out


def range_poly_hashes(
    values: npt.NDArray[np.unsignedinteger[Any]],
    starts: npt.NDArray[np.int64],
    ends: npt.NDArray[np.int64],
    table: PowerTable,
) -> U64:
    """`table.poly.of(values[s:e])` for every (s, e) pair (s < e), without a Python loop.

    With G = running sums of v_j * base**-j, the sum over [s, e) is
    (G[e] - G[s]) * base**(e-1) = sum v_j * base**(e-1-j): two passes over `values`
    for any number of ranges; the start term is start * base**(e-s).
    """
    if len(starts) == 0:
        return np.zeros(0, dtype=np.uint64)
    pw, ipw = table.get(len(values) + 1)
    n = len(values)
    prefix = np.zeros(n + 1, dtype=np.uint64)
    digits = reduce_np(values.astype(np.uint64))
    prefix[1:] = cumsum_mod(mulmod_np(digits, ipw[:n]))
    span = reduce_np(prefix[ends] + _P - prefix[starts])
    body = mulmod_np(span, pw[ends - 1])
    head = mulmod_np(np.uint64(table.poly.start), pw[ends - starts])
    return reduce_np(body + head)
