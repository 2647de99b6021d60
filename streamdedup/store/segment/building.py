"""A sealed segment written from sorted rows instead of sealed from an open index
(`SegmentBuilder`: the backfill computes every table's final rows on Spark): the
same files and manifest as `seal` makes, through the same claims, so that
`attach` and the sealed-segment machinery take it as they take a sealed one."""

from __future__ import annotations

import builtins
import contextlib
import os
import uuid
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from streamdedup.errors import (
    SealRefusedError,
)
from streamdedup.store.index import Index
from streamdedup.store.keys import MetaKey
from streamdedup.store.segment.claim import OWNER, Claim, clear_leftover
from streamdedup.store.segment.manifest import (
    DATA,
    Manifest,
    checksum,
    fsync_path,
    is_empty_dir,
    now_utc,
    partial_path,
    write_manifest,
)
from streamdedup.store.tables import Tables

BUILD_ROWS = 50_000  # rows per write transaction of a segment built from sorted runs


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
        if target.exists() and not is_empty_dir(target):
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
        fsync_path(self.target.parent)
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
