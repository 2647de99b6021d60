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
