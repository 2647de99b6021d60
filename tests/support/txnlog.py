"""A topic partition's read_committed view, worked out from the log's transaction markers.

Apache Kafka answers a read_committed fetch with the list of aborted transactions in
the range, which the client uses to drop their records.  Tansu 0.6.0 writes the same
COMMIT and ABORT control markers into the log but returns no such list, so kafka-python's
read_committed consumer shows it the records of aborted transactions as well.  The
exactly-once tests need the true committed view on every broker, so they read the raw
record batches (read_uncommitted, control batches included) and apply the rule the
brokers' aborted-transaction index encodes: a transactional batch is committed when
the next control marker of its producer is a COMMIT, aborted when it is an ABORT, and
not yet visible (beyond the last stable offset) while no marker follows it.  A test
(`test_txnlog.py`) checks this view against what kafka-python's read_committed consumer
sees on a broker that filters aborted transactions itself, and against known
transactions on every broker.

kafka-python's network client and protocol classes are internal API; this module is
test code, pinned to the kafka-python the project installs.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Record:
    offset: int
    key: bytes | None
    value: bytes | None


def _leader(bootstrap: str, topic: str, partition: int) -> int:
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        (description,) = admin.describe_topics([topic])
        for p in description["partitions"]:
            if p["partition_index"] == partition:
                return int(p["leader_id"])
    finally:
        admin.close()
    raise LookupError(f"{topic}[{partition}] has no leader")


def raw_batches(bootstrap: str, topic: str, partition: int = 0, timeout: float = 120) -> list[Any]:
    """Every record batch of the partition up to its high watermark now, control batches
    and those of aborted transactions included."""
    from kafka.net.compat import KafkaNetClient
    from kafka.protocol.consumer import FetchRequest
    from kafka.record import MemoryRecords

    leader = _leader(bootstrap, topic, partition)
    client = KafkaNetClient(bootstrap_servers=bootstrap, receive_message_max_bytes=64 << 20)
    batches: list[Any] = []
    try:
        client._manager.bootstrap(timeout_ms=int(timeout * 1000))
        offset, end, deadline = 0, None, time.time() + timeout
        while end is None or offset < end:
            if time.time() > deadline:
                raise TimeoutError(f"{topic}[{partition}]: read to {offset} of {end}")
            fetch_partition = FetchRequest.FetchTopic.FetchPartition(
                partition=partition,
                fetch_offset=offset,
                partition_max_bytes=4 << 20,
                current_leader_epoch=-1,
                log_start_offset=-1,
            )
            request = FetchRequest(
                max_wait_ms=100,
                min_bytes=1,
                max_bytes=4 << 20,
                isolation_level=0,
                session_id=0,
                session_epoch=-1,
                topics=[FetchRequest.FetchTopic(topic=topic, partitions=[fetch_partition])],
                forgotten_topics_data=[],
                rack_id="",
                max_version=11,
            )
            response = client.send_and_receive(leader, request, timeout_ms=30_000)
            (data,) = [p for t in response.responses for p in t.partitions]
            if data.error_code:
                raise RuntimeError(f"fetch {topic}[{partition}]@{offset}: error {data.error_code}")
            if end is None:
                end = int(data.high_watermark)
            records = MemoryRecords(data.records)
            while (batch := records.next_batch()) is not None:
                batches.append(batch)
                offset = batch.base_offset + batch.last_offset_delta + 1
    finally:
        client.close()
    return batches


def committed(bootstrap: str, topic: str, partition: int = 0, timeout: float = 120) -> list[Record]:
    """The records a read_committed consumer should see, in offset order."""
    return committed_of(raw_batches(bootstrap, topic, partition, timeout))


def everything(
    bootstrap: str, topic: str, partition: int = 0, timeout: float = 120
) -> list[Record]:
    """Every data record, those of aborted transactions included."""
    batches = raw_batches(bootstrap, topic, partition, timeout)
    return [Record(r.offset, r.key, r.value) for b in batches if not b.is_control_batch for r in b]


def committed_of(batches: list[Any]) -> list[Record]:
    pending: dict[int, list[Record]] = {}  # producer id -> records of its open transaction
    out: list[Record] = []
    for batch in batches:
        if batch.is_control_batch:
            (marker,) = list(batch)
            records = pending.pop(batch.producer_id, [])
            if not marker.abort:
                out.extend(records)
        elif batch.is_transactional:
            pending.setdefault(batch.producer_id, []).extend(
                Record(r.offset, r.key, r.value) for r in batch
            )
        else:
            out.extend(Record(r.offset, r.key, r.value) for r in batch)
    return sorted(out, key=lambda r: r.offset)
