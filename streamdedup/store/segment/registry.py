"""The open index's registry of its sealed segments (meta `segments`: one
`SegmentEntry` per segment, in sealing order) and what changes it: a segment
dropped once its documents all expired, segments re-pointed after a move, and
`attach`, which starts a new index from a segment.  The tombstones masking a
sealed segment's documents live beside it in the open index (table `tombs`,
`Tables.mask`)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import orjson

from streamdedup.errors import (
    ConfigError,
    SegmentError,
)
from streamdedup.store.index import Index
from streamdedup.store.keys import MetaKey
from streamdedup.store.segment.manifest import MANIFEST, Manifest, partial_path
from streamdedup.store.segment.reading import SealedSegment, shown
from streamdedup.store.tables import Tables

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
            if holds_segment(where, self.id):
                return replace(self, path=str(where))
        return replace(self, path=str(candidates[0]))


def holds_segment(where: Path, segment_id: str) -> bool:
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
                f"the index at {index.path} was created with parameters {shown(stored)}, the "
                f"base segment {where} has {shown(manifest.params)}; give a new index "
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
