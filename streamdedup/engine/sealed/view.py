"""The writer's view of an index with sealed segments: the open segment (the LMDB
index it writes) merged with the answers of its sealed segments, so that the
engine's decisions read exactly what one index holding every document would hold.

Rules that make the merge equal to one index:
- a document lives in one place: the open segment, or one sealed segment where no
  tombstone masks it.  Forgetting a sealed document (its id replaced, or expired)
  writes a tombstone; when it owned content whose copies live on, the oldest copy
  takes its signature, postings and text in the open segment (`adopt`), as in one
  index, and a copy that lived in a sealed segment moves to the open one;
- a bucket's newest `cap` postings are the newest `cap` of all places together, by
  document number (a sealed segment answers its newest `cap`; when tombstones thin
  those out, a follow-up asks for more);
- a content's owner is its oldest live copy anywhere; ids resolve in the open
  segment first.
Everything a batch needs is asked of every sealed segment before the batch's write
transaction (`Sealed.ask`); the rare questions only the decisions raise are
follow-ups (`Sealed.follow_up`)."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from streamdedup.engine.sealed.asking import Sealed
from streamdedup.models import Record
from streamdedup.store.keys import id_key
from streamdedup.store.tables import Tables


class View:
    """The open segment's tables merged with the sealed segments (see the module
    docstring).  Used in place of `Tables` by the engine, inside one write
    transaction of the open segment (`open`)."""

    def __init__(self, open_tables: Tables, sealed: Sealed) -> None:
        self.open = open_tables
        self.sealed = sealed
        self.capped = False

    def bulk_writes(self) -> None:
        """None: with sealed segments, every document is decided one by one."""
        return None

    def meta(self, name: str) -> Any:
        return self.open.meta(name)

    def set_meta(self, name: str, value: Any) -> None:
        self.open.set_meta(name, value)

    def record(self, docno: int) -> Record | None:
        rec = self.open.record(docno)
        if rec is not None:
            return rec
        got = self.sealed.record(docno)
        return None if got is None else got[1]

    def signature(self, docno: int) -> bytes | None:
        if self.open.record(docno) is not None:
            return self.open.signature(docno)
        return self.sealed.signature(docno)

    def signatures(
        self, docnos: npt.NDArray[np.int64]
    ) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.uint16]]:
        """`signature` of each: the open segment's in one call, the rest one by one
        (a signature in the open segment is its document's: a copy moved there from a
        sealed segment brings none until it adopts its owner's)."""
        found, sigs = self.open.signatures(docnos)
        rest = np.flatnonzero(~found)
        if not len(rest):
            return found, sigs
        more: list[tuple[int, bytes]] = []
        for j in rest.tolist():
            raw = self.signature(int(docnos[j]))
            if raw is not None:
                more.append((j, raw))
        if not more:
            return found, sigs
        if sigs.shape[1] == 0:  # none in the open segment: the width from a sealed one
            sigs = np.zeros((len(docnos), len(more[0][1]) // 2), dtype=np.uint16)
        for j, raw in more:
            sigs[j] = np.frombuffer(raw, dtype="<u2")
            found[j] = True
        return found, sigs

    def text(self, docno: int) -> bytes:
        if self.open.record(docno) is not None:
            return self.open.text(docno)
        return self.sealed.text(docno)

    def docno_for_id(self, key: bytes) -> int | None:
        d = self.open.docno_for_id(key)
        return d if d is not None else self.sealed.docno_for_id(key)

    def _holders(self, content_hash: bytes, count: int) -> list[int]:
        """The `count` oldest live documents holding a content, anywhere."""
        mine: list[int] = []
        first = self.open.docno_for_content(content_hash)
        if first is not None:
            mine.append(first)
            if count > 1:
                more = self.open.content_docnos(content_hash, first, count - 1)
                mine += more
        return sorted(mine + self.sealed.content_docnos(content_hash, count))[:count]

    def docno_for_content(self, content_hash: bytes) -> int | None:
        got = self._holders(content_hash, 1)
        return got[0] if got else None

    def first_copy(self, content_hash: bytes) -> int | None:
        got = self._holders(content_hash, 2)
        return got[1] if len(got) > 1 else None

    def oldest(self) -> tuple[int, int] | None:
        mine, theirs = self.open.oldest(), self.sealed.oldest()
        if mine is None or theirs is None:
            return mine if theirs is None else theirs
        return min(mine, theirs)

    def newest_timestamp(self, at_most: int) -> int:
        return max(self.open.newest_timestamp(at_most), self.sealed.newest_timestamp(at_most))

    def delete_expiry(self, timestamp_ms: int, docno: int) -> None:
        got = self.sealed.record(docno) if self.open.record(docno) is None else None
        if got is not None:
            self._mask(got[0], docno)
        else:
            self.open.delete_expiry(timestamp_ms, docno)

    def prefetch(self, keys: list[bytes], contents: list[bytes]) -> None:
        self.open.prefetch(keys, contents)  # the sealed segments answered ahead already

    def is_unshared(self, row: bytes) -> bool:
        return self.open.is_unshared(row)  # `batch_postings` counted the sealed keys in

    def batch_postings(self, band_keys: list[bytes], cap: int) -> None:
        self.open.batch_postings(band_keys, cap, elsewhere=self.sealed.present())

    def flush_postings(self) -> None:
        self.open.flush_postings()

    def candidates(self, band_keys: list[bytes], cap: int) -> npt.NDArray[np.int64]:
        self.sealed.capped = False
        found = self.open.candidates(band_keys, cap, older=self.sealed.newest)
        self.capped = self.open.capped or self.sealed.capped
        return found

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
        return self.open.put_document(
            docno, key, record, signature, bucket_keys, register_content, text, row
        )

    def remove_document(self, docno: int, key: bytes, bucket_keys: list[bytes]) -> None:
        rec = self.open.record(docno)
        if rec is None:
            got = self.sealed.record(docno)
            if got is not None:
                self._mask(got[0], docno)
            return
        was_entry = self.open.docno_for_content(rec.content_hash) == docno
        self.open.remove_document(docno, key, bucket_keys)
        if was_entry:  # the open segment's oldest copy holds its content entry now
            nxt = self.open.first_copy(rec.content_hash)
            if nxt is not None:
                self.open.set_content_owner(rec.content_hash, nxt)

    def adopt(
        self,
        docno: int,
        content_hash: bytes,
        signature: bytes | None,
        bucket_keys: list[bytes],
        text: bytes | None,
    ) -> None:
        if self.open.record(docno) is None:  # a sealed copy moves to the open segment
            got = self.sealed.record(docno)
            if got is None:
                return
            n, rec = got
            self.open.put_document(docno, id_key(rec.doc_id), rec, None, [], False)
            self._mask(n, docno)
        self.open.set_content_owner(content_hash, docno)
        self.open.adopt(docno, content_hash, signature, bucket_keys, text)

    def _mask(self, n: int, docno: int) -> None:
        self.sealed.pending[n].add(docno)
        self.open.mask(n, docno)


__all__ = ["View"]
