"""Exact verification of a document's LSH candidates (`verify = "exact"`), and what
the engine keeps in memory within one batch to do it cheaply (`VerifyCache`).

Candidates are taken in order of their signature estimate and measured exactly by
the index's similarity family (engine/similarity.py; Jaccard on text: the Jaccard
similarity of the 64-bit shingle hashes of both texts, the candidate's from its
stored text shingled again, `sketch.jaccard`).  The search stops at the first
candidate whose estimate is too far below the bar, or after a set number of exact
checks.  The batch's signature matrix is engine/signature_rows.py's.

Why the stored text and nothing narrower (index format 7): format 6 also stored each
page's 24-bit fingerprint set, as a sound filter before the exact check.  The filter
cost 1,118 of the 3,455 bytes a page of the crawl-like benchmark took (the target is
2,500), and no speed: it spared a near-threshold candidate's decompression and
re-shingling (about 12 us), but every true duplicate paid for both the filter and the
check, and every page for coding and writing its set.  Side by side, format 7 was as
fast or faster on both benchmark streams (docs/benchmarks.md)."""

from __future__ import annotations

import bisect
from collections import OrderedDict
from collections.abc import Callable
from typing import TypeVar, cast

import numpy as np
import numpy.typing as npt

from streamdedup.engine.jaccard_text import JaccardText
from streamdedup.engine.prepare import Prepared
from streamdedup.engine.roles import Store
from streamdedup.engine.signature_rows import SignatureRows
from streamdedup.engine.similarity import ExactPart, Kept, KeptTable, SimilarityFamily
from streamdedup.sketch.family import Bar, Scale
from streamdedup.sketch.jaccard import Choices, exact_jaccard
from streamdedup.sketch.minhash import margin as minhash_margin
from streamdedup.sketch.shingle import Shingler

# Exact sets kept across batches, in 64-bit values (8 bytes each): 64 MB, about 13,000
# template-heavy pages.  A page's siblings are checked against the same earlier pages
# batch after batch; shingling a stored text again costs 50-100 us, a kept set nothing.
EXACT_VALUES = 8 << 20

# Table rows kept for sets let go (`VerifyCache.exact`'s oldest): 264 bytes each where
# the set took about 5 KB, so 65,536 of them cost 17 MB.  A row is what rejects a
# template sibling below the bar (92% of a template page's checks); without it the
# rejected sibling's text was read and shingled again (on template-heavy 20k: 1,838 of
# the 2,698 texts read were of sets let go, mostly to be rejected by their row).
ORPHAN_ROWS = 1 << 16


class VerifyCache(SignatureRows):
    """What the engine keeps in memory to search candidates cheaply.

    Within one batch: the batch's indexed documents and the signatures of the
    candidates read so far (`SignatureRows`, engine/signature_rows.py).

    Across batches: the exact representations of candidates (`exact`; Jaccard on
    text: the packed shingle sets), made by the index's similarity family
    (`family`), bounded by EXACT_VALUES, oldest dropped first, and their rows of
    the family's pre-filter `table` (Jaccard: sizes and slice counts) for
    ORPHAN_ROWS more once their sets are dropped: a row alone rejects most
    candidates, and one it does not reject is read again.  A document number's text
    never changes (numbers are never reused; a copy that adopts an owner's text has
    the same text), so a kept set or row stays right.  Only committed documents'
    sets are kept: a stored candidate's at once, the batch's own ones (`pending`)
    once `commit` says the batch's transaction committed; a batch run again or
    abandoned drops them (`clear`)."""

    def __init__(
        self,
        family: SimilarityFamily | Shingler,
        exact_values: int = EXACT_VALUES,
        orphan_rows: int = ORPHAN_ROWS,
    ) -> None:
        super().__init__()
        # (a `Shingler`: the call the engine has always made, Jaccard on text)
        self.family = JaccardText.of_shingler(family) if isinstance(family, Shingler) else family
        # (insertion ordered, the oldest let go first: OrderedDict's popitem is O(1),
        # where a dict's first key after many pops from its front is a scan)
        self.exact: OrderedDict[int, Kept] = OrderedDict()
        self._exact_values = 0
        self._budget = exact_values
        # docnos whose rows of `table` outlive their sets, oldest first
        self._orphans: OrderedDict[int, None] = OrderedDict()
        self._orphan_rows = orphan_rows
        self.pending: dict[int, Kept] = {}
        # the pre-filter rows of the sets `exact` and `pending` hold (`choose`
        # rejects most candidates by their row alone); put there only when a search
        # wants the table (`tabled`): most pages of a crawl have a few candidates,
        # and a set's row would cost more than it spares them
        self.table: KeptTable = self.family.table()
        self._untabled: list[int] = []
        self._mine: tuple[Prepared, int, Kept] | None = None
        self._first = 0  # the first document number of the batch: those below committed
        self._bar: Bar | None = None
        # the ranking's estimates on the family's scale (sketch/family.py `Scale`)
        self.scale = Scale.of_family(self.family.lsh)

    def bar(self, threshold: float) -> Bar:
        """The family's threshold rule at `threshold`, made once (a search asks for
        it every time, and the threshold of an engine never changes)."""
        got = self._bar
        if got is None or got.value != threshold:
            got = self._bar = self.family.lsh.bar(threshold)
        return got

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
        super().end_batch()
        self._mine = None

    def commit(self) -> None:
        """The batch's transaction committed: its documents' exact sets are kept."""
        for docno, got in self.pending.items():
            self._keep(docno, got, queue=False)  # (queued when it became pending)
        self.pending = {}

    def remember(self, docno: int, p: Prepared, i: int) -> None:
        super().remember(docno, p, i)
        mine = self._mine
        if mine is not None and mine[0] is p and mine[1] == i:
            self.pending[docno] = mine[2]
            self._queue(docno)

    def forget(self, docno: int) -> None:
        """A document is forgotten, or adopts another's signature: read it again."""
        super().forget(docno)
        got = self.exact.pop(docno, None)
        if got is not None:
            self._exact_values -= self.family.kept_size(got)
        self.pending.pop(docno, None)
        self._orphans.pop(docno, None)
        self.table.drop(docno)

    # -- exact sets

    def own(self, p: Prepared, i: int) -> Kept:
        """The exact set of the document being checked (kept with it once stored).
        One remembered already (a batch searched as a whole) shares it with its
        place among the batch's candidates (`pending`): made once, not twice."""
        mine = self._mine
        if mine is None or mine[0] is not p or mine[1] != i:
            docno = self._unstored_docno.get((id(p), i))
            got = None if docno is None else self.pending.get(docno)
            if got is None:
                got = self._own_of(p, i)
                if docno is not None:
                    self.pending[docno] = got
                    self._queue(docno)
            mine = self._mine = (p, i, got)
        return mine[2]

    def _own_of(self, p: Prepared, i: int) -> Kept:
        """Document i of `p`'s packed exact set, made by the family."""
        assert p.hashes is not None
        starts = p.hashes.starts  # (`HashParts.of`'s lookup)
        k = bisect.bisect_right(starts, i) - 1
        return self.family.kept_own(p.hashes.parts[k], i - starts[k])

    def own_all(self, docs: list[tuple[Prepared, int, int]]) -> list[Kept]:
        """`own` for each of a batch's remembered documents ((part, index in it,
        docno)): the sets not made yet made by one call of the family per array of
        exact representations holding them (`kept_own_many`), where a call each
        cost a slice and a call of Python per document; kept in `pending` as `own`
        keeps them."""
        pending = self.pending
        out = [pending.get(d) for _, _, d in docs]
        runs: dict[int, tuple[ExactPart, list[int], list[int]]] = {}
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
            made = self.family.kept_own_many(hashes, picks)
            for k, got in zip(where, made, strict=True):
                out[k] = pending[docs[k][2]] = got
                self._queue(docs[k][2])
        return cast(list[Kept], out)

    def exact_shingles(self, t: Store, docno: int) -> Kept:
        """A candidate's exact set: from memory if this batch or an earlier one
        holds it, else from its stored text (the family reads it: shingled again)."""
        got = self.exact.get(docno)
        if got is not None:
            return got
        got = self.pending.get(docno)
        if got is not None:
            return got
        fresh = self.unstored.get(docno)
        if fresh is not None and fresh[0].hashes is not None:
            got = self.pending[docno] = self._own_of(*fresh)
            self._queue(docno)
            return got
        got = self.family.kept_stored(t.text(docno))
        if docno < self._first:  # committed before this batch: kept at once
            self._keep(docno, got)
        else:  # this batch's (a copy that took its owner's text): once committed
            self.pending[docno] = got
            self._queue(docno)
        return got

    def tabled(self) -> KeptTable:
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

    def _keep(self, docno: int, got: Kept, queue: bool = True) -> None:
        size = self.family.kept_size
        old = self.exact.pop(docno, None)
        if old is not None:
            self._exact_values -= size(old)
        self.exact[docno] = got
        self._orphans.pop(docno, None)  # (read again: its row is its set's once more)
        if queue:
            self._queue(docno)
        self._exact_values += size(got)
        while self._exact_values > self._budget and self.exact:
            first, gone = self.exact.popitem(last=False)
            self._exact_values -= size(gone)
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
    checked exactly, for Jaccard (MinHash: four standard deviations of the
    estimate): what the engine's `family.lsh.margin(params.bar_value)` is for a
    Jaccard index (tests/engine/test_similarity.py holds the two equal), for the
    backfill, which is Jaccard-only and must choose the same candidates."""
    return minhash_margin(threshold, num_perm)


def cap_stopped(
    ranked_est: npt.NDArray[np.float64],
    checks: int,
    best: tuple[float, int] | None,
    threshold: float | Bar,
    margin: float,
    max_checks: int,
) -> bool:
    """Whether `max_checks` cut a search (`best_exact`'s: `checks` made, `best`
    found) short: a candidate it did not try still had an estimate within the margin
    of what it would have had to beat.  Counted for `stats` (`exact_capped`)."""
    if not len(ranked_est) > checks >= max_checks:
        return False
    bar = _bar(threshold)
    floor = bar.floor if best is None else bar.score(best[0])
    return bool(ranked_est[checks] >= floor - margin)


def best_exact(
    t: Store,
    memory: VerifyCache,
    p: Prepared,
    i: int,
    ranked: list[int],
    ranked_est: npt.NDArray[np.float64],
    threshold: float,
    margin: float,
    max_checks: int,
) -> tuple[tuple[float, int] | None, int]:
    """The candidate (of `ranked`, in rank order, with their estimates `ranked_est`)
    closest to document `i` of `p` by the family's exact measure, meeting the bar
    at `threshold`, as (measure, docno); and the number of exact checks made.

    `choose_exact`'s rule, run by one call of the family (`choose`: compiled) over
    the exact representations of the candidates it can reach: those whose estimate
    is at least the bar less `margin` (the bar only rises: `ranked` holds only
    those, `rank_gathered`), at most `max_checks` (any beyond are not tried)."""
    reach = min(len(ranked), max_checks)
    if reach == 0:
        return None, 0
    if reach < len(ranked):
        # the rule stops at `reach` at the latest, with `reach` checks made, as here
        ranked, ranked_est = ranked[:reach], ranked_est[:reach]
    family = memory.family
    bar = memory.bar(threshold)
    mine = memory.own(p, i)
    # The kernel looks the candidates' sets up in memory's dicts; one it cannot find
    # is read here (the text shingled again) and the search resumes where it stopped.
    loose: dict[int, Kept] = {}
    sets = (memory.exact, memory.pending, loose)
    # many checks (a template page: about 90): most are rejected by the table's rows
    table = memory.tabled() if reach >= _TABLED else None  # (as `best_exact_all`)
    best, best_sim, checks = -1, 0.0, 0
    while True:
        best, best_sim, checks, more = family.choose(
            mine, sets, ranked, ranked_est, bar, margin, max_checks, checks, best, best_sim, table
        )
        if not more:
            break
        _read(t, memory, ranked[checks], loose)
    return (None if best < 0 else (best_sim, ranked[best])), checks


def best_exact_all(
    t: Store,
    memory: VerifyCache,
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
    then the rule over all of them in one call of the family (`choose_all`), which
    stops only where a candidate's set is in no dict -- read here, and the call
    resumes."""
    n = len(docs)
    state = Choices.start(n)
    if n == 0 or max_checks <= 0:  # (no check: no own set either, as `best_exact`)
        return [None] * n, state.checks
    family = memory.family
    bar = memory.bar(threshold)
    mines = memory.own_all(docs)
    reach = min(int(np.diff(at).max()), max_checks)
    table = memory.tabled() if reach >= _TABLED else None
    loose: dict[int, Kept] = {}
    sets = (memory.exact, memory.pending, loose)
    j = 0
    while True:
        j = family.choose_all(
            mines, sets, ranked, est, at, bar, margin, max_checks, state, j, table
        )
        if j == n:
            break
        _read(t, memory, int(ranked[at[j] + state.checks[j]]), loose)
    best = state.best.tolist()
    sims = state.best_sim.tolist()
    starts = at.tolist()
    found = [None if b < 0 else (sims[j], int(ranked[starts[j] + b])) for j, b in enumerate(best)]
    return found, state.checks


def _read(t: Store, memory: VerifyCache, docno: int, loose: dict[int, Kept]) -> None:
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

_R = TypeVar("_R")


def choose_exact(
    mine_of: Callable[[], _R],
    theirs: Callable[[int], _R],
    docnos: list[int],
    est: npt.NDArray[np.float64],
    order: list[int],
    threshold: float | Bar,
    margin: float,
    max_checks: int,
    measure: Callable[[_R, _R], float] = exact_jaccard,  # type: ignore[assignment]
) -> tuple[tuple[float, int] | None, int]:
    """`best_exact`'s rule, given where the exact representations come from
    (`mine_of()`: the document's own, computed once a candidate is close enough;
    `theirs(docno)`: a candidate's) and the family's exact `measure` (Jaccard by
    default), so that the backfill's executors apply the very same rule.  Written on
    scores (`Bar`): with a similarity bar, exactly `sim >= threshold`, best highest."""
    bar = _bar(threshold)
    mine: _R | None = None  # once a candidate is close enough
    best: tuple[float, int] | None = None
    for checks, j in enumerate(order):
        floor = bar.floor if best is None else bar.score(best[0])
        if checks >= max_checks or est[j] < floor - margin:
            return best, checks
        d = docnos[j]
        if mine is None:
            mine = mine_of()
        sim = measure(mine, theirs(d))
        if bar.meets(sim) and (best is None or bar.better(sim, best[0])):
            best = (sim, d)
    return best, len(order)


def _bar(threshold: float | Bar) -> Bar:
    """A plain threshold is a similarity's (every caller before the seam)."""
    return threshold if isinstance(threshold, Bar) else Bar(threshold)
