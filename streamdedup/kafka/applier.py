"""One poll batch's "apply and record" step: pick the messages of the poll still to
apply (`select`), decode them, and inside the batch's single LMDB write transaction
record what the index now holds (the ledger's applied and published offsets, the
batch's verdicts) and decide what goes out for every message (`Outgoing`: its
verdict, its stored verdict when the message is redelivered, a dead letter, or
nothing).  It is a class of its own because that step has a contract the rest of
the loop does not: LMDB may run it more than once (`Index.write` reruns a
transaction whose map filled up, after doubling it), so it must leave the same
result however many times it ran, and touch nothing outside the index transaction
but its own output.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from streamdedup.config import Fields
from streamdedup.inputs.decode import decode_message
from streamdedup.kafka.changelog import current_changes
from streamdedup.kafka.ledger import Progress
from streamdedup.kafka.messages import Outgoing
from streamdedup.kafka.publisher import BatchSink
from streamdedup.models import Change, Document, Rejected, Verdict
from streamdedup.store.keys import id_key
from streamdedup.store.tables import Tables


def select(
    records: dict[Any, list[Any]], published: dict[int, int], not_before_ms: dict[int, int]
) -> tuple[list[tuple[int, Any]], int]:
    """The messages of a poll to apply, as (partition, message) in partition order,
    and how many were skipped as published already.  `not_before_ms` (replay
    --from-timestamp): per partition, messages before it are dropped until the
    first one at or after it, which clears the partition's entry."""
    records = dict(records)
    for tp in list(records):
        since = not_before_ms.get(tp.partition)
        if since is not None:
            keep = [m for m in records[tp] if m.timestamp >= since]
            if keep:
                del not_before_ms[tp.partition]
                records[tp] = records[tp][records[tp].index(keep[0]) :]
            else:
                del records[tp]
    # Messages below `published` went out in a transaction Kafka acknowledged as
    # committed; a broker may still hand them out again (a committed-offset fetch
    # that is not yet stable), so they are skipped here rather than trusted to it.
    batch = [
        (tp.partition, m)
        for tp in sorted(records, key=lambda tp: tp.partition)
        for m in records[tp]
        if m.offset >= published.get(tp.partition, 0)
    ]
    return batch, sum(len(v) for v in records.values()) - len(batch)


class BatchApplier:
    """Applies one batch of (partition, message) pairs, in offset order per partition.

    Built before the index transaction: it decodes the messages (`decoded`), picks
    the documents the index has not applied yet (`to_decide`, to check and insert) and
    notes each partition's first and last offset.  Called as
    `applier(t, verdicts)` -- the `in_transaction` hook of `Deduplicator.apply` -- inside the
    write transaction, with the verdicts of those documents in their order.

    The re-run contract: `Index.write` may call it again in a new transaction (the
    map was full: doubled, then rerun from the start; the earlier transaction was
    aborted, so nothing it wrote stays).  Every call therefore starts from the same
    inputs -- all captured at construction, none updated by the call: the applied
    offsets read before the transaction, a copy of the published offsets not yet
    recorded (`unrecorded`), the replay/rewind limits (`silent_until`, read only) --
    and rebuilds its outputs from scratch: `out` is cleared, `republished` replaced.
    The sink's `in_index_transaction` runs in the same transaction, under the same
    contract (a file sink rewrites from the length the index recorded).  The caller
    reads `out` and `republished` only once the transaction committed."""

    def __init__(
        self,
        batch: list[tuple[int, Any]],
        *,
        progress: Progress,
        applied: dict[int, int],
        unrecorded: dict[int, int],
        silent_until: dict[int, int],
        sink: BatchSink,
        input_format: str,
        fields: Fields,
        changelog: bool,
        changed_others: Callable[[], list[bytes]],
    ) -> None:
        self.batch = batch
        self.progress = progress
        self.applied = applied
        self.unrecorded = unrecorded
        self.silent_until = silent_until
        self.sink = sink
        self.changelog = changelog
        self.changed_others = changed_others
        self.decoded: list[Document | Rejected] = []
        self.to_decide: list[tuple[int, int, Document]] = []
        for p, m in batch:
            # Kafka's "no timestamp" (-1, or 0 from some clients) is passed on as it is:
            # the engine treats every timestamp <= 0 as none (`Deduplicator._apply`)
            item = decode_message(
                m.value, m.key, input_format, fields, m.timestamp, getattr(m, "headers", None)
            )
            self.decoded.append(item)
            if isinstance(item, Document) and m.offset >= applied.get(p, 0):
                self.to_decide.append((p, m.offset, item))
        self.first: dict[int, int] = {}
        self.last: dict[int, int] = {}
        for p, m in batch:
            self.first.setdefault(p, m.offset)
            self.last[p] = m.offset
        # outputs, rebuilt by every call
        self.out: list[Outgoing] = []
        # present state of the documents the batch publishes again (current_changes)
        self.republished: list[Change] = []

    def documents(self) -> list[Document]:
        """The documents to check and insert, for the engine's preparer."""
        return [d for _, _, d in self.to_decide]

    def __call__(self, t: Tables, verdicts: list[Verdict]) -> None:
        prog, applied = self.progress, self.applied
        kept = [(p, off, v) for (p, off, _), v in zip(self.to_decide, verdicts, strict=True)]
        prog.keep_verdicts(t, self.first, kept, self.changed_others())
        Progress.advance(t, prog.applied, self.last)
        if self.unrecorded:
            Progress.advance(t, prog.published, self.unrecorded)
        new = iter(verdicts)
        redelivered = [
            (p, m.offset)
            for (p, m), item in zip(self.batch, self.decoded, strict=True)
            if isinstance(item, Document) and m.offset < applied.get(p, 0)
        ]
        again: list[bytes] = []
        stored = iter(prog.stored_verdicts(t, redelivered, again))
        out = self.out
        out.clear()
        for (p, m), item in zip(self.batch, self.decoded, strict=True):
            result: Verdict | Rejected | None = item if isinstance(item, Rejected) else None
            if isinstance(item, Document):
                if m.offset < applied.get(p, 0):
                    result = next(stored)
                    again.append(id_key(item.id))
                else:
                    result = next(new)
                if m.offset < self.silent_until.get(p, -1):
                    result = None
            out.append(Outgoing(p, m.offset, m.key, m.value, result, tuple(m.headers or ())))
        if self.changelog:
            self.republished = current_changes(t, again)
        self.sink.in_index_transaction(t, out)
