"""The `meta` table: the index's named values (parameters, counters, offsets,
bindings), packed with msgpack, and raw entries under byte keys (the Kafka layer's
per-partition records)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import msgpack

from streamdedup.store.tables.base import TablesBase


class MetaPart(TablesBase):
    """The `meta` table."""

    def meta(self, name: str) -> Any:
        raw = self.txn.get(name.encode(), db=self.db["meta"])
        return None if raw is None else msgpack.unpackb(raw)

    def set_meta(self, name: str, value: Any) -> None:
        self.txn.put(name.encode(), msgpack.packb(value), db=self.db["meta"])

    def meta_raw(self, key: bytes) -> bytes | None:
        """A `meta` entry by its key as bytes, its value as stored (packed)."""
        raw = self.txn.get(key, db=self.db["meta"])
        return None if raw is None else bytes(raw)

    def put_meta_raw(self, key: bytes, value: bytes) -> None:
        """Store a `meta` entry by its key as bytes, its value already packed."""
        self.txn.put(key, value, db=self.db["meta"])

    def delete_meta(self, name: str | bytes) -> bool:
        """Remove a `meta` entry; False if there was none."""
        key = name.encode() if isinstance(name, str) else name
        return bool(self.txn.delete(key, db=self.db["meta"]))

    def meta_entries(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        """The `meta` entries whose keys start with `prefix`, in key order: whole keys
        and packed values."""
        cur = self.txn.cursor(db=self.db["meta"])
        found = cur.set_range(prefix)
        while found and bytes(cur.key()).startswith(prefix):
            yield bytes(cur.key()), bytes(cur.value())
            found = cur.next()

    def next_meta_entry(self, key: bytes) -> tuple[bytes, bytes] | None:
        """The first `meta` entry whose key is `key` or sorts after it (whole key,
        packed value), if any."""
        cur = self.txn.cursor(db=self.db["meta"])
        return (bytes(cur.key()), bytes(cur.value())) if cur.set_range(key) else None

    def delete_meta_range(self, start: bytes, stop: bytes) -> None:
        """Remove the `meta` entries with keys from `start` up to, not including, `stop`."""
        cur = self.txn.cursor(db=self.db["meta"])
        while cur.set_range(start) and bytes(cur.key()) < stop:
            cur.delete()
