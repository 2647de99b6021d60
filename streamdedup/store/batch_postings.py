"""The posting work of one write batch, buffered in memory: the buckets read ahead in
key order and the postings the batch adds, written in key order at its end
(`Tables.batch_postings`, `Tables.flush_postings`)."""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field

NONE: list[int] = []  # an empty answer (never changed)

# A bucket's docnos as a batch keeps them: int64 arrays, array('q'), not lists of
# ints.  The compiled candidate gathering (`gather`) copies an array as it is, where
# it read a list's ints one by one, each a separate object on the heap (a batch's
# own docnos made one at a time as it went): those cache misses were most of its
# time on a template page, which meets hundreds of siblings in its buckets.  They
# behave as sequences of ints (len, iteration, slices, `del a[n:]`), but an array
# does not add to a list: `Docnos` is what readers may assume.
Docnos = Sequence[int]


def docnos() -> array[int]:
    """An empty bucket's docnos, as a batch keeps them."""
    return array("q")


def _has_key(row: bytes, bk: bytes) -> bool:
    """Is `bk` one of the 8-byte keys joined in `row`?"""
    at = row.find(bk)
    while at >= 0 and at % 8:
        at = row.find(bk, at + 1)
    return at >= 0


@dataclass
class BatchPostings:
    """The posting work of one batch (see `Tables.batch_postings`).

    Only the keys that two documents of the batch share are tracked one by one
    (`added`); the rest stay in per-document lists (`docnos`, `doc_rows`) until
    they are sorted and written.  A document prepared again inside the transaction (the engine
    does that when it changed since `known` looked) is not one of the batch's
    rows: its keys are tracked one by one, and its own query reads everything."""

    read_ahead: dict[bytes, array[int]]  # stored postings, newest first, of present keys
    added: dict[bytes, array[int]]  # buffered docnos, oldest first, of tracked keys
    rows: set[bytes]  # each document's keys, joined: the rows read ahead
    unshared: set[bytes]  # rows none of whose keys is stored or shared: no candidates
    hot: set[bytes] = field(default_factory=set)  # stored keys holding more than the cap
    # the buffered documents (docno, joined keys), as two lists: no tuple each
    docnos: list[int] = field(default_factory=list)
    doc_rows: list[bytes] = field(default_factory=list)
    buffered: set[int] = field(default_factory=set)
    dropped: set[int] = field(default_factory=set)  # buffered, then removed
    stale: set[bytes] = field(default_factory=set)  # stored postings removed since
    adopted: bool = False  # a copy took over an owner's postings (docnos out of order)

    def add(
        self, band_keys: list[bytes], docno: int, adopted: bool = False, row: bytes | None = None
    ) -> None:
        """`row`: `band_keys` joined, if the caller has them so."""
        if row is None:
            row = b"".join(band_keys)
        self.docnos.append(docno)
        self.doc_rows.append(row)
        self.buffered.add(docno)
        added = self.added
        self.adopted |= adopted
        if row in self.rows and not adopted:
            if row not in self.unshared:  # a unshared row shares no key
                for bk in band_keys:
                    if bk in added:
                        added[bk].append(docno)
            return
        self.unshared.clear()  # an unforeseen document: every later query looks
        for bk in band_keys:
            got = added.get(bk)
            if got is None:
                got = added[bk] = docnos()
            got.append(docno)

    def add_many(self, docnos: list[int], rows: list[bytes]) -> None:
        """Documents decided in bulk: what `add` does for each of them -- only their
        rows are kept -- in two list operations.  Either their rows are among the
        batch's unshared ones (`unshared`, as computed up front: they share no key with
        another row), or they are the documents of a batch searched as a whole
        (engine/search.py), given in docno order before any other of the batch is
        added.  Their docnos may be below those added already: `flush_postings`
        needs no new order for that, since a key's docnos are ordered among the
        documents sharing it, and unshared ones share none."""
        if len(docnos) != len(rows):
            raise ValueError("a docno for each row")
        self.docnos += docnos
        self.doc_rows += rows
        self.buffered.update(docnos)

    def added_to(self, bk: bytes, batch_row: bool) -> Docnos:
        """Buffered docnos of a key, oldest first."""
        found: Docnos
        if batch_row:
            found = self.added.get(bk, NONE)
        else:
            found = [
                d for d, row in zip(self.docnos, self.doc_rows, strict=True) if _has_key(row, bk)
            ]
        return [d for d in found if d not in self.dropped] if self.dropped else found

    def discard(self, docno: int) -> bool:
        """Forget a buffered document's postings; False if it has none buffered."""
        if docno in self.dropped or docno not in self.buffered:
            return False
        self.dropped.add(docno)
        return True
