"""Sealed segments: the files of one, the registry of them in the open index, and
`seal`, which moves everything indexed so far into a new one atomically.

An index is one open segment (the LMDB index the writer updates) plus sealed ones.
A sealed segment is a directory holding `data.mdb`, a compacted LMDB copy of the open
index at the moment of sealing (the same tables), and `manifest.json`: what the
segment is (id, number, parameters, document-number range, input offsets covered)
and the blake2b checksum of `data.mdb`, so that a segment copied to another disk or
host is verified before it answers a single probe.  Nothing ever writes a sealed
segment again: it is opened read-only and without a lock file.

The open index keeps the registry (meta `segments`: one `SegmentEntry` per sealed
segment, in sealing order) and the tombstones masking documents of sealed segments
that were later replaced or expired (table `tombs`, `Tables.mask`).

`seal` in three steps, so that a crash anywhere leaves the old state or the new one,
never both and never neither:

1. In ONE write transaction of the open index (the writer lock is held, so no batch
   of any process commits meanwhile): compact-copy the environment to
   `SEGMENT_DIR.partial`, write the manifest, fsync both and the directories.
2. In the same transaction: register the segment (its final path) and empty the
   document tables.  Commit.
3. Rename `SEGMENT_DIR.partial` to `SEGMENT_DIR`, fsync the parent, sync the index.

Killed before the commit, the index still holds every document and no registry
entry; the `.partial` left behind is not a segment (nothing names it) and the next
seal of this index to that directory removes it: a seal marks the `.partial` it
makes as its own and locks the mark while it works (`Claim`), and on a failure
before its commit (a full disk) removes it at once.  Whatever else is found at
`SEGMENT_DIR.partial` is refused, never removed.  Killed after the commit, the
registry names the segment and the open index is empty; `recover` (run by `seal`,
and to be run by whatever opens the index's segments: another process may be between
the commit and the rename) finishes the rename, recognising the `.partial` by the id
in its manifest.  The failpoints `seal-copied`, `seal-written` and `seal-committed`
(streamdedup.failpoints) let the tests kill the process at each step.
"""

from __future__ import annotations

import builtins
import contextlib
import datetime as dt
import fcntl
import hashlib
import os
import re
import shutil
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import msgpack
import orjson

from streamdedup import failpoints
from streamdedup.config import public_params
from streamdedup.errors import (
    ConfigError,
    IndexOpenError,
    SealRefusedError,
    SegmentError,
    StreamDedupError,
)
from streamdedup.store.index import Index
from streamdedup.store.keys import SEGMENT_BYTES, MetaKey
from streamdedup.store.tables import Tables

KIND = "streamdedup-segment"
FORMAT = 1
MANIFEST = "manifest.json"
DATA = "data.mdb"
PARTIAL = ".partial"  # suffix of a segment directory still being sealed
CHECKSUM_ALGORITHM = "blake2b-256"
CHECKSUM_BLOCK = 1 << 20  # data.mdb is read in blocks of this size, never whole
MAX_NUMBER = (1 << 8 * SEGMENT_BYTES) - 1  # a tombstone's key holds the number in 2 bytes
_HEX32 = re.compile(r"[0-9a-f]{32}")


def checksum(path: Path) -> str:
    """`blake2b-256:<hex>` of a file, read in 1 MiB blocks (a segment's data file is
    many gigabytes; memory stays flat)."""
    digest = hashlib.blake2b(digest_size=32)
    block = bytearray(CHECKSUM_BLOCK)
    view = memoryview(block)
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(block):
            digest.update(view[:n])
    return f"{CHECKSUM_ALGORITHM}:{digest.hexdigest()}"


def partial_path(dest: Path) -> Path:
    """Where a segment is built before it is renamed into place."""
    return dest.with_name(dest.name + PARTIAL)


# ---------------------------------------------------------------------- what we made

OWNER = ".streamdedup-owner"  # the mark in a directory a seal or a build makes
_OWNER_KIND = "streamdedup-partial"


class Claim:
    """A directory this process made (`SEGMENT_DIR.partial`, a build's scratch) and
    marked as its own: `OWNER` inside it names what made it (`kind`: "seal",
    "backfill", ...) and for whom (`owner`: the index, the destination), and this
    process holds an exclusive lock on that file while it works.

    A directory is only ever removed when that proves it ours: made by the same
    kind of run for the same owner, and no longer locked (the run that made it is
    dead; a lock dies with its process).  Anything else found in the way -- a
    directory without the mark, another index's seal, a run still at work, a file,
    a symlink -- is refused (`SealRefusedError`) and left as it was: `seal` once
    removed whatever was at `SEGMENT_DIR.partial` (`rm -rf`), also a directory the
    user had put there."""

    def __init__(self, path: Path, kind: str, owner: str) -> None:
        """Make `path` (a new directory: `FileExistsError` if anything is there),
        mark it and lock the mark."""
        path.parent.mkdir(parents=True, exist_ok=True)
        os.mkdir(path)
        self.path, self._fd = path, -1
        try:
            self._fd = os.open(path / OWNER, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
            fcntl.flock(self._fd, fcntl.LOCK_EX)
            mark = {"kind": _OWNER_KIND, "made_by": kind, "owner": owner, "pid": os.getpid()}
            os.write(self._fd, orjson.dumps(mark))
            os.fsync(self._fd)
            _fsync(path)
            _fsync(path.parent)
        except BaseException:
            self.remove()
            raise

    def done(self, moved_to: Path) -> None:
        """The directory became a segment at `moved_to`: its mark goes, the lock too."""
        with contextlib.suppress(OSError):
            os.unlink(moved_to / OWNER)
        self.release()

    def release(self) -> None:
        """Let go of the lock (the directory stays)."""
        if self._fd >= 0:
            os.close(self._fd)  # the lock goes with the descriptor
            self._fd = -1

    def remove(self) -> None:
        """Remove the directory and everything in it (it is ours), then release."""
        shutil.rmtree(self.path, ignore_errors=True)
        self.release()


def clear_leftover(path: Path, kind: str, owner: str, *, what: str, remove: bool = True) -> None:
    """Make way at `path` for a new `Claim`: nothing there is fine; a directory left
    by a run of `kind` for `owner` that died (see `Claim`) is removed (`remove`;
    without it only checked), under the lock its maker held; anything else is
    refused with what to do, and left alone.  `what` names the run in the message
    ("a seal of this index")."""
    if not os.path.lexists(path):
        return
    why: str | None
    if path.is_symlink() or not path.is_dir():
        why = "a symbolic link" if path.is_symlink() else "not a directory"
    else:
        try:
            fd = os.open(path / OWNER, os.O_RDWR | os.O_NOFOLLOW)
        except OSError:
            why = f"it holds no {OWNER} mark"
        else:
            try:
                why = _not_ours(fd, kind, owner)
                if why is None:
                    if remove:
                        shutil.rmtree(path)
                    return
            finally:
                os.close(fd)  # (and with it the lock taken)
    raise SealRefusedError(
        f"{path} is in the way and was not left by {what} ({why}); it is left as it was: "
        "move or remove it yourself if nothing needs it, or give another destination"
    )


def _not_ours(fd: int, kind: str, owner: str) -> str | None:
    """None when the mark open at `fd` names a dead run of `kind` for `owner` (its
    lock is then ours); else why it is not ours."""
    try:
        mark = orjson.loads(os.read(fd, 1 << 16))
    except orjson.JSONDecodeError:
        mark = None
    if not isinstance(mark, dict) or mark.get("kind") != _OWNER_KIND:
        return f"its {OWNER} mark is garbled"
    if mark.get("made_by") != kind or mark.get("owner") != owner:
        return f"made by {mark.get('made_by')} for {mark.get('owner')}"
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return f"the run that made it is still at work (process {mark.get('pid')})"
    return None


# ---------------------------------------------------------------------- manifest

# Each field of the manifest and the JSON types it must have (bool is an int in
# Python: refused separately for the numbers).
_FIELDS: dict[str, type | tuple[type, ...]] = {
    "kind": str,
    "format": int,
    "id": str,
    "number": int,
    "index": (str, type(None)),
    "params": dict,
    "first_docno": int,
    "next_docno": int,
    "documents": int,
    "offsets": dict,
    "created": str,
    "bytes": int,
    "checksum": str,
}


@dataclass(frozen=True)
class Manifest:
    """What a sealed segment is: `manifest.json` in its directory, written last.

    `params` is the index's `IndexParams.to_record()` (the engine compares it with
    the open index's); `offsets` the worker's applied input offsets at sealing,
    {"group/topic": {"partition": next offset}} ({} when `dedup` built it)."""

    id: str
    number: int
    index: str | None
    params: dict[str, Any]
    first_docno: int
    next_docno: int
    documents: int
    offsets: dict[str, dict[str, int]]
    created: str
    bytes: int
    checksum: str
    kind: str = field(default=KIND)
    format: int = field(default=FORMAT)

    def to_record(self) -> dict[str, Any]:
        rec = asdict(self)
        return {name: rec[name] for name in _FIELDS}  # the documented order

    def to_json(self) -> builtins.bytes:
        return orjson.dumps(self.to_record(), option=orjson.OPT_INDENT_2) + b"\n"

    @classmethod
    def from_record(cls, rec: Any, where: Path) -> Manifest:
        """Check a parsed manifest field by field; `SegmentError` names `where` and
        the first thing wrong."""
        if not isinstance(rec, dict):
            raise SegmentError(f"{where / MANIFEST} is not a segment manifest (not an object)")
        if rec.get("kind") != KIND:
            raise SegmentError(
                f"{where / MANIFEST} is not a streamdedup segment manifest "
                f"(kind {rec.get('kind')!r}, expected {KIND!r})"
            )
        if rec.get("format") != FORMAT:
            raise SegmentError(
                f"the segment at {where} has format {rec.get('format')!r}; this streamdedup "
                f"reads format {FORMAT} (a newer version sealed it?)"
            )
        for name, types in _FIELDS.items():
            value = rec.get(name)
            if name not in rec or not isinstance(value, types) or isinstance(value, bool):
                raise SegmentError(
                    f"{where / MANIFEST}: field {name!r} is missing or malformed ({value!r})"
                )
        if not rec["checksum"].startswith(CHECKSUM_ALGORITHM + ":"):
            raise SegmentError(
                f"{where / MANIFEST}: checksum {rec['checksum']!r} is not {CHECKSUM_ALGORITHM}"
            )
        if not 0 <= rec["first_docno"] < rec["next_docno"] or not (
            1 <= rec["documents"] <= rec["next_docno"] - rec["first_docno"]
        ):
            raise SegmentError(
                f"{where / MANIFEST}: document numbers {rec['first_docno']}.."
                f"{rec['next_docno']} for {rec['documents']} documents make no sense"
            )
        if not 1 <= rec["number"] <= MAX_NUMBER or rec["bytes"] < 0:
            raise SegmentError(
                f"{where / MANIFEST}: number {rec['number']} or size {rec['bytes']} out of range"
            )
        if not _HEX32.fullmatch(rec["id"]):  # it names Kafka topics
            raise SegmentError(f"{where / MANIFEST}: id {rec['id']!r} is not 32 hex digits")
        return cls(**{name: rec[name] for name in _FIELDS})

    @classmethod
    def read(cls, directory: str | os.PathLike[str]) -> Manifest:
        where = Path(directory)
        try:
            raw = (where / MANIFEST).read_bytes()
        except FileNotFoundError:
            raise SegmentError(
                f"{where} is not a sealed segment: it has no {MANIFEST}"
                + ("" if where.is_dir() else " (no such directory)")
            ) from None
        except OSError as exc:
            raise SegmentError(f"cannot read {where / MANIFEST}: {exc}") from exc
        try:
            rec = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise SegmentError(f"{where / MANIFEST} is not valid JSON ({exc})") from exc
        return cls.from_record(rec, where)


# ---------------------------------------------------------------------- a sealed segment


class SealedSegment:
    """A sealed segment opened for reading: `.manifest`, `.index` (read-only), `.path`."""

    def __init__(self, path: Path, manifest: Manifest, index: Index) -> None:
        self.path = path
        self.manifest = manifest
        self.index = index

    @classmethod
    def open(cls, path: str | os.PathLike[str], *, verify: bool = True) -> SealedSegment:
        """Read and check the manifest, verify the data file's checksum (`verify`:
        reads the whole file once, about 0.3 s per 60 MiB here; a server does it at
        start, a writer opening its local segments may skip it after the first time),
        open it read-only and hold its parameters and document count to the manifest."""
        where = Path(path).absolute()
        manifest = Manifest.read(where)
        data = where / DATA
        try:
            size = data.stat().st_size
        except FileNotFoundError:
            raise SegmentError(f"the segment at {where} has no {DATA}") from None
        if size != manifest.bytes:
            raise SegmentError(
                f"the segment at {where} is damaged: {DATA} holds {size:,} bytes, its "
                f"manifest says {manifest.bytes:,} (truncated or replaced?); copy it "
                "again from where it was sealed"
            )
        if verify:
            found = checksum(data)
            if found != manifest.checksum:
                raise SegmentError(
                    f"the segment at {where} is damaged: {DATA} has checksum {found}, its "
                    f"manifest expects {manifest.checksum}; copy it again from where it "
                    "was sealed"
                )
        try:
            index = Index(where, readonly=True, lock=False)
            held = index.read(lambda t: (t.meta(MetaKey.PARAMS), t.count("docs")))
        except IndexOpenError as exc:
            raise SegmentError(f"the segment at {where} cannot be opened: {exc}") from exc
        if held != (manifest.params, manifest.documents):
            index.close()
            raise SegmentError(
                f"the segment at {where} does not match its manifest: its data holds "
                f"{held[1]:,} documents with parameters {_shown(held[0])}, the manifest says "
                f"{manifest.documents:,} with {_shown(manifest.params)} (a manifest of another "
                "segment?)"
            )
        return cls(where, manifest, index)

    def close(self) -> None:
        self.index.close()

    def __enter__(self) -> SealedSegment:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ---------------------------------------------------------------------- the registry


@dataclass(frozen=True)
class SegmentEntry:
    """One sealed segment as the open index knows it (meta `segments`).  `path` is
    absolute: where the segment was registered; `inside`, for a segment inside the
    index directory (`--seal-every`'s INDEX/segments/NNNNNN), the same place relative
    to that directory, so that the segment moves with the index (`mv idx idx2`).
    `located` says where it is now.  `remote`: the writer asks segment servers, never
    opens `path`."""

    number: int
    id: str
    path: str
    remote: bool
    first_docno: int
    next_docno: int
    documents: int
    bytes: int
    inside: str | None = None

    def to_record(self) -> dict[str, Any]:
        rec = asdict(self)
        if self.inside is None:
            del rec["inside"]  # the record of a segment outside the index, as before
        return rec

    @classmethod
    def from_record(cls, rec: Mapping[str, Any]) -> SegmentEntry:
        return cls(**rec)

    @classmethod
    def of(
        cls, manifest: Manifest, path: Path, *, remote: bool, home: Path | None = None
    ) -> SegmentEntry:
        """The registry entry of the segment `manifest` describes, found at `path`
        (`home`: the index directory, for `inside`)."""
        return cls(
            number=manifest.number,
            id=manifest.id,
            path=str(path),
            remote=remote,
            first_docno=manifest.first_docno,
            next_docno=manifest.next_docno,
            documents=manifest.documents,
            bytes=manifest.bytes,
        ).at(path, home)

    def at(self, path: Path, home: Path | None) -> SegmentEntry:
        """This entry registered at `path` (absolute), with `inside` when that lies
        inside the index directory `home`."""
        where = os.path.abspath(path)
        inside = None
        if home is not None:
            root = os.path.abspath(home)
            if where.startswith(root + os.sep):
                inside = Path(os.path.relpath(where, root)).as_posix()
        return replace(self, path=where, inside=inside)

    def located(self, home: Path) -> SegmentEntry:
        """The entry with `path` where the segment is now, for the index directory
        `home`: inside it (`inside`) if a segment with this id is there, else at the
        registered absolute path.  An entry registered before `inside` existed names
        its segment by absolute path only; one that lay inside the index when it was
        sealed is found at the same place inside it now, whichever suffix of the
        old path that was (`/old/idx/segments/000001` -> HOME/segments/000001): the
        manifest's id says which, so nothing else is ever taken for it.  Not found
        anywhere: where it should be (the error then names that place)."""
        home = Path(os.path.abspath(home))
        registered = Path(self.path)
        candidates = [registered]
        if self.inside is not None:
            candidates.insert(0, home / self.inside)
        else:
            parts = registered.parts[1:]
            candidates += [home.joinpath(*parts[i:]) for i in range(len(parts))]
        for where in candidates:
            if _holds(where, self.id):
                return replace(self, path=str(where))
        return replace(self, path=str(candidates[0]))


def _holds(where: Path, segment_id: str) -> bool:
    """Whether `where` (or, mid-seal, its `.partial`) holds the segment `segment_id`
    (its manifest's id; no other check)."""
    for directory in (where, partial_path(where)):
        try:
            rec = orjson.loads((directory / MANIFEST).read_bytes())
        except (OSError, orjson.JSONDecodeError):
            continue
        if isinstance(rec, dict) and rec.get("id") == segment_id:
            return True
    return False


def located_segments(index: Index) -> list[SegmentEntry]:
    """The index's sealed segments, each `located` for where the index is now."""
    home = index.path
    return [e.located(home) for e in index.read(segments)]


def segments(t: Tables) -> list[SegmentEntry]:
    """The sealed segments of the index, in sealing order."""
    return [SegmentEntry.from_record(rec) for rec in t.meta(MetaKey.SEGMENTS) or ()]


def set_segments(t: Tables, entries: list[SegmentEntry]) -> None:
    t.set_meta(MetaKey.SEGMENTS, [e.to_record() for e in entries])


def next_number(t: Tables) -> int:
    """The number the next sealed segment gets: past every segment sealed so far,
    dropped ones included (meta `sealed`), so that a number, and a directory named
    after it, is never used twice."""
    return max([int(t.meta(MetaKey.SEALED) or 0), *(e.number for e in segments(t))]) + 1


def drop_segment(t: Tables, number: int) -> SegmentEntry | None:
    """Forget a sealed segment whose documents have all expired: its registry entry
    and its tombstones (its directory: `remove_dropped`, once committed).  Returns
    the entry dropped, None if no segment has that number."""
    entries = segments(t)
    kept = [e for e in entries if e.number != number]
    if len(kept) == len(entries):
        return None
    set_segments(t, kept)
    t.clear_masks(number)
    return next(e for e in entries if e.number == number)


def repoint(
    index: Index, dirs: Iterable[str | os.PathLike[str]]
) -> list[tuple[SegmentEntry, SegmentEntry]]:
    """Register sealed segments at the directories they were moved to: each
    directory's manifest says which segment it is (its id), and the registry entry
    with that id is pointed there (`inside` when it lies in the index directory), in
    one write transaction.  Each is opened and verified first (manifest, checksum:
    `SegmentError`), and one the index does not register is refused (`ConfigError`):
    nothing is changed then.  Returns (before, after) per segment, as registered."""
    found: list[tuple[Path, Manifest]] = []
    for d in dirs:
        where = Path(os.path.abspath(d))
        with SealedSegment.open(where) as seg:
            found.append((where, seg.manifest))

    def run(t: Tables) -> list[tuple[SegmentEntry, SegmentEntry]]:
        entries = segments(t)
        by_id = {e.id: i for i, e in enumerate(entries)}
        changed = []
        for where, manifest in found:
            i = by_id.get(manifest.id)
            if i is None:
                raise ConfigError(
                    f"{where} holds sealed segment {manifest.number} ({manifest.id}), which "
                    f"the index at {index.path} does not register; nothing was changed"
                )
            before = entries[i]
            entries[i] = before.at(where, index.path)
            changed.append((before, entries[i]))
        set_segments(t, entries)
        return changed

    return index.write(run)


def remove_dropped(index: Index, entry: SegmentEntry) -> bool:
    """After the commit that dropped `entry` (`drop_segment`): remove its directory
    when it provably is that segment and the index's own -- local, inside the index
    directory, its manifest naming that id, and no longer registered.  Anything else
    (a directory elsewhere, a remote segment's, one that holds something else) is
    left to the operator.  Returns whether it was removed."""
    where = Path(os.path.abspath(entry.path))
    root = os.path.abspath(index.path)
    if entry.remote or not str(where).startswith(root + os.sep) or where.is_symlink():
        return False
    try:
        if Manifest.read(where).id != entry.id:
            return False
    except SegmentError:
        return False
    if any(e.id == entry.id for e in index.read(segments)):
        return False  # registered again meanwhile (never, but never delete a live one)
    shutil.rmtree(where, ignore_errors=True)
    return not where.exists()


# ---------------------------------------------------------------------- seal


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _applied_offsets(t: Tables) -> dict[str, dict[str, int]]:
    """The worker's applied input offsets per consumer, as meta `applied/NS` has them."""
    prefix = MetaKey.APPLIED.encode()
    return {
        key[len(prefix) :].decode(): {str(p): int(o) for p, o in msgpack.unpackb(raw).items()}
        for key, raw in t.meta_entries(prefix)
    }


def _is_empty_dir(path: Path) -> bool:
    return path.is_dir() and next(path.iterdir(), None) is None


def write_manifest(partial: Path, manifest: Manifest) -> None:
    """Write a segment's manifest beside its data file and sync both, the directory
    and its parent: the `.partial` must outlive a crash once anything names it."""
    with open(partial / MANIFEST, "wb") as f:
        f.write(manifest.to_json())
        f.flush()
        os.fsync(f.fileno())
    _fsync(partial / DATA)
    _fsync(partial)
    _fsync(partial.parent)


def now_utc() -> str:
    """A manifest's `created`: UTC to the second."""
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def seal(index: Index, dest: str | os.PathLike[str], *, remote: bool = False) -> Manifest:
    """Move every document of the open index into a new sealed segment at `dest` (a
    new or empty directory), atomically; returns its manifest.

    Refused (`SealRefusedError`, nothing changed) when the open index holds no
    documents, when `dest` is not empty or already names a segment, and when the
    index is mirrored to a changelog.  Safe while other processes write the same
    index: their batches wait for the writer lock this holds from the copy to the
    commit, and the copy is exactly the last committed state.

    The copy runs inside our own write transaction.  LMDB's compacting copy
    (`mdb_env_copy2` with MDB_CP_COMPACT, py-lmdb `Environment.copy(compact=True)`)
    walks the tree in a read transaction of its own and never takes the writer
    mutex, and py-lmdb opens every environment with MDB_NOTLS, so that read
    transaction can begin in the thread that holds the write transaction.  Since
    that thread holds the writer lock and has written nothing yet, the snapshot is
    exactly the state this transaction started from and then empties.  (The plain,
    non-compacting copy takes the writer mutex to snapshot the meta pages: called
    here it would wait for ourselves forever.)
    """
    target = Path(dest).absolute()
    partial = partial_path(target)
    recover(index)

    def build(t: Tables) -> Manifest:
        # Index.write runs this again after growing the map: it starts from scratch.
        if t.meta(MetaKey.CHANGELOG) is not None:
            raise SealRefusedError(
                f"the index at {index.path} is mirrored to a changelog; sealing an index "
                "mirrored to a changelog is not supported yet"
            )
        params = t.meta(MetaKey.PARAMS)
        if params is None:
            raise SealRefusedError(f"{index.path} is not a streamdedup index (no parameters)")
        stored = segments(t)
        now = [e.located(index.path) for e in stored]
        if any(Path(e.path) == target for e in now):
            raise SealRefusedError(f"a sealed segment of this index is already at {target}")
        # Registered again where they are now, `inside` the index where they lie in it
        # (an entry from before `inside` existed gets it here); one not found: as it was.
        entries = [
            e.at(Path(e.path), index.path) if _holds(Path(e.path), e.id) else old
            for e, old in zip(now, stored, strict=True)
        ]
        span = t.docno_range()
        if span is None:
            n = len(entries)
            held = f" (what it indexed is in its {n} sealed segment{'s' * (n != 1)})" if n else ""
            raise SealRefusedError(f"nothing to seal: the index at {index.path} is empty{held}")
        if target.exists() and not _is_empty_dir(target):
            raise SealRefusedError(
                f"{target} exists and is not empty; give a new or empty directory"
            )
        number = next_number(t)
        if number > MAX_NUMBER:
            raise SealRefusedError(
                f"the index at {index.path} has sealed {MAX_NUMBER:,} segments, as many as "
                "an index can number (a tombstone keeps the number in two bytes)"
            )
        for earlier in claims:  # this call's own, whose commit failed: run again
            earlier.remove()
        claims.clear()
        # what a seal of this index that did not commit left (nothing names it)
        clear_leftover(partial, "seal", owner, what="a seal of this index that did not finish")
        claims.append(Claim(partial, "seal", owner))
        index.copy_to(partial, besides=(OWNER,))
        failpoints.reach("seal-copied")
        data = partial / DATA
        identity = t.meta(MetaKey.IDENTITY)
        manifest = Manifest(
            id=uuid.uuid4().hex,
            number=number,
            index=identity.get("id") if isinstance(identity, dict) else None,
            params=params,
            first_docno=span[0],
            next_docno=span[1],
            documents=t.count("docs"),
            offsets=_applied_offsets(t),
            created=now_utc(),
            bytes=data.stat().st_size,
            checksum=checksum(data),
        )
        write_manifest(partial, manifest)
        failpoints.reach("seal-written")
        entry = SegmentEntry.of(manifest, target, remote=remote, home=index.path)
        set_segments(t, [*entries, entry])
        t.set_meta(MetaKey.SEALED, number)
        t.clear_documents()
        return manifest

    owner = f"index {index.path.resolve()}"
    claims: list[Claim] = []
    try:
        manifest = index.write(build)
    except BaseException:
        # Not committed (a full disk, an error, Ctrl-C): what this seal made is removed,
        # so that a failed seal does not leave a copy of the index filling the disk.
        # (Unless the registry names it after all: then it is the segment.)
        if claims and not _registered(index, partial):
            claims[0].remove()
        for claim in claims:
            claim.release()
        raise
    failpoints.reach("seal-committed")
    # At once: from the commit on, the registry names `target`, and another process
    # writing this index opens its segments at its next batch (it may do this rename
    # itself: `recover`, which is why a missing .partial is no error here).
    with contextlib.suppress(FileNotFoundError):
        os.replace(partial, target)
    _fsync(target.parent)
    for claim in claims:
        claim.done(target)
    # With durability "process" the commit may still be in the page cache only (with
    # "full" it is on disk already): sync it now.  A power loss before this line can
    # lose the commit and keep the renamed directory: the old state, beside a
    # directory nothing registers (which a seal to the same place refuses to reuse).
    index.env.sync(True)
    return manifest


def recover(index: Index) -> list[Path]:
    """Finish the rename of a seal that committed and was then interrupted: for each
    registered segment whose directory is missing (or empty) while its `.partial`
    holds a manifest with the registered id, rename it into place.  Returns the
    directories renamed.  Call it before opening the registered segments: after a
    crash, and whenever a seal by another process may be between its commit and its
    rename (safe to run concurrently: whoever renames first wins)."""
    done: list[Path] = []
    for entry in located_segments(index):
        target = Path(entry.path)
        partial = partial_path(target)
        if not partial.is_dir() or (target.exists() and not _is_empty_dir(target)):
            continue
        try:
            if Manifest.read(partial).id != entry.id:
                continue
        except SegmentError:
            continue
        try:
            os.replace(partial, target)  # onto a missing or empty directory: atomic
        except FileNotFoundError:  # another process recovering the same index won
            continue
        with contextlib.suppress(OSError):
            os.unlink(target / OWNER)  # the mark of the seal that made it
        _fsync(target.parent)
        done.append(target)
    return done


def _registered(index: Index, partial: Path) -> bool:
    """Whether the registry names a segment whose `.partial` is `partial`, and that
    one holds its manifest (a seal that committed after all)."""
    try:
        entries = located_segments(index)
        return any(partial_path(Path(e.path)) == partial for e in entries) and any(
            Manifest.read(partial).id == e.id for e in entries
        )
    except StreamDedupError:
        return True  # cannot tell: keep it


# ---------------------------------------------------------------------- built from sorted runs

BUILD_ROWS = 50_000  # rows per write transaction of a segment built from sorted runs
# The `meta` entries an index keeps of a sealed segment's documents: copied by
# `attach` from a segment into the new index that starts from it, as `seal` leaves
# them in the open index it empties.
CARRIED_META = (
    MetaKey.PARAMS,
    MetaKey.NEXT_DOCNO,
    MetaKey.COUNTS,
    MetaKey.CLOCK,
    MetaKey.RECENT,
    MetaKey.CAPS,
)


class SegmentBuilder:
    """A sealed segment written from sorted rows instead of sealed from an open index
    (the backfill computes every table's final rows on Spark): the same files, the
    same manifest, so that `attach` and the sealed-segment machinery take it as they
    take `seal`'s.

    The rows go, in key order and appended, into a scratch LMDB beside the
    destination (one write transaction per `BUILD_ROWS`); `finish` copies it
    compacted to `SEGMENT_DIR.partial` (a file of its pages only, as `seal` makes),
    writes the manifest (checksum of data.mdb) and syncs; `commit` renames the
    `.partial` into place.  Until then nothing is at SEGMENT_DIR; `abort` (and the
    context manager on an exception) removes the scratch and the `.partial`.  Both
    are made, marked and locked at the start (`Claim`): a second build to the same
    destination is refused while this one runs, and only a dead build's leftovers
    for this destination are ever removed."""

    def __init__(self, dest: str | os.PathLike[str]) -> None:
        self.target = Path(dest).absolute()
        self.partial = partial_path(self.target)
        owner = self.check(self.target)
        self.target.parent.mkdir(parents=True, exist_ok=True)
        # what a build killed before its rename left (nothing names either): removed
        # when its mark proves it a dead build's for this destination, else left alone
        clear_leftover(self.partial, "backfill", owner, what=self._what)
        prefix = f".{self.target.name}.build-"
        for old in self.target.parent.glob(prefix + "*"):
            with contextlib.suppress(SealRefusedError):
                clear_leftover(old, "backfill scratch", owner, what=self._what)
        # Both claimed now: a second build to the same destination is refused at once.
        self._partial: Claim | None = Claim(self.partial, "backfill", owner)
        try:
            self._scratch: Claim | None = Claim(
                self.target.parent / f"{prefix}{uuid.uuid4().hex[:12]}", "backfill scratch", owner
            )
        except BaseException:
            self._partial.remove()
            raise
        self.scratch = self._scratch.path
        self.index: Index | None = None
        self.manifest: Manifest | None = None
        try:
            self.index = Index(self.scratch)
        except BaseException:
            self.abort()
            raise

    _what = "a backfill --segment to this directory that did not finish"

    @classmethod
    def check(cls, dest: str | os.PathLike[str]) -> str:
        """Refuse (`SealRefusedError`) a destination a build cannot use, before any
        work: not a new or empty directory, or a `.partial` in the way that is not a
        dead build's for it.  Returns the owner name the build marks its directories
        with."""
        target = Path(dest).absolute()
        if target.exists() and not _is_empty_dir(target):
            raise SealRefusedError(
                f"{target} exists and is not empty; give a new or empty directory"
            )
        owner = f"segment {target}"
        clear_leftover(partial_path(target), "backfill", owner, what=cls._what, remove=False)
        return owner

    def _write(self, fn: Any, grow: int) -> Any:
        assert self.index is not None, "the segment was finished or aborted"
        return self.index.write(fn, grow=grow)

    def put_sorted(self, table: str, rows: Iterable[tuple[builtins.bytes, builtins.bytes]]) -> int:
        """A table's rows, keys ascending (each table once); returns how many."""
        n = 0
        for chunk in _chunked(rows, BUILD_ROWS):
            grow = sum(len(k) + len(v) + 16 for k, v in chunk)
            n += self._write(lambda t, c=chunk: t.put_sorted(table, c), 2 * grow)
        return n

    def put_runs(self, runs: Iterable[tuple[int, Any, Any]]) -> int:
        """The postings: (partition, keys, docnos) ordered by (key, docno) within
        each, partitions ascending; returns how many postings."""
        n = 0
        for part, keys, docnos in runs:
            n += len(keys)
            self._write(lambda t, a=(part, keys, docnos): t.postings.put_run(*a), 32 * len(keys))
        return n

    def set_meta(self, entries: Mapping[str, Any]) -> None:
        def run(t: Tables) -> None:
            for name, value in entries.items():
                t.set_meta(name, value)

        self._write(run, 1 << 16)

    def finish(
        self, *, number: int = 1, offsets: dict[str, dict[str, int]] | None = None
    ) -> Manifest:
        """Copy the rows into `SEGMENT_DIR.partial` with their manifest; refused
        (`SealRefusedError`) when no document was written."""
        assert self.index is not None
        span, documents, params = self.index.read(
            lambda t: (t.docno_range(), t.count("docs"), t.meta(MetaKey.PARAMS))
        )
        if span is None or params is None:
            raise SealRefusedError(f"nothing to put in the segment at {self.target}: no documents")
        self.index.copy_to(self.partial, besides=(OWNER,))
        self._close_scratch()
        data = self.partial / DATA
        self.manifest = Manifest(
            id=uuid.uuid4().hex,
            number=number,
            index=None,
            params=params,
            first_docno=span[0],
            next_docno=span[1],
            documents=documents,
            offsets=offsets or {},
            created=now_utc(),
            bytes=data.stat().st_size,
            checksum=checksum(data),
        )
        write_manifest(self.partial, self.manifest)
        return self.manifest

    def commit(self) -> Manifest:
        """Rename the finished `.partial` into place: from here the segment exists."""
        assert self.manifest is not None, "finish() the segment first"
        os.replace(self.partial, self.target)  # onto a missing or empty directory: atomic
        _fsync(self.target.parent)
        if self._partial is not None:
            self._partial.done(self.target)
            self._partial = None
        return self.manifest

    def _close_scratch(self) -> None:
        if self.index is not None:
            self.index.close()
            self.index = None
        if self._scratch is not None:
            self._scratch.remove()
            self._scratch = None

    def abort(self) -> None:
        """Remove everything the build made (the destination itself was never made)."""
        self._close_scratch()
        if self._partial is not None:
            self._partial.remove()
            self._partial = None

    def __enter__(self) -> SegmentBuilder:
        return self

    def __exit__(self, kind: type[BaseException] | None, *rest: object) -> None:
        if kind is not None:
            self.abort()
        else:
            self._close_scratch()


def _chunked(rows: Iterable[Any], size: int) -> Iterator[list[Any]]:
    chunk: list[Any] = []
    for row in rows:
        chunk.append(row)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


# ---------------------------------------------------------------------- a new index from a segment


def _holds_anything(t: Tables) -> bool:
    return (
        t.meta(MetaKey.NEXT_DOCNO) is not None
        or bool(segments(t))
        or t.count("docs") > 0
        or next(t.meta_entries(MetaKey.APPLIED.encode()), None) is not None
    )


def attach(index: Index, segment_dir: str | os.PathLike[str]) -> SegmentEntry:
    """Start a new, empty index from a sealed segment (`--base-segment`): the index
    takes the segment's parameters, counters and next document number, and
    registers it as its local sealed segment number 1, exactly as `seal` leaves an
    index it emptied into that segment -- from then on the sealed-segment machinery
    answers for it.  Attaching the segment an index already starts from (its first
    registered one: attached before, or sealed by this index) is a no-op, since a
    restarted worker gives the same option again; any other index that holds
    anything is refused (`ConfigError`), and so is a segment that does not open
    (`SegmentError`: manifest, checksum).  The caller checks explicit detection
    options against `Manifest.read(segment_dir).params` first."""
    where = Path(segment_dir).absolute()
    with SealedSegment.open(where) as seg:
        manifest = seg.manifest
        carried = seg.index.read(lambda t: {name: t.meta(name) for name in CARRIED_META})
    entry = SegmentEntry.of(manifest, where, remote=False, home=index.path)

    def run(t: Tables) -> SegmentEntry:
        entries = segments(t)
        if entries and entries[0].id == manifest.id:
            return entries[0]  # this index started from that segment already
        if _holds_anything(t):
            raise ConfigError(
                f"`base_segment` starts a NEW index from the sealed segment {where}, and the "
                f"index at {index.path} already holds documents or segments; give a new or "
                "empty index directory",
                params=("base_segment",),
            )
        stored = t.meta(MetaKey.PARAMS)
        if stored is not None and stored != manifest.params:
            raise ConfigError(
                f"the index at {index.path} was created with parameters {_shown(stored)}, the "
                f"base segment {where} has {_shown(manifest.params)}; give a new index "
                "directory",
                params=("base_segment",),
            )
        for name, value in carried.items():
            if value is not None:
                t.set_meta(name, value)
        set_segments(t, [entry])
        t.set_meta(MetaKey.SEALED, manifest.number)
        return entry

    return index.write(run)


def _shown(params: object) -> object:
    """A parameter record for a message: without the secret shingle hash key."""
    return public_params(params) if isinstance(params, Mapping) else params
