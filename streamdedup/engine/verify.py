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

import bisect
import math
from collections import OrderedDict
from collections.abc import Callable
from typing import cast

import numpy as np
import numpy.typing as npt

from streamdedup.engine.prepare import Prepared, own_hashes, stored_hashes
from streamdedup.engine.sealed.asking import Store
from streamdedup.sketch.jaccard import (
    Choices,
    SetTable,
    Summary,
    choose_all,
    choose_ranked,
    exact_jaccard,
    summaries_of,
    summary_of,
    summary_values,
)
from streamdedup.sketch.shingle import ShingleBatch, Shingler
from streamdedup.sketch.signature import rank_gathered

# Exact sets kept across batches, in 64-bit values (8 bytes each): 64 MB, about 13,000
# template-heavy pages.  A page's siblings are checked against the same earlier pages
# batch after batch; shingling a stored text again costs 50-100 us, a kept set nothing.
EXACT_VALUES = 8 << 20

# Table rows kept for sets let go (`BatchMemory.exact`'s oldest): 264 bytes each where
# the set took about 5 KB, so 65,536 of them cost 17 MB.  A row is what rejects a
# template sibling below the bar (92% of a template page's checks); without it the
# rejected sibling's text was read and shingled again (on template-heavy 20k: 1,838 of
# the 2,698 texts read were of sets let go, mostly to be rejected by their row).
ORPHAN_ROWS = 1 << 16


class BatchMemory:
    """What the engine keeps in memory to search candidates cheaply.

    Within one batch: the batch's indexed documents (`fresh`: where their signature
    and shingle hashes are, so a later document of the batch checks against them
    without reading and decoding what was just written), and the signatures of the
    candidates read so far, as rows of one matrix found by document number (`_slot`),
    so a document's candidates are gathered by one fancy index rather than one
    LMDB read and one dict lookup each (a template-heavy page has hundreds).

    Across batches: the exact shingle sets of candidates (`exact`), bounded by
    EXACT_VALUES, oldest dropped first, and their rows of `table` (sizes and slice
    counts) for ORPHAN_ROWS more once their sets are dropped: a row alone rejects most
    candidates, and one it does not reject is read again.  A document number's text
    never changes (numbers are never reused; a copy that adopts an owner's text has
    the same text), so a kept set or row stays right.  Only committed documents' sets
    are kept: a stored candidate's at once, the batch's own ones (`_pending`) once
    `commit` says the batch's transaction committed; a batch run again or abandoned
    drops them (`clear`)."""

    def __init__(
        self, shingler: Shingler, exact_values: int = EXACT_VALUES, orphan_rows: int = ORPHAN_ROWS
    ) -> None:
        self._shingler = shingler  # exact re-checks
        self.fresh: dict[int, tuple[Prepared, int]] = {}
        # the docnos of `fresh`'s documents, by (id of their part, index): a batch
        # searched as a whole (engine/search.py) remembers every document before it
        # checks any, so `own` finds there the set a document has as a candidate
        self._fresh_docno: dict[tuple[int, int], int] = {}
        # (insertion ordered, the oldest let go first: OrderedDict's popitem is O(1),
        # where a dict's first key after many pops from its front is a scan)
        self.exact: OrderedDict[int, Summary] = OrderedDict()
        self._exact_values = 0
        self._budget = exact_values
        # docnos whose rows of `table` outlive their sets, oldest first
        self._orphans: OrderedDict[int, None] = OrderedDict()
        self._orphan_rows = orphan_rows
        self.pending: dict[int, Summary] = {}
        # the sizes and slice counts of the sets `exact` and `pending` hold, in rows
        # (`choose_ranked` rejects most candidates by their row alone); put there
        # only when a search wants the table (`tabled`): most pages of a crawl have a
        # few candidates, and a set's row would cost more than it spares them
        self.table = SetTable()
        self._untabled: list[int] = []
        self._mine: tuple[Prepared, int, Summary] | None = None
        # docno -> row of `_rows` holding its signature (-1: not read in this batch)
        self._slot: npt.NDArray[np.int32] = np.full(0, -1, dtype=np.int32)
        self._rows: npt.NDArray[np.uint16] = np.empty((0, 0), dtype=np.uint16)
        self._used = 0
        self._filled: list[npt.NDArray[np.int64]] = []
        # this batch's indexed documents: their parts' signatures copied into `_rows`
        # whole (id of the part -> its first row), their docnos set in `_slot` as they
        # are stored (`remember`), so a later document of the batch ranks them without
        # a second look
        self._blocks: dict[int, tuple[Prepared, int]] = {}  # (held: ids stay unique)
        self._mine_rows: list[int] = []
        self._first = 0  # the first document number of the batch: those below committed

    def clear(self, first: int) -> None:
        """A batch (or a new run of its transaction) begins, its documents numbered from
        `first` on: nothing of an earlier run that was not committed is kept."""
        self.end_batch()
        for docno in self.pending:
            if docno not in self.exact:
                self.table.drop(docno)
        self.pending = {}
        self._first = first

    def end_batch(self) -> None:
        """The batch is decided: its arrays are let go; its own exact sets wait for
        `commit` (or `clear`)."""
        self.fresh = {}
        self._fresh_docno = {}
        self._mine = None
        for docnos in self._filled:
            self._slot[docnos] = -1
        self._slot[self._mine_rows] = -1
        self._filled = []
        self._mine_rows = []
        self._blocks = {}
        self._used = 0

    def commit(self) -> None:
        """The batch's transaction committed: its documents' exact sets are kept."""
        for docno, got in self.pending.items():
            self._keep(docno, got, queue=False)  # (queued when it became pending)
        self.pending = {}

    def remember(self, docno: int, p: Prepared, i: int) -> None:
        self.fresh[docno] = (p, i)
        self._fresh_docno[id(p), i] = docno
        block = self._blocks.get(id(p))
        if block is None:  # the part's signatures, copied once (a few hundred KB at most)
            block = self._blocks[id(p)] = (p, self._used)
            self._put_rows(np.empty(0, dtype=np.int64), p.sigs)
        base = block[1]
        if docno >= len(self._slot):
            self._room(docno)
        self._slot[docno] = base + i
        self._mine_rows.append(docno)
        mine = self._mine
        if mine is not None and mine[0] is p and mine[1] == i:
            self.pending[docno] = mine[2]
            self._queue(docno)

    def forget(self, docno: int) -> None:
        """A document is forgotten, or adopts another's signature: read it again."""
        fresh = self.fresh.pop(docno, None)
        if fresh is not None:
            self._fresh_docno.pop((id(fresh[0]), fresh[1]), None)
        got = self.exact.pop(docno, None)
        if got is not None:
            self._exact_values -= summary_values(got)
        self.pending.pop(docno, None)
        self._orphans.pop(docno, None)
        self.table.drop(docno)
        if docno < len(self._slot):
            self._slot[docno] = -1

    # -- signatures

    def signature(self, t: Store, docno: int) -> bytes | None:
        """A candidate's signature: from memory if this batch holds it, else as stored."""
        fresh = self.fresh.get(docno)
        return fresh[0].sig_bytes[fresh[1]] if fresh is not None else t.signature(docno)

    def ranked(
        self,
        t: Store,
        sig: npt.NDArray[np.uint16],
        docnos: npt.NDArray[np.int64],
        bar: float,
        limit: int,
    ) -> tuple[int, list[int], npt.NDArray[np.float64]]:
        """`docnos` (ascending) ranked by their signatures' estimates against `sig`
        (`rank_gathered`): how many have a signature, and the first `limit` of them
        whose estimate reaches `bar`, with their estimates.  Each docno's signature is
        read from the store once a batch (`Store.signatures`, one call for a
        document's new ones) into the matrix the compiled ranking reads in place."""
        if not len(docnos):
            return 0, [], np.zeros(0, dtype=np.float64)
        missing, kept, ranked, est = rank_gathered(
            sig, self._rows, self._slot, docnos, bar, limit, fill=True
        )
        if missing is None:
            return kept, ranked, est
        # not read in this batch yet (the batch's own documents have their rows:
        # `remember`)
        self._room(int(missing[-1]))
        found, sigs = t.signatures(missing)
        if found.any():
            self._put_rows(missing[found], sigs[found])
        _, kept, ranked, est = rank_gathered(
            sig, self._rows, self._slot, docnos, bar, limit, fill=False
        )
        return kept, ranked, est

    def matrix(self) -> tuple[npt.NDArray[np.uint16], npt.NDArray[np.int32]]:
        """The signature matrix `ranked` reads and its docno -> row map (-1: none), for
        a search that ranks a whole batch's candidates in one call (engine/search.py)."""
        return self._rows, self._slot

    def _room(self, top: int) -> None:
        if top >= len(self._slot):
            grown = np.full(max(2 * len(self._slot), top + 1, 1024), -1, dtype=np.int32)
            grown[: len(self._slot)] = self._slot
            self._slot = grown

    def _put_rows(self, docnos: npt.NDArray[np.int64], sigs: npt.NDArray[np.uint16]) -> None:
        """Append `sigs` to the matrix, as the rows of `docnos` (none: a part's block,
        its slots set one by one by `remember`)."""
        n, k = sigs.shape
        if len(docnos):
            self._room(int(docnos.max()))
        if self._rows.shape[1] != k or self._used + n > len(self._rows):
            grown_rows = np.empty((max(2 * len(self._rows), self._used + n, 1024), k), np.uint16)
            if self._rows.shape[1] == k:
                grown_rows[: self._used] = self._rows[: self._used]
            self._rows = grown_rows
        self._rows[self._used : self._used + n] = sigs
        if len(docnos):
            self._slot[docnos] = np.arange(self._used, self._used + n, dtype=np.int32)
            self._filled.append(docnos)
        self._used += n

    # -- exact sets

    def own(self, p: Prepared, i: int) -> Summary:
        """The exact set of the document being checked (kept with it once stored).
        One remembered already (a batch searched as a whole) shares it with its
        place among the batch's candidates (`pending`): made once, not twice."""
        mine = self._mine
        if mine is None or mine[0] is not p or mine[1] != i:
            docno = self._fresh_docno.get((id(p), i))
            got = None if docno is None else self.pending.get(docno)
            if got is None:
                got = summary_of(own_hashes(p, i))
                if docno is not None:
                    self.pending[docno] = got
                    self._queue(docno)
            mine = self._mine = (p, i, got)
        return mine[2]

    def own_all(self, docs: list[tuple[Prepared, int, int]]) -> list[Summary]:
        """`own` for each of a batch's remembered documents ((part, index in it,
        docno)): the sets not made yet made by one compiled call per array of shingle
        hashes holding them (`summaries_of`), where a call each cost a slice and a
        call of Python per document; kept in `pending` as `own` keeps them."""
        pending = self.pending
        out = [pending.get(d) for _, _, d in docs]
        runs: dict[int, tuple[ShingleBatch, list[int], list[int]]] = {}
        for k, (p, i, _) in enumerate(docs):
            if out[k] is None:
                assert p.hashes is not None
                starts = p.hashes.starts  # (`HashParts.of`'s lookup)
                part = bisect.bisect_right(starts, i) - 1
                hashes = p.hashes.parts[part]
                run = runs.setdefault(id(hashes), (hashes, [], []))
                run[1].append(i - starts[part])
                run[2].append(k)
        for hashes, picks, where in runs.values():
            made = summaries_of(hashes.hashes, hashes.offsets, picks)
            for k, got in zip(where, made, strict=True):
                out[k] = pending[docs[k][2]] = got
                self._queue(docs[k][2])
        return cast(list[Summary], out)

    def exact_shingles(self, t: Store, docno: int) -> Summary:
        """A candidate's exact shingle set: from memory if this batch or an earlier one
        holds it, else from its stored text, shingled again."""
        got = self.exact.get(docno)
        if got is not None:
            return got
        got = self.pending.get(docno)
        if got is not None:
            return got
        fresh = self.fresh.get(docno)
        if fresh is not None and fresh[0].hashes is not None:
            got = self.pending[docno] = summary_of(own_hashes(*fresh))
            self._queue(docno)
            return got
        got = summary_of(stored_hashes(self._shingler, t.text(docno)))
        if docno < self._first:  # committed before this batch: kept at once
            self._keep(docno, got)
        else:  # this batch's (a copy that took its owner's text): once committed
            self.pending[docno] = got
            self._queue(docno)
        return got

    def tabled(self) -> SetTable:
        """`table`, with rows for every set `exact` and `pending` hold."""
        exact, pending = self.exact, self.pending
        docnos, sets = [], []
        for docno in self._untabled:
            got = exact.get(docno)
            if got is None:
                got = pending.get(docno)
            if got is not None:  # (else dropped since)
                docnos.append(docno)
                sets.append(got)
        self.table.put_many(docnos, sets)
        self._untabled = []
        return self.table

    def _queue(self, docno: int) -> None:
        self._untabled.append(docno)
        if len(self._untabled) >= 1 << 16:  # never let it grow without bound
            self.tabled()

    def _keep(self, docno: int, got: Summary, queue: bool = True) -> None:
        old = self.exact.pop(docno, None)
        if old is not None:
            self._exact_values -= summary_values(old)
        self.exact[docno] = got
        self._orphans.pop(docno, None)  # (read again: its row is its set's once more)
        if queue:
            self._queue(docno)
        self._exact_values += summary_values(got)
        while self._exact_values > self._budget and self.exact:
            first, gone = self.exact.popitem(last=False)
            self._exact_values -= summary_values(gone)
            if first not in self.pending:
                self._orphan(first)

    def _orphan(self, docno: int) -> None:
        """Docno `docno`'s set is let go; its row of `table` (if any) stays, the
        oldest such rows dropped past `_orphan_rows`.  A docno's set never changes
        (`forget` drops the row of one that may), so a kept row stays right."""
        orphans = self._orphans
        orphans[docno] = None
        while len(orphans) > self._orphan_rows:
            old, _ = orphans.popitem(last=False)
            self.table.drop(old)


def exact_margin(threshold: float, num_perm: int) -> float:
    """How far below the bar a candidate's signature estimate may be and still be
    checked exactly.  Estimates have sd sqrt(J(1-J)/K); a candidate four of them below
    the bar (P ~ 3e-5 for a true match) is not worth an exact check.  One definition
    for the engine and the backfill, which must choose the same candidates."""
    return 4.0 * math.sqrt(threshold * (1.0 - threshold) / num_perm) + 0.01


def cap_stopped(
    ranked_est: npt.NDArray[np.float64],
    checks: int,
    best: tuple[float, int] | None,
    threshold: float,
    margin: float,
    max_checks: int,
) -> bool:
    """Whether `max_checks` cut a search (`best_exact`'s: `checks` made, `best`
    found) short: a candidate it did not try still had an estimate within the margin
    of what it would have had to beat.  Counted for `stats` (`exact_capped`)."""
    if not len(ranked_est) > checks >= max_checks:
        return False
    floor = threshold if best is None else best[0]
    return bool(ranked_est[checks] >= floor - margin)


def best_exact(
    t: Store,
    memory: BatchMemory,
    p: Prepared,
    i: int,
    ranked: list[int],
    ranked_est: npt.NDArray[np.float64],
    threshold: float,
    margin: float,
    max_checks: int,
) -> tuple[tuple[float, int] | None, int]:
    """The candidate (of `ranked`, in rank order, with their estimates `ranked_est`)
    most similar to document `i` of `p` by exact Jaccard, at least `threshold`, as
    (similarity, docno); and the number of exact checks made.

    `choose_exact`'s rule, run by one compiled call (`choose_ranked`) over the exact
    sets of the candidates it can reach: those whose estimate is at least
    `threshold - margin` (the bar only rises from `threshold`: `ranked` holds only
    those, `rank_gathered`), at most `max_checks` (any beyond are not tried)."""
    reach = min(len(ranked), max_checks)
    if reach == 0:
        return None, 0
    if reach < len(ranked):
        # the rule stops at `reach` at the latest, with `reach` checks made, as here
        ranked, ranked_est = ranked[:reach], ranked_est[:reach]
    mine = memory.own(p, i)
    # The kernel looks the candidates' sets up in memory's dicts; one it cannot find
    # is read here (the text shingled again) and the search resumes where it stopped.
    loose: dict[int, Summary] = {}
    sets = (memory.exact, memory.pending, loose)
    # many checks (a template page: about 90): most are rejected by the table's rows
    table = memory.tabled() if reach >= _TABLED else None  # (as `best_exact_all`)
    best, best_sim, checks = -1, 0.0, 0
    while True:
        best, best_sim, checks, more = choose_ranked(
            mine,
            sets,
            ranked,
            ranked_est,
            threshold,
            margin,
            max_checks,
            checks,
            best,
            best_sim,
            table,
        )
        if not more:
            break
        _read(t, memory, ranked[checks], loose)
    return (None if best < 0 else (best_sim, ranked[best])), checks


def best_exact_all(
    t: Store,
    memory: BatchMemory,
    docs: list[tuple[Prepared, int, int]],
    ranked: npt.NDArray[np.int64],
    est: npt.NDArray[np.float64],
    at: npt.NDArray[np.int64],
    threshold: float,
    margin: float,
    max_checks: int,
) -> tuple[list[tuple[float, int] | None], npt.NDArray[np.int64]]:
    """`best_exact` for each of a batch's documents `docs` ((part, index in it,
    docno)), document j's candidates `ranked[at[j]:at[j + 1]]` (at least one each)
    with their estimates: the best match of each, and the checks each made.

    Every document's own exact set first (`own_all`: each kept as a candidate's),
    then the rule over all of them in one compiled call (`choose_all`), which stops
    only where a candidate's set is in no dict -- read here, and the call resumes."""
    n = len(docs)
    state = Choices.start(n)
    if n == 0 or max_checks <= 0:  # (no check: no own set either, as `best_exact`)
        return [None] * n, state.checks
    mines = memory.own_all(docs)
    reach = min(int(np.diff(at).max()), max_checks)
    table = memory.tabled() if reach >= _TABLED else None
    loose: dict[int, Summary] = {}
    sets = (memory.exact, memory.pending, loose)
    j = 0
    while True:
        j = choose_all(mines, sets, ranked, est, at, threshold, margin, max_checks, state, j, table)
        if j == n:
            break
        _read(t, memory, int(ranked[at[j] + state.checks[j]]), loose)
    best = state.best.tolist()
    sims = state.best_sim.tolist()
    starts = at.tolist()
    found = [None if b < 0 else (sims[j], int(ranked[starts[j] + b])) for j, b in enumerate(best)]
    return found, state.checks


def _read(t: Store, memory: BatchMemory, docno: int, loose: dict[int, Summary]) -> None:
    """A candidate's exact set the rule wants and no dict holds: read (`exact_shingles`,
    which keeps it), or put in `loose` if memory keeps it nowhere (a tiny budget)."""
    got = memory.exact_shingles(t, docno)
    if docno not in memory.exact and docno not in memory.pending:
        loose[docno] = got


# The fewest checks a search may make for the table to be used (and brought up to
# date): a page with fewer rarely has many siblings below the bar.  Measured (apply
# CPU against the dict-only search): at 8, crawl-like 50k lost 3% (its few wide
# searches put every set since the last one in the table) and template-heavy 20k
# gained 11%; at 32, crawl-like even and template-heavy 13%.
_TABLED = 32


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
