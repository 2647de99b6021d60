"""The compiled kernels for tests that hold them to the numpy code they mirror."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest

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
