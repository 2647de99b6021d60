"""A topic partition's read_committed view, worked out from the log's transaction markers.

Apache Kafka answers a read_committed fetch with the list of aborted transactions in
the range, which the client uses to drop their records.  Tansu 0.6 (the embedded
broker) writes the same COMMIT and ABORT control markers into the log but returns no
such list, so kafka-python's read_committed consumer shows it the records of aborted
transactions as well.  `streamdedup verdicts` (and the exactly-once tests) need the
true committed view on every broker, so this module reads the raw record batches
(read_uncommitted, control batches included) and applies the rule the brokers'
aborted-transaction index encodes: a transactional batch is committed when the next
control marker of its producer is a COMMIT, aborted when it is an ABORT, and not yet
visible while no marker follows it.  Like a read_committed consumer, nothing at or
after the first offset of a still-open transaction (the last stable offset) is
shown until that transaction ends, so records come out in offset order.

`CommittedView` is that rule, fed batch by batch; `LogReader` fetches the raw
batches of one topic.  kafka-python has no public API for raw batches: the reader
uses its network client and protocol classes, pinned by the kafka-python range in
pyproject.toml (tests/kafka/test_txnlog.py checks it against a broker that filters
aborted transactions itself, where one is available).
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from streamdedup.errors import BrokerUnavailableError, MissingTopicError

__all__ = ["CommittedView", "LogReader", "Record", "committed_of"]

# Fetch errors after which the partition's leader is looked up again (it moved).
_LEADER_MOVED = {6, 74, 75}  # NOT_LEADER_OR_FOLLOWER, FENCED/UNKNOWN_LEADER_EPOCH
_OFFSET_OUT_OF_RANGE = 1


@dataclass(frozen=True, order=True)
class Record:
    """One data record of the committed view."""

    offset: int
    key: bytes | None = field(compare=False)
    value: bytes | None = field(compare=False)
    timestamp_ms: int | None = field(default=None, compare=False)


def _records(batch: Any) -> list[Record]:
    return [Record(r.offset, r.key, r.value, r.timestamp) for r in batch]


class CommittedView:
    """The committed records of one partition, fed its raw batches in log order.

    `feed` answers the records that became visible: committed (or never
    transactional) and below the first offset of every transaction still open.
    Records of aborted transactions are never answered."""

    def __init__(self) -> None:
        # producer id -> (first offset, records) of its open transaction
        self._open: dict[int, tuple[int, list[Record]]] = {}
        self._held: list[Record] = []  # decided, waiting for an older open transaction

    @property
    def stable_offset(self) -> int | None:
        """The first offset of the oldest open transaction (None: none is open)."""
        return min((first for first, _ in self._open.values()), default=None)

    @property
    def held_back(self) -> int:
        """Records already decided visible (committed, or never transactional) that
        an older transaction still open keeps back: a read_committed reader sees
        none of them until it ends."""
        return len(self._held)

    @property
    def open_transactions(self) -> int:
        return len(self._open)

    def feed(self, batch: Any) -> list[Record]:
        if batch.is_control_batch:
            (marker,) = list(batch)
            _, records = self._open.pop(batch.producer_id, (0, []))
            if not marker.abort:
                for r in records:
                    heapq.heappush(self._held, r)
        elif batch.is_transactional:
            first, records = self._open.get(batch.producer_id, (batch.base_offset, []))
            records.extend(_records(batch))
            self._open[batch.producer_id] = (first, records)
        else:
            for r in _records(batch):
                heapq.heappush(self._held, r)
        lso = self.stable_offset
        out: list[Record] = []
        while self._held and (lso is None or self._held[0].offset < lso):
            out.append(heapq.heappop(self._held))
        return out


def committed_of(batches: Iterable[Any]) -> list[Record]:
    """The records a read_committed consumer sees of these batches (one partition,
    log order), in offset order."""
    view = CommittedView()
    return [r for b in batches for r in view.feed(b)]


class LogReader:
    """Raw record batches of a topic's partitions, control batches and aborted
    transactions included, from each partition's first retained offset on.

    `settings` are kafka-python client settings (security); the topic's partitions
    and their leaders come from the admin API, the batches from fetch requests."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        partitions: Iterable[int] | None = None,
        settings: dict[str, Any] | None = None,
        timeout_s: float = 30.0,
    ) -> None:
        from kafka.net.compat import KafkaNetClient

        self.bootstrap, self.topic = bootstrap, topic
        self.settings = dict(settings or {})
        self.timeout_s = timeout_s
        leaders = self._leaders()
        wanted = sorted(leaders) if partitions is None else sorted(set(partitions))
        missing = [p for p in wanted if p not in leaders]
        if missing:
            raise MissingTopicError(
                f"topic {topic!r} has no partition {', '.join(map(str, missing))} "
                f"(it has {len(leaders)}: 0 to {len(leaders) - 1}); check --partition"
            )
        self.partitions = wanted
        self.leaders = leaders
        self.offsets = dict.fromkeys(wanted, 0)
        self.client = KafkaNetClient(
            bootstrap_servers=bootstrap, receive_message_max_bytes=64 << 20, **self.settings
        )
        try:
            self.client._manager.bootstrap(timeout_ms=int(timeout_s * 1000))
        except Exception as exc:
            self.client.close()
            raise BrokerUnavailableError(
                f"could not connect to the Kafka broker at {bootstrap}: {exc}; "
                "check --bootstrap-servers"
            ) from exc

    def _leaders(self) -> dict[int, int]:
        from kafka.admin import KafkaAdminClient
        from kafka.errors import KafkaError

        try:
            admin = KafkaAdminClient(
                bootstrap_servers=self.bootstrap,
                bootstrap_timeout_ms=int(self.timeout_s * 1000),
                **self.settings,
            )
        except KafkaError as exc:
            raise BrokerUnavailableError(
                f"could not connect to the Kafka broker at {self.bootstrap}: {exc}; "
                "check --bootstrap-servers"
            ) from exc
        try:
            (description,) = admin.describe_topics([self.topic])
            if description.get("error_code") or not description["partitions"]:
                known = sorted(t for t in admin.list_topics() if not t.startswith("__"))
                raise MissingTopicError(
                    f"topic {self.topic!r} does not exist on {self.bootstrap}; check the "
                    f"topic name (topics there: {', '.join(known) or 'none'})"
                )
            return {
                int(p["partition_index"]): int(p["leader_id"]) for p in description["partitions"]
            }
        finally:
            admin.close()

    def fetch(self, partition: int, max_wait_ms: int = 500) -> tuple[list[Any], int]:
        """The next batches of `partition` (possibly none) and its high watermark; the
        reader's position moves past them."""
        batches, high = self._fetch(partition, max_wait_ms, 4 << 20)
        if batches:
            last = batches[-1]
            self.offsets[partition] = last.base_offset + last.last_offset_delta + 1
        return batches, high

    def _fetch(self, partition: int, max_wait_ms: int, max_bytes: int) -> tuple[list[Any], int]:
        from kafka.errors import KafkaError
        from kafka.protocol.consumer import FetchRequest
        from kafka.record import MemoryRecords

        deadline = time.monotonic() + self.timeout_s
        while True:
            offset = self.offsets[partition]
            request = FetchRequest(
                max_wait_ms=max_wait_ms,
                min_bytes=1,
                max_bytes=max_bytes,
                isolation_level=0,  # read_uncommitted: the markers decide, see above
                session_id=0,
                session_epoch=-1,
                topics=[
                    FetchRequest.FetchTopic(
                        topic=self.topic,
                        partitions=[
                            FetchRequest.FetchTopic.FetchPartition(
                                partition=partition,
                                fetch_offset=offset,
                                partition_max_bytes=max_bytes,
                                current_leader_epoch=-1,
                                log_start_offset=-1,
                            )
                        ],
                    )
                ],
                forgotten_topics_data=[],
                rack_id="",
                max_version=11,
            )
            try:
                response = self.client.send_and_receive(
                    self.leaders[partition], request, timeout_ms=int(self.timeout_s * 1000)
                )
            except KafkaError as exc:
                if time.monotonic() > deadline:
                    raise BrokerUnavailableError(
                        f"reading {self.topic}[{partition}] from {self.bootstrap}: {exc}"
                    ) from exc
                time.sleep(0.5)
                continue
            found = [p for t in response.responses for p in t.partitions]
            if not found:  # Tansu answers a fetch with max_wait_ms=0 with no partitions
                if time.monotonic() > deadline:
                    raise BrokerUnavailableError(
                        f"reading {self.topic}[{partition}] from {self.bootstrap}: the "
                        "broker answers fetches with no data for the partition"
                    )
                max_wait_ms = max(max_wait_ms, 10)
                continue
            (data,) = found
            if data.error_code == _OFFSET_OUT_OF_RANGE and data.log_start_offset > offset:
                self.offsets[partition] = int(data.log_start_offset)  # retention removed it
                continue
            if data.error_code in _LEADER_MOVED and time.monotonic() < deadline:
                self.leaders = self._leaders()
                time.sleep(0.2)
                continue
            if data.error_code:
                raise BrokerUnavailableError(
                    f"reading {self.topic}[{partition}] at offset {offset} from "
                    f"{self.bootstrap}: Kafka error code {data.error_code}"
                )
            records = MemoryRecords(data.records)
            out = []
            while (batch := records.next_batch()) is not None:
                out.append(batch)
            return out, int(data.high_watermark)

    def close(self) -> None:
        self.client.close()
