"""`clusters`: every cluster's members, from an index or from verdict files
(DESIGN.md "Outputs users consume": one JSON line a cluster, `{"cluster": <id of its
first document>, "members": [<ids, first first>], "size": n}`, every document in
exactly one cluster).

A verdict names its cluster already (the id of the cluster's first document: a
duplicate inherits the cluster of what it duplicates), so a cluster is the documents
that name it, in the order they came.  From verdict files: each document's last
verdict counts (a re-run or a replay repeats a document; a changed one may move), in
the order its id first appeared; error records are not documents.  From an index:
its live documents, in the order they were indexed, across the open index and its
local sealed segments (those the open index masks, replaced or expired, are not
live); a remote segment's documents cannot be read here, so an index with one is
refused rather than answered in part."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import orjson

from streamdedup.errors import ConfigError
from streamdedup.ops.sources import index_sources

Cluster = dict[str, Any]


class _Grouping:
    """Documents by cluster, each document once (its last assignment), clusters in
    the order of their first member."""

    def __init__(self) -> None:
        self.cluster_of: dict[bytes, bytes] = {}  # document key -> cluster key
        self.ids: dict[bytes, Any] = {}  # key -> the id as given (a string or an int)

    def add(self, doc_id: Any, cluster: Any) -> None:
        key, home = _key(doc_id), _key(cluster)
        self.ids.setdefault(key, doc_id)
        self.ids.setdefault(home, cluster)
        self.cluster_of[key] = home  # (a later verdict moves it, keeping its place)

    def clusters(self, min_size: int = 1) -> Iterator[Cluster]:
        members: dict[bytes, list[bytes]] = {}
        for key, home in self.cluster_of.items():
            members.setdefault(home, []).append(key)
        for home, keys in members.items():
            if len(keys) >= min_size:
                ids = [self.ids[k] for k in keys]
                yield {"cluster": self.ids[home], "members": ids, "size": len(ids)}


def _key(doc_id: Any) -> bytes:
    """An id as a dict key that keeps "1" and 1 apart (as the index does)."""
    return orjson.dumps(doc_id)


def from_verdicts(lines: Iterable[bytes], min_size: int = 1) -> Iterator[Cluster]:
    """The clusters of verdict records (JSON Lines, as `dedup`, `replay` and
    `verdicts` write them), in order of their first member."""
    grouping = _Grouping()
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise ConfigError(f"line {n} is not JSON: {exc}") from exc
        if not isinstance(rec, dict) or "error" in rec:
            continue  # (an error record: its document got no verdict)
        if "id" not in rec or "cluster" not in rec:
            raise ConfigError(f"line {n} is not a verdict record (no `id` or `cluster`)")
        grouping.add(rec["id"], rec["cluster"])
    return grouping.clusters(min_size)


def from_index(path: str, min_size: int = 1) -> Iterator[Cluster]:
    """The clusters of an index's live documents, in order of their first member."""
    with index_sources(path) as found:
        if found.remote:
            n = found.remote
            raise ConfigError(
                f"sealed segment{'s' * (len(n) > 1)} {', '.join(map(str, n))} "
                "of this index are served remotely and cannot be read here: export the "
                "clusters where the segments are local, or from the verdict files"
            )
        rows = [row for src in found.local for row in src.live_records()]
    rows.sort(key=lambda row: row[0])  # docnos are the index's, across segments
    grouping = _Grouping()
    for _, rec in rows:
        grouping.add(rec.doc_id, rec.cluster)
    return grouping.clusters(min_size)


__all__ = ["Cluster", "from_index", "from_verdicts"]
