"""A sealed segment opened for reading (`SealedSegment.open`): its manifest read,
its data file checked against the manifest's size and checksum, and opened
read-only without a lock file (nothing ever writes a sealed segment again).  What
a segment server, `inspect` and the writer's local readers open."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from streamdedup.config import public_params
from streamdedup.errors import (
    IndexOpenError,
    SegmentError,
)
from streamdedup.store.index import Index
from streamdedup.store.keys import MetaKey
from streamdedup.store.segment.manifest import DATA, Manifest, checksum


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
                f"{held[1]:,} documents with parameters {shown(held[0])}, the manifest says "
                f"{manifest.documents:,} with {shown(manifest.params)} (a manifest of another "
                "segment?)"
            )
        return cls(where, manifest, index)

    def close(self) -> None:
        self.index.close()

    def __enter__(self) -> SealedSegment:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def shown(params: object) -> object:
    """A parameter record for a message: without the secret shingle hash key."""
    return public_params(params) if isinstance(params, Mapping) else params
