"""`seal`: move everything indexed so far into a new sealed segment, atomically, and
`recover`, which finishes a seal interrupted between its commit and its rename.

An index is one open segment (the LMDB index the writer updates) plus sealed ones
(their files: manifest.py; their registry in the open index: registry.py).
Nothing ever writes a sealed segment again: it is opened read-only and without a
lock file (reading.py).

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

import contextlib
import os
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgpack

from streamdedup import failpoints
from streamdedup.errors import (
    SealRefusedError,
    SegmentError,
    StreamDedupError,
)
from streamdedup.store.index import Index
from streamdedup.store.keys import MetaKey
from streamdedup.store.segment.claim import OWNER, Claim, clear_leftover
from streamdedup.store.segment.manifest import (
    DATA,
    MAX_NUMBER,
    Manifest,
    checksum,
    fsync_path,
    is_empty_dir,
    now_utc,
    partial_path,
    write_manifest,
)
from streamdedup.store.segment.registry import (
    SegmentEntry,
    holds_segment,
    located_segments,
    next_number,
    segments,
    set_segments,
)
from streamdedup.store.tables import Tables


def _applied_offsets(t: Tables) -> dict[str, dict[str, int]]:
    """The worker's applied input offsets per consumer, as meta `applied/NS` has them."""
    prefix = MetaKey.APPLIED.encode()
    return {
        key[len(prefix) :].decode(): {str(p): int(o) for p, o in msgpack.unpackb(raw).items()}
        for key, raw in t.meta_entries(prefix)
    }


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
        plan = _plan(t, index, target)
        for earlier in claims:  # this call's own, whose commit failed: run again
            earlier.remove()
        claims.clear()
        # what a seal of this index that did not commit left (nothing names it)
        clear_leftover(partial, "seal", owner, what="a seal of this index that did not finish")
        claims.append(Claim(partial, "seal", owner))
        index.copy_to(partial, besides=(OWNER,))
        failpoints.reach("seal-copied")
        manifest = _manifest(t, plan, partial)
        write_manifest(partial, manifest)
        failpoints.reach("seal-written")
        entry = SegmentEntry.of(manifest, target, remote=remote, home=index.path)
        set_segments(t, [*plan.entries, entry])
        t.set_meta(MetaKey.SEALED, plan.number)
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
    _put_in_place(index, partial, target, claims)
    return manifest


@dataclass(frozen=True)
class _Plan:
    """What a seal found in the open index it may go ahead with: the parameters, the
    registry entries to keep (re-registered where they are now), the document
    number range to seal and the new segment's number."""

    params: dict[str, Any]
    entries: list[SegmentEntry]
    span: tuple[int, int]
    number: int


def _plan(t: Tables, index: Index, target: Path) -> _Plan:
    """Refuse a seal of this index to `target` (`SealRefusedError`), or say what it seals."""
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
        e.at(Path(e.path), index.path) if holds_segment(Path(e.path), e.id) else old
        for e, old in zip(now, stored, strict=True)
    ]
    span = t.docno_range()
    if span is None:
        n = len(entries)
        held = f" (what it indexed is in its {n} sealed segment{'s' * (n != 1)})" if n else ""
        raise SealRefusedError(f"nothing to seal: the index at {index.path} is empty{held}")
    if target.exists() and not is_empty_dir(target):
        raise SealRefusedError(f"{target} exists and is not empty; give a new or empty directory")
    number = next_number(t)
    if number > MAX_NUMBER:
        raise SealRefusedError(
            f"the index at {index.path} has sealed {MAX_NUMBER:,} segments, as many as "
            "an index can number (a tombstone keeps the number in two bytes)"
        )
    return _Plan(params, entries, span, number)


def _manifest(t: Tables, plan: _Plan, partial: Path) -> Manifest:
    """The manifest of the segment copied to `partial` (its data file checksummed)."""
    data = partial / DATA
    identity = t.meta(MetaKey.IDENTITY)
    return Manifest(
        id=uuid.uuid4().hex,
        number=plan.number,
        index=identity.get("id") if isinstance(identity, dict) else None,
        params=plan.params,
        first_docno=plan.span[0],
        next_docno=plan.span[1],
        documents=t.count("docs"),
        offsets=_applied_offsets(t),
        created=now_utc(),
        bytes=data.stat().st_size,
        checksum=checksum(data),
    )


def _put_in_place(index: Index, partial: Path, target: Path, claims: list[Claim]) -> None:
    """After the commit: rename the `.partial` to `target` and make both durable."""
    # At once: from the commit on, the registry names `target`, and another process
    # writing this index opens its segments at its next batch (it may do this rename
    # itself: `recover`, which is why a missing .partial is no error here).
    with contextlib.suppress(FileNotFoundError):
        os.replace(partial, target)
    fsync_path(target.parent)
    for claim in claims:
        claim.done(target)
    # With durability "process" the commit may still be in the page cache only (with
    # "full" it is on disk already): sync it now.  A power loss before this line can
    # lose the commit and keep the renamed directory: the old state, beside a
    # directory nothing registers (which a seal to the same place refuses to reuse).
    index.env.sync(True)


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
        if not partial.is_dir() or (target.exists() and not is_empty_dir(target)):
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
        fsync_path(target.parent)
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
