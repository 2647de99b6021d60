"""The part every table part builds on (`TablesBase`): the one LMDB transaction the
parts share, the write-behind buffer of document entries and what was read ahead
(see the package docstring), and the table layout's constants (rows: store/rows.py).
One object holds them, so the parts need no handing of state between them."""

from __future__ import annotations

import operator
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import lmdb

from streamdedup.models import Record
from streamdedup.store.batch_postings import BatchPostings
from streamdedup.store.keys import (
    docno_key,
    docno_of,
)
from streamdedup.store.postings import Postings

_KEY = operator.itemgetter(0)  # an entry's key

TABLES = (
    "meta",
    "ids",
    "docs",
    "sigs",
    "texts",
    "content",
    "copies",
    "expiry",
    "postings",
    "tombs",
)
# The tables that hold documents: what `seal` moves out of the open index.
DATA_TABLES = ("ids", "docs", "sigs", "texts", "content", "copies", "expiry", "postings")

ABSENT = -1  # read ahead: no document (docnos are >= 0)
UNREAD = -2  # not read ahead (`Tables.read_ahead`)


def _in_order(keys: list[bytes]) -> list[bytes]:
    """Keys to read in one `getmulti`, in key order (each B-tree page visited once).
    Sorted as they are, not made distinct first: a batch's ids mostly come in order,
    which `sorted` confirms in one pass, where a set's order it must sort all over
    again (1.6 against 0.07 ms a batch of 8,000).  A repeated key is read twice."""
    return sorted(keys)


@dataclass
class _Writes:
    """Document entries `put_document` buffered, per table, until `Tables._flush`; and
    the documents' records, for reads before then (those stored in bulk as packed,
    unpacked if one is read: `put_plain`)."""

    pending: bool = False
    ids: list[tuple[bytes, bytes]] = field(default_factory=list)
    docs: list[tuple[bytes, bytes]] = field(default_factory=list)
    sigs: list[tuple[bytes, bytes]] = field(default_factory=list)
    texts: list[tuple[bytes, bytes]] = field(default_factory=list)
    content: list[tuple[bytes, bytes]] = field(default_factory=list)
    copies: list[tuple[bytes, bytes]] = field(default_factory=list)
    expiry: list[tuple[bytes, bytes]] = field(default_factory=list)
    records: dict[int, Record | bytes] = field(default_factory=dict)
    # `put_plain` appended documents numbered below some already buffered: `docs`,
    # `sigs` and `texts` are then sorted on `_flush` (two ascending runs: timsort
    # merges them in one pass), so that their appends stay appends
    mixed: bool = False


class TablesBase:
    """What the parts of `Tables` share: the one transaction and its tables, the
    write-behind buffer (`_Writes`, written out by `_flush`), the ids and content
    hashes read ahead, and the point reads every part answers from them."""

    def __init__(self, txn: lmdb.Transaction, dbs: dict[str, Any]) -> None:
        self.txn = txn
        self.db = dbs
        self.postings = Postings(txn, dbs["postings"])
        self._postings: BatchPostings | None = None
        # whether the last `candidates` call left postings out of a bucket (the cap)
        self.capped = False
        # What ids and content hashes point to (ABSENT: nothing), for those read ahead
        # (`prefetch`) or written since; every buffered write's key is here.
        self._ids: dict[bytes, int] = {}
        self._content: dict[bytes, int] = {}
        self._writes = _Writes()

    def _flush(self) -> None:
        """Write the buffered document entries, each table's in one call, in key order."""
        w = self._writes
        if not w.pending:
            return
        self._writes = _Writes()
        # Sorted by key alone: a buffer holds a key once (a document written again in
        # the batch is removed first, which writes the buffer out: `_settle`), and a
        # tuple comparison compares the keys twice (equal? less?): 40% slower.
        self._put_many("ids", sorted(w.ids, key=_KEY))
        self._put_many("docs", sorted(w.docs, key=_KEY) if w.mixed else w.docs, last=True)
        self._put_many("sigs", sorted(w.sigs, key=_KEY) if w.mixed else w.sigs, last=True)
        self._put_many("texts", sorted(w.texts, key=_KEY) if w.mixed else w.texts, last=True)
        self._put_many("content", sorted(w.content, key=_KEY))
        self._put_many("copies", sorted(w.copies, key=_KEY))
        self._put_many("expiry", sorted(w.expiry, key=_KEY))

    def _put_many(self, table: str, items: list[tuple[bytes, bytes]], last: bool = False) -> None:
        """`last`: keys that are normally the table's largest, in order (docnos only
        grow): LMDB's append skips the search and fills pages to the brim, where an
        insert at the end of a page would split it in half.  A restore, or a copy
        moved from a sealed segment, writes older docnos: those are put again
        without it."""
        if not items:
            return
        cur = self.txn.cursor(db=self.db[table])
        if last:
            consumed, added = cur.putmulti(items, append=True)
            if added == consumed:
                return
        cur.putmulti(items)

    def _settle(self) -> None:
        """Before a change the buffer does not model: write the buffer out and forget
        what was read ahead (the change may make it stale)."""
        self._flush()
        self._ids = {}
        self._content = {}

    def _put_last(self, key: bytes, value: bytes, table: str) -> None:
        """Put a key that is normally the table's largest (docnos only grow): LMDB's
        append skips the search and fills pages to the brim, where an insert at the
        end of a page would split it in half.  A restore writes in any order."""
        db = self.db[table]
        if not self.txn.put(key, value, db=db, append=True):
            self.txn.put(key, value, db=db)

    def items(self, table: str, after: bytes = b"") -> Iterator[tuple[bytes, bytes]]:
        """A table's entries in key order, those with keys past `after` if given (LMDB
        checks each page it walks: a damaged one raises)."""
        self._flush()
        cur = self.txn.cursor(db=self.db[table])
        found = cur.set_range(after) if after else cur.first()
        if found and after and bytes(cur.key()) == after:
            found = cur.next()
        while found:
            yield bytes(cur.key()), bytes(cur.value())
            found = cur.next()

    def count(self, table: str) -> int:
        self._flush()
        return int(self.txn.stat(self.db[table])["entries"])

    def docno_for_id(self, key: bytes) -> int | None:
        known = self._ids.get(key)
        if known is not None:
            return None if known == ABSENT else known
        raw = self.txn.get(key, db=self.db["ids"])
        return None if raw is None else docno_of(raw)

    def record(self, docno: int) -> Record | None:
        w = self._writes
        if w.records and (rec := w.records.get(docno)) is not None:
            return Record.unpack(rec) if isinstance(rec, bytes) else rec
        raw = self.txn.get(docno_key(docno), db=self.db["docs"])
        return None if raw is None else Record.unpack(bytes(raw))

    def docno_for_content(self, content_hash: bytes) -> int | None:
        known = self._content.get(content_hash)
        if known is not None:
            return None if known == ABSENT else known
        raw = self.txn.get(content_hash, db=self.db["content"])
        return None if raw is None else docno_of(raw)

    # (the parts' own, called across parts: defined by `Buckets` and `ExpiryOrder`)
    def _add_postings(
        self, docno: int, bucket_keys: list[bytes], adopted: bool = False, row: bytes | None = None
    ) -> None:
        raise NotImplementedError

    def delete_expiry(self, timestamp_ms: int, docno: int) -> None:
        raise NotImplementedError
