"""The committed view the exactly-once tests read (tests/support/txnlog.py), on the real broker."""

from __future__ import annotations

import uuid

import pytest

from tests.support.txnlog import committed

pytestmark = pytest.mark.integration


def test_committed_view_keeps_exactly_the_committed_records(
    kafka_bootstrap: str, hides_aborted_transactions: bool
) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import KafkaAdminClient, NewTopic

    topic = f"txnlog-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    admin.create_topics([NewTopic(topic, 1, 1)])
    admin.close()

    plain = KafkaProducer(bootstrap_servers=kafka_bootstrap)
    a = KafkaProducer(bootstrap_servers=kafka_bootstrap, transactional_id=f"{topic}-a")
    b = KafkaProducer(bootstrap_servers=kafka_bootstrap, transactional_id=f"{topic}-b")
    for p in (a, b):
        p.init_transactions()
    plain.send(topic, b"plain-1").get(timeout=30)
    a.begin_transaction()
    b.begin_transaction()
    a.send(topic, b"a-aborted-1").get(timeout=30)
    b.send(topic, b"b-committed-1").get(timeout=30)
    a.send(topic, b"a-aborted-2").get(timeout=30)
    plain.send(topic, b"plain-2").get(timeout=30)
    b.send(topic, b"b-committed-2").get(timeout=30)
    b.commit_transaction()
    a.abort_transaction()
    a.begin_transaction()
    a.send(topic, b"a-committed").get(timeout=30)
    a.commit_transaction()
    # a transaction left open by a process that dies is aborted by its successor
    a.begin_transaction()
    a.send(topic, b"a-fenced").get(timeout=30)
    successor = KafkaProducer(bootstrap_servers=kafka_bootstrap, transactional_id=f"{topic}-a")
    successor.init_transactions()
    successor.begin_transaction()
    successor.send(topic, b"successor").get(timeout=30)
    successor.commit_transaction()
    for p in (plain, b, successor):
        p.close()
    a.close(timeout=0)

    seen = [r.value for r in committed(kafka_bootstrap, topic)]
    assert seen == [
        b"plain-1",
        b"b-committed-1",
        b"plain-2",
        b"b-committed-2",
        b"a-committed",
        b"successor",
    ]
    if hides_aborted_transactions:  # the broker filters: it must agree with the markers
        consumer = KafkaConsumer(
            bootstrap_servers=kafka_bootstrap,
            isolation_level="read_committed",
            consumer_timeout_ms=3000,
        )
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        assert [m.value for m in consumer] == seen
        consumer.close()
