"""TEMPORARY minimal stand-in (lead's engine branch): replaced by helper "store"'s module."""

from __future__ import annotations

import json
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from streamdedup.errors import SegmentError
from streamdedup.store.index import Index
from streamdedup.store.keys import MetaKey
from streamdedup.store.tables import Tables

DATA_TABLES = ("ids", "docs", "sigs", "texts", "content", "copies", "expiry", "postings")


@dataclass(frozen=True)
class Manifest:
    id: str
    number: int
    params: dict[str, Any]
    first_docno: int
    next_docno: int
    documents: int


@dataclass(frozen=True)
class SegmentEntry:
    number: int
    id: str
    path: str
    remote: bool
    first_docno: int
    next_docno: int
    documents: int
    bytes: int


class SealedSegment:
    def __init__(self, path: Path, manifest: Manifest, index: Index) -> None:
        self.path, self.manifest, self.index = path, manifest, index

    @classmethod
    def open(cls, path: str | Path, *, verify: bool = True) -> SealedSegment:
        p = Path(path)
        try:
            m = Manifest(**json.loads((p / "manifest.json").read_text()))
        except (OSError, ValueError, TypeError) as exc:
            raise SegmentError(f"no sealed segment at {p}: {exc}") from exc
        return cls(p, m, Index(p, readonly=True))

    def close(self) -> None:
        self.index.close()


def segments(t: Tables) -> list[SegmentEntry]:
    return [SegmentEntry(**e) for e in (t.meta(MetaKey.SEGMENTS) or [])]


def set_segments(t: Tables, entries: list[SegmentEntry]) -> None:
    t.set_meta(MetaKey.SEGMENTS, [asdict(e) for e in entries])


def drop_segment(t: Tables, number: int) -> None:
    set_segments(t, [e for e in segments(t) if e.number != number])
    t.clear_masks(number)


def seal(index: Index, dest: Path, *, remote: bool = False) -> Manifest:
    def run(t: Tables) -> Manifest:
        from streamdedup.store.keys import docno_of

        docs = [docno_of(k) for k, _ in t.items("docs")]
        entries = segments(t)
        number = max((e.number for e in entries), default=0) + 1
        params = t.meta(MetaKey.PARAMS)
        m = Manifest(uuid.uuid4().hex, number, params, min(docs), max(docs) + 1, len(docs))
        dest.mkdir(parents=True)
        index.env.copy(str(dest), compact=True)
        (dest / "manifest.json").write_text(json.dumps(asdict(m)))
        entries.append(
            SegmentEntry(
                number,
                m.id,
                str(dest.resolve()),
                remote,
                m.first_docno,
                m.next_docno,
                m.documents,
                (dest / "data.mdb").stat().st_size,
            )
        )
        set_segments(t, entries)
        for name in DATA_TABLES:
            t.txn.drop(t.db[name], delete=False)
        return m

    return index.write(run)
