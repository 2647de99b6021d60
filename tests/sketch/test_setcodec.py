import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamdedup.sketch.setcodec import decode, encode, encode_sets, jaccard
from streamdedup.sketch.signature import FINGERPRINT_BITS, FingerprintSets

# every test here runs on the compiled kernels and on the numpy code (conftest)
pytestmark = pytest.mark.usefixtures("kernel")

fingerprint = st.integers(0, (1 << FINGERPRINT_BITS) - 1)
sets = st.lists(fingerprint, max_size=3000, unique=True).map(
    lambda v: np.array(sorted(v), np.uint32)
)


@given(st.lists(sets, min_size=1, max_size=6))
def test_batch_encoding_round_trips(batch: list[np.ndarray]) -> None:
    offsets = np.zeros(len(batch) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(b) for b in batch])
    values = np.concatenate(batch).astype(np.uint32)
    blobs = encode_sets(FingerprintSets(values, offsets))
    for original, blob in zip(batch, blobs, strict=True):
        assert decode(blob).tolist() == original.tolist()
        assert encode(original) == blob


def test_encoding_is_compact_for_typical_pages() -> None:
    rng = np.random.default_rng(1)
    values = np.unique(rng.integers(0, 1 << FINGERPRINT_BITS, 500)).astype(np.uint32)
    assert len(encode(values)) < 2.4 * len(values)


@given(sets, sets)
def test_jaccard_is_exact(a: np.ndarray, b: np.ndarray) -> None:
    sa, sb = set(a.tolist()), set(b.tolist())
    expected = len(sa & sb) / len(sa | sb) if sa and sb else 0.0
    assert jaccard(a, b) == expected
    assert jaccard(a, encode(b)) == expected  # a stored set, as verification reads it


def test_large_sets_use_narrow_low_parts_and_round_trip() -> None:
    rng = np.random.default_rng(2)
    big = np.unique(rng.integers(0, 1 << FINGERPRINT_BITS, 200_000)).astype(np.uint32)
    small = np.array([3, 70_000], dtype=np.uint32)
    values = np.concatenate([small, big, small])
    offsets = np.array([0, 2, 2 + len(big), len(values)], dtype=np.int64)
    blobs = encode_sets(FingerprintSets(values, offsets))
    assert [b[4] for b in blobs] == [3, 1, 3]  # bytes per low part
    assert [decode(b).tolist() for b in blobs] == [small.tolist(), big.tolist(), small.tolist()]
