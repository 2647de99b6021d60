"""Content ownership: a content hash is owned by one document (indexed: signature,
postings, text), its exact copies listed in `copies`; when the owner goes, the
oldest copy takes its place (`adopt`)."""

from __future__ import annotations

from streamdedup.store.keys import (
    docno_key,
    docno_of,
)
from streamdedup.store.rows import text_chunks
from streamdedup.store.tables.base import TablesBase


class Ownership(TablesBase):
    """The `content` and `copies` tables."""

    def first_copy(self, content_hash: bytes) -> int | None:
        """The oldest live copy of a content hash other than its owner, if any."""
        if self._writes.copies:  # only `copies` is read
            self._flush()
        cur = self.txn.cursor(db=self.db["copies"])
        if not cur.set_range(content_hash):
            return None
        key = bytes(cur.key())
        return docno_of(key[len(content_hash) :]) if key.startswith(content_hash) else None

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
