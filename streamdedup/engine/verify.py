"""Exact verification of a document's LSH candidates (`verify = "exact"`), and what
the engine keeps in memory within one batch to do it cheaply (`BatchMemory`).

Candidates are taken in order of their signature estimate and measured exactly: the
Jaccard similarity of the 64-bit shingle hashes of both texts (the candidate's from
its stored text, shingled again; `sketch.jaccard`).  The search stops at the first
candidate whose estimate is too far below the bar, or after a set number of exact
checks.

Why the stored text and nothing narrower (index format 7): format 6 also stored each
page's 24-bit fingerprint set, as a sound filter before the exact check.  The filter
cost 1,118 of the 3,455 bytes a page of the crawl-like benchmark took (the target is
2,500), and no speed: it spared a near-threshold candidate's decompression and
re-shingling (about 12 us), but every true duplicate paid for both the filter and the
check, and every page for coding and writing its set.  Side by side, format 7 was as
fast or faster on both benchmark streams (docs/benchmarks.md)."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from streamdedup.engine.prepare import Prepared, exact_shingles, own_shingles
from streamdedup.engine.sealed import Store
from streamdedup.sketch.jaccard import exact_jaccard
from streamdedup.sketch.shingle import Shingler

EXACT_CACHE = 4096  # candidates' exact sets kept within a batch (~4 KB each)


class BatchMemory:
    """The current batch's indexed documents: docno -> where their signature and
    shingle hashes are in memory (`fresh`), so a later document of the same batch checks
    against them without reading and decoding what was just written; and the exact
    shingle sets of this batch's re-checked candidates (`exact`: re-emissions of a
    page check against the same earlier page again and again).  Not kept past the
    batch (`clear`): it holds the batch's arrays."""

    def __init__(self, shingler: Shingler) -> None:
        self._shingler = shingler  # exact re-checks
        self.fresh: dict[int, tuple[Prepared, int]] = {}
        self.exact: dict[int, npt.NDArray[np.uint64]] = {}

    def clear(self) -> None:
        self.fresh = {}
        self.exact = {}

    def remember(self, docno: int, p: Prepared, i: int) -> None:
        self.fresh[docno] = (p, i)

    def forget(self, docno: int) -> None:
        self.fresh.pop(docno, None)
        self.exact.pop(docno, None)

    def signature(self, t: Store, docno: int) -> bytes | None:
        """A candidate's signature: from memory if this batch holds it, else as stored."""
        fresh = self.fresh.get(docno)
        return fresh[0].sig_bytes[fresh[1]] if fresh is not None else t.signature(docno)

    def exact_shingles(self, t: Store, docno: int) -> npt.NDArray[np.uint64]:
        """A candidate's exact shingle set: from memory if this batch holds it, else
        from its stored text, shingled again."""
        got = self.exact.get(docno)
        if got is not None:
            return got
        fresh = self.fresh.get(docno)
        if fresh is not None and fresh[0].hashes is not None:
            got = own_shingles(*fresh)
        else:
            got = exact_shingles(self._shingler, t.text(docno))
        if len(self.exact) >= EXACT_CACHE:
            self.exact.clear()
        self.exact[docno] = got
        return got


def exact_margin(threshold: float, num_perm: int) -> float:
    """How far below the bar a candidate's signature estimate may be and still be
    checked exactly.  Estimates have sd sqrt(J(1-J)/K); a candidate four of them below
    the bar (P ~ 3e-5 for a true match) is not worth an exact check.  One definition
    for the engine and the backfill, which must choose the same candidates."""
    return 4.0 * math.sqrt(threshold * (1.0 - threshold) / num_perm) + 0.01


def best_exact(
    t: Store,
    memory: BatchMemory,
    p: Prepared,
    i: int,
    docnos: list[int],
    est: npt.NDArray[np.float64],
    order: list[int],
    threshold: float,
    margin: float,
    max_checks: int,
) -> tuple[tuple[float, int] | None, int]:
    """The candidate (of `docnos`, tried in `order` of their estimates `est`) most
    similar to document `i` of `p` by exact Jaccard, at least `threshold`, as
    (similarity, docno); and the number of exact checks made."""
    return choose_exact(
        lambda: own_shingles(p, i),
        lambda d: memory.exact_shingles(t, d),
        docnos,
        est,
        order,
        threshold,
        margin,
        max_checks,
    )


def choose_exact(
    mine_of: Callable[[], npt.NDArray[np.uint64]],
    theirs: Callable[[int], npt.NDArray[np.uint64]],
    docnos: list[int],
    est: npt.NDArray[np.float64],
    order: list[int],
    threshold: float,
    margin: float,
    max_checks: int,
) -> tuple[tuple[float, int] | None, int]:
    """`best_exact`'s rule, given where the exact sets come from (`mine_of()`: the
    document's own, computed once a candidate is close enough; `theirs(docno)`: a
    candidate's), so that the backfill's executors apply the very same rule."""
    mine: npt.NDArray[np.uint64] | None = None  # once a candidate is close enough
    best: tuple[float, int] | None = None
    for checks, j in enumerate(order):
        floor = threshold if best is None else best[0]
        if checks >= max_checks or est[j] < floor - margin:
            return best, checks
        d = docnos[j]
        if mine is None:
            mine = mine_of()
        sim = exact_jaccard(mine, theirs(d))
        if sim >= threshold and (best is None or sim > best[0]):
            best = (sim, d)
    return best, len(order)
