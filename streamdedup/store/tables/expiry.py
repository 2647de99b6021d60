"""The expiry order: documents by timestamp, oldest first (`expiry`), for the time
window (`--ttl`) and the stream clock's repair."""

from __future__ import annotations

from streamdedup.store.keys import (
    docno_of,
    expiry_key,
)
from streamdedup.store.tables.base import TablesBase


class ExpiryOrder(TablesBase):
    """The `expiry` table."""

    def expiry_entries(self, after: bytes | None, limit: int) -> tuple[list[tuple[int, int]], bool]:
        """Up to `limit` entries of the expiry order after key `after` (from the
        start if None): (timestamp, docno); and whether more follow."""
        out: list[tuple[int, int]] = []
        for key, _ in self.items("expiry", after or b""):
            if len(out) == limit:
                return out, True
            out.append((int.from_bytes(key[:8], "big"), docno_of(key[8:])))
        return out, False

    def delete_expiry(self, timestamp_ms: int, docno: int) -> None:
        """Drop one entry of the expiry order (an orphan: its document is gone)."""
        self._flush()
        self.txn.delete(expiry_key(timestamp_ms, docno), db=self.db["expiry"])

    def newest_timestamp(self, at_most: int) -> int:
        """The newest stored timestamp at most `at_most` (0: none)."""
        self._flush()
        cur = self.txn.cursor(db=self.db["expiry"])
        found = cur.prev() if cur.set_range((at_most + 1).to_bytes(8, "big")) else cur.last()
        return int.from_bytes(bytes(cur.key())[:8], "big") if found else 0

    def oldest(self) -> tuple[int, int] | None:
        """(timestamp, docno) of the oldest timestamped document, if any."""
        self._flush()
        cur = self.txn.cursor(db=self.db["expiry"])
        if not cur.first():
            return None
        key = bytes(cur.key())
        return int.from_bytes(key[:8], "big"), docno_of(key[8:])
