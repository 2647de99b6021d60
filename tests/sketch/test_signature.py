"""MinHash (one-permutation hashing + densification) against exact Jaccard."""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamdedup.sketch.hashing import fmix64
from streamdedup.sketch.shingle import ShingleBatch
from streamdedup.sketch.signature import (
    FINGERPRINT_BITS,
    band_keys,
    estimate_jaccard,
    fingerprint_sets,
    seed_key,
    signatures,
)

# every test here runs on the compiled kernels and on the numpy code (conftest)
pytestmark = pytest.mark.usefixtures("kernel")


def sign(batch: ShingleBatch, num_perm: int, seed: int) -> np.ndarray:
    return signatures(fingerprint_sets(batch, seed), num_perm, seed)


def reference_fingerprints(hashes: list[int], seed: int) -> list[int]:
    return sorted({fmix64(h ^ seed_key(seed, 1)) >> (64 - FINGERPRINT_BITS) for h in hashes})


@given(
    st.lists(st.integers(0, 2**64 - 1), max_size=500),
    st.lists(st.integers(0, 2**64 - 1), max_size=500),
    st.integers(0, 2**32),
)
def test_fingerprint_sets_are_sorted_distinct_top_bits_of_seeded_hashes(
    a: list[int], b: list[int], seed: int
) -> None:
    hashes = np.array(a + b, dtype=np.uint64)
    batch = ShingleBatch(hashes, np.array([0, len(a), len(a) + len(b)], dtype=np.int64))
    fps = fingerprint_sets(batch, seed)
    for i, src in enumerate((a, b)):
        assert fps.of(i).tolist() == reference_fingerprints(src, seed)


@pytest.mark.parametrize("n_docs", [1, 255, 256, 257, 600])
def test_small_and_large_batches_give_the_same_sets_and_signatures(n_docs: int) -> None:
    """Batches of up to 256 documents sort 32-bit pairs, larger ones 64-bit pairs;
    a document's set and signature must not depend on which."""
    rng = np.random.default_rng(n_docs)
    counts = rng.integers(0, 40, size=n_docs)
    counts[::7] = 0  # documents without shingles in between
    hashes = rng.integers(0, 2**63, size=int(counts.sum())).astype(np.uint64) * np.uint64(3)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    whole = fingerprint_sets(ShingleBatch(hashes, offsets), 9)
    sigs = signatures(whole, 64, 9)
    for i in range(n_docs):
        one = ShingleBatch(hashes[offsets[i] : offsets[i + 1]], np.array([0, counts[i]]))
        alone = fingerprint_sets(one, 9)
        assert whole.of(i).tolist() == alone.of(0).tolist()
        assert whole.of(i).tolist() == reference_fingerprints(one.hashes.tolist(), 9)
        assert sigs[i].tolist() == signatures(alone, 64, 9)[0].tolist()
        assert (sigs[i] == 0).all() == (counts[i] == 0)


@given(
    st.lists(st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=300), max_size=4),
    st.sampled_from([16, 100, 128, 256]),
)
def test_each_filled_bin_holds_its_smallest_fingerprint(docs: list[list[int]], k: int) -> None:
    """The definition, one document and one bin at a time; an empty bin holds the
    value of some filled bin of the same document (densification)."""
    offsets = np.cumsum([0] + [len(d) for d in docs])
    batch = ShingleBatch(
        np.array([h for d in docs for h in d], dtype=np.uint64), offsets.astype(np.int64)
    )
    sig = sign(batch, k, seed=5)
    for row, hashes in zip(sig.tolist(), docs, strict=True):
        bins: dict[int, int] = {}
        for f in reference_fingerprints(hashes, 5):
            bins.setdefault(f * k >> FINGERPRINT_BITS, f & 0xFFFF)
        for i, value in enumerate(row):
            assert value == bins[i] if i in bins else value in bins.values()


def _pairs(rng: np.random.Generator, count: int, max_size: int) -> tuple[ShingleBatch, list[float]]:
    docs: list[np.ndarray] = []
    truth: list[float] = []
    for _ in range(count):
        na = int(rng.integers(1, max_size))
        shared = int(rng.integers(0, na + 1))
        extra = int(rng.integers(0, max_size))
        pool = rng.choice(2**62, size=na + extra, replace=False).astype(np.uint64)
        a, b = pool[:na], np.concatenate([pool[:shared], pool[na:]])
        docs += [a, b]
        inter = shared
        union = na + extra
        truth.append(inter / union)
    offsets = np.zeros(len(docs) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(d) for d in docs])
    return ShingleBatch(np.concatenate(docs), offsets), truth


@pytest.mark.parametrize("num_perm", [32, 128, 256])
def test_estimator_error_within_the_seed_bound(num_perm: int) -> None:
    """002_ea8a...: with n = 2 eps^-2 ln(2/delta) hashes, P(|est - J| >= eps) <= delta."""
    rng = np.random.default_rng(num_perm)
    batch, truth = _pairs(rng, 1500, 600)
    sig = sign(batch, num_perm, seed=7)
    est = np.array(
        [estimate_jaccard(sig[2 * i], sig[2 * i + 1][None, :])[0] for i in range(len(truth))]
    )
    err = est - np.array(truth)
    for delta in (0.01, 0.05, 0.2):
        eps = math.sqrt(2 * math.log(2 / delta) / num_perm)
        assert np.mean(np.abs(err) >= eps) <= delta
    # Sharper than the bound: unbiased, with the spread of K independent trials.
    assert abs(err.mean()) < 0.01
    j = np.array(truth)
    assert err.std() <= 1.2 * math.sqrt(np.mean(j * (1 - j)) / num_perm)


def test_tiny_sets_are_densified_consistently() -> None:
    hashes = np.array([11, 22, 11, 22, 33], dtype=np.uint64)
    batch = ShingleBatch(hashes, np.array([0, 2, 4, 5], dtype=np.int64))
    sig = sign(batch, 128, seed=3)
    assert (sig[0] == sig[1]).all()  # same set, same signature, every bin filled
    assert estimate_jaccard(sig[0], sig[2][None, :])[0] < 0.2


def test_empty_documents_get_a_zero_row() -> None:
    batch = ShingleBatch(np.array([5], dtype=np.uint64), np.array([0, 0, 1], dtype=np.int64))
    sig = sign(batch, 64, seed=1)
    assert sig.shape == (2, 64) and not sig[0].any()


def test_seed_changes_signatures_and_is_deterministic() -> None:
    batch = ShingleBatch(np.arange(1, 200, dtype=np.uint64), np.array([0, 199], dtype=np.int64))
    a, b, c = (sign(batch, 128, seed=s) for s in (1, 1, 2))
    assert (a == b).all() and not (a == c).all()


def test_band_keys_depend_only_on_their_rows() -> None:
    rng = np.random.default_rng(0)
    sig = rng.integers(0, 2**16, size=(2, 128), dtype=np.uint16)
    sig[1, :7] = sig[0, :7]  # band 0 agrees, the rest differ
    keys = band_keys(sig, 18, 7, seed=1)
    assert keys.shape == (2, 18)
    assert keys[0, 0] == keys[1, 0]
    assert (keys[0, 1:] != keys[1, 1:]).all()
    assert len(set(keys[0].tolist())) == 18  # equal rows in different bands differ
