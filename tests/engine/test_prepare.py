"""Pieces of the preparing stage that have a shortcut for short documents."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from streamdedup.engine.prepare import SMALL_SET, _distinct


@given(
    st.lists(st.integers(0, 2**64 - 1), max_size=3 * SMALL_SET).flatmap(
        lambda values: (
            st.lists(st.sampled_from(values), max_size=3 * SMALL_SET) if values else st.just([])
        )
    )
)
def test_distinct_is_sorted_unique_either_way(values: list[int]) -> None:
    """A short document's set takes the Python path, a long one numpy's: the same
    sorted distinct uint64 array, repeats and values past 2**63 included."""
    got = _distinct(np.array(values, dtype=np.uint64))
    assert got.dtype == np.uint64
    assert got.tolist() == sorted(set(values))
