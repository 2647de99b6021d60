"""`sketch.jaccard.exact_jaccard` is the Jaccard of the sets, exactly: against Python's
own sets, on the compiled kernel and on the numpy code (the `kernel` fixture)."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamdedup.sketch.jaccard import exact_jaccard

pytestmark = pytest.mark.usefixtures("kernel")

# Values from a small range overlap often; the extremes of uint64 check that no
# signed or narrower arithmetic slips in (a value above 2^63 stays above the others).
values = st.one_of(st.integers(0, 300), st.integers((1 << 64) - 300, (1 << 64) - 1))
sets = st.lists(values, max_size=400, unique=True).map(lambda v: np.array(sorted(v), np.uint64))


@given(sets, sets)
def test_exact_jaccard_is_the_jaccard_of_the_sets(a: np.ndarray, b: np.ndarray) -> None:
    sa, sb = set(a.tolist()), set(b.tolist())
    expected = len(sa & sb) / len(sa | sb) if sa and sb else 0.0
    assert exact_jaccard(a, b) == expected
    assert exact_jaccard(b, a) == expected


def test_values_differing_only_in_low_bits_are_different_shingles() -> None:
    """Two hashes that share their top 24 bits (one fingerprint in index format 6)
    are two shingles here."""
    top = np.uint64(0xABCDEF) << np.uint64(40)
    a = np.array([top, top + np.uint64(1)], np.uint64)
    b = np.array([top], np.uint64)
    assert exact_jaccard(a, b) == 0.5
    assert exact_jaccard(a, a) == 1.0
    assert exact_jaccard(a, np.zeros(0, np.uint64)) == 0.0
