"""The persistent LSH index: one LMDB environment in a directory, its read and write
transactions, map growth and disk reserve.  The tables and their layout: tables.py.

All of one batch happens in one write transaction (`Index.write`); the map doubles
ahead of need, and a transaction that still hits its limit is aborted, the map doubled
and the batch run again, so callers never see MapFullError.

The data file is written through a shared memory map, and a page of a sparse file
that the filesystem cannot back kills the process with SIGBUS.  So before each write
transaction, under the writer lock, the file's blocks are allocated (`posix_fallocate`)
up to the pages in use plus a headroom larger than a batch's growth; when the disk
cannot give that, the batch is refused with `DiskFullError` before anything is written.
"""

from __future__ import annotations

import contextlib
import errno
import os
import struct
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any, TypeVar

import lmdb

from streamdedup.errors import ConfigError, DiskFullError, IndexCorruptError, IndexOpenError
from streamdedup.store.tables import TABLES, Tables

T = TypeVar("T")

MAP_FILL = 0.75  # grow the map before a batch once this much of it is used
# Allocated ahead of the pages in use before each write transaction: at least this,
# and at least twice the largest growth of one transaction seen by this process.
# STREAMDEDUP_DISK_HEADROOM (bytes) sets it: the test suite makes hundreds of small
# indexes, and 64 MiB allocated for each took 28 GB of disk in one run.
DISK_HEADROOM = int(os.environ.get("STREAMDEDUP_DISK_HEADROOM") or 64 << 20)

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


# LMDB's meta pages (pages 0 and 1, the newer one current), as mdb.c lays them out:
# a 16-byte page header, then MDB_meta: magic, version (uint32 each), map address and
# size (8 each), the two core MDB_db records (48 bytes each; the first one's leading
# uint32 is the page size), the last page number in use and the transaction id.
_META_MAGIC = 0xBEEFC0DE
_META = struct.Struct("=IIQQI92xQQ")  # magic, version, address, mapsize, psize, last, txnid
_META_AT = 16


def committed_end(data: Path) -> int | None:
    """The byte where the pages of the last committed transaction end, read from
    the data file's meta pages (plain reads, no mapping); None when the file is
    missing, shorter than its two meta pages, or not LMDB's -- LMDB's own open then
    reports it."""
    try:
        with open(data, "rb") as f:
            first = f.read(_META_AT + _META.size)
            if len(first) < _META_AT + _META.size:
                return None
            magic, _, _, _, psize, last, txnid = _META.unpack_from(first, _META_AT)
            if magic != _META_MAGIC or psize < 512 or psize & (psize - 1):
                return None
            f.seek(psize)
            second = f.read(_META_AT + _META.size)
    except OSError:
        return None
    if len(second) == _META_AT + _META.size:
        magic2, _, _, _, _, last2, txnid2 = _META.unpack_from(second, _META_AT)
        if magic2 == _META_MAGIC and txnid2 > txnid:
            last = last2
    return int((last + 1) * psize)


class Index:
    """One LMDB environment in a directory.  Open it after fork, never before."""

    TABLES = TABLES

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        map_size: int = 1 << 30,
        readonly: bool = False,
        durability: str = "process",
        lock: bool = True,
    ) -> None:
        """`lock=False` (read-only only): no lock file, no reader table -- for a
        sealed segment, which no process ever writes, so that its directory holds
        just its data file and manifest and may sit on a read-only volume."""
        self.path = Path(path)
        if readonly and not (self.path / "data.mdb").exists():
            raise IndexOpenError(f"no index at {self.path} (data.mdb not found)")
        self._check_length()
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
                lock=lock or not readonly,
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

    def _check_length(self) -> None:
        """Refuse a data file cut short (a torn copy, a backup or a disk that filled
        while it was written) before LMDB maps it.  LMDB reads the pages in use through
        its memory map, and a page past the end of the file kills a read-only process
        with SIGBUS (exit 135, no message).  A writer happened not to die: LMDB
        extends the file to the map size when it opens it for writing, so the missing
        pages read as zeros and it reports them damaged (exit 5) -- after changing the
        file.  Every open goes through this one check instead, in every mode, before
        anything is mapped or changed.  The header is read first and the length after
        it: a committed header's pages are always inside the file by then (a writer
        extends the file before it commits pages beyond it, and never shrinks it), so a
        writer at work in another process cannot make a sound file look short."""
        end = committed_end(self.path / "data.mdb")
        if end is None:
            return  # no file yet (a new index), or not LMDB: its own open says which
        try:
            length = (self.path / "data.mdb").stat().st_size
        except OSError:
            return
        if length < end:
            raise self.damaged(
                f"data.mdb holds {length:,} bytes, but its committed pages end at {end:,}: "
                "the file was cut short, a torn copy or a disk that filled while it was "
                "written"
            )

    def damaged(self, exc: Exception | str) -> IndexCorruptError:
        error = IndexCorruptError(
            f"the index at {self.path} is damaged ({exc}). Stop every process using it; "
            "put a backup in its place (`streamdedup restore BACKUP --index NEW_DIR`), "
            "restore it from the changelog (start the worker with --changelog-topic on an "
            "empty --index), or rebuild it (`streamdedup replay --mode rebuild` or `dedup` "
            "over the same input into a new directory)."
        )
        error.reason = str(exc)
        return error

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

    def write(self, fn: Callable[[Tables], T], grow: int = 0, commit: bool = True) -> T:
        """Run `fn` in one write transaction, growing the map and retrying as needed.

        `fn` may run more than once, so it must not have effects outside the index.
        `grow`: what the caller expects the transaction may add to the file at most
        (the disk headroom is at least that).  `commit` False: the transaction is
        aborted once `fn` has answered (a dry run: what the writes would decide,
        none of them kept).
        """
        self._make_room()
        while True:
            try:
                if not commit:
                    return self._aborted(fn)
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

    def _aborted(self, fn: Callable[[Tables], T]) -> T:
        """`fn` in a write transaction that is then aborted (nothing is written to
        the file, so no disk space is reserved for it)."""
        txn = self.env.begin(write=True, buffers=True)
        try:
            return fn(Tables(txn, self.dbs))
        finally:
            txn.abort()

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

    def copy_to(self, dest: str | os.PathLike[str], *, besides: Collection[str] = ()) -> Path:
        """A consistent, compacted copy of the index (one read transaction, so writers
        in this or other processes go on meanwhile) into an empty or new directory
        (one that holds only files named in `besides`: a segment's owner mark)."""
        target = Path(dest)
        if target.exists() and any(p.name not in besides for p in target.iterdir()):
            raise ConfigError(f"{target} is not empty; give a new or empty directory")
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

    def last_txnid(self) -> int:
        """The id of the last committed write transaction (any process's): it moves
        whenever the index changes."""
        return int(self.env.info()["last_txnid"])

    def file_bytes(self) -> int:
        """Disk space the data file takes (it is sparse: its length is the map size)."""
        return (self.path / "data.mdb").stat().st_blocks * 512

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        self.env.close()
