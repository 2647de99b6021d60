"""Band postings (band key -> documents) as sorted runs: a small log-structured
merge tree kept inside LMDB.

A B-tree with one entry per posting costs a descent and a page copy per insert,
and once the table outgrows the caches every batch dirties most of its pages: the
index slowed down by half between 10,000 and 1,000,000 documents.  Here the
postings of a key partition (the key's top byte) live in a few runs, each one
LMDB value holding sorted keys and their docnos as two little-endian uint64
arrays.  A batch's new postings merge into the partition's level-0 run; a run that
outgrows its level (about BASE * GROWTH**level postings) merges into the next one.  Each
posting is thus rewritten a handful of times by numpy, never inserted one by one,
and lookups are `searchsorted` over zero-copy views of the runs.

Runs are ordered by (key, docno), so the newest postings of a key are the tails of
its slices.  Removed documents are not cut out of the runs at once: their docnos
join a sorted "dead" array that lookups filter by, and the runs are purged of them
when the dead outnumber a quarter of the live documents.
"""

from __future__ import annotations

import itertools
from array import array
from collections.abc import Iterator
from typing import Any

import lmdb
import numpy as np
import numpy.typing as npt

from streamdedup import kernels

U64 = npt.NDArray[np.uint64]

PARTITIONS = 256  # by the top byte of the band key
BASE = 2048  # postings a level-0 run holds before it merges into level 1
GROWTH = 8
PURGE_MIN = 256  # dead documents tolerated before a purge, however small the index
_DEAD = b"\xff\xff\xff\xff"  # the dead array's key; run keys are 2 bytes
_LE = np.dtype("<u8")


def capacity(part: int, level: int) -> int:
    """Postings a run may hold before it merges into the next level.  Partitions
    fill at the same pace, so equal capacities would have all of them merge in the
    same batch (one slow batch in many); staggered ones spread the merges out."""
    scale: int = GROWTH**level
    return BASE * scale * (16 + part % 16) // 16


def level_for(part: int, n: int) -> int:
    """The lowest level of a partition whose run may hold `n` postings (a segment
    built whole keeps each partition in one run there)."""
    level = 0
    while level < 255 and capacity(part, level) < n:
        level += 1
    return level


def run_key(part: int, level: int) -> bytes:
    return bytes((part, level))


def unpack(raw: Any) -> tuple[U64, U64]:
    """A run's keys and docnos, as views of `raw` (no copy)."""
    n = len(raw) // 16
    keys: U64 = np.frombuffer(raw, dtype=_LE, count=n)
    docnos: U64 = np.frombuffer(raw, dtype=_LE, count=n, offset=8 * n)
    return keys, docnos


def pack(keys: U64, docnos: U64) -> bytes:
    return np.concatenate([keys, docnos]).astype(_LE, copy=False).tobytes()


def partition_of(keys: U64) -> U64:
    """Each band key's partition (its top byte): the runs of a partition hold its keys."""
    return keys >> np.uint64(56)


def sorted_run(keys: U64, docnos: U64) -> bytes:
    """Postings of one partition as one stored run, ordered by (key, docno): what a
    segment built from sorted runs stores per partition (backfill/segment.py)."""
    order = np.lexsort((docnos, keys))
    return pack(keys[order], docnos[order])


def merge(older: tuple[U64, U64], newer: tuple[U64, U64]) -> tuple[U64, U64]:
    """Two runs as one, ordered by (key, docno): fresh arrays, never views of either.

    A linear merge of the two sorted runs keeps the older run's postings first within
    a key; documents restored from a changelog arrive in any order, and for those a
    full sort puts docnos right."""
    # Where each newer posting lands: after every older one of a key not above its
    # own, and after the newer ones before it (a linear merge, without the index
    # arrays and gathers of a sort: 2-5 times faster on a batch's runs).
    at = np.searchsorted(older[0], newer[0], side="right")
    at += np.arange(len(at), dtype=at.dtype)
    n = len(older[0]) + len(at)
    keys = np.empty(n, dtype=np.uint64)
    docnos = np.empty(n, dtype=np.uint64)
    rest = np.ones(n, dtype=np.bool_)
    rest[at] = False
    keys[at], docnos[at] = newer
    keys[rest], docnos[rest] = older
    if np.any((keys[1:] == keys[:-1]) & (docnos[1:] < docnos[:-1])):
        order = np.lexsort((docnos, keys))
        keys, docnos = keys[order], docnos[order]
    return keys, docnos


def merge_packed(older: tuple[U64, U64], newer: tuple[U64, U64]) -> bytes:
    """`pack(*merge(older, newer))`: one compiled pass (`merge_runs`) writes the
    merged run as it is stored, where numpy's merge took a dozen calls and `pack`
    two copies more (a batch merges into each of the 256 partitions); a run whose
    docnos that leaves out of order (a restore) is merged by `merge`."""
    if kernels.native is not None:
        got = kernels.native.merge_runs(
            older[0], older[1], newer[0].astype(_LE, copy=False), newer[1].astype(_LE, copy=False)
        )
        if got is not None:
            return got
    return pack(*merge(older, newer))


class Postings:
    """The postings, inside one transaction (whose buffers must be zero-copy views:
    `Index` opens every transaction with buffers=True)."""

    def __init__(self, txn: lmdb.Transaction, db: Any) -> None:
        self.txn = txn
        self.db = db
        self._stored_dead: U64 | None = None
        self.removed: set[int] = set()  # dead since this transaction began
        self._removed_sorted: U64 | None = None

    # -- reading
    def runs(self, part: int | None = None) -> Iterator[tuple[int, int, tuple[U64, U64]]]:
        """(partition, level, run) of one partition, or of all in partition order."""
        for p, level, raw in self._raw_runs(part):
            yield p, level, unpack(raw)

    def _raw_runs(self, part: int | None = None) -> Iterator[tuple[int, int, Any]]:
        """`runs`, each run as its raw value (a view valid until the next write)."""
        cur = self.txn.cursor(db=self.db)
        found = cur.set_range(bytes((part,))) if part is not None else cur.first()
        while found:
            key = cur.key()
            if len(key) == 2:
                if part is not None and key[0] != part:
                    return
                yield key[0], key[1], cur.value()
            found = cur.next()

    def dead(self) -> U64:
        """Docnos removed before this transaction, sorted (a copy: a view could move
        under a later write)."""
        if self._stored_dead is None:
            raw = self.txn.get(_DEAD, db=self.db)
            self._stored_dead = np.frombuffer(bytes(raw or b""), dtype=_LE)
        return self._stored_dead

    def _alive(self, docnos: U64) -> npt.NDArray[np.bool_]:
        alive = _not_in(docnos, self.dead())
        if self.removed:
            if self._removed_sorted is None:
                self._removed_sorted = np.sort(np.fromiter(self.removed, dtype=np.uint64))
            alive &= _not_in(docnos, self._removed_sorted)
        return alive

    def lookup(self, keys: U64, cap: int) -> dict[int, list[int]]:
        """key -> its newest `cap` live docnos, newest first, for the keys (sorted,
        unique) that have any."""
        found = self.found(keys, cap)
        at = np.fromiter(found, dtype=np.intp, count=len(found))
        return {k: v.tolist() for k, v in zip(keys[at].tolist(), found.values(), strict=True)}

    def found(self, keys: U64, cap: int) -> dict[int, array[int]]:
        """`lookup` by the keys' positions in `keys`: position -> its key's newest
        `cap` live docnos, newest first, as int64 arrays (a batch's read-ahead makes
        its own keys of the positions, and keeps the arrays: batch_postings.py `Docnos`)."""
        if not len(keys):
            return {}
        parts = (keys >> np.uint64(56)).astype(np.int64)
        runs = [(part, raw) for part, _, raw in self._raw_runs_of(_present(parts))]
        query, cut, docnos = probe_runs(keys, runs, cap)
        if not len(query):
            return {}
        out, lossy = self._gather(query, cut, docnos, cap)
        for q in lossy:
            # dead among the newest `cap` of a cut slice: older live ones may belong
            out.pop(q, None)
            out.update(self._full(int(keys[q]), q, cap))
        return out

    def _raw_runs_of(self, parts: list[int]) -> Iterator[tuple[int, int, Any]]:
        """(partition, level, stored run as its raw value) of the given partitions."""
        if len(parts) > PARTITIONS // 4:  # most of them: one walk over the table
            wanted = set(parts)
            for part, level, raw in self._raw_runs():
                if part in wanted:
                    yield part, level, raw
        else:
            for part in parts:
                yield from self._raw_runs(part)

    def _gather(
        self, query: npt.NDArray[np.int64], cut: npt.NDArray[np.bool_], docnos: U64, cap: int
    ) -> tuple[dict[int, array[int]], list[int]]:
        """query index -> newest live docnos, from the postings `probe_runs` took;
        and the queries that lost dead postings from a cut slice (to be read in
        full)."""
        alive = self._alive(docnos)
        # (few, mostly none: a set, where `np.unique` would import numpy.ma, 7 ms of
        # a short `dedup` run)
        lossy = sorted(set(query[cut & ~alive].tolist()))
        query, docnos = query[alive], docnos[alive]
        query, docnos = _newest_first(query, docnos)
        first = _group_starts(query)
        rank = np.arange(len(query)) - np.repeat(first, np.diff(np.r_[first, len(query)]))
        keep = rank < cap
        query, docnos = query[keep], docnos[keep]
        flat = array("q", docnos.astype(np.int64).tobytes())
        first = _group_starts(query)
        edges = np.r_[first, len(flat)].tolist()
        lists = [flat[a:b] for a, b in itertools.pairwise(edges)]
        return dict(zip(query[first].tolist(), lists, strict=True)), lossy

    def _full(self, key: int, q: int, cap: int) -> dict[int, array[int]]:
        """One key's newest live postings from whole slices (a hot key, dead ones)."""
        needle = np.array([key], dtype=np.uint64)
        slices = []
        for _, _, (rk, rd) in self.runs(key >> 56):
            lo = np.searchsorted(rk, needle, "left")[0]
            hi = np.searchsorted(rk, needle, "right")[0]
            slices.append(rd[lo:hi])
        d = np.concatenate(slices) if slices else np.empty(0, dtype=np.uint64)
        d = np.sort(d[self._alive(d)])[::-1]
        return {q: array("q", d[:cap].astype(np.int64).tobytes())} if len(d) else {}

    # -- writing
    def add(self, keys: U64, docnos: U64) -> None:
        """Add postings (any order; docnos of a key ascending if given in order)."""
        if not len(keys):
            return
        keys, docnos = sort_pairs(keys, docnos)
        parts = (keys >> np.uint64(56)).astype(np.int64)
        bounds = np.searchsorted(parts, np.arange(PARTITIONS + 1)).tolist()
        for part in _present(parts):
            a, b = bounds[part], bounds[part + 1]
            self._merge_into(part, (keys[a:b], docnos[a:b]))

    def _merge_into(self, part: int, run: tuple[U64, U64]) -> None:
        # Each level is read just before it is merged (a copy is made then), never
        # held across a write: a write may move the values on its page.
        level = 0
        packed: bytes | None = None  # `run` as stored, once a merge made it
        while True:
            raw = self.txn.get(run_key(part, level), db=self.db)
            if raw is not None:
                packed = merge_packed(unpack(raw), run)
                run = unpack(packed)
            if len(run[0]) <= capacity(part, level) or level == 255:
                value = pack(*run) if packed is None else packed
                self.txn.put(run_key(part, level), value, db=self.db)
                return
            if raw is not None:
                self.txn.delete(run_key(part, level), db=self.db)
            level += 1

    def put_run(self, part: int, keys: U64, docnos: U64) -> None:
        """Store a partition's postings, ordered by (key, docno), as its one run, at
        `level_for`; partitions in ascending order (appended: a sealed segment built
        from sorted runs, whose partitions are not written otherwise)."""
        if not self.txn.put(
            run_key(part, level_for(part, len(keys))), pack(keys, docnos), db=self.db, append=True
        ):
            raise ValueError(f"postings partition {part} is not past the last one written")

    def remove(self, docno: int) -> None:
        self.removed.add(docno)
        self._removed_sorted = None

    def finish(self, live_docs: int) -> None:
        """At the end of a write transaction: store the new dead, purge if they are many."""
        if not self.removed:
            return
        dead = np.union1d(self.dead(), np.fromiter(self.removed, dtype=np.uint64))
        self.removed = set()
        self._removed_sorted = None
        if len(dead) > max(PURGE_MIN, live_docs // 4):
            self._purge(dead)
            dead = dead[:0]
        self.txn.put(_DEAD, dead.astype(_LE).tobytes(), db=self.db)
        self._stored_dead = None

    def _purge(self, dead: U64) -> None:
        for key in list(self._run_keys()):
            rk, rd = unpack(self.txn.get(key, db=self.db))
            alive = ~np.isin(rd, dead)
            if alive.all():
                continue
            if alive.any():
                self.txn.put(key, pack(rk[alive], rd[alive]), db=self.db)
            else:
                self.txn.delete(key, db=self.db)

    def _run_keys(self) -> Iterator[bytes]:
        for key in self.txn.cursor(db=self.db).iternext(keys=True, values=False):
            if len(key) == 2:
                yield bytes(key)

    # -- statistics
    def sizes(self) -> Iterator[int]:
        """The number of live postings of every non-empty bucket."""
        for part in range(PARTITIONS):
            pairs = self.pairs(part)
            if len(pairs[0]):
                yield from np.unique(pairs[0], return_counts=True)[1].tolist()

    def pairs(self, part: int) -> tuple[U64, U64]:
        """A partition's live postings, ordered by (key, docno)."""
        keys: U64 = np.empty(0, dtype=np.uint64)
        docnos: U64 = np.empty(0, dtype=np.uint64)
        for _, _, run in self.runs(part):
            keys, docnos = merge((keys, docnos), (run[0].copy(), run[1].copy()))
        alive = self._alive(docnos)
        return keys[alive], docnos[alive]

    def live(self) -> list[tuple[int, int]]:
        """Every live (key, docno), in order: what two indexes must agree on."""
        out: list[tuple[int, int]] = []
        for part in range(PARTITIONS):
            keys, docnos = self.pairs(part)
            out += zip(keys.tolist(), docnos.tolist(), strict=True)
        return out

    def stored(self) -> int:
        """Postings held in the runs, dead ones included (what the disk holds)."""
        return sum(len(run[0]) for _, _, run in self.runs())


def sort_pairs(keys: npt.NDArray[Any], values: npt.NDArray[Any]) -> tuple[U64, U64]:
    """`keys` ascending, stably (equal keys keep their order), each with its value,
    as uint64 arrays (read-only, maybe): one compiled call (`sort_pairs`: the keys
    dealt by their top byte, then each partition's few hundred sorted in cache),
    else numpy's stable argsort and two gathers, which is the definition.  numpy's
    argsort was a sixth of a batch of one-line documents' apply time."""
    keys = np.ascontiguousarray(keys, dtype=np.uint64)
    values = np.ascontiguousarray(values, dtype=np.uint64)
    if kernels.native is not None:
        raw_keys, raw_values = kernels.native.sort_pairs(keys, values)
        return np.frombuffer(raw_keys, dtype=np.uint64), np.frombuffer(raw_values, dtype=np.uint64)
    order = np.argsort(keys, kind="stable")
    return keys[order], values[order]


def distinct(keys: npt.NDArray[Any]) -> tuple[U64, npt.NDArray[np.intp], npt.NDArray[np.intp]]:
    """`np.unique(keys, return_inverse=True, return_counts=True)` of uint64 keys, by
    `sort_pairs` (a batch's band keys: numpy sorts them by argsort)."""
    n = len(keys)
    if not n:
        empty = np.empty(0, dtype=np.intp)
        return np.empty(0, dtype=np.uint64), empty, empty
    ordered, at = sort_pairs(keys, np.arange(n, dtype=np.uint64))
    first = np.empty(n, dtype=np.bool_)
    first[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=first[1:])
    starts = np.flatnonzero(first)
    inverse = np.empty(n, dtype=np.intp)
    inverse[at] = np.cumsum(first) - 1
    return ordered[starts], inverse, np.diff(np.append(starts, n))


def probe_runs(
    keys: U64, runs: list[tuple[int, Any]], cap: int
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_], U64]:
    """The postings of `keys` (sorted, distinct) in `runs` ((partition, raw stored
    run) pairs), the newest `cap` of each key's slice of each run, one entry a
    posting: its key's position in `keys`, whether the slice was cut to `cap`, its
    docno; run after run, each slice in the run's order.  One compiled call
    (`probe_runs`: a binary search per key from where the last one ended) for a
    batch's 100,000 keys over the 700 runs of the 256 partitions, where numpy took
    a dozen calls a run; the numpy code below is the definition."""
    if kernels.native is not None:
        q, c, d = kernels.native.probe_runs(np.ascontiguousarray(keys, dtype=np.uint64), runs, cap)
        return (
            np.frombuffer(q, dtype=np.int64),
            np.frombuffer(c, dtype=np.bool_),
            np.frombuffer(d, dtype=np.uint64),
        )
    parts = (keys >> np.uint64(56)).astype(np.int64)
    bounds = np.searchsorted(parts, np.arange(PARTITIONS + 1))
    query: list[npt.NDArray[np.int64]] = [np.empty(0, dtype=np.int64)]
    cut: list[npt.NDArray[np.bool_]] = [np.empty(0, dtype=np.bool_)]
    docnos: list[U64] = [np.empty(0, dtype=np.uint64)]
    for part, raw in runs:
        rk, rd = unpack(raw)
        a, b = int(bounds[part]), int(bounds[part + 1])
        lo = np.searchsorted(rk, keys[a:b], "left")
        hi = np.searchsorted(rk, keys[a:b], "right")
        hit = np.nonzero(hi > lo)[0]
        # the newest `cap` of each slice (more only if dead ones are among them:
        # `Postings.found`)
        start = np.maximum(lo[hit], hi[hit] - cap)
        n = hi[hit] - start
        query.append(np.repeat(hit + a, n))
        cut.append(np.repeat(hi[hit] - lo[hit] > cap, n))
        docnos.append(rd[np.repeat(start, n) + _ramp(n)].astype(np.uint64))
    return np.concatenate(query), np.concatenate(cut), np.concatenate(docnos)


_DOCNO_BITS = 40  # docnos are 5 bytes (keys.DOCNO_BYTES: `docno_key` refuses more)
_NEWEST = np.uint64((1 << _DOCNO_BITS) - 1)


def _newest_first(query: npt.NDArray[np.int64], docnos: U64) -> tuple[npt.NDArray[np.int64], U64]:
    """The postings ordered by query, newest (largest docno) first within one: as
    `np.lexsort((-docnos, query))` orders them, by one sort of uint64s holding both
    (the query above the docno's 40 bits, the docno counted down below them), a
    fraction of the two sorting passes of a lexsort."""
    if not len(query) or int(query.max()) >> (64 - _DOCNO_BITS):  # (16M keys asked: never)
        order = np.lexsort((-docnos.astype(np.int64), query))
        return query[order], docnos[order]
    both = (query.astype(np.uint64) << np.uint64(_DOCNO_BITS)) | (_NEWEST - docnos)
    both.sort()
    return (both >> np.uint64(_DOCNO_BITS)).astype(np.int64), _NEWEST - (both & _NEWEST)


def _present(parts: npt.NDArray[np.int64]) -> list[int]:
    """The distinct partition numbers, in order: counting 256 bins takes a fifteenth
    of `np.unique`'s time on a batch's keys."""
    out: list[int] = np.flatnonzero(np.bincount(parts, minlength=PARTITIONS)).tolist()
    return out


def _group_starts(sorted_values: npt.NDArray[Any]) -> npt.NDArray[np.intp]:
    """Where each run of equal values begins."""
    if not len(sorted_values):
        return np.empty(0, dtype=np.intp)
    return np.flatnonzero(np.r_[True, sorted_values[1:] != sorted_values[:-1]])


def _not_in(values: U64, sorted_set: U64) -> npt.NDArray[np.bool_]:
    if not len(sorted_set):
        return np.ones(len(values), dtype=bool)
    at = np.minimum(np.searchsorted(sorted_set, values), len(sorted_set) - 1)
    out: npt.NDArray[np.bool_] = sorted_set[at] != values
    return out


def _ramp(lengths: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """0..n-1 for each n in `lengths`, concatenated."""
    total = int(lengths.sum())
    if total == 0:
        return np.empty(0, dtype=np.int64)
    ends = np.cumsum(lengths)
    out: npt.NDArray[np.int64] = np.arange(total) - np.repeat(ends - lengths, lengths)
    return out
