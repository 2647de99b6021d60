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

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from streamdedup import kernels


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
    inter = _shared(a, b)
    return inter / (len(a) + len(b) - inter)


def numpy_containment(a: npt.NDArray[Any], b: npt.NDArray[Any]) -> float:
    """|A n B| / |A| (0 for an empty A): the containment of `a` in `b`."""
    if len(a) == 0 or len(b) == 0:
        return 0.0
    return _shared(a, b) / len(a)


def _shared(a: npt.NDArray[Any], b: npt.NDArray[Any]) -> int:
    """The values of sorted distinct `a` found in sorted distinct `b`."""
    pos = np.searchsorted(b, a)
    pos[pos == len(b)] = 0
    return int(np.count_nonzero(b[pos] == a))


SLICES = 256  # slices of the 64-bit hash range, by the top 8 bits
_HEADER = np.dtype("<u8")
_VALUES = np.dtype("<u8")
_COUNTS = np.dtype("u1")

# A set as the candidate search keeps it, packed in one bytes object: a uint64 header
# (the number of slice counts: SLICES, or 0 for a set with more than 255 values in a
# slice), its values' counts per slice (a byte each), then its values (sorted,
# distinct uint64), little-endian.
# One bytes object, not two numpy arrays: the compiled check reads it in place, where
# the buffer protocol on two arrays cost more per check than the check's slice filter
# (a template-heavy page makes about 90 checks).
Summary = bytes
_COUNTED = np.array([SLICES], _HEADER).tobytes()  # the header of a set with counts


def summarise(values: npt.NDArray[np.uint64]) -> Summary:
    """A sorted distinct set with its counts per slice of the hash range (none for a
    set with a count past a byte: tens of thousands of values).  Two sets share at
    most the fewer of their counts in each slice: the compiled check (`choose_ranked`)
    sums those minima, a sound bound on the intersection, and rejects a candidate it
    proves below the bar without a merge.  256 bytes a set, about a twentieth of a
    page's (bytes, not 16-bit counts: the check reads half as much memory)."""
    body = np.ascontiguousarray(values, dtype=_VALUES).tobytes()
    top = (np.asarray(values, dtype=np.uint64) >> np.uint64(56)).astype(np.intp)
    counts = np.bincount(top, minlength=SLICES)
    if counts.max() > 255:
        return np.array([0], _HEADER).tobytes() + body
    return _COUNTED + counts.astype(_COUNTS).tobytes() + body


def summary_of(hashes: npt.NDArray[np.uint64]) -> Summary:
    """`summarise` of the sorted distinct values of `hashes` (any order, repeats
    allowed): one compiled pass (sorting by the top byte is the slice count's pass
    already, and leaves each slice a few values to sort), else numpy's sort."""
    if kernels.native is not None:
        return kernels.native.summarise(np.ascontiguousarray(hashes, dtype=np.uint64))
    return summarise(sorted_distinct(hashes))


def summaries_of(
    hashes: npt.NDArray[np.uint64], offsets: npt.NDArray[np.int64], picks: list[int]
) -> list[Summary]:
    """`summary_of(hashes[offsets[j]:offsets[j + 1]])` for each j of `picks`: one
    compiled call for a batch's documents (`summarise_many`), else one each."""
    if kernels.native is not None:
        return kernels.native.summarise_many(
            np.ascontiguousarray(hashes, dtype=np.uint64),
            np.ascontiguousarray(offsets, dtype=np.int64),
            np.asarray(picks, dtype=np.int64),
        )
    return [summary_of(hashes[offsets[j] : offsets[j + 1]]) for j in picks]


def sorted_distinct(hashes: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """The definition `summary_of` mirrors: sorted distinct values, by a sort and a mask."""
    out = np.sort(np.asarray(hashes, dtype=np.uint64))
    first = np.ones(len(out), dtype=np.bool_)
    np.not_equal(out[1:], out[:-1], out=first[1:])
    return out[first]


def values_of(summary: Summary) -> npt.NDArray[np.uint64]:
    """The set of a summary (a read-only view)."""
    at = 8 + int(np.frombuffer(summary, _HEADER, count=1)[0])
    return np.frombuffer(summary, _VALUES, offset=at)


def counts_of(summary: Summary) -> npt.NDArray[np.uint8]:
    """A summary's counts per slice (empty: a set too large to count)."""
    n = int(np.frombuffer(summary, _HEADER, count=1)[0])
    return np.frombuffer(summary, _COUNTS, count=n, offset=8)


def summary_values(summary: Summary) -> int:
    """What a kept summary costs, in 8-byte values."""
    return len(summary) // 8


class SetTable:
    """The sizes and slice counts of the exact sets the candidate search keeps, one
    contiguous row a set, found by docno (`rows`, -1: none), so the compiled check
    rejects a candidate below the bar by its row alone.  Measured on template-heavy
    pages: 92% of checks fail the slice filter, and reading a summary through its dict
    was most of their cost.  A set without counts (`summarise`: a slice past 255
    values) gets no row.  Rows freed by `drop` are reused."""

    def __init__(self) -> None:
        self.rows: npt.NDArray[np.int32] = np.full(0, -1, dtype=np.int32)
        self.counts: npt.NDArray[np.uint8] = np.zeros((0, SLICES), dtype=np.uint8)
        self.sizes: npt.NDArray[np.int64] = np.zeros(0, dtype=np.int64)
        self._free: list[int] = []
        self._used = 0

    def put(self, docno: int, summary: Summary) -> None:
        """Docno `docno`'s set is `summary`.  A docno's set never changes: one that
        has a row keeps it as it is (a batch's own set is put once pending and again
        once kept)."""
        self.put_many([docno], [summary])

    def put_many(self, docnos: list[int], summaries: list[Summary]) -> None:
        """`put` of each docno's set, in one pass of array operations (the sets a
        search brings up to date are thousands: a `put` each was a few numpy scalar
        writes each).  A docno twice gets one row (its sets are the same)."""
        new = {
            d: got
            for d, got in zip(docnos, summaries, strict=True)
            if got[:8] == _COUNTED and (d >= len(self.rows) or self.rows[d] < 0)
        }
        if not new:
            return
        top = max(new) + 1
        if top > len(self.rows):
            grown = np.full(max(2 * len(self.rows), top, 1024), -1, dtype=np.int32)
            grown[: len(self.rows)] = self.rows
            self.rows = grown
        rows = self._take(len(new))
        self.rows[list(new)] = rows
        sets = list(new.values())
        block = b"".join([got[8 : 8 + SLICES] for got in sets])
        self.counts[rows] = np.frombuffer(block, dtype=np.uint8).reshape(-1, SLICES)
        self.sizes[rows] = [(len(got) - 8 - SLICES) // 8 for got in sets]

    def _take(self, n: int) -> npt.NDArray[np.intp]:
        """n free rows: freed ones first, then new ones at the end (grown as needed)."""
        reused = [self._free.pop() for _ in range(min(n, len(self._free)))]
        fresh = n - len(reused)
        if self._used + fresh > len(self.sizes):
            size = max(2 * len(self.sizes), self._used + fresh, 1024)
            counts = np.zeros((size, SLICES), dtype=np.uint8)
            counts[: len(self.counts)] = self.counts
            sizes = np.zeros(size, dtype=np.int64)
            sizes[: len(self.sizes)] = self.sizes
            self.counts, self.sizes = counts, sizes
        rows = np.concatenate(
            [np.asarray(reused, dtype=np.intp), np.arange(self._used, self._used + fresh)]
        )
        self._used += fresh
        return rows

    def drop(self, docno: int) -> None:
        """Docno `docno`'s set is no longer kept."""
        if docno < len(self.rows):
            row = int(self.rows[docno])
            if row >= 0:
                self.rows[docno] = -1
                self._free.append(row)


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
    table: SetTable | None = None,
    contain: bool = False,
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
    answer: the loop below, which measures every candidate in full, is the definition.

    `table` (optional) holds the sizes and slice counts of sets the dicts hold or
    held (a docno's set never changes), in rows by docno: the compiled loop rejects
    most candidates from it alone (without the dict lookup and the summary's five
    cache lines, and without reading again a set let go); the loop below needs none.

    `contain`: the measure is the containment of `mine` in each candidate
    (|A n B| / |A|, containment.py), not their Jaccard; every bound holds for both."""
    if kernels.native is not None:
        return kernels.native.choose_packed(
            mine,
            sets,
            ranked,
            np.ascontiguousarray(est, dtype=np.float64),
            threshold,
            margin,
            max_checks,
            start,
            best,
            best_sim,
            *_table_args(table),
            contain,
        )
    measure = numpy_containment if contain else numpy_jaccard
    mine_values = values_of(mine)
    for checks in range(start, len(est)):
        floor = threshold if best < 0 else best_sim
        if checks >= max_checks or est[checks] < floor - margin:
            return best, best_sim, checks, False
        theirs = next((s[ranked[checks]] for s in sets if ranked[checks] in s), None)
        if theirs is None:
            return best, best_sim, checks, True
        sim = measure(mine_values, values_of(theirs))
        if sim >= threshold and (best < 0 or sim > best_sim):
            best, best_sim = checks, sim
    return best, best_sim, max(start, len(est)), False


_TableArgs = tuple[npt.NDArray[Any] | None, npt.NDArray[Any] | None, npt.NDArray[Any] | None]


def _table_args(table: SetTable | None) -> _TableArgs:
    """A table as the compiled choices take it: its rows, counts and sizes, or None's."""
    return (None, None, None) if table is None else (table.rows, table.counts, table.sizes)


@dataclass
class Choices:
    """Where `choose_all` is in each document's rule: the rank of its best so far
    (-1: none), that one's similarity, and the checks made; updated in place."""

    best: npt.NDArray[np.int64]
    best_sim: npt.NDArray[np.float64]
    checks: npt.NDArray[np.int64]

    @classmethod
    def start(cls, n: int) -> Choices:
        return cls(np.full(n, -1, np.int64), np.zeros(n, np.float64), np.zeros(n, np.int64))


def choose_all(
    mines: list[Summary],
    sets: tuple[dict[int, Summary], ...],
    ranked: npt.NDArray[np.int64],
    est: npt.NDArray[np.float64],
    at: npt.NDArray[np.int64],
    threshold: float,
    margin: float,
    max_checks: int,
    state: Choices,
    first: int = 0,
    table: SetTable | None = None,
    contain: bool = False,
) -> int:
    """`choose_ranked` for documents `first`, `first + 1`, ... of a batch: document
    j's own set `mines[j]`, its ranked candidates `ranked[at[j]:at[j + 1]]` with their
    estimates, its progress in `state` (resumed from, and updated).  Returns the first
    document whose rule wants a set no dict holds (that of rank `state.checks[j]`:
    the caller reads it and calls again from j), or `len(mines)` when all are done.

    One compiled call for a batch's documents (`choose_batch`), where a call each
    cost more Python than checking (the list of its candidates, the call, the loop
    around it) for a template page's hundred candidates most rejected by their rows.
    The loop below, one `choose_ranked` a document, is the definition."""
    if kernels.native is not None:
        return kernels.native.choose_batch(
            mines,
            sets,
            np.ascontiguousarray(ranked, dtype=np.int64),
            np.ascontiguousarray(est, dtype=np.float64),
            np.ascontiguousarray(at, dtype=np.int64),
            threshold,
            margin,
            max_checks,
            state.best,
            state.best_sim,
            state.checks,
            first,
            *_table_args(table),
            contain,
        )
    return choose_each(
        lambda mine, r, e, start, best, best_sim: choose_ranked(
            mine, sets, r, e, threshold, margin, max_checks, start, best, best_sim, None, contain
        ),
        mines,
        ranked,
        est,
        at,
        state,
        first,
    )


# One item's rule, resumable: (its kept representation, its ranked candidates, their
# estimates, where to resume, the best so far and its measure) -> (best, its measure,
# checks made, `more`), as `choose_ranked` answers.
ChooseOne = Callable[
    [Any, list[int], npt.NDArray[np.float64], int, int, float], tuple[int, float, int, bool]
]


def choose_each(
    one: ChooseOne,
    mines: Sequence[Any],
    ranked: npt.NDArray[np.int64],
    est: npt.NDArray[np.float64],
    at: npt.NDArray[np.int64],
    state: Choices,
    first: int,
) -> int:
    """`choose_all`'s walk over a batch's items with one item's rule `one` (any
    family's): item j's candidates `ranked[at[j]:at[j + 1]]`, its progress in `state`
    (resumed from, and updated); the first item whose rule wants a representation no
    dict holds, or `len(mines)`.  An item without candidates keeps its state (its
    rule would make no check), so it is not asked."""
    bounds = at.tolist()
    for j in range(first, len(mines)):
        a, b = bounds[j], bounds[j + 1]
        if a == b:
            continue
        best, best_sim, checks, more = one(
            mines[j],
            ranked[a:b].tolist(),
            est[a:b],
            int(state.checks[j]),
            int(state.best[j]),
            float(state.best_sim[j]),
        )
        state.best[j], state.best_sim[j], state.checks[j] = best, best_sim, checks
        if more:
            return j
    return len(mines)
