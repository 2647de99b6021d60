"""The worker facing hostile input and faults, against a real broker: messages too
large to dead-letter as they are, transactions that keep failing, a recreated input
topic, rewound group offsets, and a second index in the same consumer group."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

from streamdedup.kafka.broker import free_port
from tests.support.kafka import FAST_GROUP, Topics, file_mode, stream, verdicts_by_offset
from tests.support.metrics import scrape

pytestmark = pytest.mark.integration


def test_an_oversized_dead_letter_is_truncated_and_the_rest_goes_through(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """A 2 MiB non-JSON message is over the producer's max_request_size (1 MiB): sent
    as it is, it failed every transaction of its batch, for good.  It goes to the
    dead-letter topic cut short, with headers saying so; every good message gets its
    verdict."""
    from kafka import KafkaProducer

    docs = stream(60, seed=41)
    huge = b"<html>" + b"x" * (2 << 20)
    t = Topics(kafka_bootstrap)
    p = KafkaProducer(bootstrap_servers=kafka_bootstrap, max_request_size=8 << 20, linger_ms=5)
    values = [orjson.dumps(d) for d in docs[:30]] + [huge] + [orjson.dumps(d) for d in docs[30:]]
    for v in values:
        p.send(t.input, value=v, key=b"hostile" if v is huge else None)
    p.flush()
    p.close()
    r = t.run_worker(tmp_path / "idx", "--max-poll-records", "1000")
    assert r.returncode == 0, r.stderr.decode()[-3000:]
    got = verdicts_by_offset(t.read(t.output, expect=len(docs)))
    expected = file_mode(tmp_path, docs)
    offsets = [i for i in range(len(values)) if i != 30]
    assert sorted(got) == [(0, i) for i in offsets]
    assert [got[(0, i)] for i in offsets] == expected
    dead = t.read(t.dlq, expect=1)
    assert len(dead) == 1
    headers = dict(dead[0].headers)
    assert headers["streamdedup.reason"] == b"malformed_json"
    assert headers["streamdedup.truncated"] == b"true"
    assert headers["streamdedup.original_size"] == str(len(huge)).encode()
    assert headers["streamdedup.source.offset"] == b"30"
    assert dead[0].key == b"hostile"
    assert 0 < len(dead[0].value) < 1 << 20 and huge.startswith(dead[0].value)


def long_id_docs(n: int) -> list[bytes]:
    """Documents whose verdicts are over a 600-byte max_request_size."""
    return [orjson.dumps({"id": f"{i}-" + "i" * 700, "text": f"text {i} here"}) for i in range(n)]


def test_transactions_that_keep_failing_make_health_fail(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """Every transaction fails (the producer refuses each verdict as too large): the
    loop turns, but nothing commits; /healthz must say so, with the reason."""
    t = Topics(kafka_bootstrap)
    t.produce(long_id_docs(5))
    port = free_port()
    proc = subprocess.Popen(
        t.worker_args(
            tmp_path / "idx",
            "--metrics-port",
            str(port),
            "--producer-option",
            "max_request_size=600",
        ),
        stderr=subprocess.PIPE,
    )
    try:
        health = (0, "")
        deadline = time.time() + 60
        while time.time() < deadline:
            time.sleep(0.5)
            try:
                health = scrape(port, "/healthz")
            except OSError:
                continue
            if health[0] == 503:
                break
        assert health[0] == 503, health
        assert "Kafka transactions in a row failed" in health[1], health
        assert "MessageSizeTooLarge" in health[1], health
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert b"reporting unhealthy on /healthz" in err, err.decode()[-3000:]
    assert t.read(t.output, timeout=3) == []


def test_transactions_that_keep_failing_stop_the_worker(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """After `stop_after_failures` failed transactions in a row the worker stops with
    UnsafeToContinueError (exit 7) instead of turning for good; nothing was committed,
    so the group's offsets still point at the batch."""
    from kafka import KafkaConsumer, TopicPartition

    from streamdedup.engine.deduplicator import Deduplicator
    from streamdedup.errors import UnsafeToContinueError
    from streamdedup.kafka.worker import Worker
    from streamdedup.worker_config import WorkerConfig, parse_pairs

    t = Topics(kafka_bootstrap)
    t.produce(long_id_docs(5))
    cfg = WorkerConfig(
        t.bootstrap,
        t.input,
        t.output,
        t.dlq,
        t.group,
        consumer_options=parse_pairs(FAST_GROUP[1::2], "--consumer-option"),
        producer_options={"max_request_size": 600},
        unhealthy_after_failures=2,
        stop_after_failures=4,
        idle_exit_s=60,
    )
    started = time.time()
    with (
        Deduplicator(tmp_path / "idx") as dd,
        pytest.raises(UnsafeToContinueError, match="4 Kafka transactions in a row failed"),
    ):
        Worker(cfg, dd).run()
    assert time.time() - started < 50
    c = KafkaConsumer(bootstrap_servers=t.bootstrap, group_id=t.group, enable_auto_commit=False)
    assert c.committed(TopicPartition(t.input, 0)) is None
    c.close()


def recreate(t: Topics) -> None:
    """Delete the input topic and create it again, empty."""
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=t.bootstrap)
    admin.delete_topics([t.input])
    deadline = time.time() + 30
    while t.input in admin.list_topics() and time.time() < deadline:
        time.sleep(0.2)
    admin.create_topics([NewTopic(t.input, 1, 1)])
    admin.close()


@pytest.mark.parametrize("again", [40, 150])
def test_a_recreated_input_topic_is_refused(
    kafka_bootstrap: str, tmp_path: Path, again: int
) -> None:
    """The input topic is deleted and recreated, with more messages than the index
    processed (only the topic id tells) or fewer (the partition ends below the index's
    offsets; the topic id the index kept is removed, as on a broker without ids, to
    check that sign alone): the worker refuses (exit 7) rather than skip the new
    messages as processed, and says what to do."""
    docs = stream(100 + again, seed=42)
    t = Topics(kafka_bootstrap)
    t.produce([orjson.dumps(d) for d in docs[:100]])
    index = tmp_path / "idx"
    assert t.run_worker(index).returncode == 0
    assert len(t.read(t.output, expect=100)) == 100
    recreate(t)
    t.produce([orjson.dumps(d) for d in docs[100:]])
    if again < 100:
        from streamdedup.engine.deduplicator import Deduplicator

        with Deduplicator(index) as dd:
            key = f"topic-id/{t.group}/{t.input}".encode()
            dd.index.write(lambda tx: tx.delete_meta(key))
    r = t.run_worker(index)
    err = r.stderr.decode()
    assert r.returncode == 7, err[-3000:]
    sign = "now ends at offsets {0: 40}" if again < 100 else "its topic id was"
    assert sign in err and "deleted and recreated" in err, err[-3000:]
    assert "Nothing was processed" in err, err[-3000:]
    assert "new, empty --index" in err and "replay --mode reverdict" in err, err[-3000:]
    assert len(t.read(t.output, timeout=3)) == 100, "no verdict was published"


def test_rewound_group_offsets_are_reported(kafka_bootstrap: str, tmp_path: Path) -> None:
    """The group's committed offsets are rewound below what the index published: the
    worker skips those messages (their verdicts went out before) and says so loudly,
    with how to get their verdicts again; later messages are processed as usual."""
    from kafka import KafkaConsumer, TopicPartition
    from kafka.structs import OffsetAndMetadata

    docs = stream(110, seed=43)
    t = Topics(kafka_bootstrap)
    t.produce([orjson.dumps(d) for d in docs[:100]])
    index = tmp_path / "idx"
    assert t.run_worker(index).returncode == 0
    tp = TopicPartition(t.input, 0)
    c = KafkaConsumer(bootstrap_servers=t.bootstrap, group_id=t.group, enable_auto_commit=False)
    c.assign([tp])
    c.commit({tp: OffsetAndMetadata(20, "", -1)})
    assert c.committed(tp) == 20
    c.close()
    t.produce([orjson.dumps(d) for d in docs[100:]])
    r = t.run_worker(index)
    err = r.stderr.decode()
    assert r.returncode == 0, err[-3000:]
    assert "the group's offsets were rewound" in err, err[-3000:]
    assert "Messages 20 to 99 are SKIPPED" in err, err[-3000:]
    assert "--from-offsets 0:20" in err, err[-3000:]
    got = verdicts_by_offset(t.read(t.output, expect=110))
    assert sorted(got) == [(0, i) for i in range(110)]
    assert [got[(0, i)] for i in range(110)] == file_mode(tmp_path, docs)


def test_a_second_index_in_the_group_is_refused(kafka_bootstrap: str, tmp_path: Path) -> None:
    """A worker on another index joins a group whose worker runs: it is refused at
    join time (exit 7, before processing anything) and the first keeps every
    partition, so duplicates across partitions are still found.  Started later, alone
    in the group, it is refused by the committed offsets' metadata."""
    from kafka import KafkaProducer

    t = Topics(kafka_bootstrap, partitions=2)
    first_log = tmp_path / "first.log"
    with open(first_log, "wb") as handle:
        first = subprocess.Popen(
            t.worker_args(tmp_path / "idx"), stdout=subprocess.DEVNULL, stderr=handle
        )
        try:
            deadline = time.time() + 60
            while b"partitions assigned: " + t.input.encode() not in first_log.read_bytes():
                assert time.time() < deadline and first.poll() is None, first_log.read_text()
                time.sleep(0.3)
            second = t.run_worker(tmp_path / "other-idx", idle=20)
            err = second.stderr.decode()
            assert second.returncode == 7, err[-3000:]
            assert "is served by index" in err and "another one" in err, err[-3000:]
            assert "--group-id" in err and "Nothing was processed" in err, err[-3000:]
            docs = stream(200, seed=44)
            originals = [d for d in docs if "edited" not in d["text"]][:50]
            t.produce([orjson.dumps(d) for d in originals], partitions=2)
            p = KafkaProducer(bootstrap_servers=kafka_bootstrap)
            for i, d in enumerate(originals):  # each copy on the other partition
                copy = {"id": f"copy-{d['id']}", "text": d["text"]}
                p.send(t.input, value=orjson.dumps(copy), partition=(i + 1) % 2)
            p.flush()
            p.close()
            verdicts = [orjson.loads(m.value) for m in t.read(t.output, expect=100, timeout=90)]
        finally:
            first.send_signal(signal.SIGTERM)
            assert first.wait(timeout=30) == 0, first_log.read_text()[-3000:]
    by_id = {v["id"]: v for v in verdicts}
    assert len(verdicts) == len(by_id) == 100
    for d in originals:  # whichever partition went first, the other is its duplicate
        pair = (by_id[d["id"]], by_id[f"copy-{d['id']}"])
        assert sorted(v["verdict"] for v in pair) == ["duplicate", "unique"], pair
    # Alone in the group, in a group whose offsets the first worker committed.  Not that
    # group itself: Tansu 0.6 leaves a group whose members have just left stuck, never
    # completing a join (CI: both attempts of 36 s, after a 3 s pause, in one run of
    # six).  A group no member has joined, holding the same commits, is what the worker
    # reads at join; a restarted pod on a real broker finds the old group like that.
    t.group = with_the_commits_of(t, t.group, partitions=2)
    alone = t.run_worker(tmp_path / "third-idx")
    err = alone.stderr.decode()
    if keeps_offsets_metadata(t):
        assert alone.returncode == 7, err[-3000:]
        assert "committed by a worker on another index" in err, err[-3000:]
    else:  # Tansu 0.6 drops it: only the warning is left
        assert alone.returncode == 0, err[-3000:]
        assert "has never processed partitions [0, 1]" in err, err[-3000:]
    assert len(t.read(t.output, timeout=3)) == 100


def test_a_restored_or_copied_index_is_refused_beside_the_original(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """`backup` + `restore` of a running worker's index, and the backup itself used as
    an index: a worker on either joins the group beside the original's and is refused
    at join time (exit 7, nothing processed).  The restored copy has an id of its own;
    the backup keeps the original's id, but lives in another place.  On d62e5e5 both
    shared the original's id and were given half the partitions, silently.  The
    original keeps every partition: duplicates across partitions are still found."""
    from kafka import KafkaProducer

    t = Topics(kafka_bootstrap, partitions=2)
    first_log = tmp_path / "first.log"
    idx, backup, restored = tmp_path / "idx", tmp_path / "backup", tmp_path / "restored"
    cli = [sys.executable, "-m", "streamdedup.cli"]
    with open(first_log, "wb") as handle:
        first = subprocess.Popen(t.worker_args(idx), stdout=subprocess.DEVNULL, stderr=handle)
        try:
            deadline = time.time() + 60
            while b"partitions assigned: " + t.input.encode() not in first_log.read_bytes():
                assert time.time() < deadline and first.poll() is None, first_log.read_text()
                time.sleep(0.3)
            for args in (
                ["backup", "--index", str(idx), str(backup)],
                ["restore", str(backup), "--index", str(restored)],
            ):
                r = subprocess.run([*cli, *args], capture_output=True, timeout=60)
                assert r.returncode == 0, r.stderr.decode()
            for copy, says in ((restored, "another one"), (backup, "a copy of it")):
                second = t.run_worker(copy, idle=20)
                err = second.stderr.decode()
                assert second.returncode == 7, err[-3000:]
                assert "is served by index" in err and says in err, err[-3000:]
                assert "Nothing was processed" in err, err[-3000:]
            originals = [d for d in stream(80, seed=46) if "edited" not in d["text"]][:20]
            p = KafkaProducer(bootstrap_servers=kafka_bootstrap)
            for i, d in enumerate(originals):  # each copy on the other partition
                copy_doc = {"id": f"copy-{d['id']}", "text": d["text"]}
                p.send(t.input, value=orjson.dumps(d), partition=i % 2)
                p.send(t.input, value=orjson.dumps(copy_doc), partition=(i + 1) % 2)
            p.flush()
            p.close()
            verdicts = [orjson.loads(m.value) for m in t.read(t.output, expect=40, timeout=90)]
        finally:
            first.send_signal(signal.SIGTERM)
            assert first.wait(timeout=30) == 0, first_log.read_text()[-3000:]
    by_id = {v["id"]: v for v in verdicts}
    assert len(verdicts) == len(by_id) == 40
    for d in originals:
        pair = (by_id[d["id"]], by_id[f"copy-{d['id']}"])
        assert sorted(v["verdict"] for v in pair) == ["duplicate", "unique"], pair


def with_the_commits_of(t: Topics, group: str, partitions: int) -> str:
    """A new group holding `group`'s committed offsets on the input, metadata and all,
    committed without joining (an assigned consumer), so no member ever joined it."""
    from kafka import KafkaConsumer, TopicPartition

    tps = [TopicPartition(t.input, p) for p in range(partitions)]
    old = KafkaConsumer(bootstrap_servers=t.bootstrap, group_id=group, enable_auto_commit=False)
    commits = {tp: old.committed(tp, metadata=True) for tp in tps}
    old.close()
    assert all(c is not None for c in commits.values()), commits
    fresh = f"{group}-copy"
    new = KafkaConsumer(bootstrap_servers=t.bootstrap, group_id=fresh, enable_auto_commit=False)
    new.assign(tps)
    new.commit({tp: c for tp, c in commits.items() if c is not None})
    new.close()
    return fresh


def keeps_offsets_metadata(t: Topics) -> bool:
    """Whether the broker returns the metadata committed with the group's offsets."""
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=t.bootstrap, group_id=t.group, enable_auto_commit=False)
    committed = c.committed(TopicPartition(t.input, 0), metadata=True)
    c.close()
    return bool(committed is not None and committed.metadata)


def test_a_group_member_with_another_assignor_is_a_clear_error(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """A consumer of the group that joins with kafka-python's default assignors (a
    worker of an older version, another tool) cannot share the group with a worker,
    whose assignor checks the index: the worker says so and stops (exit 7) instead of
    a traceback, or of joining without the check."""
    from kafka import KafkaConsumer

    t = Topics(kafka_bootstrap)
    t.produce([orjson.dumps(d) for d in stream(10, seed=45)])
    other = KafkaConsumer(
        bootstrap_servers=t.bootstrap,
        group_id=t.group,
        enable_auto_commit=False,
        max_poll_interval_ms=3000,
        session_timeout_ms=3000,
        heartbeat_interval_ms=500,
    )
    other.subscribe([t.input])
    try:
        deadline = time.time() + 30
        while not other.assignment() and time.time() < deadline:
            other.poll(timeout_ms=200)
        assert other.assignment()
        r = t.run_worker(tmp_path / "idx")
    finally:
        other.close()
    err = r.stderr.decode()
    assert r.returncode == 7, err[-3000:]
    assert "another partition assignor" in err and "Traceback" not in err, err[-3000:]
    assert t.read(t.output, timeout=3) == []
