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

The typed access is one `Tables` object per transaction, made of parts of one
concern each, sharing that transaction (base.py: the buffer and the point reads):
meta.py, reads.py, writes.py (the write-behind buffer), ownership.py, expiry.py,
buckets.py, masks.py.  The engine types against role protocols of them
(engine/sealed.py: `Store`).
"""

from __future__ import annotations

from streamdedup.store.rows import TEXT_CHUNK, text_chunks
from streamdedup.store.tables.base import (
    ABSENT,
    DATA_TABLES,
    TABLES,
    UNREAD,
    TablesBase,
)
from streamdedup.store.tables.buckets import Buckets, gather_newest
from streamdedup.store.tables.expiry import ExpiryOrder
from streamdedup.store.tables.masks import Masks
from streamdedup.store.tables.meta import MetaPart
from streamdedup.store.tables.ownership import Ownership
from streamdedup.store.tables.reads import DocumentReads
from streamdedup.store.tables.writes import Packed, WriteBuffer


class Tables(
    MetaPart, DocumentReads, WriteBuffer, Ownership, ExpiryOrder, Buckets, Masks, TablesBase
):
    """Typed access to the tables inside one transaction, its parts together.  `txn`
    and `db` are the store's own: code outside the store uses the methods."""

    def bulk_writes(self) -> Tables:
        """These tables: the bulk path stores whole lists in them (engine/bulk.py)."""
        return self

    def finish(self) -> None:
        """Before the transaction commits: write what is buffered, record (and maybe
        purge) removed postings."""
        self._flush()
        if self.postings.removed:
            self.postings.finish(live_docs=self.count("sigs"))


__all__ = [
    "ABSENT",
    "DATA_TABLES",
    "TABLES",
    "TEXT_CHUNK",
    "UNREAD",
    "Packed",
    "Tables",
    "gather_newest",
    "text_chunks",
]
