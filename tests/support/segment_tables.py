"""Comparing two sealed segments table by table: what `backfill --segment` writes
against what `dedup` then `seal` leave, key by key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgpack

from streamdedup.config import public_params
from streamdedup.store.keys import MetaKey
from streamdedup.store.segment.reading import SealedSegment
from streamdedup.store.tables import TABLES, Tables

# What may differ between two segments holding the same index, and why:
#  - postings: the layout of the runs (a stream's merge history vs one run per
#    partition) and the dead-document array (docnos a stream removed but has not
#    purged yet): compared as the live (band key, docno) pairs instead;
#  - meta `counts`: a stream keeps a tally at 0 once its last document went; compared
#    without zero tallies;
#  - the manifest's id, created, bytes and checksum (a new segment, another file
#    layout); the rest of the manifest must agree;
#  - the secret shingle hash key in the parameters (meta and manifest): each index
#    draws its own, and nothing else stored depends on it.
LEGITIMATE = (
    "postings runs and dead array",
    "zero tallies in meta counts",
    "the parameters' hash_key",
)
MANIFEST_FREE = ("id", "created", "bytes", "checksum")


def _tables(t: Tables) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in TABLES:
        if name == "postings":
            out[name] = t.postings.live()
        elif name == "meta":
            meta = {k.decode(): msgpack.unpackb(v) for k, v in t.items("meta")}
            if MetaKey.PARAMS in meta:
                meta[MetaKey.PARAMS] = public_params(meta[MetaKey.PARAMS])
            if MetaKey.COUNTS in meta:
                meta[MetaKey.COUNTS] = {k: v for k, v in meta[MetaKey.COUNTS].items() if v}
            out[name] = meta
        else:
            out[name] = list(t.items(name))
    return out


def segment_tables(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """Every table of a sealed segment (opened read-only, checksum verified) in a
    comparable form, and its manifest without the fields that name the file."""
    with SealedSegment.open(path) as seg:
        tables = seg.index.read(_tables)
        manifest = {k: v for k, v in seg.manifest.to_record().items() if k not in MANIFEST_FREE}
        manifest["params"] = public_params(manifest["params"])
    return tables, manifest


def assert_same_segments(want: Path, got: Path) -> dict[str, int]:
    """Every table equal key by key (but `LEGITIMATE`), the manifests too (but
    `MANIFEST_FREE`); returns the rows per table compared."""
    a, ma = segment_tables(want)
    b, mb = segment_tables(got)
    assert ma == mb
    for name in TABLES:
        if a[name] != b[name]:
            extra = [r for r in b[name] if r not in a[name]][:3]
            missing = [r for r in a[name] if r not in b[name]][:3]
            raise AssertionError(f"table {name} differs: missing {missing}, extra {extra}")
    return {name: len(a[name]) for name in TABLES}
