"""Shingle hashes -> MinHash signatures and LSH band keys.

Signatures use one-permutation hashing (Li, Owen & Zhang 2012) with optimal
densification (Shrivastava 2017): each shingle is hashed once with a seeded mix, the
high bits pick one of K bins and the low 32 bits are its rank; a bin keeps its minimum
rank.  An empty bin borrows the value of the first non-empty bin on a fixed, seeded
probe sequence, so P[sig_i(A) == sig_i(B)] = J(A, B) still holds.  That is K times
less hashing than K independent permutations, and it runs over a whole batch at once.

Stored signatures keep a 16-bit fingerprint of each bin's minimum (b-bit minwise
hashing, Li & Koenig 2010): two unrelated minima agree by accident with probability
2**-16, which `estimate_jaccard` corrects for.
"""

from __future__ import annotations

from functools import cache

import numpy as np
import numpy.typing as npt

from .hashing import U64, fmix64, fmix64_np
from .shingle import ShingleBatch

Signatures = npt.NDArray[np.uint16]  # shape (n_docs, K)

_EMPTY = np.uint64(1 << 32)  # above every 32-bit rank
_PROBE_ROUNDS = 16  # probe sequence length, in multiples of K
_FINGERPRINT_SPACE = 1 << 16


def seed_key(seed: int, purpose: int) -> int:
    """Independent 64-bit keys derived from the index seed, one per purpose."""
    return fmix64(fmix64(seed) ^ (purpose * 0x9E3779B97F4A7C15))


@cache
def probe_table(num_perm: int, seed: int) -> npt.NDArray[np.int64]:
    """probe[i, t]: the t-th bin an empty bin i borrows from.  Pure function of the seed."""
    rounds = _PROBE_ROUNDS * num_perm
    i = np.arange(num_perm, dtype=np.uint64)[:, None]
    t = np.arange(rounds, dtype=np.uint64)[None, :]
    mixed = fmix64_np(((i << np.uint64(32)) | t) ^ np.uint64(seed_key(seed, 2)))
    return (mixed % np.uint64(num_perm)).astype(np.int64)


def signatures(batch: ShingleBatch, num_perm: int, seed: int) -> Signatures:
    """One signature row per document; rows of documents without shingles are zero."""
    n = len(batch.offsets) - 1
    ranked = fmix64_np(batch.hashes ^ np.uint64(seed_key(seed, 1)))
    bins = ((ranked >> np.uint64(32)) % np.uint64(num_perm)).astype(np.int64)
    flat = np.full(n * num_perm, _EMPTY, dtype=np.uint64)
    np.minimum.at(flat, batch.doc_index() * num_perm + bins, ranked & np.uint64(0xFFFFFFFF))
    minima = flat.reshape(n, num_perm)
    _densify(minima, batch.counts > 0, num_perm, seed)
    return (minima & np.uint64(0xFFFF)).astype(np.uint16)


def _densify(minima: U64, has_shingles: npt.NDArray[np.bool_], num_perm: int, seed: int) -> None:
    """Fill empty bins in place from their probe sequences (documents with shingles only)."""
    empty = (minima == _EMPTY) & has_shingles[:, None]
    docs, bins = np.nonzero(empty)
    if len(docs) == 0:
        return
    filled = ~empty & has_shingles[:, None]
    probes = probe_table(num_perm, seed)
    source = np.full(len(docs), -1, dtype=np.int64)
    pending = np.arange(len(docs))
    step = 32
    for t0 in range(0, probes.shape[1], step):
        cand = probes[bins[pending], t0 : t0 + step]  # (pending, step) bin numbers
        hit = filled[docs[pending][:, None], cand]
        found = hit.any(axis=1)
        source[pending[found]] = cand[found, hit[found].argmax(axis=1)]
        pending = pending[~found]
        if len(pending) == 0:
            break
    if len(pending):  # astronomically rare: fall back to the first filled bin
        source[pending] = filled[docs[pending]].argmax(axis=1)
    minima[docs, bins] = minima[docs, source]


def band_keys(sigs: Signatures, bands: int, rows: int, seed: int) -> U64:
    """(n_docs, bands) 64-bit bucket keys; band j hashes rows [j*r, (j+1)*r)."""
    n = sigs.shape[0]
    base = fmix64_np(np.arange(bands, dtype=np.uint64) ^ np.uint64(seed_key(seed, 3)))
    acc = np.broadcast_to(base, (n, bands)).copy()
    banded = sigs[:, : bands * rows].reshape(n, bands, rows).astype(np.uint64)
    for i in range(rows):
        acc = fmix64_np(acc ^ (banded[:, :, i] + np.uint64(i << 16)))
    return acc


def estimate_jaccard(sig: Signatures, others: Signatures) -> npt.NDArray[np.float64]:
    """Estimated Jaccard of `sig` (shape (K,)) against each row of `others`."""
    agree = (others == sig).mean(axis=1)
    accidental = 1.0 / _FINGERPRINT_SPACE
    out: npt.NDArray[np.float64] = np.clip((agree - accidental) / (1.0 - accidental), 0.0, 1.0)
    return out
