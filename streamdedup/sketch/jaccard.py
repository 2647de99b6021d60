"""The exact Jaccard similarity of two documents' shingle sets: what `--verify exact`
reports and decides on.

A document's exact set is its sorted, distinct 64-bit shingle hashes (the new
document's from its own shingling, a stored one's from its stored text shingled
again: see engine/verify.py).  Nothing narrower is exact: with 24-bit fingerprints,
two shingles of one shared template fall on one fingerprint in about 1% of 600-shingle
pages (n^2 / 2^25), the union shrinks, and a pair at 0.8992 reads 0.9021.  The 64-bit
hashes can collide too, with probability about |A||B| / 2^64 for a pair of pages
(2e-14 for two 600-shingle pages): negligible beside any other error of the system.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from streamdedup.sketch import kernels


def exact_jaccard(a: npt.NDArray[np.uint64], b: npt.NDArray[np.uint64]) -> float:
    """Jaccard of two sorted arrays of distinct 64-bit values: one merge pass in the
    compiled kernel (a few microseconds for two pages, a quarter of numpy's
    `searchsorted` with its call overhead), else the numpy code it mirrors."""
    if kernels.native is not None:
        return kernels.native.jaccard(
            np.ascontiguousarray(a, dtype=np.uint64), np.ascontiguousarray(b, dtype=np.uint64)
        )
    return numpy_jaccard(a, b)


def numpy_jaccard(a: npt.NDArray[Any], b: npt.NDArray[Any]) -> float:
    """The definition: the shared values of `a` found in `b` by binary search."""
    if len(a) == 0 or len(b) == 0:
        return 0.0
    pos = np.searchsorted(b, a)
    pos[pos == len(b)] = 0
    inter = int(np.count_nonzero(b[pos] == a))
    return inter / (len(a) + len(b) - inter)
