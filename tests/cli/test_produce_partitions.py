"""`produce` creates a missing topic with --partitions (default 1, so the order of
processing is the order of the file) instead of letting the broker auto-create it
with its own default (4 on the embedded broker), and says what the topic has."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from streamdedup.kafka.settings import topic_partitions
from tests.support.cli import corpus, run

pytestmark = pytest.mark.integration


def test_produce_creates_one_partition_by_default_and_says_so(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    src = tmp_path / "in.jsonl"
    corpus(src, 3)
    topic = f"produced-{uuid.uuid4().hex[:8]}"
    common = ("produce", str(src), "--bootstrap-servers", kafka_bootstrap, "--topic", topic)
    r = run(*common)
    assert r.returncode == 0, r.stderr
    assert f"created topic {topic} with 1 partition\n".encode() in r.stderr
    assert b"sent 3 messages" in r.stderr
    assert topic_partitions(kafka_bootstrap, topic, {}) == 1
    r = run(*common, "--partitions", "3")  # exists: kept as it is, and said
    assert r.returncode == 0, r.stderr
    assert (
        f"topic {topic} exists with 1 partition (--partitions 3 applies to a new topic only)"
    ).encode() in r.stderr
    assert topic_partitions(kafka_bootstrap, topic, {}) == 1


def test_produce_partitions_for_a_new_topic(kafka_bootstrap: str, tmp_path: Path) -> None:
    src = tmp_path / "in.jsonl"
    corpus(src, 4)
    topic = f"produced-{uuid.uuid4().hex[:8]}"
    r = run(
        "produce",
        str(src),
        "--bootstrap-servers",
        kafka_bootstrap,
        "--topic",
        topic,
        "--partitions",
        "2",
    )
    assert r.returncode == 0, r.stderr
    assert f"created topic {topic} with 2 partitions".encode() in r.stderr
    assert topic_partitions(kafka_bootstrap, topic, {}) == 2
    r = run("produce", str(src), "--bootstrap-servers", kafka_bootstrap, "--partitions", "0")
    assert r.returncode == 2
    assert b"--partitions must be at least 1" in r.stderr


def test_produce_keys_by_host_and_names_what_it_leaves_out(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """`--message-key host` keys each line by its `url`'s host (id, uri: the others);
    a line over `--max-message-bytes` is named on stderr, not sent, and the exit
    status is 1; the rest go out in order."""
    import orjson
    from kafka import KafkaConsumer

    lines = [
        {"id": "a", "url": "https://one.example/x", "text": "first page"},
        {"id": "b", "url": "https://two.example/y?q=1", "text": "second page"},
        {"id": "c", "url": "https://one.example/z", "text": "w " * 3000},  # 6 KB
        {"id": "d", "text": "no url"},
    ]
    src = tmp_path / "in.jsonl"
    src.write_bytes(b"".join(orjson.dumps(d) + b"\n" for d in lines))
    topic = f"keyed-{uuid.uuid4().hex[:8]}"
    r = run(
        "produce", str(src), "--bootstrap-servers", kafka_bootstrap, "--topic", topic,
        "--message-key", "host", "--max-message-bytes", "4096",
    )  # fmt: skip
    assert r.returncode == 1, r.stderr
    err = r.stderr.decode()
    assert "not sent: line 3: " in err and "[too_large_to_send]" in err
    assert f"sent 3 messages to {topic}; 1 not sent (too_large_to_send 1)" in err
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=kafka_bootstrap,
        auto_offset_reset="earliest",
        consumer_timeout_ms=3000,
    )
    got = [(m.key, orjson.loads(m.value)["id"]) for m in consumer]
    consumer.close()
    assert got == [(b"one.example", "a"), (b"two.example", "b"), (None, "d")]
