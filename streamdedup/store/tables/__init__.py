"""The tables of an index and typed access to them inside one transaction (`Tables`):
the only code that reads and writes their keys and values.

Tables (LMDB named databases):

==========  =========================  ============================================
table       key                        value
==========  =========================  ============================================
meta        name                       msgpack (parameters, counters, offsets)
ids         encoded document id        docno (5 bytes, big-endian)
docs        docno                      msgpack record: id, verdict, links, hashes
sigs        docno                      signature: K little-endian uint16
texts       docno + chunk number       zstd-compressed normalised text (exact
                                       verification: re-shingled to 64-bit hashes)
content     normalised-content hash    docno of the document owning that content
copies      content hash + docno       empty: the other live documents with it
postings    partition + level          a sorted run of band postings (postings.py)
expiry      timestamp (8) + docno      empty: documents in time order, for --ttl
tombs       segment (2) + docno        empty: a sealed segment's document masked
            segment (2)                the number of that segment's tombstones
==========  =========================  ============================================

The keys are spelled in `keys.py` (the names in `meta` too: `MetaKey`).

`seal` (segments.py) moves every document into a sealed segment: the tables up to
`postings` (`DATA_TABLES`) are emptied, `meta` and `tombs` stay.  A document of a
sealed segment that is later replaced or expired is masked by a tombstone here, in
the open index, since the segment itself never changes.  An index made before
segments has no `tombs` table: read-only, it simply has no tombstones.

A content hash is owned by one document, the one indexed (signature, postings,
text); its exact copies are stored without those and listed in `copies`.  When
the owner is forgotten, the oldest copy takes its place (`Tables.adopt`), so a copy
stays findable, as an exact and as a near duplicate, as long as it lives.

Documents are numbered in arrival order, so "the newest N of a hot bucket" are the
largest docnos among its postings.  All of one batch happens in one write transaction
(`Index.write`).  Within a batch the engine reads the buckets it needs ahead and writes
its postings at the end, a whole batch at once (`Tables.batch_postings`, batch.py).

The documents' own entries are written behind too (`put_document` buffers them, `_flush`
writes each table's in one `putmulti`, in key order): one LMDB call per table and batch
instead of five per document, which was a fifth of a one-line document's cost.  The
buffer is invisible to callers: the point reads of documents (`record`, `signature`,
`text`, `docno_for_id`, `docno_for_content`) answer from it, and every other method that
reads or changes those tables writes it out first.  Ids and content hashes read ahead
for a whole batch (`prefetch`) are answered from memory as well.  A new method that
reads the document tables must call `_flush` first.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import lmdb
import msgpack
import numpy as np
import numpy.typing as npt

from streamdedup.models import Record
from streamdedup.sketch import kernels
from streamdedup.store.batch import NONE, BatchPostings, Docnos, docnos
from streamdedup.store.keys import (
    DOCNO_BYTES,
    SEGMENT_BYTES,
    docno_key,
    docno_keys,
    docno_of,
    expiry_key,
    native_keys,
    raw_keys,
    tomb_key,
)
from streamdedup.store.postings import Postings, distinct

_NO_DOCS: npt.NDArray[np.int64] = np.empty(0, dtype=np.int64)  # no candidates (never changed)
_FEW = 64  # candidates made distinct in Python below this, by numpy above
TEXT_CHUNK = 1000  # small values pack 4 KiB pages well and never overflow

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


def text_chunks(docno: int, text: bytes) -> list[tuple[bytes, bytes]]:
    """A stored text's `texts` rows: (docno + chunk number, at most TEXT_CHUNK bytes),
    in key order.  The one layout of the table, for the engine's inserts and a
    segment built from sorted runs alike."""
    return _chunks_of(docno_key(docno), text)


def _chunks_of(dk: bytes, text: bytes) -> list[tuple[bytes, bytes]]:
    """`text_chunks` of the document whose docno key is `dk`.  Most texts are one or
    two chunks (a compressed crawl page: 1-2 KB), spelled out: half the time of the
    general loop below (0.47 against 0.98 us), once per stored document."""
    n = len(text)
    if n <= TEXT_CHUNK:
        return [(dk + _FIRST_CHUNK, text)]
    if n <= 2 * TEXT_CHUNK:
        return [(dk + b"\x00\x00", text[:TEXT_CHUNK]), (dk + b"\x00\x01", text[TEXT_CHUNK:])]
    return [
        (dk + (i // TEXT_CHUNK).to_bytes(2, "big"), text[i : i + TEXT_CHUNK])
        for i in range(0, n, TEXT_CHUNK)
    ]


def _texts_rows(dks: list[bytes], texts: list[bytes]) -> Iterable[tuple[bytes, bytes]]:
    """The `texts` rows of many documents (`dks`: their docno keys), in order: each
    one's `_chunks_of`.  When every text is one chunk (short documents), their keys
    are made in one C pass instead of a call each (half the time)."""
    if texts and max(map(len, texts)) <= TEXT_CHUNK:
        return zip(map(operator.add, dks, itertools.repeat(_FIRST_CHUNK)), texts, strict=True)
    each = itertools.starmap(_chunks_of, zip(dks, texts, strict=True))
    return itertools.chain.from_iterable(each)


_FIRST_CHUNK = b"\x00\x00"  # chunk number 0, as `_chunks_of` numbers them
_KEY = operator.itemgetter(0)  # an entry's key


def _in_order(keys: list[bytes]) -> list[bytes]:
    """Keys to read in one `getmulti`, in key order (each B-tree page visited once).
    Sorted as they are, not made distinct first: a batch's ids mostly come in order,
    which `sorted` confirms in one pass, where a set's order it must sort all over
    again (1.6 against 0.07 ms a batch of 8,000).  A repeated key is read twice."""
    return sorted(keys)


@dataclass(frozen=True)
class Packed:
    """The records of documents stored in bulk (`put_plain`, `put_copies`), packed
    (`Record.pack_verdicts`), with the two fields the tables key by: a `Record` each
    cost as much to build as to pack, and nothing reads them as objects."""

    packed: list[bytes]
    content_hashes: list[bytes]
    timestamps: list[int | None]

    @classmethod
    def of(cls, records: list[Record]) -> Packed:
        """Records packed (tests; the engine packs without making them)."""
        return cls(
            Record.pack_many(records),
            [r.content_hash for r in records],
            [r.timestamp_ms for r in records],
        )


ABSENT = -1  # read ahead: no document (docnos are >= 0)
UNREAD = -2  # not read ahead (`Tables.read_ahead`)


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


class Tables:
    """Typed access to the tables inside one transaction.  `txn` and `db` are the
    store's own: code outside the store uses the methods."""

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

    def bulk_writes(self) -> Tables:
        """These tables: the bulk path stores whole lists in them (engine/bulk.py)."""
        return self

    def finish(self) -> None:
        """Before the transaction commits: write what is buffered, record (and maybe
        purge) removed postings."""
        self._flush()
        if self.postings.removed:
            self.postings.finish(live_docs=self.count("sigs"))

    # -- meta
    def meta(self, name: str) -> Any:
        raw = self.txn.get(name.encode(), db=self.db["meta"])
        return None if raw is None else msgpack.unpackb(raw)

    def set_meta(self, name: str, value: Any) -> None:
        self.txn.put(name.encode(), msgpack.packb(value), db=self.db["meta"])

    def meta_raw(self, key: bytes) -> bytes | None:
        """A `meta` entry by its key as bytes, its value as stored (packed)."""
        raw = self.txn.get(key, db=self.db["meta"])
        return None if raw is None else bytes(raw)

    def put_meta_raw(self, key: bytes, value: bytes) -> None:
        """Store a `meta` entry by its key as bytes, its value already packed."""
        self.txn.put(key, value, db=self.db["meta"])

    def delete_meta(self, name: str | bytes) -> bool:
        """Remove a `meta` entry; False if there was none."""
        key = name.encode() if isinstance(name, str) else name
        return bool(self.txn.delete(key, db=self.db["meta"]))

    def meta_entries(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        """The `meta` entries whose keys start with `prefix`, in key order: whole keys
        and packed values."""
        cur = self.txn.cursor(db=self.db["meta"])
        found = cur.set_range(prefix)
        while found and bytes(cur.key()).startswith(prefix):
            yield bytes(cur.key()), bytes(cur.value())
            found = cur.next()

    def next_meta_entry(self, key: bytes) -> tuple[bytes, bytes] | None:
        """The first `meta` entry whose key is `key` or sorts after it (whole key,
        packed value), if any."""
        cur = self.txn.cursor(db=self.db["meta"])
        return (bytes(cur.key()), bytes(cur.value())) if cur.set_range(key) else None

    def delete_meta_range(self, start: bytes, stop: bytes) -> None:
        """Remove the `meta` entries with keys from `start` up to, not including, `stop`."""
        cur = self.txn.cursor(db=self.db["meta"])
        while cur.set_range(start) and bytes(cur.key()) < stop:
            cur.delete()

    # -- whole tables
    def table_names(self) -> list[str]:
        """The tables of this index, in layout order (a read-only index of an older
        format may lack some)."""
        return list(self.db)

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

    def records(self) -> Iterator[tuple[int, Record]]:
        """Every stored document's number and record, in document order."""
        for key, raw in self.items("docs"):
            yield docno_of(key), Record.unpack(raw)

    # -- documents
    def prefetch(self, keys: list[bytes], contents: list[bytes]) -> None:
        """Read what these ids and content hashes point to, in key order and one call
        per table (a batch's, before its documents are checked one by one)."""
        self._flush()
        self._ids = self._read_ahead("ids", keys, self._ids)
        self._content = self._read_ahead("content", contents, self._content)

    def _read_ahead(
        self, table: str, keys: list[bytes], known: dict[bytes, int]
    ) -> dict[bytes, int]:
        got = self.txn.cursor(db=self.db[table]).getmulti(_in_order(keys))
        out = dict.fromkeys(keys, ABSENT)
        out.update({bytes(k): docno_of(v) for k, v in got})
        out.update(known)
        return out

    def docnos_for_ids(self, keys: list[bytes]) -> dict[bytes, int]:
        """The stored documents of these ids: key -> docno, for those that have one."""
        self._flush()
        got = self.txn.cursor(db=self.db["ids"]).getmulti(_in_order(keys))
        return {bytes(k): docno_of(v) for k, v in got}

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

    def signature(self, docno: int) -> bytes | None:
        if self._writes.pending and docno in self._writes.records:  # rare: the engine
            self._flush()  # reads the batch's own signatures from memory
        raw = self.txn.get(docno_key(docno), db=self.db["sigs"])
        return None if raw is None else bytes(raw)

    def signatures(
        self, docnos: npt.NDArray[np.int64]
    ) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.uint16]]:
        """The signatures of `docnos` as rows of a matrix (a row of zeros where there
        is none), and which exist: one call for a document's candidates, where
        `signature` is a call (and a key built) per candidate."""
        get, db = self.txn.get, self.db["sigs"]
        keys, step = docno_keys(docnos), DOCNO_BYTES
        found = np.zeros(len(docnos), dtype=np.bool_)
        rows: list[bytes] = []
        for j in range(len(docnos)):
            raw = get(keys[j * step : (j + 1) * step], db=db)
            if raw is not None:
                found[j] = True
                rows.append(bytes(raw))
        return _matrix(found, rows)

    def _chunked(self, docno: int, table: str) -> bytes:
        """The chunks joined; only a full chunk can have a next one (gets are cheaper
        than a cursor: most values are one or two chunks)."""
        prefix, db = docno_key(docno), self.db[table]
        parts: list[bytes] = []
        for n in range(1 << 16):
            raw = self.txn.get(prefix + n.to_bytes(2, "big"), db=db)
            if raw is None:
                break
            parts.append(bytes(raw))
            if len(raw) < TEXT_CHUNK:
                break
        return b"".join(parts)

    def text(self, docno: int) -> bytes:
        """The stored compressed text (`texts`), chunks joined; b"" if none."""
        if self._writes.pending and docno in self._writes.records:  # rare, as `signature`
            self._flush()
        return self._chunked(docno, "texts")

    def docno_for_content(self, content_hash: bytes) -> int | None:
        known = self._content.get(content_hash)
        if known is not None:
            return None if known == ABSENT else known
        raw = self.txn.get(content_hash, db=self.db["content"])
        return None if raw is None else docno_of(raw)

    def first_copy(self, content_hash: bytes) -> int | None:
        """The oldest live copy of a content hash other than its owner, if any."""
        if self._writes.copies:  # only `copies` is read
            self._flush()
        cur = self.txn.cursor(db=self.db["copies"])
        if not cur.set_range(content_hash):
            return None
        key = bytes(cur.key())
        return docno_of(key[len(content_hash) :]) if key.startswith(content_hash) else None

    def put_document(
        self,
        docno: int,
        key: bytes,
        record: Record,
        signature: bytes | None,
        bucket_keys: list[bytes],
        register_content: bool,
        text: bytes | None = None,
        row: bytes | None = None,
    ) -> bool:
        """Store a document; True if it became the owner of its content hash (else,
        with `register_content`, it is listed as one of that content's copies).
        Buffered: written by `_flush`.  `row`: `bucket_keys` joined, if the caller
        has them so."""
        dk = docno.to_bytes(DOCNO_BYTES, "big")
        w = self._writes
        w.pending = True
        w.ids.append((key, dk))
        self._ids[key] = docno
        w.docs.append((dk, record.pack()))
        w.records[docno] = record
        if signature is not None:
            w.sigs.append((dk, signature))
        if bucket_keys:
            self._add_postings(docno, bucket_keys, row=row)
        if text is not None:
            w.texts += _chunks_of(dk, text)
        if record.timestamp_ms is not None:
            w.expiry.append((expiry_key(record.timestamp_ms, docno), b""))
        if not register_content:
            return False
        # the first document with this content stays its owner
        content_hash = record.content_hash
        owner = self._content.get(content_hash)
        if owner is None:  # not read ahead
            owner = ABSENT if self.docno_for_content(content_hash) is None else 0
        if owner == ABSENT:
            w.content.append((content_hash, dk))
            self._content[content_hash] = docno
            return True
        w.copies.append((content_hash + dk, b""))
        return False

    def read_ahead(
        self, keys: list[bytes], contents: list[bytes]
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """What these ids and content hashes point to, as read ahead (`prefetch`) or
        written since: a docno, ABSENT (nothing), or UNREAD (not read ahead)."""
        ids, content = self._ids.get, self._content.get
        return (
            np.fromiter(map(ids, keys, itertools.repeat(UNREAD)), np.int64, len(keys)),
            np.fromiter(map(content, contents, itertools.repeat(UNREAD)), np.int64, len(contents)),
        )

    def put_plain(
        self,
        docnos: list[int],
        keys: list[bytes],
        records: Packed,
        signatures: list[bytes],
        rows: list[bytes],
        texts: list[bytes] | None,
    ) -> None:
        """Store documents the engine decided in bulk, the common case of a stream:
        each a new id (no entry in `ids`, nor another of the batch's), the owner of a
        content hash nobody else holds, indexed (signature, postings: `rows`, each
        document's band keys joined: the batch's quiet rows, or those of a batch
        searched as a whole, in docno order, `BatchPostings.add_many`; text when
        given).  The
        same entries `put_document` would write for each (owner of its content:
        True), buffered the same way, written with whole-list operations instead of
        one call chain per document.  `docnos` ascend; they may interleave with
        documents `put_document` buffered (the engine stores the rest of a batch one
        by one, in order, and these after): `_flush` then sorts.  `records`: theirs,
        packed (`Packed`)."""
        if not docnos:
            return
        dks = self._put_records(docnos, keys, records)
        w = self._writes
        w.sigs += zip(dks, signatures, strict=True)
        if texts is not None:
            w.texts += _texts_rows(dks, texts)
        hashes = records.content_hashes
        w.content += zip(hashes, dks, strict=True)
        self._content.update(zip(hashes, docnos, strict=True))
        if self._postings is not None:
            self._postings.add_many(docnos, rows)
        else:
            flat = native_keys(b"".join(rows))
            per = np.fromiter(map(len, rows), np.int64, len(rows)) // 8
            self.postings.add(flat, np.repeat(np.asarray(docnos, dtype=np.uint64), per))

    def put_copies(self, docnos: list[int], keys: list[bytes], records: Packed) -> None:
        """Store exact copies the engine decided in bulk: each a new id (as in
        `put_plain`), of a content hash that has an owner, listed among its copies
        -- what `put_document` writes for a copy (not indexed: no signature,
        postings or text), in whole-list operations."""
        if not docnos:
            return
        dks = self._put_records(docnos, keys, records)
        w = self._writes
        w.copies += [(c + dk, b"") for c, dk in zip(records.content_hashes, dks, strict=True)]

    def _put_records(self, docnos: list[int], keys: list[bytes], records: Packed) -> list[bytes]:
        """Buffer the `ids`, `docs` and `expiry` entries of new documents (docnos
        ascending); their docno keys."""
        dks = [d.to_bytes(DOCNO_BYTES, "big") for d in docnos]
        w = self._writes
        w.pending = True
        if w.docs and w.docs[-1][0] > dks[0]:
            w.mixed = True
        w.ids += zip(keys, dks, strict=True)
        self._ids.update(zip(keys, docnos, strict=True))
        w.docs += zip(dks, records.packed, strict=True)
        w.records.update(zip(docnos, records.packed, strict=True))
        if records.timestamps.count(None) < len(docnos):  # (file mode: none has one)
            w.expiry += [
                (expiry_key(ts, d), b"")
                for d, ts in zip(docnos, records.timestamps, strict=True)
                if ts is not None
            ]
        return dks

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

    def register_content(self, content_hash: bytes, docno: int, *, copy: bool = True) -> bool:
        """Make a document the owner of its content hash if that has none (True); else,
        with `copy`, list it among the content's copies."""
        self._settle()
        dk = docno_key(docno)
        if self.txn.put(content_hash, dk, db=self.db["content"], overwrite=False):
            return True
        if copy:
            self.txn.put(content_hash + dk, b"", db=self.db["copies"])
        return False

    def clear_content(self) -> None:
        """Empty the `content` and `copies` tables (to set them again from the stored
        documents: `register_content`)."""
        self._settle()
        self.txn.drop(self.db["content"], delete=False)
        self.txn.drop(self.db["copies"], delete=False)

    def adopt(
        self,
        docno: int,
        content_hash: bytes,
        signature: bytes | None,
        bucket_keys: list[bytes],
        text: bytes | None,
    ) -> None:
        """Make a copy the owner of its content, with the forgotten owner's signature,
        postings and text (identical content: identical data)."""
        self._settle()
        dk = docno_key(docno)
        self.txn.delete(content_hash + dk, db=self.db["copies"])
        self.txn.put(content_hash, dk, db=self.db["content"])
        self._put_data(docno, signature, bucket_keys, text, adopted=True)

    def _put_data(
        self,
        docno: int,
        signature: bytes | None,
        bucket_keys: list[bytes],
        text: bytes | None,
        adopted: bool = False,
    ) -> None:
        dk = docno_key(docno)
        if signature is not None:
            self._put_last(dk, signature, "sigs")
        if bucket_keys:
            self._add_postings(docno, bucket_keys, adopted)
        if text is None:
            return
        for chunk_key, chunk in text_chunks(docno, text):
            self._put_last(chunk_key, chunk, "texts")

    def _add_postings(
        self, docno: int, bucket_keys: list[bytes], adopted: bool = False, row: bytes | None = None
    ) -> None:
        if self._postings is not None:
            self._postings.add(bucket_keys, docno, adopted=adopted, row=row)
        else:
            keys = native_keys(b"".join(bucket_keys))
            self.postings.add(keys, np.full(len(keys), docno, dtype=np.uint64))

    def _put_last(self, key: bytes, value: bytes, table: str) -> None:
        """Put a key that is normally the table's largest (docnos only grow): LMDB's
        append skips the search and fills pages to the brim, where an insert at the
        end of a page would split it in half.  A restore writes in any order."""
        db = self.db[table]
        if not self.txn.put(key, value, db=db, append=True):
            self.txn.put(key, value, db=db)

    def put_sorted(self, table: str, rows: Iterable[tuple[bytes, bytes]]) -> int:
        """Append rows whose keys ascend and sort after every key the table holds (a
        sealed segment built from sorted runs: `segments.SegmentBuilder`); returns how
        many.  A key out of order is refused (`ValueError`), never written elsewhere."""
        db, put, n = self.db[table], self.txn.put, 0
        for key, value in rows:
            if not put(key, value, db=db, append=True):
                raise ValueError(f"table {table}: key {key!r} is not past the last one")
            n += 1
        return n

    def remove_document(self, docno: int, key: bytes, bucket_keys: list[bytes]) -> None:
        """Forget a document entirely (its id, record, postings, text and content
        or copies entry).  The caller promotes an owner's copy (`adopt`)."""
        self._settle()
        dk = docno_key(docno)
        record = self.record(docno)
        self.txn.delete(key, db=self.db["ids"])
        self.txn.delete(dk, db=self.db["docs"])
        self.txn.delete(dk, db=self.db["sigs"])
        buffered = self._postings is not None and self._postings.discard(docno)
        if bucket_keys and not buffered:
            self.postings.remove(docno)
            if self._postings is not None:
                self._postings.stale.update(bucket_keys)
        cur = self.txn.cursor(db=self.db["texts"])
        while cur.set_range(dk) and cur.key()[:DOCNO_BYTES] == dk:
            cur.delete()
        if record is not None and self.docno_for_content(record.content_hash) == docno:
            self.txn.delete(record.content_hash, db=self.db["content"])
        elif record is not None:
            self.txn.delete(record.content_hash + dk, db=self.db["copies"])
        if record is not None and record.timestamp_ms is not None:
            self.delete_expiry(record.timestamp_ms, docno)

    def record_bytes(self, docno: int) -> bytes | None:
        """A stored record as packed (for a sealed segment's answers)."""
        self._flush()
        raw = self.txn.get(docno_key(docno), db=self.db["docs"])
        return None if raw is None else bytes(raw)

    def content_docnos(self, content_hash: bytes, after: int, limit: int) -> list[int]:
        """The documents holding a content (its owner and its copies), ascending,
        those numbered above `after`, at most `limit`.  (Asked for every document of
        an index with sealed segments: the buffer is written out only if `copies`,
        the one table read here directly, has entries in it.)"""
        if self._writes.copies:
            self._flush()
        out: list[int] = []
        owner = self.docno_for_content(content_hash)
        if owner is not None and owner > after:
            out.append(owner)
        cur = self.txn.cursor(db=self.db["copies"])
        found = cur.set_range(content_hash + docno_key(after + 1))
        while found and len(out) < limit + 1:
            key = bytes(cur.key())
            if not key.startswith(content_hash):
                break
            out.append(docno_of(key[len(content_hash) :]))
            found = cur.next()
        return sorted(out)[:limit]

    def set_content_owner(self, content_hash: bytes, docno: int) -> None:
        """Make `docno` the content's owner entry; the entry it replaces (if any)
        becomes one of the copies."""
        self._settle()
        dk = docno_key(docno)
        prev = self.docno_for_content(content_hash)
        if prev is not None and prev != docno:
            self.txn.put(content_hash + docno_key(prev), b"", db=self.db["copies"])
        self.txn.delete(content_hash + dk, db=self.db["copies"])
        self.txn.put(content_hash, dk, db=self.db["content"])

    def expiry_entries(self, after: bytes | None, limit: int) -> tuple[list[tuple[int, int]], bool]:
        """Up to `limit` entries of the expiry order after key `after` (from the
        start if None): (timestamp, docno); and whether more follow."""
        out: list[tuple[int, int]] = []
        for key, _ in self.items("expiry", after or b""):
            if len(out) == limit:
                return out, True
            out.append((int.from_bytes(key[:8], "big"), docno_of(key[8:])))
        return out, False

    # -- expiry order
    def delete_expiry(self, timestamp_ms: int, docno: int) -> None:
        """Drop one entry of the expiry order (an orphan: its document is gone)."""
        self._flush()
        self.txn.delete(expiry_key(timestamp_ms, docno), db=self.db["expiry"])

    def newest_timestamp(self, at_most: int) -> int:
        """The newest stored timestamp at most `at_most` (0: none)."""
        self._flush()
        cur = self.txn.cursor(db=self.db["expiry"])
        found = cur.prev() if cur.set_range((at_most + 1).to_bytes(8, "big")) else cur.last()
        return int.from_bytes(bytes(cur.key())[:8], "big") if found else 0

    def oldest(self) -> tuple[int, int] | None:
        """(timestamp, docno) of the oldest timestamped document, if any."""
        self._flush()
        cur = self.txn.cursor(db=self.db["expiry"])
        if not cur.first():
            return None
        key = bytes(cur.key())
        return int.from_bytes(key[:8], "big"), docno_of(key[8:])

    # -- postings
    def batch_postings(
        self, band_keys: list[bytes], cap: int, elsewhere: set[int] | None = None
    ) -> None:
        """Read the buckets of a whole batch up front and buffer the postings it adds,
        both in key order (`flush_postings` writes the buffer).

        B-tree work in key order walks each page once, while it is in cache; one
        document at a time jumps all over the tree, and in a large index those jumps
        are most of a document's cost.  `candidates` then answers from the read-ahead
        and the buffer (this batch's documents, newer than anything stored); it reads
        a bucket again only if a removal in this batch changed it.

        `elsewhere`: band keys that have postings outside this index (in sealed
        segments): their rows are not quiet."""
        if not band_keys:
            self._postings = BatchPostings({}, {}, set(), set())
            return
        flat = native_keys(b"".join(band_keys))
        unique, inverse, counts = distinct(flat)
        # the stored keys, by their positions in `unique`; one more than the cap: is
        # it reached?
        found = self.postings.found(unique, cap + 1)
        at = np.fromiter(found, dtype=np.intp, count=len(found))
        stored = dict(zip(raw_keys(unique[at]), found.values(), strict=True))
        hot = set()
        for bk, newest in stored.items():
            if len(newest) > cap:
                hot.add(bk)
                del newest[cap:]
        # Documents none of whose keys is stored or shared with another document of
        # the batch (most of them) have no candidates: found here in numpy passes over
        # the distinct keys, then mapped back to each document's.
        busy_key = counts > 1
        shared = unique[busy_key]
        busy_key[at] = True
        if elsewhere:
            busy_key |= np.isin(unique, np.fromiter(elsewhere, dtype=np.uint64))
        busy = busy_key[inverse.reshape(-1)]
        quiet = (~np.any(busy.reshape(len(band_keys), -1), axis=1)).tolist()
        self._postings = BatchPostings(
            read_ahead=stored,
            hot=hot,
            added={bk: docnos() for bk in raw_keys(shared)},
            rows=set(band_keys),
            quiet=set(itertools.compress(band_keys, quiet)),
        )

    def batch_buckets(self) -> BatchPostings | None:
        """The batch's buckets read ahead and postings buffered (`batch_postings`), for
        a search of the whole batch before its documents are stored (engine/search.py);
        None outside a batch."""
        return self._postings

    def is_quiet(self, row: bytes) -> bool:
        """Whether a document of the batch (`row`: its band keys joined) has no
        candidates: none of its buckets is stored, nor shared with another document of
        the batch (`candidates` would answer {})."""
        p = self._postings
        return p is not None and row in p.quiet

    def quiet_rows(self, rows: Iterable[bytes], n: int) -> npt.NDArray[np.bool_]:
        """`is_quiet` of each of `n` rows, at once (a set lookup each in C)."""
        p = self._postings
        if p is None:
            return np.zeros(n, dtype=np.bool_)
        return np.fromiter(map(p.quiet.__contains__, rows), dtype=np.bool_, count=n)

    def flush_postings(self) -> None:
        """Write the buffered postings in key order and stop buffering."""
        postings, self._postings = self._postings, None
        if postings is None or not postings.docnos:
            return
        numbers, rows = postings.docnos, postings.doc_rows
        if postings.dropped:
            kept = [j for j, d in enumerate(numbers) if d not in postings.dropped]
            numbers, rows = [numbers[j] for j in kept], [rows[j] for j in kept]
        flat = native_keys(b"".join(rows))
        per = np.fromiter(map(len, rows), dtype=np.intp, count=len(rows)) // 8
        docnos = np.repeat(np.array(numbers, dtype=np.uint64), per)
        if postings.adopted:  # an adopted copy is older than the batch's documents
            order = np.argsort(docnos, kind="stable")
            flat, docnos = flat[order], docnos[order]
        self.postings.add(flat, docnos)  # docnos ascending

    def _newest(self, bk: bytes, cap: int) -> list[int]:
        """A bucket's stored postings, newest first, at most `cap` of them (and
        `capped` set if there are more)."""
        key = int.from_bytes(bk, "big")
        got = self.postings.lookup(np.array([key], dtype=np.uint64), cap + 1).get(key, [])
        if len(got) > cap:
            self.capped = True
            del got[cap:]
        return got

    def candidates(
        self,
        band_keys: list[bytes],
        cap: int,
        older: Callable[[bytes, int, list[int]], list[int]] | None = None,
    ) -> npt.NDArray[np.int64]:
        """The documents in any of the given buckets, ascending, from at most the
        `cap` newest postings of each bucket.  `older(key, cap, newest)`: the bucket's
        newest `cap` postings once those held elsewhere (sealed segments) are
        merged with this index's `newest`.

        A document whose buckets were all read ahead and not changed since (most of
        them) is answered by one compiled call (`gather_newest`); the loop below
        serves the rest.  Either way the buckets' lists are joined and made distinct
        at the end, not counted one posting at a time: a page of a templated site
        meets hundreds of its siblings in its buckets.  The array may be read-only."""
        lists: list[list[int]] = []
        p = self._postings
        self.capped = False
        row = b"".join(band_keys) if p is not None else b""
        if p is not None and row in p.quiet:
            return _NO_DOCS
        read_ahead = p is not None and row in p.rows
        if (
            p is not None
            and read_ahead
            and older is None
            and not p.stale
            and not p.dropped
            and not p.adopted
        ):  # the common case: every bucket answered from the read-ahead and the buffer
            found, self.capped = gather_newest(band_keys, p.read_ahead, p.added, p.hot, cap)
            return found
        for bk in band_keys:
            if p is None:
                newest = self._newest(bk, cap)
            else:
                stored = (
                    p.read_ahead.get(bk, NONE)
                    if read_ahead and not (p.stale and bk in p.stale)
                    else self._newest(bk, cap)
                )
                added = (
                    p.added.get(bk, NONE)  # the common case of `added_to`, inline
                    if read_ahead and not p.dropped
                    else p.added_to(bk, read_ahead)
                )
                if p.hot and bk in p.hot:
                    self.capped = True
                newest, cut = _newest_of(added, stored, cap, p.adopted)
                if cut:
                    self.capped = True
            if older is not None:
                newest = older(bk, cap, newest)
            if newest:
                lists.append(newest)
        return _distinct_docnos(lists)

    # -- documents as a whole (seal)
    def docno_range(self) -> tuple[int, int] | None:
        """(first, last + 1) of the stored document numbers; None when there are none."""
        self._flush()
        cur = self.txn.cursor(db=self.db["docs"])
        if not cur.first():
            return None
        first = docno_of(bytes(cur.key()))
        cur.last()
        return first, docno_of(bytes(cur.key())) + 1

    def clear_documents(self) -> None:
        """Empty every table that holds documents (`DATA_TABLES`): `seal` has copied
        them into a sealed segment.  `meta` (parameters, counters, offsets, the
        segment registry) and `tombs` stay.  The pages go to LMDB's free list, so the
        open index's file stops growing once it has held one segment's worth."""
        self._settle()
        for name in DATA_TABLES:
            self.txn.drop(self.db[name], delete=False)

    # -- tombstones: documents of sealed segments masked by the open index
    def mask(self, number: int, docno: int) -> bool:
        """Mask `docno` in sealed segment `number` only; False if it was masked already.

        Each segment's count of tombstones sits under its bare number (a key shorter
        than its tombstones', so it sorts first among them), updated with them, so
        that `mask_count` is one read rather than a walk over them all."""
        db = self.db["tombs"]
        if not self.txn.put(tomb_key(number, docno), b"", db=db, overwrite=False):
            return False
        head = number.to_bytes(SEGMENT_BYTES, "big")
        self.txn.put(head, (self.mask_count(number) + 1).to_bytes(8, "big"), db=db)
        return True

    def mask_count(self, number: int) -> int:
        """How many documents of sealed segment `number` are masked."""
        db = self.db.get("tombs")
        raw = None if db is None else self.txn.get(number.to_bytes(SEGMENT_BYTES, "big"), db=db)
        return 0 if raw is None else int.from_bytes(bytes(raw), "big")

    def masked(self, number: int) -> npt.NDArray[np.uint64]:
        """The masked docnos of sealed segment `number`, ascending (the key order)."""
        db = self.db.get("tombs")
        if db is None:
            return np.empty(0, dtype=np.uint64)
        head = number.to_bytes(SEGMENT_BYTES, "big")
        cur = self.txn.cursor(db=db)
        keys: list[bytes] = []
        if cur.set_range(tomb_key(number, 0)):
            for key in cur.iternext(values=False):
                if bytes(key[:SEGMENT_BYTES]) != head:
                    break
                keys.append(bytes(key))
        # 7-byte keys: the 5 docno bytes, zero-padded to big-endian uint64s
        rows = np.frombuffer(b"".join(keys), dtype=np.uint8).reshape(
            -1, SEGMENT_BYTES + DOCNO_BYTES
        )
        padded = np.zeros((len(keys), 8), dtype=np.uint8)
        padded[:, 8 - DOCNO_BYTES :] = rows[:, SEGMENT_BYTES:]
        return padded.view(">u8").ravel().astype(np.uint64)

    def clear_masks(self, number: int) -> int:
        """Remove every tombstone of sealed segment `number` (and its count); returns
        how many there were."""
        db = self.db.get("tombs")
        if db is None:
            return 0
        head = number.to_bytes(SEGMENT_BYTES, "big")
        removed = self.mask_count(number)
        cur = self.txn.cursor(db=db)
        while cur.set_range(head) and bytes(cur.key()).startswith(head):
            cur.delete()
        return removed

    def bucket_sizes(self) -> Iterator[int]:
        return self.postings.sizes()

    def count(self, table: str) -> int:
        self._flush()
        return int(self.txn.stat(self.db[table])["entries"])

    def table_bytes(self) -> dict[str, int]:
        self._flush()
        out: dict[str, int] = {}
        for name, db in self.db.items():
            st = self.txn.stat(db)
            pages = st["branch_pages"] + st["leaf_pages"] + st["overflow_pages"]
            out[name] = int(pages * st["psize"])
        return out


def gather_newest(
    band_keys: list[bytes],
    read_ahead: Mapping[bytes, Docnos],
    added: Mapping[bytes, Docnos],
    hot: set[bytes],
    cap: int,
) -> tuple[npt.NDArray[np.int64], bool]:
    """`Tables.candidates` for a document whose buckets were all read ahead, none
    changed since (no removal, no adoption in the batch) and none held elsewhere: the
    distinct docnos, ascending, of each bucket's newest `cap` postings -- the batch's
    own (`added`, oldest first, all newer than stored ones) before the stored ones
    (`read_ahead`, newest first) -- and whether a cap cut a bucket.

    One compiled call (`gather`: dict lookups, the caps, a radix sort and the distinct
    pass in C) for what was a dozen Python operations per bucket and then numpy's
    fromiter, sort and mask: a template page meets hundreds of siblings in 16 buckets.
    The loop below is the definition the compiled one is tested against."""
    if kernels.native is not None:
        raw, capped = kernels.native.gather(band_keys, read_ahead, added, hot, cap)
        return np.frombuffer(raw, dtype=np.int64), capped
    lists: list[list[int]] = []
    capped = False
    for bk in band_keys:
        if hot and bk in hot:
            capped = True
        newest, cut = _newest_of(added.get(bk, NONE), read_ahead.get(bk, NONE), cap)
        capped = capped or cut
        if newest:
            lists.append(newest)
    return _distinct_docnos(lists), capped


def _newest_of(
    batch: Docnos, stored: Docnos, cap: int, adopted: bool = False
) -> tuple[list[int], bool]:
    """A bucket's newest `cap` postings, from the batch's own (`batch`, oldest first,
    newer than every stored one) and the stored ones (`stored`, newest first, at most
    `cap`); and whether the cap left any out.  `adopted`: a copy older than stored
    postings took over an owner's in the batch, so the two are sorted together."""
    if not batch:
        return list(stored), False
    cut = len(batch) + len(stored) > cap
    if adopted:
        return sorted([*batch, *stored], reverse=True)[:cap], cut
    # (batch[-cap:]: all of it for a cap of 0, as ever)
    if len(batch) >= cap:
        return list(batch[-cap:]), cut
    return [*batch, *stored[: cap - len(batch)]], cut


def _distinct_docnos(lists: list[list[int]]) -> npt.NDArray[np.int64]:
    if not lists:
        return _NO_DOCS
    joined = itertools.chain.from_iterable(lists)
    if sum(len(x) for x in lists) <= _FEW:  # most pages: a few, sorted in Python
        return np.array(sorted(set(joined)), dtype=np.int64)
    out = np.fromiter(joined, dtype=np.int64)
    out.sort()
    first = np.ones(len(out), dtype=np.bool_)
    np.not_equal(out[1:], out[:-1], out=first[1:])
    return out[first]


def _matrix(
    found: npt.NDArray[np.bool_], rows: list[bytes]
) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.uint16]]:
    """Signature rows (little-endian uint16) placed where `found` says, zeros elsewhere."""
    if not rows:
        return found, np.zeros((len(found), 0), dtype=np.uint16)
    got = np.frombuffer(b"".join(rows), dtype="<u2").reshape(len(rows), -1)
    out = np.zeros((len(found), got.shape[1]), dtype=np.uint16)
    out[found] = got
    return found, out
