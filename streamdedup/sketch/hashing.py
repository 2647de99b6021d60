"""64-bit hashing primitives shared by shingling, signatures and banding.

Every hash here is defined twice: on Python ints (the readable reference, used by
tests and by one-off work) and on numpy uint64 arrays (the batch path).  Both use
modulo-2**64 arithmetic so they agree bit for bit; numpy integer arithmetic wraps.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

U64 = npt.NDArray[np.uint64]

MASK64 = (1 << 64) - 1

# Odd multipliers (odd => invertible modulo 2**64, which the prefix-sum trick needs).
CHAR_BASE = 0x100000001B3  # FNV-64 prime
TOKEN_BASE = 0x9E3779B97F4A7C15  # golden-ratio constant
LENGTH_SALT = 0xC2B2AE3D27D4EB4F


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


def poly_hash(values: list[int], base: int) -> int:
    """sum(v_j * base**(m-1-j)) mod 2**64 -- the reference for `range_poly_hashes`."""
    acc = 0
    for v in values:
        acc = (acc * base + v) & MASK64
    return acc


def salted(poly: int, length: int) -> int:
    """A polynomial value with its length folded in, so that prefixes differ.  Not
    yet mixed: whoever uses it as a hash mixes it (`finish`, or the fingerprint's
    seeded mix, which is a bijection and so keeps every distinction)."""
    return (poly + length * LENGTH_SALT) & MASK64


def salted_np(poly: U64, length: npt.NDArray[np.int64]) -> U64:
    return poly + length.astype(np.uint64) * np.uint64(LENGTH_SALT)


def finish(poly: int, length: int) -> int:
    """A well-mixed hash of a polynomial value and its length."""
    return fmix64(salted(poly, length))


def finish_np(poly: U64, length: npt.NDArray[np.int64]) -> U64:
    return fmix64_np(salted_np(poly, length))


class PowerTable:
    """Cached powers base**i and base**-i modulo 2**64, grown on demand.

    Kept up to `keep` entries between calls so that one outsized document does not pin
    a huge table in memory for the life of a worker.
    """

    def __init__(self, base: int, keep: int = 1 << 22) -> None:
        self.base = base
        self.inverse = pow(base, -1, 1 << 64)
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
    """base**i for i < n by doubling: each step multiplies the known prefix by one
    power (a vectorised multiply, ten times faster than a running product)."""
    out = np.empty(n, dtype=np.uint64)
    out[0] = 1
    m = 1
    while m < n:
        step = min(m, n - m)
        np.multiply(out[:step], np.uint64(pow(base, m, 1 << 64)), out=out[m : m + step])
        m += step
    return out


def range_poly_hashes(
    values: npt.NDArray[np.unsignedinteger[Any]],
    starts: npt.NDArray[np.int64],
    ends: npt.NDArray[np.int64],
    table: PowerTable,
) -> U64:
    """Polynomial hash of values[s:e] for every (s, e) pair, without a Python loop.

    With G = prefix sums of v_j * base**-j, the hash of [s, e) is
    (G[e] - G[s]) * base**(e-1) = sum v_j * base**(e-1-j): two passes over `values`
    for any number of ranges.
    """
    if len(starts) == 0:
        return np.zeros(0, dtype=np.uint64)
    pw, ipw = table.get(len(values))
    prefix = np.zeros(len(values) + 1, dtype=np.uint64)
    np.cumsum(np.multiply(values, ipw[: len(values)], dtype=np.uint64), out=prefix[1:])
    return (prefix[ends] - prefix[starts]) * pw[ends - 1]
