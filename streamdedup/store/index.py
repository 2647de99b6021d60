"""The persistent LSH index: an LMDB environment and the layout of its tables.

Tables (LMDB named databases):

==========  =========================  ============================================
table       key                        value
==========  =========================  ============================================
meta        name                       msgpack (parameters, counters, offsets)
ids         encoded document id        docno (5 bytes, big-endian)
docs        docno                      msgpack record: id, verdict, links, hashes
sigs        docno                      signature: K little-endian uint16
sets        docno + chunk number       Elias-Fano coded shingle fingerprints (exact
                                       verification: a sound filter)
texts       docno + chunk number       zstd-compressed normalised text (exact
                                       verification: re-shingled to 64-bit hashes)
content     normalised-content hash    docno of the document owning that content
copies      content hash + docno       empty: the other live documents with it
postings    partition + level          a sorted run of band postings (postings.py)
expiry      timestamp (8) + docno      empty: documents in time order, for --ttl
==========  =========================  ============================================

A content hash is owned by one document, the one indexed (signature, postings,
set, text); its exact copies are stored without those and listed in `copies`.  When
the owner is forgotten, the oldest copy takes its place (`Tables.adopt`), so a copy
stays findable, as an exact and as a near duplicate, as long as it lives.

Documents are numbered in arrival order, so "the newest N of a hot bucket" are the
largest docnos among its postings.  All of one batch happens in one write transaction
(`Index.write`); the map doubles ahead of need, and a transaction that still hits
its limit is aborted, the map doubled and the batch run again, so callers never see
MapFullError.  Within a batch the engine reads the buckets it needs ahead and writes
its postings at the end, a whole batch at once (`Tables.batch_postings`).

The data file is written through a shared memory map, and a page of a sparse file
that the filesystem cannot back kills the process with SIGBUS.  So before each write
transaction, under the writer lock, the file's blocks are allocated (`posix_fallocate`)
up to the pages in use plus a headroom larger than a batch's growth; when the disk
cannot give that, the batch is refused with `DiskFullError` before anything is written.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import lmdb
import msgpack
import numpy as np
import numpy.typing as npt

from streamdedup.errors import DiskFullError, IndexCorruptError, IndexOpenError
from streamdedup.models import DocId, Record
from streamdedup.store.postings import Postings

T = TypeVar("T")

DOCNO_BYTES = 5
SET_CHUNK = 1000  # small values pack 4 KiB pages well and never overflow
_MAX_ID_KEY = 400  # LMDB keys are limited to 511 bytes
MAP_FILL = 0.75  # grow the map before a batch once this much of it is used
# Allocated ahead of the pages in use before each write transaction: at least this,
# and at least twice the largest growth of one transaction seen by this process.
DISK_HEADROOM = 64 << 20

# What LMDB says when the file is damaged (a torn or overwritten page, or not LMDB).
DAMAGE_ERRORS: tuple[type[lmdb.Error], ...] = (
    lmdb.CorruptedError,
    lmdb.PageNotFoundError,
    lmdb.BadValsizeError,
    lmdb.InvalidError,
    lmdb.PanicError,
    lmdb.IncompatibleError,
    lmdb.BadChecksumError,
    lmdb.ProblemError,
)


def docno_key(docno: int) -> bytes:
    return docno.to_bytes(DOCNO_BYTES, "big")


def docno_of(key: bytes) -> int:
    return int.from_bytes(key, "big")


def expiry_key(timestamp_ms: int, docno: int) -> bytes:
    return max(timestamp_ms, 0).to_bytes(8, "big") + docno_key(docno)


def id_key(doc_id: DocId) -> bytes:
    """Ids keep their type (1 and "1" differ); very long ids are hashed to fit a key."""
    raw = (
        (b"i%d" % doc_id)
        if isinstance(doc_id, int)
        else b"s" + doc_id.encode("utf-8", "surrogatepass")
    )
    if len(raw) > _MAX_ID_KEY:
        return b"h" + hashlib.blake2b(raw, digest_size=32).digest()
    return raw


class Tables:
    """Typed access to the tables inside one transaction."""

    def __init__(self, txn: lmdb.Transaction, dbs: dict[str, Any]) -> None:
        self.txn = txn
        self.db = dbs
        self.postings = Postings(txn, dbs["postings"])
        self._postings: _Postings | None = None

    def finish(self) -> None:
        """Before the transaction commits: record (and maybe purge) removed postings."""
        if self.postings.removed:
            self.postings.finish(live_docs=self.count("sigs"))

    # -- meta
    def meta(self, name: str) -> Any:
        raw = self.txn.get(name.encode(), db=self.db["meta"])
        return None if raw is None else msgpack.unpackb(raw)

    def set_meta(self, name: str, value: Any) -> None:
        self.txn.put(name.encode(), msgpack.packb(value), db=self.db["meta"])

    # -- documents
    def docno_for_id(self, key: bytes) -> int | None:
        raw = self.txn.get(key, db=self.db["ids"])
        return None if raw is None else docno_of(bytes(raw))

    def record(self, docno: int) -> Record | None:
        raw = self.txn.get(docno_key(docno), db=self.db["docs"])
        return None if raw is None else Record.unpack(bytes(raw))

    def signature(self, docno: int) -> bytes | None:
        raw = self.txn.get(docno_key(docno), db=self.db["sigs"])
        return None if raw is None else bytes(raw)

    def shingle_set(self, docno: int) -> bytes:
        """The stored fingerprint set (`setcodec.encode`d), chunks joined; b"" if none."""
        return self._chunked(docno, "sets")

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
            if len(raw) < SET_CHUNK:
                break
        return b"".join(parts)

    def text(self, docno: int) -> bytes:
        """The stored compressed text (`texts`), chunks joined; b"" if none."""
        return self._chunked(docno, "texts")

    def docno_for_content(self, content_hash: bytes) -> int | None:
        raw = self.txn.get(content_hash, db=self.db["content"])
        return None if raw is None else docno_of(bytes(raw))

    def first_copy(self, content_hash: bytes) -> int | None:
        """The oldest live copy of a content hash other than its owner, if any."""
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
        shingle_set: bytes | None,
        register_content: bool,
        text: bytes | None = None,
    ) -> bool:
        """Store a document; True if it became the owner of its content hash (else,
        with `register_content`, it is listed as one of that content's copies)."""
        dk = docno_key(docno)
        self.txn.put(key, dk, db=self.db["ids"])
        self._put_last(dk, record.pack(), "docs")
        self._put_data(docno, signature, bucket_keys, shingle_set, text)
        if record.timestamp_ms is not None:
            self.txn.put(expiry_key(record.timestamp_ms, docno), b"", db=self.db["expiry"])
        if register_content:  # the first document with this content stays its owner
            owns = bool(
                self.txn.put(record.content_hash, dk, db=self.db["content"], overwrite=False)
            )
            if not owns:
                self.txn.put(record.content_hash + dk, b"", db=self.db["copies"])
            return owns
        return False

    def adopt(
        self,
        docno: int,
        content_hash: bytes,
        signature: bytes | None,
        bucket_keys: list[bytes],
        shingle_set: bytes | None,
        text: bytes | None,
    ) -> None:
        """Make a copy the owner of its content, with the forgotten owner's signature,
        postings, set and text (identical content: identical data)."""
        dk = docno_key(docno)
        self.txn.delete(content_hash + dk, db=self.db["copies"])
        self.txn.put(content_hash, dk, db=self.db["content"])
        self._put_data(docno, signature, bucket_keys, shingle_set, text, adopted=True)

    def _put_data(
        self,
        docno: int,
        signature: bytes | None,
        bucket_keys: list[bytes],
        shingle_set: bytes | None,
        text: bytes | None,
        adopted: bool = False,
    ) -> None:
        dk = docno_key(docno)
        if signature is not None:
            self._put_last(dk, signature, "sigs")
        if bucket_keys and self._postings is not None:
            self._postings.add(bucket_keys, docno, adopted=adopted)
        elif bucket_keys:
            keys = native_keys(b"".join(bucket_keys))
            self.postings.add(keys, np.full(len(keys), docno, dtype=np.uint64))
        for table, value in (("sets", shingle_set), ("texts", text)):
            if value is None:
                continue
            if len(value) < SET_CHUNK:  # most sets, and many texts: one chunk
                self._put_last(dk + b"\x00\x00", value, table)
                continue
            for i in range(0, len(value), SET_CHUNK):
                chunk_key = dk + (i // SET_CHUNK).to_bytes(2, "big")
                self._put_last(chunk_key, value[i : i + SET_CHUNK], table)

    def _put_last(self, key: bytes, value: bytes, table: str) -> None:
        """Put a key that is normally the table's largest (docnos only grow): LMDB's
        append skips the search and fills pages to the brim, where an insert at the
        end of a page would split it in half.  A restore writes in any order."""
        db = self.db[table]
        if not self.txn.put(key, value, db=db, append=True):
            self.txn.put(key, value, db=db)

    def remove_document(self, docno: int, key: bytes, bucket_keys: list[bytes]) -> None:
        """Forget a document entirely (its id, record, postings, set, text and content
        or copies entry).  The caller promotes an owner's copy (`adopt`)."""
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
        for table in ("sets", "texts"):
            cur = self.txn.cursor(db=self.db[table])
            while cur.set_range(dk) and cur.key()[:DOCNO_BYTES] == dk:
                cur.delete()
        if record is not None and self.docno_for_content(record.content_hash) == docno:
            self.txn.delete(record.content_hash, db=self.db["content"])
        elif record is not None:
            self.txn.delete(record.content_hash + dk, db=self.db["copies"])
        if record is not None and record.timestamp_ms is not None:
            self.txn.delete(expiry_key(record.timestamp_ms, docno), db=self.db["expiry"])

    def oldest(self) -> tuple[int, int] | None:
        """(timestamp, docno) of the oldest timestamped document, if any."""
        cur = self.txn.cursor(db=self.db["expiry"])
        if not cur.first():
            return None
        key = bytes(cur.key())
        return int.from_bytes(key[:8], "big"), docno_of(key[8:])

    # -- postings
    def batch_postings(self, band_keys: list[bytes], cap: int) -> None:
        """Read the buckets of a whole batch up front and buffer the postings it adds,
        both in key order (`flush_postings` writes the buffer).

        B-tree work in key order walks each page once, while it is in cache; one
        document at a time jumps all over the tree, and in a large index those jumps
        are most of a document's cost.  `candidates` then answers from the read-ahead
        and the buffer (this batch's documents, newer than anything stored); it reads
        a bucket again only if a removal in this batch changed it."""
        if not band_keys:
            self._postings = _Postings({}, {}, set(), set())
            return
        flat = native_keys(b"".join(band_keys))
        unique, counts = np.unique(flat, return_counts=True)
        stored = self.postings.lookup(unique, cap)
        shared = unique[counts > 1]
        # Documents none of whose keys is stored or shared with another document of
        # the batch (most of them) have no candidates: found here in one numpy pass.
        present = np.fromiter(stored, dtype=np.uint64, count=len(stored))
        busy = np.isin(flat, np.union1d(shared, present))
        rows = np.any(busy.reshape(len(band_keys), -1), axis=1).astype(bool).tolist()
        self._postings = _Postings(
            read_ahead={k.to_bytes(8, "big"): v for k, v in stored.items()},
            added={bk: [] for bk in raw_keys(shared)},
            rows=set(band_keys),
            quiet={k for k, b in zip(band_keys, rows, strict=True) if not b},
        )

    def flush_postings(self) -> None:
        """Write the buffered postings in key order and stop buffering."""
        postings, self._postings = self._postings, None
        if postings is None or not postings.docs:
            return
        docs = postings.docs
        if postings.dropped:
            docs = [(d, row) for d, row in docs if d not in postings.dropped]
        flat = native_keys(b"".join([row for _, row in docs]))
        docnos = np.repeat(
            np.array([d for d, _ in docs], dtype=np.uint64), [len(row) // 8 for _, row in docs]
        )
        if postings.adopted:  # an adopted copy is older than the batch's documents
            order = np.argsort(docnos, kind="stable")
            flat, docnos = flat[order], docnos[order]
        self.postings.add(flat, docnos)  # docnos ascending

    def _newest(self, bk: bytes, cap: int) -> list[int]:
        """A bucket's stored postings, newest first, at most `cap` of them."""
        key = int.from_bytes(bk, "big")
        return self.postings.lookup(np.array([key], dtype=np.uint64), cap).get(key, [])

    def candidates(self, band_keys: list[bytes], cap: int) -> dict[int, int]:
        """docno -> number of the given buckets it is in, from at most the `cap`
        newest postings of each bucket."""
        found: dict[int, int] = {}
        get = found.get
        p = self._postings
        row = b"".join(band_keys) if p is not None else b""
        if p is not None and row in p.quiet:
            return found
        read_ahead = p is not None and row in p.rows
        for bk in band_keys:
            if p is None:
                newest = self._newest(bk, cap)
            else:
                stored = (
                    p.read_ahead.get(bk, _NONE)
                    if read_ahead and not (p.stale and bk in p.stale)
                    else self._newest(bk, cap)
                )
                added = (
                    p.added.get(bk, _NONE)  # the common case of `added_to`, inline
                    if read_ahead and not p.dropped
                    else p.added_to(bk, read_ahead)
                )
                if not added:
                    newest = stored
                elif len(added) >= cap:
                    newest = added[-cap:]
                else:
                    newest = added + stored[: cap - len(added)]
            for d in newest:
                found[d] = get(d, 0) + 1
        return found

    def bucket_sizes(self) -> Iterator[int]:
        return self.postings.sizes()

    def count(self, table: str) -> int:
        return int(self.txn.stat(self.db[table])["entries"])

    def table_bytes(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for name, db in self.db.items():
            st = self.txn.stat(db)
            pages = st["branch_pages"] + st["leaf_pages"] + st["overflow_pages"]
            out[name] = int(pages * st["psize"])
        return out


_NONE: list[int] = []


def _has_key(row: bytes, bk: bytes) -> bool:
    """Is `bk` one of the 8-byte keys joined in `row`?"""
    at = row.find(bk)
    while at >= 0 and at % 8:
        at = row.find(bk, at + 1)
    return at >= 0


def chunks(raw: bytes, width: int) -> list[bytes]:
    """`raw` cut into `width`-byte pieces (by numpy: several times faster than slicing)."""
    out: list[bytes] = np.frombuffer(raw, dtype=f"V{width}").tolist()
    return out


def native_keys(raw: bytes) -> npt.NDArray[np.uint64]:
    """Band keys stored big-endian, as native integers (numpy sorts those several
    times faster than a byte-swapped dtype)."""
    return np.frombuffer(raw, dtype=">u8").astype(np.uint64)


def raw_keys(keys: npt.NDArray[np.uint64]) -> list[bytes]:
    """uint64 band keys as the 8-byte big-endian keys the engine passes around."""
    return chunks(keys.astype(">u8").tobytes(), 8)


@dataclass
class _Postings:
    """The posting work of one batch (see `Tables.batch_postings`).

    Only the keys that two documents of the batch share are tracked one by one
    (`added`); the rest stay in per-document lists (`docs`) until they are sorted
    and written.  A document prepared again inside the transaction (the engine
    does that when it changed since `known` looked) is not one of the batch's
    rows: its keys are tracked one by one, and its own query reads everything."""

    read_ahead: dict[bytes, list[int]]  # stored postings, newest first, of present keys
    added: dict[bytes, list[int]]  # buffered docnos, oldest first, of tracked keys
    rows: set[bytes]  # each document's keys, joined: the rows read ahead
    quiet: set[bytes]  # rows none of whose keys is stored or shared: no candidates
    docs: list[tuple[int, bytes]] = field(default_factory=list)  # docno, joined keys
    buffered: set[int] = field(default_factory=set)
    dropped: set[int] = field(default_factory=set)  # buffered, then removed
    stale: set[bytes] = field(default_factory=set)  # stored postings removed since
    adopted: bool = False  # a copy took over an owner's postings (docnos out of order)

    def add(self, band_keys: list[bytes], docno: int, adopted: bool = False) -> None:
        row = b"".join(band_keys)
        self.docs.append((docno, row))
        self.buffered.add(docno)
        added = self.added
        self.adopted |= adopted
        if row in self.rows and not adopted:
            if row not in self.quiet:  # a quiet row shares no key
                for bk in band_keys:
                    if bk in added:
                        added[bk].append(docno)
            return
        self.quiet.clear()  # an unforeseen document: every later query looks
        for bk in band_keys:
            added.setdefault(bk, []).append(docno)

    def added_to(self, bk: bytes, batch_row: bool) -> list[int]:
        """Buffered docnos of a key, oldest first."""
        if batch_row:
            docnos = self.added.get(bk, _NONE)
        else:
            docnos = [d for d, row in self.docs if _has_key(row, bk)]
        return [d for d in docnos if d not in self.dropped] if self.dropped else docnos

    def discard(self, docno: int) -> bool:
        """Forget a buffered document's postings; False if it has none buffered."""
        if docno in self.dropped or docno not in self.buffered:
            return False
        self.dropped.add(docno)
        return True


class Index:
    """One LMDB environment in a directory.  Open it after fork, never before."""

    TABLES = (
        "meta",
        "ids",
        "docs",
        "sigs",
        "sets",
        "texts",
        "content",
        "copies",
        "expiry",
        "postings",
    )

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        map_size: int = 1 << 30,
        readonly: bool = False,
        durability: str = "process",
    ) -> None:
        self.path = Path(path)
        if readonly and not (self.path / "data.mdb").exists():
            raise IndexOpenError(f"no index at {self.path} (data.mdb not found)")
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            self.env = lmdb.open(
                str(self.path),
                map_size=map_size,
                # Pages are written in the shared mapping; with "process" durability
                # the kernel writes them back, so a page dirtied by many batches is
                # written once rather than at every commit (the id and content-hash
                # B-trees are dirtied all over by every batch once they are large).
                writemap=not readonly,
                sync=durability == "full",
                max_dbs=len(self.TABLES),
                readonly=readonly,
                max_readers=256,
            )
        except DAMAGE_ERRORS as exc:
            raise self.damaged(exc) from exc
        except lmdb.DiskError as exc:
            raise self.disk_full() from exc
        except OSError as exc:
            if exc.errno == errno.ENOSPC:
                raise self.disk_full() from exc
            raise IndexOpenError(f"cannot open index at {self.path}: {exc}") from exc
        except lmdb.Error as exc:
            raise IndexOpenError(f"cannot open index at {self.path}: {exc}") from exc
        self._page_size = int(self.env.stat()["psize"])
        self.dbs: dict[str, Any] = {}
        try:
            for name in self.TABLES:
                try:
                    self.dbs[name] = self.env.open_db(name.encode(), create=not readonly)
                except lmdb.NotFoundError:
                    # Read-only, an index of an older format may lack a table; its
                    # stored parameters then say which format it is, and it is refused.
                    if name == "meta":
                        raise
        except DAMAGE_ERRORS as exc:
            self.env.close()
            raise self.damaged(exc) from exc
        except lmdb.Error as exc:
            self.env.close()
            raise IndexOpenError(f"{self.path} is not a streamdedup index: {exc}") from exc
        self.headroom = DISK_HEADROOM
        self._largest_growth = 0
        self._allocated = 0  # data.mdb's blocks are allocated up to here (this process)
        self._fd: int | None = None
        if not readonly:
            try:
                self._fd = os.open(self.path / "data.mdb", os.O_RDWR | getattr(os, "O_CLOEXEC", 0))
            except OSError as exc:
                self.env.close()
                raise IndexOpenError(f"cannot open index at {self.path}: {exc}") from exc

    def damaged(self, exc: Exception) -> IndexCorruptError:
        return IndexCorruptError(
            f"the index at {self.path} is damaged ({exc}). Stop every process using it; "
            "put a backup in its place (`streamdedup restore BACKUP --index NEW_DIR`), "
            "restore it from the changelog (start the worker with --changelog-topic on an "
            "empty --index), or rebuild it (`streamdedup replay --mode rebuild` or `dedup` "
            "over the same input into a new directory)."
        )

    def disk_full(self, needed: int | None = None) -> DiskFullError:
        try:
            st = os.statvfs(self.path)
            free = f"{st.f_bavail * st.f_frsize / 2**20:,.1f} MiB free"
        except OSError:
            free = "free space unknown"
        need = (
            ""
            if needed is None
            else f"; it keeps {needed / 2**20:,.1f} MiB allocated ahead of its data for the "
            "next batch"
        )
        return DiskFullError(
            f"no space left for the index at {self.path} ({free}{need}). Nothing of the "
            "batch was written: the index holds everything committed before it. Free some "
            "space (or move the index to a bigger disk) and run the same command again."
        )

    def write(self, fn: Callable[[Tables], T], grow: int = 0) -> T:
        """Run `fn` in one write transaction, growing the map and retrying as needed.

        `fn` may run more than once, so it must not have effects outside the index.
        `grow`: what the caller expects the transaction may add to the file at most
        (the disk headroom is at least that).
        """
        self._make_room()
        while True:
            try:
                with self.env.begin(write=True, buffers=True) as txn:
                    used = self._reserve(grow)
                    tables = Tables(txn, self.dbs)
                    result = fn(tables)
                    tables.finish()
                self._largest_growth = max(self._largest_growth, self._used() - used)
                return result
            except lmdb.MapFullError:
                self.env.set_mapsize(self.env.info()["map_size"] * 2)
            except lmdb.MapResizedError:
                self.env.set_mapsize(0)  # another process grew it: adopt its size
            except lmdb.DiskError as exc:  # ENOSPC from LMDB itself (a commit's write)
                raise self.disk_full() from exc
            except DAMAGE_ERRORS as exc:
                raise self.damaged(exc) from exc

    def _used(self) -> int:
        return (int(self.env.info()["last_pgno"]) + 1) * self._page_size

    def _reserve(self, grow: int = 0) -> int:
        """Inside a write transaction, before it writes anything (so under the writer
        lock, and no other process is writing): make sure data.mdb's blocks exist up
        to the pages in use plus the headroom.  Writes through the map into pages the
        filesystem cannot back would kill the process (SIGBUS); a batch that cannot
        have its headroom is refused here, with nothing written.  Returns the bytes
        in use."""
        info = self.env.info()
        used = (int(info["last_pgno"]) + 1) * self._page_size
        ahead = max(self.headroom, 2 * self._largest_growth, grow)
        want = min(used + ahead, int(info["map_size"]))
        start = max(self._allocated, used)
        if self._fd is None or want <= start:
            return used
        try:
            os.posix_fallocate(self._fd, start, want - start)
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise self.disk_full(want - used) from exc
            # No fallocate on this filesystem: count the free space instead.
            st = os.statvfs(self.path)
            if st.f_bavail * st.f_frsize < want - start:
                raise self.disk_full(want - used) from exc
        except AttributeError:  # no posix_fallocate on this platform (macOS)
            st = os.statvfs(self.path)
            if st.f_bavail * st.f_frsize < want - start:
                raise self.disk_full(want - used) from None
        self._allocated = want
        return used

    def _make_room(self) -> None:
        """Double the map ahead of need: a batch that hits the limit is run again, a
        whole batch's work twice (and a restored copy starts with a full map)."""
        info = self.env.info()
        used = (info["last_pgno"] + 1) * self._page_size
        if used > info["map_size"] * MAP_FILL:
            # Refused while this process has a transaction open; MapFullError then does it.
            with contextlib.suppress(lmdb.Error):
                self.env.set_mapsize(info["map_size"] * 2)

    def read(self, fn: Callable[[Tables], T]) -> T:
        while True:
            try:
                with self.env.begin(buffers=True) as txn:
                    return fn(Tables(txn, self.dbs))
            except lmdb.MapResizedError:
                self.env.set_mapsize(0)
            except DAMAGE_ERRORS as exc:
                raise self.damaged(exc) from exc

    def copy_to(self, dest: str | os.PathLike[str]) -> Path:
        """A consistent, compacted copy of the index (one read transaction, so writers
        in this or other processes go on meanwhile) into an empty or new directory."""
        target = Path(dest)
        if target.exists() and any(target.iterdir()):
            raise IndexOpenError(f"{target} is not empty; give a new or empty directory")
        target.mkdir(parents=True, exist_ok=True)
        try:
            self.env.copy(str(target), compact=True)
        except DAMAGE_ERRORS as exc:
            raise self.damaged(exc) from exc
        except lmdb.DiskError as exc:
            raise DiskFullError(
                f"no space left for the copy in {target} ({exc}); the index itself is "
                "unchanged. Free some space there, or copy to another disk."
            ) from exc
        except lmdb.Error as exc:
            raise IndexOpenError(f"cannot copy the index to {target}: {exc}") from exc
        return target

    def file_bytes(self) -> int:
        """Disk space the data file takes (it is sparse: its length is the map size)."""
        return (self.path / "data.mdb").stat().st_blocks * 512

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        self.env.close()
