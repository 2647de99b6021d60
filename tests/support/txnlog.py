"""The tests' view of a topic partition's log, read with the product's reader
(`streamdedup.kafka.txnlog`: how the committed view is worked out from the control
markers, and why): `committed` is what a read_committed consumer should see on every
broker, `everything` also shows the records of aborted transactions."""

from __future__ import annotations

from typing import Any

from streamdedup.kafka.txnlog import LogReader, Record, committed_of

__all__ = ["Record", "committed", "committed_of", "everything", "raw_batches"]


def raw_batches(bootstrap: str, topic: str, partition: int = 0, timeout: float = 120) -> list[Any]:
    """Every record batch of the partition up to its high watermark now, control batches
    and those of aborted transactions included."""
    reader = LogReader(bootstrap, topic, [partition], timeout_s=timeout)
    batches: list[Any] = []
    try:
        end: int | None = None
        while end is None or reader.offsets[partition] < end:
            got, high = reader.fetch(partition, max_wait_ms=100)
            end = high if end is None else end
            if not got and reader.offsets[partition] < end:
                raise TimeoutError(f"{topic}[{partition}]: read to {reader.offsets[partition]}")
            batches.extend(got)
    finally:
        reader.close()
    return batches


def committed(bootstrap: str, topic: str, partition: int = 0, timeout: float = 120) -> list[Record]:
    """The records a read_committed consumer should see, in offset order."""
    return committed_of(raw_batches(bootstrap, topic, partition, timeout))


def everything(
    bootstrap: str, topic: str, partition: int = 0, timeout: float = 120
) -> list[Record]:
    """Every data record, those of aborted transactions included."""
    batches = raw_batches(bootstrap, topic, partition, timeout)
    return [
        Record(r.offset, r.key, r.value, r.timestamp)
        for b in batches
        if not b.is_control_batch
        for r in b
    ]
