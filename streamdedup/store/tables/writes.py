"""Documents written: one by one (`put_document`, buffered), in bulk (`put_plain`,
`put_copies`: whole lists, the engine's bulk path), removed (`remove_document`), a
sealed segment's sorted runs appended (`put_sorted`), every document table emptied
after a seal (`clear_documents`)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from streamdedup.models import Record
from streamdedup.store.keys import (
    DOCNO_BYTES,
    docno_key,
    expiry_key,
    native_keys,
)
from streamdedup.store.rows import (
    chunks_of,
    content_row,
    content_rows,
    copy_row,
    doc_row,
    expiry_row,
    id_row,
    sig_row,
    sig_rows,
    texts_rows,
)
from streamdedup.store.tables.base import ABSENT, DATA_TABLES, TablesBase


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


class WriteBuffer(TablesBase):
    """Documents stored and removed."""

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
        w.ids.append(id_row(key, dk))
        self._ids[key] = docno
        w.docs.append(doc_row(dk, record))
        w.records[docno] = record
        if signature is not None:
            w.sigs.append(sig_row(dk, signature))
        if bucket_keys:
            self._add_postings(docno, bucket_keys, row=row)
        if text is not None:
            w.texts += chunks_of(dk, text)
        if record.timestamp_ms is not None:
            w.expiry.append(expiry_row(record.timestamp_ms, docno))
        if not register_content:
            return False
        # the first document with this content stays its owner
        content_hash = record.content_hash
        owner = self._content.get(content_hash)
        if owner is None:  # not read ahead
            owner = ABSENT if self.docno_for_content(content_hash) is None else 0
        if owner == ABSENT:
            w.content.append(content_row(content_hash, dk))
            self._content[content_hash] = docno
            return True
        w.copies.append(copy_row(content_hash, dk))
        return False

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
        document's band keys joined: the batch's unshared rows, or those of a batch
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
        w.sigs += sig_rows(dks, signatures)
        if texts is not None:
            w.texts += texts_rows(dks, texts)
        hashes = records.content_hashes
        w.content += content_rows(hashes, dks)
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

    def clear_documents(self) -> None:
        """Empty every table that holds documents (`DATA_TABLES`): `seal` has copied
        them into a sealed segment.  `meta` (parameters, counters, offsets, the
        segment registry) and `tombs` stay.  The pages go to LMDB's free list, so the
        open index's file stops growing once it has held one segment's worth."""
        self._settle()
        for name in DATA_TABLES:
            self.txn.drop(self.db[name], delete=False)
