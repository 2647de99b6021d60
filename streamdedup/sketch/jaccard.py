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


SLICES = 256  # slices of the 64-bit hash range, by the top 8 bits
_NO_COUNTS: npt.NDArray[np.uint16] = np.zeros(0, dtype=np.uint16)

# A set as the candidate search keeps it: (its values' counts per slice, its values).
Summary = tuple[npt.NDArray[np.uint16], npt.NDArray[np.uint64]]


def summarise(values: npt.NDArray[np.uint64]) -> Summary:
    """A sorted distinct set with its counts per slice of the hash range (none for a
    set so large that a count could pass 16 bits).  Two sets share at most the fewer
    of their counts in each slice: the compiled check (`choose_ranked`) sums those
    minima, a sound bound on the intersection, and rejects a candidate it proves
    below the bar without a merge.  512 bytes a set, about a tenth of a page's."""
    if len(values) >= 1 << 16:
        return _NO_COUNTS, values
    top = (values >> np.uint64(56)).astype(np.intp)
    return np.bincount(top, minlength=SLICES).astype(np.uint16), values


def choose_ranked(
    mine: Summary,
    sets: tuple[dict[int, Summary], ...],
    ranked: list[int],
    est: npt.NDArray[np.float64],
    threshold: float,
    margin: float,
    max_checks: int,
    start: int = 0,
    best: int = -1,
    best_sim: float = 0.0,
) -> tuple[int, float, int, bool]:
    """The exact-check rule (engine/verify.py `choose_exact`) over candidates already
    in rank order: `ranked` their docnos, `est` their estimates (descending), `sets`
    dicts docno -> `summarise`d exact set, looked up in turn.  Resumes at rank `start` with the best
    so far (rank `best`, -1: none) and returns (rank of the best or -1, its
    similarity, checks made, `more`): `more` if the rule wants the set of rank
    `checks` and no dict holds it -- the caller reads it and calls again, so sets are
    read only as far as the rule goes.

    The compiled loop looks the sets up itself and rejects a candidate as soon as a
    bound proves it cannot beat the bar -- the sizes, the slice counts (`summarise`),
    then the merge, which stops once the values left cannot lift the intersection
    enough -- so a page's many template siblings just below the threshold cost a
    fraction of a merge each, and no Python runs per candidate.  The bounds change no
    answer: the loop below, which measures every candidate in full, is the definition."""
    if kernels.native is not None:
        return kernels.native.choose(
            mine[0],
            np.ascontiguousarray(mine[1], dtype=np.uint64),
            sets,  # summaries: contiguous arrays already (the kernel checks)
            ranked,
            np.ascontiguousarray(est, dtype=np.float64),
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
        theirs = next((s[ranked[checks]] for s in sets if ranked[checks] in s), None)
        if theirs is None:
            return best, best_sim, checks, True
        sim = numpy_jaccard(mine[1], theirs[1])
        if sim >= threshold and (best < 0 or sim > best_sim):
            best, best_sim = checks, sim
    return best, best_sim, max(start, len(est)), False
