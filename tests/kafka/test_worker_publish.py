"""How the worker hands a batch to Kafka (`Sink.publish`), against a stand-in
producer: what no broker can be made to do on demand.  Everything else about the
worker runs against a real broker in test_worker.py."""

from __future__ import annotations

from typing import Any

import pytest
from kafka.errors import KafkaTimeoutError
from kafka.future import Future
from kafka.partitioner.default import murmur2

from streamdedup import kernels
from streamdedup.errors import UndeliveredError
from streamdedup.kafka.messages import Outgoing
from streamdedup.kafka.publisher import Sink
from streamdedup.models import Rejected, Verdict
from streamdedup.worker_config import WorkerConfig


class Producer:
    """Records what is sent; the records numbered in `fail` come back failed, as
    kafka-python reports a produce batch that ran out of retries or delivery time."""

    def __init__(self, fail: frozenset[int] = frozenset(), partitions: int = 3) -> None:
        self.fail, self.partitions = fail, partitions
        self.records: list[tuple[str, dict[str, Any]]] = []
        self.offsets: Any = None
        self.committed = False

    def begin_transaction(self) -> None:
        pass

    def partitions_for(self, topic: str) -> set[int]:
        return set(range(self.partitions))

    def send(self, topic: str, **record: Any) -> Future:
        future = Future()
        if len(self.records) in self.fail:
            future.failure(KafkaTimeoutError("Expiring 1 record(s): 120000 ms has passed"))
        else:
            future.success(None)
        self.records.append((topic, record))
        return future

    def flush(self) -> None:
        pass

    def send_offsets_to_transaction(self, offsets: Any, group: Any) -> None:
        self.offsets = offsets

    def commit_transaction(self) -> None:
        self.committed = True


def sink_with(producer: Producer, changes: list[tuple[bytes, bytes | None]]) -> Sink:
    cfg = WorkerConfig("localhost:9092", "docs", "verdicts", "dlq", "g", changelog_topic="log")
    sink = Sink(
        cfg,
        transactional_id=lambda: "streamdedup-test",
        group_metadata=lambda: None,
        changelog=lambda: changes,
    )
    sink.producer = producer
    return sink


def batch() -> list[Outgoing]:
    out = [
        Outgoing(0, i, None, b"{}", Verdict(f"doc-{i}", "unique", None, f"doc-{i}", None, False))
        for i in range(40)
    ]
    out.append(Outgoing(0, 40, b"k", b"not json", Rejected("malformed_json", "bad")))
    return out


def test_a_batch_goes_out_whole_and_commits() -> None:
    producer = Producer()
    changes = [(f"doc-{i}".encode(), b"record") for i in range(40)]
    sink_with(producer, changes).publish(batch(), {0: 41})
    topics = [topic for topic, _ in producer.records]
    assert topics.count("verdicts") == 40 and topics.count("dlq") == 1
    assert topics.count("log") == 40
    assert producer.committed
    assert [(tp.partition, o.offset) for tp, o in producer.offsets.items()] == [(0, 41)]
    if kernels.native is not None:  # partitions chosen here, as the default partitioner would
        for topic, record in producer.records:
            if topic != "dlq":
                assert record["partition"] == (murmur2(record["key"]) & 0x7FFFFFFF) % 3


@pytest.mark.parametrize("failed", [0, 17, 40, 41, 80])  # verdicts, dead letter, changelog
def test_an_undelivered_record_stops_the_commit(failed: int) -> None:
    """kafka-python fails such a batch without failing the transaction: committing
    would lose those records and commit the offsets past them."""
    producer = Producer(fail=frozenset({failed}))
    changes = [(f"doc-{i}".encode(), b"record") for i in range(40)]
    with pytest.raises(UndeliveredError, match="not delivered"):
        sink_with(producer, changes).publish(batch(), {0: 41})
    assert producer.offsets is None and not producer.committed


def test_a_dead_letter_is_cut_to_fit_the_producer_limit() -> None:
    """Key and value beyond what one produce request may carry are cut, with headers
    saying so; a dead letter that fits goes out as it came."""
    from kafka.record.default_records import DefaultRecordBatchBuilder

    from streamdedup.kafka.messages import fit_dead_letter

    headers = [("streamdedup.reason", b"malformed_json")]
    key, value = b"k" * 5000, b"v" * 100_000
    k, v, h = fit_dead_letter(key, value, headers, 20_000)
    assert DefaultRecordBatchBuilder.estimate_size_in_bytes(k, v, h) <= 20_000
    assert key.startswith(k) and len(k) == 1024 and value.startswith(v) and len(v) > 15_000
    assert dict(h) == {
        "streamdedup.reason": b"malformed_json",
        "streamdedup.truncated": b"true",
        "streamdedup.original_size": b"100000",
        "streamdedup.original_key_size": b"5000",
    }
    assert fit_dead_letter(b"k", b"small", headers, 20_000) == (b"k", b"small", headers)


def test_a_unique_message_too_large_to_keep_is_a_dead_letter() -> None:
    """`--keep-topic`: a unique document's message goes out as it came (headers too);
    one over the producer's limit, which would fail the transaction on every retry,
    goes to the dead letters instead, cut to fit, with reason `too_large_to_keep`."""
    from dataclasses import replace

    producer = Producer()
    sink = sink_with(producer, [])
    sink.cfg = replace(sink.cfg, keep_topic="kept", producer_options={"max_request_size": 20_000})
    producer.config = {"max_request_size": 20_000}  # type: ignore[attr-defined]
    big = Outgoing(0, 1, b"big", b"x" * 50_000, Verdict("big", "unique", None, "big", None, False))
    dup = Verdict("d", "duplicate", "small", "small", 0.9, False)
    out = [
        Outgoing(
            0,
            0,
            b"small",
            b"{}",
            Verdict("small", "unique", None, "small", None, False),
            (("h", b"1"),),
        ),
        big,
        Outgoing(0, 2, b"d", b"{}", dup),
    ]
    sink.publish(out, {0: 3})
    kept = [r for topic, r in producer.records if topic == "kept"]
    assert kept == [{"key": b"small", "value": b"{}", "headers": [("h", b"1")]}]
    (letter,) = [r for topic, r in producer.records if topic == "dlq"]
    headers = dict(letter["headers"])
    assert headers["streamdedup.reason"] == b"too_large_to_keep" and letter["key"] == b"big"
    assert headers["streamdedup.truncated"] == b"true" and len(letter["value"]) < 20_000
