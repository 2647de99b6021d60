"""Topics on the real broker, generated streams, and the file-mode verdicts a worker's
must equal: shared by the worker, replay, changelog and operations tests."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import orjson

from tests.support.docs import edited_stream
from tests.support.txnlog import Record, committed

FAST_GROUP = [
    "--consumer-option",
    "max_poll_interval_ms=3000",
    "--consumer-option",
    "session_timeout_ms=3000",
    "--consumer-option",
    "heartbeat_interval_ms=500",
]


def stream(n: int, seed: int) -> list[dict[str, Any]]:
    return edited_stream(n, seed)


class Topics:
    def __init__(self, bootstrap: str, partitions: int = 1, output_partitions: int = 1) -> None:
        from kafka.admin import KafkaAdminClient, NewTopic

        tag = uuid.uuid4().hex[:8]
        self.bootstrap = bootstrap
        self.input, self.output, self.dlq = f"in-{tag}", f"out-{tag}", f"dlq-{tag}"
        self.group = f"g-{tag}"
        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        admin.create_topics(
            [
                NewTopic(self.input, partitions, 1),
                NewTopic(self.output, output_partitions, 1),
                NewTopic(self.dlq, 1, 1),
            ]
        )
        admin.close()

    def produce(
        self, values: list[bytes], keys: list[bytes | None] | None = None, partitions: int = 1
    ) -> None:
        from kafka import KafkaProducer

        p = KafkaProducer(bootstrap_servers=self.bootstrap, linger_ms=5)
        for i, v in enumerate(values):
            p.send(
                self.input, value=v, key=None if keys is None else keys[i], partition=i % partitions
            )
        p.flush()
        p.close()

    def read(self, topic: str, expect: int | None = None, timeout: float = 30) -> list[Any]:
        from kafka import KafkaConsumer, TopicPartition

        c = KafkaConsumer(
            bootstrap_servers=self.bootstrap,
            isolation_level="read_committed",
            enable_auto_commit=False,
            consumer_timeout_ms=2000,
        )
        tps = [TopicPartition(topic, p) for p in sorted(c.partitions_for_topic(topic) or {0})]
        c.assign(tps)
        c.seek_to_beginning(*tps)
        out: list[Any] = []
        deadline = time.time() + timeout
        while time.time() < deadline:
            batch = list(c)
            out.extend(batch)
            if expect is None or len(out) >= expect:
                break
        c.close()
        return out

    def read_to_end(self, topic: str, timeout: float = 120) -> list[Record]:
        """The read_committed view of partition 0 up to its end now, from the log's
        transaction markers (tests/txnlog.py), so on every broker."""
        return committed(self.bootstrap, topic, timeout=timeout)

    def worker_args(self, index: Path, *extra: str) -> list[str]:
        return [
            sys.executable,
            "-m",
            "streamdedup.cli",
            "worker",
            "--bootstrap-servers",
            self.bootstrap,
            "--input-topic",
            self.input,
            "--output-topic",
            self.output,
            "--dead-letter-topic",
            self.dlq,
            "--group-id",
            self.group,
            "--index",
            str(index),
            *FAST_GROUP,
            *extra,
        ]

    def run_worker(
        self, index: Path, *extra: str, idle: float = 4.0
    ) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            self.worker_args(index, "--idle-exit", str(idle), *extra),
            capture_output=True,
            timeout=600,
        )


def file_mode(tmp: Path, docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    src = tmp / "file-in.jsonl"
    src.write_bytes(b"".join(orjson.dumps(d) + b"\n" for d in docs))
    out = tmp / "file-out.jsonl"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "streamdedup.cli",
            "dedup",
            str(src),
            "--index",
            str(tmp / "file-index"),
            "--output",
            str(out),
        ],
        capture_output=True,
    )
    assert r.returncode == 0, r.stderr
    return [orjson.loads(x) for x in out.read_bytes().splitlines()]


def verdicts_by_offset(messages: list[Any]) -> dict[tuple[int, int], dict[str, Any]]:
    out: dict[tuple[int, int], dict[str, Any]] = {}
    for m in messages:
        v = orjson.loads(m.value)
        src = v.pop("source")
        key = (src["partition"], src["offset"])
        assert key not in out, f"two verdicts for {key}"
        assert m.key == str(v["id"]).encode()
        out[key] = v
    return out
