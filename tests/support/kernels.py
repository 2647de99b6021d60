"""The compiled kernels for tests that hold them to the numpy code they mirror."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from hypothesis import strategies as st

from streamdedup import kernels

compiled = kernels.load("compiled")
needs_compiled = pytest.mark.skipif(compiled is None, reason="compiled kernels not built")


@contextmanager
def numpy_code() -> Iterator[None]:
    """The numpy code runs inside, whatever kernels are built."""
    saved, kernels.native = kernels.native, None
    try:
        yield
    finally:
        kernels.native = saved


@functools.cache
def subsets(of: tuple[bytes, ...]) -> st.SearchStrategy[set[bytes]]:
    """Sets of the keys `of`, a strategy made once per tuple of keys: the search-kernel
    properties draw the hot keys from each example's own keys, and making the strategy
    afresh every example took a third of those tests' CPU."""
    return st.sets(st.sampled_from(of))
