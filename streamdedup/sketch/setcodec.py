"""Compact storage of shingle sets: the fast filter of exact verification.

A document's shingle set is kept as its fingerprint set (`signature.fingerprint_sets`:
the sorted, distinct top 24 bits of its seeded shingle hashes), Elias-Fano coded with
the low part rounded up to whole bytes: about 2.2 bytes per shingle for a typical 3 KB
page, instead of 8.  Fingerprints are lossy: two shingles of one document may share
one (the set shrinks), and a shingle of one document may share one with a different
shingle of another (the intersection grows), so Jaccard on fingerprints is not the
Jaccard of the shingle sets -- for one-shingle documents, 300,000 of them collide in
thousands of pairs at "Jaccard 1.0".  It is used only where it is sound:
`jaccard_bound` turns it, with the new document's count of distinct 64-bit shingle
hashes, into an upper bound on the true Jaccard, which rejects almost every
candidate below the threshold; a candidate at or above it is checked exactly on its
64-bit shingle hashes (the engine shingles its stored text again).  Whole batches are
encoded with a few numpy calls.

Layout: u32 n | u8 low_bytes | n low parts of low_bytes bytes each (little-endian)
| bit-packed unary code of the high parts (Elias-Fano upper half).
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import numpy.typing as npt

from streamdedup.sketch import kernels
from streamdedup.sketch.shingle import offsets_of
from streamdedup.sketch.signature import FINGERPRINT_BITS, Fingerprints, FingerprintSets

_HEADER = struct.Struct("<IB")
_LOW_VIEWS: dict[int, np.dtype[Any]] = {1: np.dtype(np.uint8), 2: np.dtype("<u2")}


def low_bytes(n: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """Bytes per value for the low parts: Elias-Fano's log2(U/n) bits, rounded up to
    whole bytes so that low parts are plain byte columns (no bit packing)."""
    bit_length = np.where(n > 0, np.floor(np.log2(np.maximum(n, 1))).astype(np.int64) + 1, 0)
    out: npt.NDArray[np.int64] = -(-np.maximum(0, FINGERPRINT_BITS - bit_length) // 8)
    return out


def encode_sets(sets: FingerprintSets) -> list[bytes]:
    """Elias-Fano code of every document's set, vectorised over the batch; Python
    only joins each document's three slices (header, low parts, upper half)."""
    if kernels.native is not None:
        return kernels.native.encode_sets(
            np.ascontiguousarray(sets.values, dtype=np.uint32),
            np.ascontiguousarray(sets.offsets, dtype=np.int64),
        )
    counts = np.diff(sets.offsets)
    low = low_bytes(counts)
    n_docs, total = len(counts), len(sets.values)
    doc = np.repeat(np.arange(n_docs), counts)
    rank = np.arange(total) - sets.offsets[doc]
    high = (sets.values.astype(np.int64) >> (8 * low[doc])) + rank  # each value's 1 bit
    last = sets.offsets[1:] - 1
    upper_bits = np.where(counts > 0, high[np.maximum(last, 0)] + 1 if total else 0, 0)
    upper_start = offsets_of((upper_bits + 7) // 8)
    bits = np.zeros(int(upper_start[-1]) * 8, dtype=np.uint8)
    bits[upper_start[doc] * 8 + high] = 1
    upper = np.packbits(bits).tobytes()
    # Low parts: one byte string per width, holding the documents of that width in
    # order; low_start[i] is where document i's part starts in its width's string.
    lows: dict[int, bytes] = {}
    low_start = np.zeros(n_docs + 1, dtype=np.int64)
    for width in np.flatnonzero(np.bincount(low)).tolist():
        of_width = low == width
        values = sets.values if of_width.all() else sets.values[of_width[doc]]
        lows[width] = _low_parts(values, width)
        low_start[np.flatnonzero(of_width)] = offsets_of(counts[of_width] * width)[:-1]
    pack = _HEADER.pack
    ls, us = low_start.tolist(), upper_start.tolist()
    return [
        pack(n, w) + lows[w][ls[i] : ls[i] + n * w] + upper[us[i] : us[i + 1]]
        for i, (n, w) in enumerate(zip(counts.tolist(), low.tolist(), strict=True))
    ]


def _low_parts(values: Fingerprints, width: int) -> bytes:
    """The low `width` bytes of each value, little-endian, back to back."""
    if width in _LOW_VIEWS:  # a narrowing cast keeps the low bytes: a fast, plain copy
        return values.astype(_LOW_VIEWS[width]).tobytes()
    return values.astype("<u4").view(np.uint8).reshape(-1, 4)[:, :width].tobytes()


def encode(values: Fingerprints) -> bytes:
    """Elias-Fano code of one sorted array of distinct fingerprints."""
    offsets = np.array([0, len(values)], dtype=np.int64)
    return encode_sets(FingerprintSets(values.astype(np.uint32), offsets))[0]


def decode(data: bytes) -> Fingerprints:
    n, low = _HEADER.unpack_from(data)
    if n == 0:
        return np.zeros(0, dtype=np.uint32)
    body = np.frombuffer(data, dtype=np.uint8, offset=_HEADER.size)
    ones = np.flatnonzero(np.unpackbits(body[n * low :]))[:n]
    values = (ones - np.arange(n)).astype(np.uint32) << np.uint32(8 * low)
    if low in _LOW_VIEWS:  # the common case: a direct view, no copy
        values |= body[: n * low].view(_LOW_VIEWS[low])
    elif low:
        padded = np.zeros((n, 4), dtype=np.uint8)
        padded[:, :low] = body[: n * low].reshape(n, low)
        values |= padded.view("<u4").ravel()
    return values


def jaccard(a: Fingerprints, b: Fingerprints | bytes) -> float:
    """Exact Jaccard of two sorted distinct arrays; `b` may be a set as stored
    (`encode`d), which the compiled kernel reads without decoding it first."""
    if kernels.native is not None:
        other = b if isinstance(b, bytes) else np.ascontiguousarray(b, dtype=np.uint32)
        return kernels.native.jaccard(np.ascontiguousarray(a, dtype=np.uint32), other)
    return exact_jaccard(a, decode(b) if isinstance(b, bytes) else b)


def count(code: bytes) -> int:
    """The number of fingerprints in an Elias-Fano code."""
    return int(_HEADER.unpack_from(code)[0])


def jaccard_bound(fp_jaccard: float, fp_a: int, fp_b: int, distinct_a: int) -> float:
    """A sound upper bound on the Jaccard of two shingle sets A and B (of 64-bit
    hashes) from the Jaccard of their fingerprint sets f(A), f(B), |f(A)|, |f(B)|
    and |A| (the new document's, whose hashes are at hand; B's need not be stored).

    Every shared shingle maps to a shared fingerprint, and a shared fingerprint g
    stands for at most min(m_A(g), m_B(g)) shared shingles (m_X(g): the shingles of
    X on g), so |A & B| <= I_fp + c_A, with c_A = |A| - |f(A)| the shingles A lost
    to collisions within itself, and |A & B| <= |A|.  J = I / (|A| + |B| - I) grows
    with I and falls with |B| >= |f(B)|, so J <= I_ub / (|A| + |f(B)| - I_ub), which
    also holds where |f(B)| < I (then J <= I / |A|).  Integers throughout but the last
    division, which rounds as the exact Jaccard's does (monotone)."""
    if fp_a == 0 or fp_b == 0:
        return 0.0
    # I_fp back from the fingerprint Jaccard: exact integers, far inside float range
    inter_fp = round(fp_jaccard * (fp_a + fp_b) / (1.0 + fp_jaccard))
    inter = min(inter_fp + distinct_a - fp_a, distinct_a)
    return inter / (distinct_a + fp_b - inter)


def exact_jaccard(a: npt.NDArray[Any], b: npt.NDArray[Any]) -> float:
    """Jaccard of two sorted arrays of distinct values: the 64-bit shingle hashes of
    the exact re-check, or fingerprints where the compiled kernel is missing."""
    if len(a) == 0 or len(b) == 0:
        return 0.0
    pos = np.searchsorted(b, a)
    pos[pos == len(b)] = 0
    inter = int(np.count_nonzero(b[pos] == a))
    return inter / (len(a) + len(b) - inter)
