"""The bulk path: the documents of a batch most of a stream is made of, found for the
whole batch at once (`_classify`) and decided and stored together after the loop
(`_store_bulk`), where the loop only numbers them in their place.

Most documents of a stream need none of the one-by-one order's subtleties: a new id,
with a new content and no candidates (unique, PLAIN), or an exact copy of a content
held by a document that stays (duplicate, exact: COPY).  In a batch of new ids (most
batches of a stream), the documents that search for near duplicates are decided in
bulk too (SEARCH): no verdict changes what a later document of such a batch finds,
so the whole batch's searches are made at once (engine/search.py).  Their verdicts,
stored entries and changes are those the one-by-one path would make
(tests/engine/test_bulk.py compares the two on random batches)."""

from __future__ import annotations

import itertools
import operator
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from streamdedup.engine.prepare import Prepared, pick
from streamdedup.engine.search import search_batch
from streamdedup.engine.window import WindowRun, chained, reached
from streamdedup.models import Change, DocId, Record, Verdict
from streamdedup.store.keys import id_key
from streamdedup.store.tables import ABSENT, Packed, Tables

# the kinds of documents decided in bulk (`_classify`); SEARCH: searched for near
# duplicates with the whole batch's others (engine/search.py)
PLAIN, COPY, SEARCH = 1, 2, 3

# placeholders of the verdicts and changes of documents decided in bulk (`_store_bulk`)
LATER = Verdict("", "unique", None, "", None, False)
LATER_CHANGE = Change(b"", -1, None, None, False)

_T = TypeVar("_T")
_ID = operator.attrgetter("id")


def joined(lists: Sequence[Sequence[_T]]) -> Sequence[_T]:
    """The parts' lists as one: the list itself for a batch of one part (file mode)."""
    return lists[0] if len(lists) == 1 else [x for seq in lists for x in seq]


def _first_positions(contents: list[bytes]) -> npt.NDArray[np.intp] | None:
    """Each document's first position in the batch with its content (None: every
    content is there once), from a dict built backwards (the first one written last)."""
    n = len(contents)
    if len(set(contents)) == n:
        return None
    first = dict(zip(reversed(contents), range(n - 1, -1, -1), strict=True))
    return np.fromiter(map(first.__getitem__, contents), dtype=np.intp, count=n)


def _text(p: Prepared, i: int) -> bytes:
    assert p.texts is not None
    return p.texts[i]


class Bulk:
    """The documents of a batch decided in bulk: their kinds by position (0: one by
    one), the content owner (duplicate_of, cluster) of each copy; and as the loop
    numbers them, their positions, document numbers, stored timestamps, and the
    places their changes take in the batch's list (`_store_bulk` fills them; a
    verdict's place is its position: every document has one)."""

    def __init__(self, n: int) -> None:
        self.kind = np.zeros(n, dtype=np.int8)
        self.kinds: list[int] = [0] * n
        self.owner_of: dict[int, tuple[DocId, DocId]] = {}
        self.positions: list[int] = []
        self.docnos: list[int] = []
        self.timestamps: list[int | None] = []
        self.change_at: list[int] = []
        # a copy of a SEARCH document's content (position -> that document's
        # position): its `owner_of` follows that document's verdict (`_store_bulk`)
        self.copy_of: dict[int, int] = {}

    def hold(
        self, start: int, stop: int, docno: int, stamps: list[int | None], change_at: int
    ) -> int:
        """Number the batch's documents at positions `start` .. `stop - 1`, decided in
        bulk, from `docno` on, their changes taking the places from `change_at` on
        in the batch's list; how many (the caller holds their places in its lists
        of verdicts and changes, which `_store_bulk` fills)."""
        k = stop - start
        self.positions += range(start, stop)
        self.docnos += range(docno, docno + k)
        self.timestamps += stamps[start:stop]
        self.change_at += range(change_at, change_at + k)
        return k


@dataclass
class Stored:
    """Documents of one kind stored in bulk (`_store_bulk`), kept for their changes:
    those are made from them if `changes` is read (`build`), not for every batch.
    `signatures` (and `texts`, with exact verification): indexed ones, which own
    their content; None: exact copies."""

    at: list[int]  # the places of their changes in the batch's list
    keys: list[bytes]
    docnos: list[int]
    verdicts: list[Verdict]
    contents: list[bytes]
    timestamps: list[int | None]
    shingles: list[int]
    signatures: list[bytes] | None = None
    texts: list[bytes] | None = None

    def build(self) -> list[Change]:
        """Their changes, in the order of `at` (what `_insert` appends for a document
        stored one by one)."""
        records = [
            Record.of(v, c, ts, n)
            for v, c, ts, n in zip(
                self.verdicts, self.contents, self.timestamps, self.shingles, strict=True
            )
        ]
        if self.signatures is None:
            return [
                Change(key, docno, rec, None, False)
                for key, docno, rec in zip(self.keys, self.docnos, records, strict=True)
            ]
        texts: Sequence[bytes | None] = self.texts or [None] * len(records)
        return [
            Change(key, docno, rec, sig, True, text)
            for key, docno, rec, sig, text in zip(
                self.keys, self.docnos, records, self.signatures, texts, strict=True
            )
        ]


@dataclass
class _Joined:
    """A batch's per-document lists as one list each (`joined`), for `_store_bulk`."""

    one: Prepared | None  # the batch's only part, if it has one
    at: list[tuple[Prepared, int]]  # each position's part and place in it (several parts)
    docs: Sequence[object]
    keys: Sequence[bytes]
    content: Sequence[bytes]
    shingles: Sequence[int]
    sigs: Sequence[bytes]
    rows: Sequence[bytes]

    @classmethod
    def of(cls, parts: list[Prepared], rows: list[list[bytes]]) -> _Joined:
        one = parts[0] if len(parts) == 1 else None
        return cls(
            one,
            [] if one else [(p, i) for p in parts for i in range(len(p.docs))],
            joined([p.docs for p in parts]),
            joined([p.keys for p in parts]),
            joined([p.content for p in parts]),
            joined([p.shingles for p in parts]),
            joined([p.sig_bytes for p in parts]),
            joined(rows),
        )


class BulkRun(WindowRun):
    """A batch's run, with its bulk path."""

    def _classify(
        self,
        t: Tables,
        parts: list[Prepared],
        rows: list[list[bytes]],
        stamps: list[int | None],
        cutoff: int | None,
    ) -> Bulk:
        """Which of the batch's documents are decided in bulk, by kind, one per
        position (`Bulk`), found by set and numpy operations over the whole batch
        (after `prefetch` and `batch_postings`), for an engine without sealed
        segments.  Each a new id: in neither the index nor another document of the
        batch; not `light`; with shingles; with a time window, stored as of the
        batch's last cutoff or later (`cutoff`: the window forgets or hides nothing
        these documents depend on during the batch -- a stored content owner of a
        copy must be as recent).  Then either

        PLAIN: its content hash is in neither the index nor another document of the
        batch, and its row is quiet: `unique`, stored as the owner of its content; or
        the first of the batch's documents with a content new to the index, all
        others of which are new ids (COPY);

        COPY: an exact copy of a stored document whose id no document of the batch
        has (so it keeps its content), or of such a first document: `duplicate`,
        `exact`, stored as a copy.

        In a batch whose every id is new (or a `light` replay), where the window
        forgets nothing, the documents left -- those that search
        for near duplicates -- are SEARCH (and the later copies of their contents
        COPY): decided by one search of the whole batch (`_search_kinds`,
        `_searched`, engine/search.py), whose answers no verdict can change.

        Their checks would answer as here whatever comes before them in the batch:
        no one else's id or content is theirs (only a replaced id is forgotten, and
        none of these is, nor a stored owner of their content), and nothing a plain
        document could meet in a bucket is written before it -- a quiet row shares
        no key with a stored document or a searching row of the batch; the rows
        `_searching` leaves out (exact copies) are their content owner's, stored or
        searching, so they share none either; an adopted copy takes a stored
        owner's keys or a searching row's.  What remains is a `light` document
        prepared again inside the transaction (its row is unforeseen): when one may
        be (its id is repeated in the batch, or no longer holds its content),
        nothing is decided in bulk.  Conversely, nothing is written for these
        documents before the loop ends, and no document decided one by one reads
        their entries: their ids and contents are not its own, and a plain
        document's keys are in no other row."""
        n = sum(len(p.docs) for p in parts)
        out = Bulk(n)
        keys = list(joined([p.keys for p in parts]))
        contents = list(joined([p.content for p in parts]))
        ids, owners = t.read_ahead(keys, contents)
        free = ids == ABSENT
        # the ids that come more than once in the batch (most batches: none)
        repeated = set() if len(set(keys)) == n else {k for k, c in Counter(keys).items() if c > 1}
        if repeated:  # only those seen once may be free
            free &= np.fromiter((k not in repeated for k in keys), dtype=np.bool_, count=n)
        if cutoff is not None:  # with a time window: none the window reaches in the batch
            free &= np.fromiter(
                (ts is None or ts >= cutoff for ts in stamps), dtype=np.bool_, count=n
            )
        light = np.zeros(n, dtype=np.bool_)
        start = 0
        for p in parts:
            if p.light:
                light[[start + i for i in p.light]] = True
            start += len(p.docs)
        searchable = self._searchable(parts, repeated, free | light, cutoff)
        free &= np.fromiter(chained([p.shingles for p in parts]), dtype=np.int64, count=n) > 0
        free &= ~light
        # (a batch of replays only has nothing to check)
        if not free.any() or not all(
            self._replays(t, p, repeated, cutoff) for p in parts if p.light
        ):
            return out
        quiet = t.quiet_rows(chained(rows), n)
        new = owners == ABSENT
        first_at = _first_positions(contents)
        self._new_contents(out, parts, contents, first_at, free, new, quiet)
        self._stored_copies(t, out, keys, free, owners, cutoff)
        if searchable:
            self._search_kinds(out, first_at, free & new & ~quiet, free)
        out.kinds = out.kind.tolist()
        return out

    def _searchable(
        self,
        parts: list[Prepared],
        repeated: set[bytes],
        seen: npt.NDArray[np.bool_],
        cutoff: int | None,
    ) -> bool:
        """Whether the batch's searches can be made at once (engine/search.py): no
        verdict can change what a later document finds -- every id new or a `light`
        replay (`seen`, checked later: its stored document stays, unchanged), so no
        document is forgotten, replaced or adopted --, the window forgetting and
        hiding nothing during the batch."""
        oldest = self._expiry.oldest
        return (
            self.settings.bulk_search
            and not repeated
            and bool(seen.all())
            and (self.params.verify == "signature" or all(p.hashes is not None for p in parts))
            and (cutoff is None or oldest is None or oldest[0] >= cutoff)
        )

    @staticmethod
    def _new_contents(
        out: Bulk,
        parts: list[Prepared],
        contents: list[bytes],
        first_at: npt.NDArray[np.intp] | None,
        free: npt.NDArray[np.bool_],
        new: npt.NDArray[np.bool_],
        quiet: npt.NDArray[np.bool_],
    ) -> None:
        """The PLAIN documents, with a content new to the index, and the later copies
        of such a content in the batch (COPY): all or none of a content's."""
        kind = out.kind
        if first_at is None:  # (every content once in the batch)
            kind[free & new & quiet] = PLAIN
            return
        n = len(contents)
        once = np.bincount(first_at, minlength=n)[first_at] == 1
        kind[free & new & quiet & once] = PLAIN
        # a content new to the index, several times in the batch: all or none
        groups: dict[bytes, list[int]] = {}
        for j in np.flatnonzero(new & ~once).tolist():
            groups.setdefault(contents[j], []).append(j)
        docs = joined([p.docs for p in parts])
        for group in groups.values():
            first = group[0]
            if quiet[first] and free[group].all():
                kind[first] = PLAIN
                kind[group[1:]] = COPY
                d = docs[first].id
                out.owner_of.update(dict.fromkeys(group[1:], (d, d)))

    @staticmethod
    def _stored_copies(
        t: Tables,
        out: Bulk,
        keys: list[bytes],
        free: npt.NDArray[np.bool_],
        owners: npt.NDArray[np.int64],
        cutoff: int | None,
    ) -> None:
        """The COPY documents of stored contents whose owner stays through the batch
        (no document of the batch has its id; the window does not reach it)."""
        copies = np.flatnonzero(free & (owners >= 0))
        if not len(copies):
            return
        kind = out.kind
        batch_keys = set(keys)
        stored: dict[int, tuple[DocId, DocId] | None] = {}
        for j, owner in zip(copies.tolist(), owners[copies].tolist(), strict=True):
            if owner not in stored:
                rec = t.record(owner)
                kept = (
                    rec is not None
                    and id_key(rec.doc_id) not in batch_keys
                    and not reached(rec, cutoff)
                )
                stored[owner] = (rec.doc_id, rec.cluster) if rec is not None and kept else None
            if (got := stored[owner]) is not None:
                kind[j] = COPY
                out.owner_of[j] = got

    @staticmethod
    def _search_kinds(
        out: Bulk,
        first_at: npt.NDArray[np.intp] | None,
        searching: npt.NDArray[np.bool_],
        shingled: npt.NDArray[np.bool_],
    ) -> None:
        """In a batch whose searches no verdict can change (`_classify`), the
        documents that would search (`searching`: new ids with shingles, a content
        new to the index, a row that is not quiet) when the first of the batch with
        their content (`first_at`: `_first_positions`): SEARCH; the later ones with
        that content: their copies.
        Every other document with shingles (`shingled`) is PLAIN or COPY already; if
        one is not (a content owner without a record: a damaged index), nothing is
        searched in bulk (its check in the loop would meet documents not stored
        yet)."""
        kind = out.kind
        undecided = kind == 0
        if first_at is None:  # (every content once in the batch)
            kind[undecided & searching] = SEARCH
        else:
            firsts = first_at == np.arange(len(first_at))
            kind[undecided & searching & firsts] = SEARCH
            later = np.flatnonzero(undecided & searching & ~firsts)
            for j, owner in zip(later.tolist(), first_at[later].tolist(), strict=True):
                if kind[owner] == SEARCH:
                    kind[j] = COPY
                    out.copy_of[j] = owner
        if np.any((kind == 0) & shingled):  # (not expected: the classes cover them)
            kind[kind == SEARCH] = 0
            kind[list(out.copy_of)] = 0
            out.copy_of = {}

    def _searched(
        self,
        t: Tables,
        where: list[tuple[Prepared, int]],
        docnos: list[int],
        ids: list[DocId],
    ) -> list[Verdict]:
        """The verdicts of the batch's SEARCH documents (`where`, numbered `docnos`,
        ascending): their near duplicates searched at once (engine/search.py), the
        work counted as `_best_match` counts it.  A duplicate of an earlier SEARCH
        document of the batch (the only ones of the batch a search can meet) takes
        that document's cluster, known by then: they are decided in batch order."""
        buckets = t.batch_buckets()
        assert buckets is not None and not (buckets.stale or buckets.dropped or buckets.adopted)
        got = search_batch(
            t,
            self._memory,
            buckets,
            [(p, i, d) for (p, i), d in zip(where, docnos, strict=True)],
            self.options.max_bucket_candidates,
            self.params.threshold,
            self._margin,
            self.options.max_exact_checks,
            signature_only=self.params.verify == "signature",
        )
        c = self.counters
        c.candidates += got.candidates
        c.most_candidates = max(c.most_candidates, got.most_candidates)
        c.exact_checks += got.exact_checks
        c.bucket_capped += got.bucket_capped
        c.exact_capped += got.exact_capped
        c.searched += len(docnos)
        found = got.found
        mine: dict[int, tuple[DocId, DocId]] = {}  # docno -> (id, cluster), in the batch
        verdicts: list[Verdict] = []
        for docno, d in zip(docnos, ids, strict=True):
            best = found[docno]
            v = None
            if best is not None:
                match = mine.get(best[1])
                if match is None and (rec := t.record(best[1])) is not None:
                    match = (rec.doc_id, rec.cluster)
                if match is not None:
                    v = Verdict(d, "duplicate", *match, round(best[0], 4), False)
            if v is None:
                v = Verdict(d, "unique", None, d, None, False)
            mine[docno] = (d, v.cluster)
            verdicts.append(v)
        return verdicts

    @staticmethod
    def _replays(t: Tables, p: Prepared, repeated: set[bytes], cutoff: int | None) -> bool:
        """Whether every `light` document of `p` will be a replay (its stored
        document holds its content, stays inside the window through the batch, and no
        other document of the batch has its id: none is in `repeated`), so that none
        of them is prepared again inside the transaction."""
        for i in p.light:
            key = p.keys[i]
            if key in repeated:
                return False
            docno = t.docno_for_id(key)
            rec = None if docno is None else t.record(docno)
            if rec is None or rec.content_hash != p.content[i] or reached(rec, cutoff):
                return False
        return True

    def _store_bulk(
        self,
        t: Tables,
        parts: list[Prepared],
        rows: list[list[bytes]],
        b: Bulk,
        out: list[Verdict],
    ) -> None:
        """Decide and store the documents `_classify` found and the loop numbered:
        what `_check_one` and `_insert` do for each, in whole-list operations.  A
        plain one: `unique`, its own cluster, stored as the owner of its content
        with signature, postings and text.  A copy: `duplicate` of its content's
        owner, exact, stored as one of the content's copies.  Their verdicts and
        changes take the places the loop kept, so `out` and `changes` are as the
        one-by-one path makes them.  A SEARCH one: its verdict from the batch's
        search (`_searched`), stored as a plain one is (`put_plain`: the batch's
        documents sharing a bucket are SEARCH ones, stored in docno order, so the
        postings buffer keeps their order)."""
        lists = _Joined.of(parts, rows)
        timeless = b.timestamps.count(None) == len(b.timestamps)  # (file mode)
        kind_of = b.kind[b.positions]  # each numbered document's kind, in loop order
        for kind in (SEARCH, PLAIN, COPY):  # (copies of SEARCH documents follow them)
            ms = np.flatnonzero(kind_of == kind).tolist()
            if not ms:
                continue
            pos = pick(b.positions, ms)
            one = lists.one
            where = list(zip(itertools.repeat(one), pos)) if one else pick(lists.at, pos)
            docnos = pick(b.docnos, ms)
            verdicts = self._bulk_verdicts(t, kind, b, pos, where, docnos, lists)
            for j, v in zip(pos, verdicts, strict=True):
                out[j] = v
            stamps: list[int | None] = [None] * len(ms) if timeless else pick(b.timestamps, ms)
            stored = Stored(
                pick(b.change_at, ms),
                pick(lists.keys, pos),
                docnos,
                verdicts,
                pick(lists.content, pos),
                stamps,
                pick(lists.shingles, pos),
            )
            self.unbuilt.append(stored)
            self._put_kind(t, kind, stored, pos, where, parts, lists)
        self.counters.bulk += len(b.positions)

    def _bulk_verdicts(
        self,
        t: Tables,
        kind: int,
        b: Bulk,
        pos: list[int],
        where: list[tuple[Prepared, int]],
        docnos: list[int],
        lists: _Joined,
    ) -> list[Verdict]:
        """The verdicts of the documents of one kind decided in bulk, at positions
        `pos`, tallied."""
        ids = list(map(_ID, pick(lists.docs, pos)))
        counts = self._counts
        if kind == SEARCH:
            verdicts = self._searched(t, where, docnos, ids)
            by_position = dict(zip(pos, verdicts, strict=True))
            for j, owner in b.copy_of.items():
                v = by_position[owner]
                b.owner_of[j] = (v.id, v.cluster)
            tallied = Counter(itertools.chain.from_iterable(map(Verdict.kinds, verdicts)))
            for name, k in tallied.items():
                counts[name] = counts.get(name, 0) + k
            return verdicts
        if kind == PLAIN:
            verdicts = [Verdict(d, "unique", None, d, None, False) for d in ids]
        else:
            of = pick(b.owner_of, pos)
            verdicts = [
                Verdict(d, "duplicate", o[0], o[1], 1.0, True) for d, o in zip(ids, of, strict=True)
            ]
        for name in verdicts[0].kinds():  # (the same for every verdict of a kind)
            counts[name] = counts.get(name, 0) + len(verdicts)
        return verdicts

    def _put_kind(
        self,
        t: Tables,
        kind: int,
        stored: Stored,
        pos: list[int],
        where: list[tuple[Prepared, int]],
        parts: list[Prepared],
        lists: _Joined,
    ) -> None:
        """Store the documents of one kind decided in bulk: copies as copies, the
        others indexed (signature, postings, text)."""
        docnos, keys, contents, stamps = (
            stored.docnos,
            stored.keys,
            stored.contents,
            stored.timestamps,
        )
        records = Packed(
            Record.pack_verdicts(stored.verdicts, contents, stamps, stored.shingles),
            contents,
            stamps,
        )
        if kind == COPY:
            t.put_copies(docnos, keys, records)
            return
        stored.signatures = sigs = pick(lists.sigs, pos)
        # exact verification stores every indexed document's text (all parts or none)
        one = lists.one
        if one is not None and one.texts is not None:
            stored.texts = one.texts.take(pos)
        elif parts[0].texts is not None:
            stored.texts = [_text(p, i) for p, i in where]
        t.put_plain(docnos, keys, records, sigs, pick(lists.rows, pos), stored.texts)
        # later documents of the batch meet them (if at all) through memory (the
        # search remembered SEARCH documents already)
        if kind == PLAIN:
            self._memory.fresh.update(zip(docnos, where, strict=True))
        # (nor are they the time window's `_expiry.oldest`: none is older than the
        # batch's last cutoff, so the window reaches none of them in the batch)


__all__ = [
    "COPY",
    "LATER",
    "LATER_CHANGE",
    "PLAIN",
    "SEARCH",
    "Bulk",
    "BulkRun",
    "Stored",
    "joined",
]
