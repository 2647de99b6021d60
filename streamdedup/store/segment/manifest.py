"""The files of a sealed segment: a directory holding `data.mdb`, a compacted LMDB
copy of an index (the same tables), and `manifest.json`, what the segment is (id,
number, parameters, document-number range, input offsets covered) with the blake2b
checksum of `data.mdb`, so that a segment copied to another disk or host is
verified before it answers a single probe.  The one place that spells the
format: `seal`, a backfill's `SegmentBuilder` and every reader go through it."""

from __future__ import annotations

import builtins
import datetime as dt
import hashlib
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import orjson

from streamdedup.errors import (
    SegmentError,
)
from streamdedup.store.keys import SEGMENT_BYTES

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


def fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def is_empty_dir(path: Path) -> bool:
    return path.is_dir() and next(path.iterdir(), None) is None


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


def write_manifest(partial: Path, manifest: Manifest) -> None:
    """Write a segment's manifest beside its data file and sync both, the directory
    and its parent: the `.partial` must outlive a crash once anything names it."""
    with open(partial / MANIFEST, "wb") as f:
        f.write(manifest.to_json())
        f.flush()
        os.fsync(f.fileno())
    fsync_path(partial / DATA)
    fsync_path(partial)
    fsync_path(partial.parent)


def now_utc() -> str:
    """A manifest's `created`: UTC to the second."""
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
