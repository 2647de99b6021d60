"""Where the read-only reports find an index's documents: the open index and its
local sealed segments, each with the documents of it the open index masks (replaced
or expired: not live), and the numbers of the segments served remotely, which cannot
be opened here.  `inspect` (one document) and `clusters` (every one) read them alike."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

from streamdedup.config import IndexParams
from streamdedup.models import Record
from streamdedup.ops.report import open_readonly
from streamdedup.store.index import Index
from streamdedup.store.keys import docno_of
from streamdedup.store.segment.reading import SealedSegment
from streamdedup.store.segment.registry import located_segments
from streamdedup.store.tables import Tables


@dataclass(frozen=True)
class Source:
    """The open index (`number` None) or a local sealed segment, with the documents
    of it the open index masks."""

    number: int | None
    index: Index
    masked: frozenset[int]

    def live_records(self) -> list[tuple[int, Record]]:
        """Its live documents' records, with their docnos, in docno order."""
        return [r for r in self.index.read(records_of) if r[0] not in self.masked]


@dataclass(frozen=True)
class Sources:
    """An index opened read-only, its parameters, its sources (the open index first,
    then its local segments, newest first: where an id's latest document is found
    first) and the numbers of its remote segments."""

    index: Index
    params: IndexParams
    local: list[Source]
    remote: list[int]


@contextlib.contextmanager
def index_sources(path: str) -> Iterator[Sources]:
    """The index at `path` and its local segments, open while the block runs."""
    index, params = open_readonly(path)
    opened: list[SealedSegment] = []
    try:
        entries = located_segments(index)
        masks = index.read(
            lambda t: {e.number: frozenset(t.masked(e.number).tolist()) for e in entries}
        )
        local = [Source(None, index, frozenset())]
        for e in reversed(entries):
            if not e.remote:
                opened.append(SealedSegment.open(e.path, verify=False))
                local.append(Source(e.number, opened[-1].index, masks[e.number]))
        yield Sources(index, params, local, [e.number for e in entries if e.remote])
    finally:
        for seg in opened:
            seg.close()
        index.close()


def records_of(t: Tables) -> list[tuple[int, Record]]:
    """Every document record of one index or segment, with its docno, in docno order."""
    return [(docno_of(key), Record.unpack(value)) for key, value in t.items("docs")]


__all__ = ["Source", "Sources", "index_sources", "records_of"]
