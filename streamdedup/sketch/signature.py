"""Shingle hashes -> fingerprint sets -> MinHash signatures and LSH band keys.

Each shingle hash is mixed with the index seed and cut to its top 24 bits, its
"fingerprint"; a document's sorted distinct fingerprints are its fingerprint set
(computed for the signature only: nothing stores it, and exact verification works
on the 64-bit hashes themselves, `jaccard.py`).  Its signature is
one-permutation hashing (Li, Owen & Zhang 2012) over that set: fingerprints fall
into K bins by their leading bits (bin = f * K >> 24, monotone), and each bin keeps
its smallest -- in a sorted set, simply the first of the bin, so the one sort that
builds the sets also builds the signatures.  An empty bin borrows the value of the
first non-empty bin on a fixed, seeded probe sequence (optimal densification,
Shrivastava 2017), so P[sig_i(A) == sig_i(B)] = J(A, B) still holds, for the
fingerprint sets.

The production path, `sketch`, computes the same signatures without the sets: a
bin's minimum over all of a document's fingerprints, repeats and all, is the first
of the bin in the sorted set, so one compiled pass per document takes the minima,
densifies and hashes the band keys (`fingerprint_sets` and `signatures` stay the
definition, and the numpy fallback).

Stored signatures keep the low 16 bits of each bin's minimum (b-bit minwise
hashing, Li & Koenig 2010): two different minima agree by accident with
probability about 2**-16, which `estimate_jaccard` corrects for.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np
import numpy.typing as npt

from streamdedup import kernels
from streamdedup.sketch.hashing import U64, fmix64, fmix64_np
from streamdedup.sketch.shingle import ShingleBatch, join_ragged

Signatures = npt.NDArray[np.uint16]  # shape (n_docs, K)
Fingerprints = npt.NDArray[np.uint32]

FINGERPRINT_BITS = 24
_FINGERPRINT_MASK = (1 << FINGERPRINT_BITS) - 1
_TOP = np.uint64(64 - FINGERPRINT_BITS)  # the fingerprint is the top bits
_EMPTY = np.uint32(0xFFFF0000)  # above every fingerprint, and 0 in the 16 bits kept
_NARROW_DOCS = 1 << (32 - FINGERPRINT_BITS)  # batches this small sort 32-bit pairs
_PROBE_ROUNDS = 16  # probe sequence length, in multiples of K
_FINGERPRINT_SPACE = 1 << 16


@dataclass(frozen=True)
class FingerprintSets:
    """Sorted distinct fingerprints of n documents: document i owns
    values[offsets[i]:offsets[i+1]]."""

    values: Fingerprints
    offsets: npt.NDArray[np.int64]

    def of(self, i: int) -> Fingerprints:
        return self.values[self.offsets[i] : self.offsets[i + 1]]

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @property
    def counts(self) -> npt.NDArray[np.int64]:
        return np.diff(self.offsets)

    @classmethod
    def concat(cls, parts: Sequence[FingerprintSets]) -> FingerprintSets:
        if len(parts) == 1:
            return parts[0]
        return cls(*join_ragged([p.values for p in parts], [p.offsets for p in parts]))


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


@cache
def rank_table(num_perm: int, seed: int) -> npt.NDArray[np.int32]:
    """rank[c, i]: the first round at which bin i's probe sequence visits bin c (the
    sequence's length if never).  The bin an empty bin borrows from is the filled bin
    of least rank, which the kernel finds in one pass over the bins per filled bin
    (row c) instead of walking the sequences: a document of a few shingles fills a
    few of K bins, and the walk then takes about K / filled steps per empty bin (6 us
    of a 1-15-word document's 20 us budget, measured).  Pure function of the probe
    table."""
    return ranks_of(probe_table(num_perm, seed))


def ranks_of(probes: npt.NDArray[np.int64]) -> npt.NDArray[np.int32]:
    """`rank_table` of any probe table (K rows of bins < K)."""
    num_perm, rounds = probes.shape
    rank = np.full(num_perm * num_perm, rounds, dtype=np.int32)
    flat = np.repeat(np.arange(num_perm, dtype=np.int64) * num_perm, rounds) + probes.ravel()
    seen, first = np.unique(flat, return_index=True)  # first occurrences (stable sort)
    rank[seen] = (first % rounds).astype(np.int32)
    return np.ascontiguousarray(rank.reshape(num_perm, num_perm).T)


def fingerprint_sets(batch: ShingleBatch, seed: int) -> FingerprintSets:
    """One sort over (document, fingerprint) pairs for the whole batch; 32-bit
    pairs, which sort twice as fast, when the batch's document numbers fit."""
    n = len(batch.offsets) - 1
    mixed = fmix64_np(batch.hashes ^ np.uint64(seed_key(seed, 1)))
    kind = np.dtype(np.uint32 if n <= _NARROW_DOCS else np.uint64)
    pairs: npt.NDArray[np.unsignedinteger[Any]] = (mixed >> _TOP).astype(kind)
    pairs |= np.repeat(np.arange(n, dtype=kind) << FINGERPRINT_BITS, batch.counts)
    pairs.sort()
    keep = np.ones(len(pairs), dtype=np.bool_)
    np.not_equal(pairs[1:], pairs[:-1], out=keep[1:])
    pairs = pairs[keep]
    offsets = np.empty(n + 1, dtype=np.int64)
    offsets[:-1] = np.searchsorted(pairs, np.arange(n, dtype=kind) << FINGERPRINT_BITS)
    offsets[-1] = len(pairs)
    return FingerprintSets((pairs & _FINGERPRINT_MASK).astype(np.uint32), offsets)


def signatures(sets: FingerprintSets, num_perm: int, seed: int) -> Signatures:
    """One signature row per document; rows of documents without shingles are zero."""
    if kernels.native is not None:
        raw = kernels.native.signatures(
            np.ascontiguousarray(sets.values, dtype=np.uint32),
            np.ascontiguousarray(sets.offsets, dtype=np.int64),
            num_perm,
            probe_table(num_perm, seed),
            rank_table(num_perm, seed),
        )
        return np.frombuffer(raw, dtype=np.uint16).reshape(len(sets), num_perm)
    n, counts, values = len(sets), sets.counts, sets.values
    cell = (values.astype(np.int64) * num_perm) >> FINGERPRINT_BITS  # the bin ...
    cell += np.repeat(np.arange(0, n * num_perm, num_perm, dtype=np.int64), counts)  # ... its row
    first = np.ones(len(cell), dtype=np.bool_)  # the first, smallest, of each bin
    np.not_equal(cell[1:], cell[:-1], out=first[1:])
    at = np.flatnonzero(first)
    minima = np.full((n, num_perm), _EMPTY, dtype=np.uint32)
    minima.ravel()[cell[at]] = values[at]
    _densify(minima, counts > 0, num_perm, seed)
    return minima.astype(np.uint16)  # the low 16 bits


def _densify(
    minima: Fingerprints, has_shingles: npt.NDArray[np.bool_], num_perm: int, seed: int
) -> None:
    """Fill empty bins in place from their probe sequences (documents with shingles only)."""
    empty = minima == _EMPTY
    empty[~has_shingles] = False
    docs, bins = np.nonzero(empty)
    if len(docs) == 0:
        return
    filled = (~empty).ravel()
    filled[np.repeat(~has_shingles, num_perm)] = False
    probes = probe_table(num_perm, seed)
    rows = docs * num_perm
    source = np.full(len(docs), -1, dtype=np.int64)
    pending = np.arange(len(docs))
    step = 4  # a probe finds a filled bin 98% of the time at 500 shingles
    for t0 in range(0, probes.shape[1], step):
        cand = probes[bins[pending], t0 : t0 + step]  # (pending, step) bin numbers
        hit = filled[rows[pending][:, None] + cand]
        first = hit.argmax(axis=1)  # the first filled candidate, or 0 if none is
        chosen = cand[np.arange(len(cand)), first]
        found = hit[np.arange(len(cand)), first]
        source[pending[found]] = chosen[found]
        pending = pending[~found]
        if len(pending) == 0:
            break
    if len(pending):  # astronomically rare: fall back to the first filled bin
        source[pending] = filled.reshape(minima.shape)[docs[pending]].argmax(axis=1)
    minima[docs, bins] = minima[docs, source]


def band_keys(sigs: Signatures, bands: int, rows: int, seed: int) -> U64:
    """(n_docs, bands) 64-bit bucket keys; band j hashes rows [j*r, (j+1)*r)."""
    n = sigs.shape[0]
    acc = np.broadcast_to(_band_bases(bands, seed), (n, bands)).copy()
    banded = sigs[:, : bands * rows].reshape(n, bands, rows).astype(np.uint64)
    for i in range(rows):
        acc = fmix64_np(acc ^ (banded[:, :, i] + np.uint64(i << 16)))
    return acc


@dataclass(frozen=True)
class Sketches:
    """What the index stores of a batch's documents, from their shingle hashes: the
    signatures (n, K) and the band keys, n x bands 8-byte big-endian keys end to end
    (the store's key format, so nothing converts them again)."""

    sigs: Signatures
    keys: bytes


def sketch(batch: ShingleBatch, num_perm: int, seed: int, bands: int, rows: int) -> Sketches:
    """`sketch_numpy`'s signatures and band keys, in one compiled pass per document
    when the kernels are built: a bin's minimum needs no sorted, distinct set, and the
    sort that made one was a fifth of preparing a crawl page."""
    native = kernels.native
    if native is None:
        return sketch_numpy(batch, num_perm, seed, bands, rows)
    sigs, keys = native.sketch(
        np.ascontiguousarray(batch.hashes, dtype=np.uint64),
        np.ascontiguousarray(batch.offsets, dtype=np.int64),
        num_perm,
        seed_key(seed, 1),
        probe_table(num_perm, seed),
        rank_table(num_perm, seed),
        _band_bases(bands, seed),
        rows,
    )
    n = len(batch.offsets) - 1
    return Sketches(np.frombuffer(sigs, dtype=np.uint16).reshape(n, num_perm), keys)


def sketch_numpy(batch: ShingleBatch, num_perm: int, seed: int, bands: int, rows: int) -> Sketches:
    """The definition `sketch` computes: fingerprint sets, signatures, band keys."""
    sigs = signatures(fingerprint_sets(batch, seed), num_perm, seed)
    keys = band_keys(sigs, bands, rows, seed).astype(">u8").tobytes()
    return Sketches(sigs, keys)


@cache
def _band_bases(bands: int, seed: int) -> U64:
    """Where each band's hash chain starts (`band_keys`)."""
    return fmix64_np(np.arange(bands, dtype=np.uint64) ^ np.uint64(seed_key(seed, 3)))


def estimate_jaccard(sig: Signatures, others: Signatures) -> npt.NDArray[np.float64]:
    """Estimated Jaccard of `sig` (shape (K,)) against each row of `others`."""
    # Called per document on a handful of rows, where numpy's call overhead is the
    # cost: a ufunc sum and `maximum` take half the time of count_nonzero and clip
    # (agree <= 1, so only the lower bound can bind).
    return estimate_of_agreeing((others == sig).sum(axis=1, dtype=np.int64), sig.shape[-1])


def estimate_of_agreeing(agreeing: npt.NDArray[np.int64], num_perm: int) -> npt.NDArray[np.float64]:
    """The Jaccard estimate of signatures that agree in `agreeing` of their
    `num_perm` positions (any shape): the share agreeing, less the chance that two
    different 16-bit minima agree by accident, clipped at 0 (agree <= 1, so only the
    lower bound can bind).  A strictly rising function of the count, so ranking by
    the count ranks by the estimate."""
    agree = agreeing / num_perm
    accidental = 1.0 / _FINGERPRINT_SPACE
    out: npt.NDArray[np.float64] = np.maximum((agree - accidental) / (1.0 - accidental), 0.0)
    return out


# What `rank_gathered` answers: the candidates' distinct docnos still to be read (or
# None), how many have a signature, and the first of those in rank order with their
# estimates.
Ranked = tuple[npt.NDArray[np.int64] | None, int, list[int], npt.NDArray[np.float64]]


def rank_gathered(
    sig: Signatures,
    matrix: Signatures,
    slot: npt.NDArray[np.int32],
    docnos: npt.NDArray[np.int64],
    bar: float,
    limit: int,
    fill: bool,
) -> Ranked:
    """A document's candidates in the order the exact check tries them: `docnos`
    (ascending) whose signature is row `slot[docno]` of `matrix` (-1: none), by their
    `estimate_jaccard` against `sig`, highest first, ties by docno; the first `limit`
    of them whose estimate is at least `bar`, with those estimates, and how many have
    a signature.  With `fill`, candidates without a row are answered first (their
    docnos, nothing ranked), so the caller reads them and asks again.

    One compiled call (`rank`: the rows looked up and compared in place, then a
    counting sort by the number of agreeing positions, of which the estimate is a
    strictly increasing function) for what numpy does in a dozen calls; the numpy code
    below is the definition."""
    if kernels.native is not None:
        gone, kept, first, raw = kernels.native.rank(
            np.ascontiguousarray(sig, dtype=np.uint16),
            np.ascontiguousarray(matrix, dtype=np.uint16),
            np.ascontiguousarray(slot, dtype=np.int32),
            np.ascontiguousarray(docnos, dtype=np.int64),
            bar,
            limit,
            fill,
        )
        return (
            None if gone is None else np.frombuffer(gone, dtype=np.int64),
            kept,
            first,
            np.frombuffer(raw, dtype=np.float64),
        )
    if len(docnos) and (docnos[0] < 0 or np.any(docnos[1:] <= docnos[:-1])):
        raise ValueError("rank: docnos must ascend from 0")
    rows = np.full(len(docnos), -1, dtype=np.int32)
    inside = docnos < len(slot)
    rows[inside] = slot[docnos[inside]]
    if fill and np.any(rows < 0):
        return docnos[rows < 0], 0, [], np.empty(0, dtype=np.float64)
    keep = rows >= 0
    found = docnos[keep]
    est = estimate_jaccard(sig, matrix[rows[keep]])
    order = np.lexsort((found, -est))
    est = est[order]
    take = min(int(np.count_nonzero(est >= bar)), max(limit, 0))
    ranked: list[int] = found[order[:take]].tolist()
    return None, len(found), ranked, est[:take]


def estimate_rows(sigs: Signatures, others: Signatures) -> npt.NDArray[np.float64]:
    """`estimate_jaccard` of many signatures at once: row i of `sigs` (shape (n, K))
    against each of `others[i]` (shape (n, m, K)); the same arithmetic, value for
    value (the backfill's candidates are ranked by these numbers, the stream's by
    `estimate_jaccard`'s)."""
    agreeing = (others == sigs[:, None, :]).sum(axis=2, dtype=np.int64)
    return estimate_of_agreeing(agreeing, sigs.shape[-1])
