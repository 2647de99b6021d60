"""Tombstones (`tombs`): documents of sealed segments the open index masks
(replaced or expired since the seal), with a count per segment."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from streamdedup.store.keys import (
    DOCNO_BYTES,
    SEGMENT_BYTES,
    tomb_key,
)
from streamdedup.store.tables.base import TablesBase


class Masks(TablesBase):
    """The `tombs` table."""

    def mask(self, number: int, docno: int) -> bool:
        """Mask `docno` in sealed segment `number` only; False if it was masked already.

        Each segment's count of tombstones sits under its bare number (a key shorter
        than its tombstones', so it sorts first among them), updated with them, so
        that `mask_count` is one read rather than a walk over them all."""
        db = self.db["tombs"]
        if not self.txn.put(tomb_key(number, docno), b"", db=db, overwrite=False):
            return False
        head = number.to_bytes(SEGMENT_BYTES, "big")
        self.txn.put(head, (self.mask_count(number) + 1).to_bytes(8, "big"), db=db)
        return True

    def mask_count(self, number: int) -> int:
        """How many documents of sealed segment `number` are masked."""
        db = self.db.get("tombs")
        raw = None if db is None else self.txn.get(number.to_bytes(SEGMENT_BYTES, "big"), db=db)
        return 0 if raw is None else int.from_bytes(bytes(raw), "big")

    def masked(self, number: int) -> npt.NDArray[np.uint64]:
        """The masked docnos of sealed segment `number`, ascending (the key order)."""
        db = self.db.get("tombs")
        if db is None:
            return np.empty(0, dtype=np.uint64)
        head = number.to_bytes(SEGMENT_BYTES, "big")
        cur = self.txn.cursor(db=db)
        keys: list[bytes] = []
        if cur.set_range(tomb_key(number, 0)):
            for key in cur.iternext(values=False):
                if bytes(key[:SEGMENT_BYTES]) != head:
                    break
                keys.append(bytes(key))
        # 7-byte keys: the 5 docno bytes, zero-padded to big-endian uint64s
        rows = np.frombuffer(b"".join(keys), dtype=np.uint8).reshape(
            -1, SEGMENT_BYTES + DOCNO_BYTES
        )
        padded = np.zeros((len(keys), 8), dtype=np.uint8)
        padded[:, 8 - DOCNO_BYTES :] = rows[:, SEGMENT_BYTES:]
        return padded.view(">u8").ravel().astype(np.uint64)

    def clear_masks(self, number: int) -> int:
        """Remove every tombstone of sealed segment `number` (and its count); returns
        how many there were."""
        db = self.db.get("tombs")
        if db is None:
            return 0
        head = number.to_bytes(SEGMENT_BYTES, "big")
        removed = self.mask_count(number)
        cur = self.txn.cursor(db=db)
        while cur.set_range(head) and bytes(cur.key()).startswith(head):
            cur.delete()
        return removed
