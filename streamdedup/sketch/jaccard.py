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


def choose_ranked(
    mine: npt.NDArray[np.uint64],
    theirs: list[npt.NDArray[np.uint64]],
    est: npt.NDArray[np.float64],
    measured: npt.NDArray[np.float64],
    threshold: float,
    margin: float,
    max_checks: int,
    start: int = 0,
    best: int = -1,
    best_sim: float = 0.0,
) -> tuple[int, float, int, bool]:
    """The exact-check rule (engine/verify.py `choose_exact`) over candidates already
    in rank order: `est` every candidate's estimate (descending), `theirs` the exact
    sets of the first ones and `measured` their similarities measured elsewhere (NaN:
    not).  Resumes at rank `start` with the best so far (rank `best`, -1: none) and
    returns (rank of the best or -1, its similarity, checks made, `more`): `more` if
    the rule wants the set of rank `checks`, not given yet -- the caller reads more
    sets and calls again, so that sets are read only as far as the rule goes.

    The compiled loop measures each candidate with a merge that stops once a bound
    proves the candidate cannot beat the bar, so a page's many template siblings just
    below the threshold cost a fraction of a full merge each, and no Python runs per
    candidate.  The loop below is its definition."""
    if kernels.native is not None:
        return kernels.native.choose(
            np.ascontiguousarray(mine, dtype=np.uint64),
            theirs,  # sorted sets: contiguous uint64 already (the kernel checks)
            np.ascontiguousarray(est, dtype=np.float64),
            np.ascontiguousarray(measured, dtype=np.float64),
            threshold,
            margin,
            max_checks,
            start,
            best,
            best_sim,
        )
    for checks in range(start, len(est)):
        floor = threshold if best < 0 else best_sim
        if checks >= max_checks or est[checks] < floor - margin:
            return best, best_sim, checks, False
        if checks >= len(theirs):
            return best, best_sim, checks, True
        sim = float(measured[checks])
        if sim != sim:  # NaN: not measured elsewhere
            sim = numpy_jaccard(mine, theirs[checks])
        if sim >= threshold and (best < 0 or sim > best_sim):
            best, best_sim = checks, sim
    return best, best_sim, max(start, len(est)), False
