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

from tests.support import forkserver
from tests.support.docs import edited_stream
from tests.support.txnlog import Record, committed

# The embedded broker (Tansu 0.6) completes a group join about half a session timeout
# after the first JoinGroup (rounded up to its one-second tick): ~2 s with these.  Not
# shorter: with 2 s sessions (~1 s joins) a worker that joins a group after a refused
# member of another index never gets a partition and never idles out (2 runs of 2 in
# test_a_second_index_in_the_group_is_refused; 0 of 2 with 3 s sessions).
WORKER_TIMEOUT_S = 200  # inside pytest's 300 s, so a hang shows the worker's log
JOIN_NEVER_DONE = b"assigned this worker no partitions"  # JoinWatch's error

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
        """The topic's records from the beginning (read_committed): once `expect` have
        come (at once when None), up to the end offsets of that moment, so records
        published beyond `expect` are returned too; at most `timeout` seconds.  No
        quiet period is waited for: a caller that reads while a worker still runs
        gets what is there now and calls again."""
        from kafka import KafkaConsumer, TopicPartition

        c = KafkaConsumer(
            bootstrap_servers=self.bootstrap,
            isolation_level="read_committed",
            enable_auto_commit=False,
        )
        tps = [TopicPartition(topic, p) for p in sorted(c.partitions_for_topic(topic) or {0})]
        c.assign(tps)
        c.seek_to_beginning(*tps)
        out: list[Any] = []
        ends: dict[Any, int] | None = None
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                if ends is None and (expect is None or len(out) >= expect):
                    ends = c.end_offsets(tps)
                if ends is not None and all(c.position(tp) >= ends[tp] for tp in tps):
                    break
                for batch in c.poll(timeout_ms=200).values():
                    out.extend(batch)
        finally:
            c.close()
        return out

    def read_to_end(self, topic: str, timeout: float = 120) -> list[Record]:
        """The read_committed view of partition 0 up to its end now, from the log's
        transaction markers (tests/txnlog.py), so on every broker."""
        return committed(self.bootstrap, topic, timeout=timeout)

    def worker_args(self, index: Path, *extra: str, fast_group: bool = True) -> list[str]:
        """The worker on these topics; `fast_group=False` leaves out the tests' short
        group timeouts (for the tests of the worker's own defaults)."""
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
            *(FAST_GROUP if fast_group else ()),
            *extra,
        ]

    def replay_args(self, index: Path, *extra: str) -> list[str]:
        return [
            sys.executable,
            "-m",
            "streamdedup.cli",
            "replay",
            "--bootstrap-servers",
            self.bootstrap,
            "--input-topic",
            self.input,
            "--index",
            str(index),
            "--progress",
            "never",
            *extra,
        ]

    def run_worker(
        self, index: Path, *extra: str, idle: float = 2.0
    ) -> subprocess.CompletedProcess[bytes]:
        """The worker until it has had nothing to do for `idle` seconds (counted from
        its partition assignment, so the group join is not part of it): the tests
        produce before they run it, so the first fetches bring everything.

        A join the broker's group coordinator never completes (seen once with Tansu in
        CI, after a refused member and a stopped one had left the group) ends the run
        with the worker's own error, having processed nothing; it is run once more
        then.  A worker that hangs otherwise fails the test with its log."""
        args = self.worker_args(index, "--idle-exit", str(idle), *extra)
        for attempt in (1, 2):
            try:
                r = forkserver.run(forkserver.arguments(args), timeout=WORKER_TIMEOUT_S)
            except subprocess.TimeoutExpired as exc:
                log = (exc.stderr or b"").decode(errors="replace")
                raise AssertionError(f"the worker ran {WORKER_TIMEOUT_S} s: {log[-4000:]}") from exc
            if attempt == 1 and r.returncode == 3 and JOIN_NEVER_DONE in r.stderr:
                continue
            return r
        return r


def file_mode(tmp: Path, docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    src = tmp / "file-in.jsonl"
    src.write_bytes(b"".join(orjson.dumps(d) + b"\n" for d in docs))
    out = tmp / "file-out.jsonl"
    r = forkserver.run(
        ["dedup", str(src), "--index", str(tmp / "file-index"), "--output", str(out)]
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
