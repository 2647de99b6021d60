"""The worker's ledger in the index: per consumer group and input topic, the offsets
whose documents the index has applied and whose verdicts Kafka has committed, and
the last batch's verdicts (and the other documents it touched) to publish again if
the batch is redelivered.  It is what makes the worker exactly-once across the two
transactions of a batch (one in LMDB, one in Kafka); it is written only inside the
batch's index transaction, so it moves with the documents it describes.
"""

from __future__ import annotations

import bisect
from typing import Any

import msgpack

from streamdedup.errors import StreamDedupError
from streamdedup.models import DistanceVerdict, Verdict
from streamdedup.store.keys import MetaKey
from streamdedup.store.tables import Tables


class Progress:
    """Where one consumer (a group on a topic) stands in the index, kept in `meta`:

    - `applied/NS`: per partition, the next offset whose document the index holds;
    - `published/NS`: per partition, the next offset whose verdict is committed out;
    - `verdicts/NS/P/LAST`: the verdicts of the last applied batch, to publish again
      if that batch is redelivered: one msgpack list of rows per partition and batch,
      keyed by its last offset (a put and a pack per batch rather than per document);
    - `touched/NS/P/LAST`, next to those verdicts when the batch changed documents
      other than its own (`Deduplicator.changed_others`: copies promoted to content owner,
      documents the time window forgot): their ids, whose present state a redelivery
      of the batch sends to the changelog again, with its own documents'.

    NS is "group/topic", so a replay and a live worker can share an index."""

    def __init__(self, group_id: str, topic: str) -> None:
        self.ns = f"{group_id}/{topic}"
        self.applied = MetaKey.APPLIED + self.ns
        self.published = MetaKey.PUBLISHED + self.ns
        self._verdicts = f"{MetaKey.VERDICTS}{self.ns}/".encode()
        self._touched = f"{MetaKey.TOUCHED}{self.ns}/".encode()

    def verdict_key(self, partition: int, offset: int) -> bytes:
        return self._verdicts + f"{partition}/".encode() + offset.to_bytes(8, "big")

    def touched_key(self, verdict_key: bytes) -> bytes:
        """Where the ids a stored batch touched beyond its own are kept."""
        return self._touched + verdict_key[len(self._verdicts) :]

    @staticmethod
    def read(t: Tables, name: str) -> dict[int, int]:
        return {int(k): int(v) for k, v in (t.meta(name) or {}).items()}

    @staticmethod
    def past(now: dict[int, int], last: dict[int, int]) -> dict[int, int]:
        """Per-partition next offsets `now`, moved past the last offsets `last` (never
        back)."""
        out = dict(now)
        for p, hi in last.items():
            out[p] = max(out.get(p, 0), hi + 1)
        return out

    @classmethod
    def advance(cls, t: Tables, name: str, last: dict[int, int]) -> None:
        """Move per-partition next offsets past `last`, read and written in the same
        write transaction: processes sharing the index update different partitions."""
        now = cls.past(cls.read(t, name), last)
        t.set_meta(name, {str(k): v for k, v in now.items()})

    def keep_verdicts(
        self,
        t: Tables,
        first: dict[int, int],
        verdicts: list[tuple[int, int, Verdict]],
        touched: list[bytes] | None = None,
    ) -> None:
        """Store this batch's verdicts (and the ids of other documents it changed,
        `touched`); drop those wholly below the batch, which went out in committed
        transactions.  A redelivered batch need not start where the stored one did, so
        a stored batch goes only once all of it is below."""
        for p, lo in first.items():
            for prefix in (self._verdicts, self._touched):
                start = prefix + f"{p}/".encode()
                t.delete_meta_range(start, start + lo.to_bytes(8, "big"))
        rows: dict[int, list[tuple[Any, ...]]] = {}
        for p, off, v in verdicts:
            row: tuple[Any, ...] = (
                off,
                v.id,
                v.verdict,
                v.duplicate_of,
                v.cluster,
                v.similarity,
                v.exact,
                v.reason,
            )
            if isinstance(v, DistanceVerdict):  # (a family with a distance: one field more)
                row += (v.distance,)
            rows.setdefault(p, []).append(row)
        # Under every partition's part of the batch: a redelivery of any part of it
        # (the broker may cut it otherwise, a rebalance may split it) re-sends them.
        ids = msgpack.packb(list(dict.fromkeys(touched))) if touched else None
        for p, batch in rows.items():
            t.put_meta_raw(self.verdict_key(p, batch[-1][0]), msgpack.packb(batch))
            if ids is not None:
                t.put_meta_raw(self.touched_key(self.verdict_key(p, batch[-1][0])), ids)

    def stored_verdicts(
        self, t: Tables, wanted: list[tuple[int, int]], touched: list[bytes] | None = None
    ) -> list[Verdict]:
        """The stored verdicts of (partition, offset) messages: each in the stored
        batch of its partition that ends first at or after it (batches never overlap).
        `touched`, if given, gets the ids the stored batches read changed beyond their
        own documents (see `keep_verdicts`)."""
        rows: list[Any]
        part, rows = -1, []  # the stored batch last read
        out: list[Verdict] = []
        for p, offset in wanted:
            if p != part or not rows or not rows[0][0] <= offset <= rows[-1][0]:
                key = self.verdict_key(p, offset)
                entry = t.next_meta_entry(key)
                if entry is not None and entry[0][:-8] != key[:-8]:
                    entry = None  # another partition's, or another consumer's
                part, rows = p, [] if entry is None else msgpack.unpackb(entry[1])
                if entry is not None and touched is not None:
                    ids = t.meta_raw(self.touched_key(entry[0]))
                    if ids is not None:
                        touched.extend(msgpack.unpackb(ids))
            at = bisect.bisect_left(rows, offset, key=lambda row: row[0])
            if at == len(rows) or rows[at][0] != offset:
                raise StreamDedupError(
                    f"no stored verdict for {self.ns} partition {p} offset {offset}, "
                    "which the index has already applied; were the consumer group's "
                    "offsets reset while the index was kept?"
                )
            fields = rows[at][1:]
            out.append(Verdict(*fields) if len(fields) < 8 else DistanceVerdict(*fields))
        return out
