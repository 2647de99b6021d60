"""The stored documents read: records, signatures (one by one and as a matrix),
texts, ids read ahead for a batch, whole tables walked, and the sizes of the
tables."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import cast

import numpy as np
import numpy.typing as npt

from streamdedup.models import Record
from streamdedup.store.keys import (
    DOCNO_BYTES,
    docno_key,
    docno_keys,
    docno_of,
)
from streamdedup.store.rows import TEXT_CHUNK
from streamdedup.store.tables.base import ABSENT, UNREAD, TablesBase, _in_order


class DocumentReads(TablesBase):
    """Reads of the stored documents and of whole tables."""

    def table_names(self) -> list[str]:
        """The tables of this index, in layout order (a read-only index of an older
        format may lack some)."""
        return list(self.db)

    def records(self) -> Iterator[tuple[int, Record]]:
        """Every stored document's number and record, in document order."""
        for key, raw in self.items("docs"):
            yield docno_of(key), Record.unpack(raw)

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

    def docnos_for_ids(self, keys: list[bytes]) -> dict[bytes, int]:
        """The stored documents of these ids: key -> docno, for those that have one."""
        self._flush()
        got = self.txn.cursor(db=self.db["ids"]).getmulti(_in_order(keys))
        return {bytes(k): docno_of(v) for k, v in got}

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
        `signature` is a call (and a key built) per candidate.  One `getmulti` for
        all (in C; the keys cut from one buffer by numpy): a `get` a candidate in a
        Python loop took 18 of the 43 s of a million Hamming strings, whose
        strings meet about 12 candidates each."""
        if not len(docnos):
            return np.zeros(0, dtype=np.bool_), np.zeros((0, 0), dtype=np.uint16)
        order = np.argsort(docnos, kind="stable")  # (key order: each page visited once)
        keys = np.frombuffer(docno_keys(docnos[order]), dtype=f"V{DOCNO_BYTES}").tolist()
        got = self.txn.cursor(db=self.db["sigs"]).getmulti(keys)
        if not got:
            return np.zeros(len(docnos), dtype=np.bool_), np.zeros((len(docnos), 0), np.uint16)
        have = np.frombuffer(b"".join(k for k, _ in got), dtype=np.uint8).reshape(-1, DOCNO_BYTES)
        wide = np.zeros((len(got), 8), dtype=np.uint8)
        wide[:, 8 - DOCNO_BYTES :] = have
        have_docnos = wide.view(">u8").ravel().astype(np.int64)
        found = np.isin(docnos, have_docnos)
        rows = cast(list[bytes], [v for _, v in got])  # (in key order; bytes: no buffers)
        if len(docnos) > 1 and not bool(np.all(docnos[1:] > docnos[:-1])):
            by_docno = dict(zip(have_docnos.tolist(), rows, strict=True))  # back in order
            rows = [by_docno[d] for d in docnos[found].tolist()]
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

    def record_bytes(self, docno: int) -> bytes | None:
        """A stored record as packed (for a sealed segment's answers)."""
        self._flush()
        raw = self.txn.get(docno_key(docno), db=self.db["docs"])
        return None if raw is None else bytes(raw)

    def docno_range(self) -> tuple[int, int] | None:
        """(first, last + 1) of the stored document numbers; None when there are none."""
        self._flush()
        cur = self.txn.cursor(db=self.db["docs"])
        if not cur.first():
            return None
        first = docno_of(bytes(cur.key()))
        cur.last()
        return first, docno_of(bytes(cur.key())) + 1

    def table_bytes(self) -> dict[str, int]:
        self._flush()
        out: dict[str, int] = {}
        for name, db in self.db.items():
            st = self.txn.stat(db)
            pages = st["branch_pages"] + st["leaf_pages"] + st["overflow_pages"]
            out[name] = int(pages * st["psize"])
        return out


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
