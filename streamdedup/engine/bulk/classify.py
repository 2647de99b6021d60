"""The bulk path's first half: the documents of a batch most of a stream is made of,
found for the whole batch at once (`_classify`), before the loop, which only numbers
them in their place (store.py decides and stores them after it).

Most documents of a stream need none of the one-by-one order's subtleties: a new id,
with a new content and no candidates (unique, PLAIN), or an exact copy of a content
held by a document that stays (duplicate, exact: COPY).  In a batch of new ids (most
batches of a stream), the documents that search for near duplicates are decided in
bulk too (SEARCH): no verdict changes what a later document of such a batch finds,
so the whole batch's searches are made at once (engine/search.py).  Their verdicts,
stored entries and changes are those the one-by-one path would make
(tests/engine/test_bulk.py compares the two on random batches)."""

from __future__ import annotations

import operator
from collections import Counter
from collections.abc import Sequence
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from streamdedup.engine.prepare import Prepared
from streamdedup.engine.window import WindowRun, chained, reached
from streamdedup.models import Change, DocId, Verdict
from streamdedup.store.keys import id_key
from streamdedup.store.tables import ABSENT, Tables

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


def _resent(parts: list[Prepared], n: int) -> npt.NDArray[np.bool_]:
    """Which of the batch's `n` documents are `resent` (known: same id, same content)."""
    resent = np.zeros(n, dtype=np.bool_)
    start = 0
    for p in parts:
        if p.resent:
            resent[[start + i for i in p.resent]] = True
        start += len(p.docs)
    return resent


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


class ClassifyRun(WindowRun):
    """A batch's run, finding the documents its bulk path decides."""

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
        batch; not `resent`; with shingles; with a time window, stored as of the
        batch's last cutoff or later (`cutoff`: the window forgets or hides nothing
        these documents depend on during the batch -- a stored content owner of a
        copy must be as recent).  Then either

        PLAIN: its content hash is in neither the index nor another document of the
        batch, and its row is unshared: `unique`, stored as the owner of its content; or
        the first of the batch's documents with a content new to the index, all
        others of which are new ids (COPY);

        COPY: an exact copy of a stored document whose id no document of the batch
        has (so it keeps its content), or of such a first document: `duplicate`,
        `exact`, stored as a copy.

        In a batch whose every id is new (or a `resent` replay), where the window
        forgets nothing, the documents left -- those that search
        for near duplicates -- are SEARCH (and the later copies of their contents
        COPY): decided by one search of the whole batch (`_search_kinds`,
        `_searched`, engine/search.py), whose answers no verdict can change.

        Their checks would answer as here whatever comes before them in the batch:
        no one else's id or content is theirs (only a replaced id is forgotten, and
        none of these is, nor a stored owner of their content), and nothing a plain
        document could meet in a bucket is written before it -- a unshared row shares
        no key with a stored document or a searching row of the batch; the rows
        `_searching` leaves out (exact copies) are their content owner's, stored or
        searching, so they share none either; an adopted copy takes a stored
        owner's keys or a searching row's.  What remains is a `resent` document
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
        resent = _resent(parts, n)
        searchable = self._searchable(parts, repeated, free | resent, cutoff)
        free &= np.fromiter(chained([p.shingles for p in parts]), dtype=np.int64, count=n) > 0
        free &= ~resent
        # (a batch of replays only has nothing to check)
        if not free.any() or not all(
            self._replays(t, p, repeated, cutoff) for p in parts if p.resent
        ):
            return out
        unshared = t.unshared_rows(chained(rows), n)
        new = owners == ABSENT
        first_at = _first_positions(contents)
        self._new_contents(out, parts, contents, first_at, free, new, unshared)
        self._stored_copies(t, out, keys, free, owners, cutoff)
        if searchable:
            self._search_kinds(out, first_at, free & new & ~unshared, free)
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
        verdict can change what a later document finds -- every id new or a `resent`
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
        unshared: npt.NDArray[np.bool_],
    ) -> None:
        """The PLAIN documents, with a content new to the index, and the later copies
        of such a content in the batch (COPY): all or none of a content's."""
        kind = out.kind
        if first_at is None:  # (every content once in the batch)
            kind[free & new & unshared] = PLAIN
            return
        n = len(contents)
        once = np.bincount(first_at, minlength=n)[first_at] == 1
        kind[free & new & unshared & once] = PLAIN
        # a content new to the index, several times in the batch: all or none
        groups: dict[bytes, list[int]] = {}
        for j in np.flatnonzero(new & ~once).tolist():
            groups.setdefault(contents[j], []).append(j)
        docs = joined([p.docs for p in parts])
        for group in groups.values():
            first = group[0]
            if unshared[first] and free[group].all():
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
        new to the index, a row that is not unshared) when the first of the batch with
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

    @staticmethod
    def _replays(t: Tables, p: Prepared, repeated: set[bytes], cutoff: int | None) -> bool:
        """Whether every `resent` document of `p` will be a replay (its stored
        document holds its content, stays inside the window through the batch, and no
        other document of the batch has its id: none is in `repeated`), so that none
        of them is prepared again inside the transaction."""
        for i in p.resent:
            key = p.keys[i]
            if key in repeated:
                return False
            docno = t.docno_for_id(key)
            rec = None if docno is None else t.record(docno)
            if rec is None or rec.content_hash != p.content[i] or reached(rec, cutoff):
                return False
        return True


__all__ = [
    "COPY",
    "LATER",
    "LATER_CHANGE",
    "PLAIN",
    "SEARCH",
    "Bulk",
    "ClassifyRun",
    "joined",
]
