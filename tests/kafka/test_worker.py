"""The Kafka worker against a real broker (see the `kafka_bootstrap` fixture)."""

from __future__ import annotations

import contextlib
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.support.kafka import Topics, file_mode, stream, verdicts_by_offset
from tests.support.sockets import pipe
from tests.support.txnlog import committed, everything

pytestmark = pytest.mark.integration


def test_worker_verdicts_equal_file_mode(kafka_bootstrap: str, tmp_path: Path) -> None:
    docs = stream(400, seed=1)
    t = Topics(kafka_bootstrap)
    t.produce([orjson.dumps(d) for d in docs])
    r = t.run_worker(tmp_path / "idx")
    assert r.returncode == 0, r.stderr.decode()[-3000:]
    got = verdicts_by_offset(t.read(t.output, expect=len(docs)))
    assert len(got) == len(docs)
    expected = file_mode(tmp_path, docs)
    assert [got[(0, i)] for i in range(len(docs))] == expected
    assert any(v["verdict"] == "duplicate" for v in expected)


def test_bad_messages_go_to_the_dead_letter_topic(kafka_bootstrap: str, tmp_path: Path) -> None:
    t = Topics(kafka_bootstrap)
    values = [
        b'{"id": "ok", "text": "a perfectly good document with words"}',
        b"not json",
        b'{"id": "x"}',
        b'{"id": "big", "text": "' + b"y" * 3000 + b'"}',
        b'{"id": "ok2", "text": "another good one here"}',
    ]
    t.produce(values)
    r = t.run_worker(tmp_path / "idx", "--max-doc-bytes", "1000")
    assert r.returncode == 0, r.stderr.decode()[-3000:]
    verdicts = verdicts_by_offset(t.read(t.output, expect=2))
    assert sorted(verdicts) == [(0, 0), (0, 4)]
    dead = t.read(t.dlq, expect=3)
    reasons = [dict(m.headers)["streamdedup.reason"] for m in dead]
    assert reasons == [b"malformed_json", b"missing_text", b"too_large"]
    assert [dict(m.headers)["streamdedup.source.offset"] for m in dead] == [b"1", b"2", b"3"]
    assert [m.value for m in dead] == values[1:4]


def test_restart_resumes_where_it_stopped(kafka_bootstrap: str, tmp_path: Path) -> None:
    docs = stream(300, seed=2)
    t = Topics(kafka_bootstrap)
    t.produce([orjson.dumps(d) for d in docs[:150]])
    assert t.run_worker(tmp_path / "idx").returncode == 0
    # a stopped worker leaves everything it published recorded as such in the index
    assert progress(tmp_path / "idx", t) == ({0: 150}, {0: 150})
    t.produce([orjson.dumps(d) for d in docs[150:]])
    assert t.run_worker(tmp_path / "idx").returncode == 0
    assert progress(tmp_path / "idx", t) == ({0: 300}, {0: 300})
    got = verdicts_by_offset(t.read(t.output, expect=len(docs)))
    assert [got[(0, i)] for i in range(len(docs))] == file_mode(tmp_path, docs)


def progress(index: Path, t: Topics) -> tuple[dict[int, int], dict[int, int]]:
    """The next offsets the index records as applied, and as published."""
    from streamdedup.engine.deduplicator import Deduplicator
    from streamdedup.kafka.ledger import Progress

    prog = Progress(t.group, t.input)
    with Deduplicator(index) as dd:
        return dd.index.read(
            lambda tx: (Progress.read(tx, prog.applied), Progress.read(tx, prog.published))
        )


def test_sigterm_finishes_and_exits_0(kafka_bootstrap: str, tmp_path: Path) -> None:
    docs = stream(200, seed=3)
    t = Topics(kafka_bootstrap)
    t.produce([orjson.dumps(d) for d in docs])
    proc = subprocess.Popen(t.worker_args(tmp_path / "idx"), stderr=subprocess.PIPE)
    deadline = time.time() + 60
    while time.time() < deadline and len(t.read(t.output, timeout=1)) < len(docs):
        time.sleep(0.5)
    started = time.time()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err.decode()[-2000:]
    assert time.time() - started < 20
    assert len(verdicts_by_offset(t.read(t.output))) == len(docs)


def test_an_index_bound_to_another_group_is_refused(kafka_bootstrap: str, tmp_path: Path) -> None:
    t = Topics(kafka_bootstrap)
    t.produce([b'{"id": 1, "text": "one document"}'])
    assert t.run_worker(tmp_path / "idx", idle=2).returncode == 0
    other = Topics(kafka_bootstrap)
    r = other.run_worker(tmp_path / "idx", idle=2)
    assert r.returncode == 2
    assert b"belongs to consumer group" in r.stderr


@pytest.mark.slow
def test_crash_test_exactly_one_verdict_per_document(kafka_bootstrap: str, tmp_path: Path) -> None:
    """SIGKILL the worker at random moments over a 10,000-document stream; restart it
    each time.  The read_committed verdict topic holds exactly one verdict per document
    (none lost, none repeated), equal to an uninterrupted run's (none re-checked into a
    duplicate of itself)."""
    docs = stream(10_000, seed=4)
    t = Topics(kafka_bootstrap)
    t.produce([orjson.dumps(d) for d in docs])
    from kafka import KafkaConsumer, TopicPartition

    seed = random.randrange(1 << 30)
    rnd = random.Random(seed)
    # kill points spread over the stream, counted in verdicts published so far (aborted
    # ones included), each followed by a random pause of up to a batch's duration; the
    # last leaves at least 3,000 documents (six batches) for the final run, since the
    # watcher counts behind the worker and a kill after the end would test nothing
    kill_points = sorted(rnd.sample(range(1000, 7_000), 5))
    watcher = KafkaConsumer(bootstrap_servers=t.bootstrap, enable_auto_commit=False)
    watcher.assign([TopicPartition(t.output, 0)])
    published = 0
    index = tmp_path / "idx"
    for point in kill_points:
        proc = subprocess.Popen(
            t.worker_args(index, "--max-poll-records", "500"),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.time() + 120
        while published < point:
            assert proc.poll() is None and time.time() < deadline, (seed, point, published)
            published += sum(len(b) for b in watcher.poll(timeout_ms=20).values())
        time.sleep(rnd.uniform(0, 0.15))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    watcher.close()
    before_last_run = len(t.read_to_end(t.output))
    assert before_last_run < len(docs), f"seed {seed}: the kills {kill_points} came too late"
    r = t.run_worker(index, "--max-poll-records", "500", idle=8)
    assert r.returncode == 0, r.stderr.decode()[-3000:]
    expected = file_mode(tmp_path, docs)
    seen: dict[int, list[dict[str, Any]]] = {}
    for m in t.read_to_end(t.output):
        v = orjson.loads(m.value)
        seen.setdefault(v.pop("source")["offset"], []).append(v)
    missing = sorted(set(range(len(docs))) - set(seen))
    assert not missing, f"seed {seed}: {len(missing)} documents got no verdict: {missing[:10]}"
    for offset, verdicts in seen.items():
        assert all(v == expected[offset] for v in verdicts), (seed, offset, verdicts)
    assert all(len(v) == 1 for v in seen.values()), f"seed {seed}: a document got two verdicts"


@pytest.mark.parametrize("point", ["index-written", "verdicts-sent", "offsets-sent", "committed"])
def test_a_crash_at_each_step_of_a_batch(kafka_bootstrap: str, tmp_path: Path, point: str) -> None:
    """The worker SIGKILLs itself at one step of its third batch (streamdedup.failpoints)
    and is restarted: the read_committed verdict topic holds exactly one verdict per
    document, equal to an uninterrupted run's, the committed changelog holds the
    index's state of every document, and the keep topic each unique document's
    message once, in input order."""
    import os

    from streamdedup.kafka.settings import create_topics

    docs = stream(3000, seed=11)
    t = Topics(kafka_bootstrap)
    changelog, keep = f"changelog-{t.group}", f"keep-{t.group}"
    create_topics(t.bootstrap, [changelog], 1, {}, compacted=(changelog,))
    create_topics(t.bootstrap, [keep], 1, {})
    t.produce([orjson.dumps(d) for d in docs])
    index = tmp_path / "idx"
    opts = ("--max-poll-records", "200", "--changelog-topic", changelog, "--keep-topic", keep)
    crash = subprocess.run(
        t.worker_args(index, *opts),
        env={**os.environ, "STREAMDEDUP_FAILPOINT": f"{point}:3"},
        capture_output=True,
        timeout=300,
    )
    assert crash.returncode == -signal.SIGKILL, crash.stderr.decode()[-3000:]
    log_before = everything(t.bootstrap, t.output)
    if point in ("verdicts-sent", "offsets-sent"):
        assert len(log_before) > len(t.read_to_end(t.output)), "an open transaction was left"
    r = t.run_worker(index, *opts)
    assert r.returncode == 0, r.stderr.decode()[-3000:]

    seen: dict[int, list[dict[str, Any]]] = {}
    for m in t.read_to_end(t.output):
        v = orjson.loads(m.value)
        seen.setdefault(v.pop("source")["offset"], []).append(v)
    expected = file_mode(tmp_path, docs)
    assert sorted(seen) == list(range(len(docs)))
    assert all(len(v) == 1 for v in seen.values()), "a document got two verdicts"
    for offset, verdicts in seen.items():
        assert verdicts[0] == expected[offset], (offset, verdicts)
    assert changelog_state(t.bootstrap, changelog) == index_state(index)
    unique = [
        orjson.dumps(d) for d, v in zip(docs, expected, strict=True) if v["verdict"] == "unique"
    ]
    assert [m.value for m in t.read_to_end(keep)] == unique  # (each once, in order)


def changelog_state(bootstrap: str, topic: str) -> dict[bytes, bytes]:
    """What a restore would see: the last committed record of each key, the index
    parameters left out."""
    from streamdedup.kafka.changelog import PARAMS_KEY

    latest: dict[bytes, bytes | None] = {}
    for r in committed(bootstrap, topic):
        assert r.key is not None
        latest[r.key] = r.value
    assert latest.pop(PARAMS_KEY, None), "the changelog holds the index parameters"
    return {k: v for k, v in latest.items() if v is not None}


def index_state(index: Path) -> dict[bytes, bytes]:
    """Every document of the index as the changelog encodes it."""
    from streamdedup.engine.deduplicator import Deduplicator
    from streamdedup.kafka.changelog import current_changes, encode_changes

    def read(t: Any) -> dict[bytes, bytes]:
        keys = [k for k, _ in t.items("ids")]
        return {k: v for k, v in encode_changes(current_changes(t, keys)) if v is not None}

    with Deduplicator(index) as dd:
        return dd.index.read(read)


def test_duplicates_across_partitions_are_found(kafka_bootstrap: str, tmp_path: Path) -> None:
    docs = stream(120, seed=5)
    originals = [d for d in docs if not d["text"].count("edited")][:60]
    t = Topics(kafka_bootstrap, partitions=3, output_partitions=2)
    t.produce([orjson.dumps(d) for d in originals], partitions=3)
    assert t.run_worker(tmp_path / "idx").returncode == 0
    copies = [{"id": f"copy-{d['id']}", "text": d["text"]} for d in originals]
    # each copy lands on a different partition from its original
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=kafka_bootstrap)
    for i, c in enumerate(copies):
        p.send(t.input, value=orjson.dumps(c), partition=(i + 1) % 3)
    p.flush()
    p.close()
    assert t.run_worker(tmp_path / "idx").returncode == 0
    messages = t.read(t.output, expect=120)
    verdicts = [orjson.loads(m.value) for m in messages]
    assert len(verdicts) == 120
    # keyed by id, on the partition the default partitioner (Java's too) picks for it
    from kafka.partitioner.default import murmur2

    assert all(m.key == str(v["id"]).encode() for m, v in zip(messages, verdicts, strict=True))
    assert [m.partition for m in messages] == [(murmur2(m.key) & 0x7FFFFFFF) % 2 for m in messages]
    assert {m.partition for m in messages} == {0, 1}
    by_id = {v["id"]: v for v in verdicts}
    assert len(by_id) == 120
    for d in originals:
        v = by_id[f"copy-{d['id']}"]
        assert v["verdict"] == "duplicate" and v["exact"] and v["duplicate_of"] == d["id"]
    assert {v["source"]["partition"] for v in verdicts} == {0, 1, 2}


def test_msgpack_and_raw_inputs(kafka_bootstrap: str, tmp_path: Path) -> None:
    import msgpack

    text = "alpha beta gamma delta epsilon zeta eta theta iota kappa"
    t = Topics(kafka_bootstrap)
    t.produce(
        [msgpack.packb({"id": 1, "text": text}), msgpack.packb({"id": 2, "text": text}), b"\xc1"]
    )
    r = t.run_worker(tmp_path / "a", "--input-format", "msgpack", "--output-format", "msgpack")
    assert r.returncode == 0, r.stderr.decode()[-2000:]
    out = [msgpack.unpackb(m.value) for m in t.read(t.output, expect=2)]
    assert [(v["id"], v["verdict"]) for v in out] == [(1, "unique"), (2, "duplicate")]
    assert dict(t.read(t.dlq, expect=1)[0].headers)["streamdedup.reason"] == b"malformed_msgpack"

    raw = Topics(kafka_bootstrap)
    raw.produce([text.encode(), text.encode(), b"no key"], keys=[b"r1", b"r2", None])
    r = raw.run_worker(tmp_path / "b", "--input-format", "raw")
    assert r.returncode == 0, r.stderr.decode()[-2000:]
    out = [orjson.loads(m.value) for m in raw.read(raw.output, expect=2)]
    assert [(v["id"], v["verdict"]) for v in out] == [("r1", "unique"), ("r2", "duplicate")]
    assert dict(raw.read(raw.dlq, expect=1)[0].headers)["streamdedup.reason"] == b"missing_id"


def test_unreachable_broker_fails_clearly_and_in_bounded_time(tmp_path: Path) -> None:
    from streamdedup.kafka.broker import free_port

    started = time.time()
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "streamdedup.cli",
            "worker",
            "--bootstrap-servers",
            f"127.0.0.1:{free_port()}",
            "--index",
            str(tmp_path / "idx"),
            "--connect-timeout",
            "3",
        ],
        capture_output=True,
        timeout=60,
    )
    assert r.returncode == 3
    assert b"no Kafka broker answered" in r.stderr
    assert time.time() - started < 30


def test_two_processes_share_one_index(kafka_bootstrap: str, tmp_path: Path) -> None:
    """Two workers of one group on one host, one index: the group splits four
    partitions between them, and duplicates across partitions are still found."""
    t = Topics(kafka_bootstrap, partitions=4)
    index = tmp_path / "idx"
    logs = [tmp_path / "w0.log", tmp_path / "w1.log"]
    procs = []
    handles = [open(log_path, "wb") for log_path in logs]  # noqa: SIM115 - closed below
    for i, handle in enumerate(handles):
        if i:
            time.sleep(1.0)
        procs.append(
            subprocess.Popen(t.worker_args(index), stdout=subprocess.DEVNULL, stderr=handle)
        )
    deadline = time.time() + 60
    while time.time() < deadline:  # both members hold partitions before data arrives
        if all(b"partitions assigned: " + t.input.encode() in p.read_bytes() for p in logs):
            break
        time.sleep(0.5)
    docs = stream(200, seed=6)
    originals = [d for d in docs if "edited" not in d["text"]][:80]
    t.produce([orjson.dumps(d) for d in originals], partitions=4)
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=kafka_bootstrap)
    for i, d in enumerate(originals):
        p.send(
            t.input,
            value=orjson.dumps({"id": f"copy-{d['id']}", "text": d["text"]}),
            partition=(i + 1) % 4,
        )
    p.flush()
    p.close()
    verdicts = [orjson.loads(m.value) for m in t.read(t.output, expect=160, timeout=90)]
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    for handle in handles:
        handle.close()
    assert len(verdicts) == 160
    by_id = {v["id"]: v for v in verdicts}
    assert len(by_id) == 160
    # The two processes race through their partitions, so either one of a pair may
    # come first; what must hold is that the later one is found as a duplicate of it.
    for d in originals:
        pair = (by_id[d["id"]], by_id[f"copy-{d['id']}"])
        assert sorted(v["verdict"] for v in pair) == ["duplicate", "unique"], pair
        dup = next(v for v in pair if v["verdict"] == "duplicate")
        other = next(v for v in pair if v is not dup)
        assert dup["duplicate_of"] == other["id"] and dup["exact"], pair
    assert all(b"partitions assigned: " + t.input.encode() in p.read_bytes() for p in logs), (
        "both processes held partitions"
    )


def test_rebalance_mid_stream_loses_nothing_and_offsets_agree(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """A second worker joins while the first is busy: partitions move between them.
    Nothing is lost, a redelivered message gets the verdict it had, and afterwards the
    offsets recorded in the index agree with the group's committed offsets."""
    from kafka import KafkaConsumer, TopicPartition

    docs = stream(12_000, seed=7)
    t = Topics(kafka_bootstrap, partitions=2)
    t.produce([orjson.dumps(d) for d in docs], partitions=2)
    index = tmp_path / "idx"
    # small batches: many transactions, so the stream outlasts the group's rebalance
    args = t.worker_args(index, "--max-poll-records", "50")
    logs = [open(tmp_path / f"w{i}.log", "wb") for i in range(2)]  # noqa: SIM115
    first = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=logs[0])
    watcher = KafkaConsumer(bootstrap_servers=kafka_bootstrap, isolation_level="read_committed")
    watcher.assign([TopicPartition(t.output, 0)])
    published, deadline = 0, time.time() + 60
    while published < 1000 and time.time() < deadline:  # the first worker is under way
        published += sum(len(b) for b in watcher.poll(timeout_ms=200).values())
    watcher.close()
    second = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=logs[1])

    def verdicts(aborted_too: bool = False) -> dict[tuple[int, int], list[dict[str, Any]]]:
        seen: dict[tuple[int, int], list[dict[str, Any]]] = {}
        read = everything if aborted_too else committed
        for m in read(t.bootstrap, t.output):
            v = orjson.loads(m.value)
            src = v.pop("source")
            seen.setdefault((src["partition"], src["offset"]), []).append(v)
        return seen

    deadline = time.time() + 180
    while len(verdicts()) < len(docs) and time.time() < deadline:
        time.sleep(2)
    for proc in (first, second):
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
    for log in logs:
        log.close()
    first_log, second_log = ((tmp_path / f"w{i}.log").read_bytes() for i in range(2))
    lost, took = b"partitions revoked: " + t.input.encode(), b"assigned: " + t.input.encode()
    assert lost in first_log, "the first worker lost a partition"
    assert took in second_log, "the second worker took one over"
    # and took it over mid-stream: it processed part of the stream itself (the first
    # worker processes ~600 documents a second here, the second joins in ~6 s: 12,000
    # documents last ~20 s)
    second_stats = re.search(rb"stopped: ([\d,]+) messages", second_log)
    assert second_stats is not None, second_log.decode()[-2000:]
    assert int(second_stats.group(1).replace(b",", b"")) > 0, "the rebalance came too late"
    seen = verdicts()
    assert len(seen) == len(docs), "a document got no verdict"
    assert all(len(v) == 1 for v in seen.values()), "a document got two verdicts"
    for key, published in verdicts(aborted_too=True).items():  # aborted batches included
        assert all(v == seen[key][0] for v in published), (key, published)
    consumer = KafkaConsumer(
        bootstrap_servers=kafka_bootstrap, group_id=t.group, enable_auto_commit=False
    )
    group_offsets = {p: consumer.committed(TopicPartition(t.input, p)) for p in (0, 1)}
    consumer.close()
    from streamdedup.engine.deduplicator import Deduplicator

    with Deduplicator(index) as dd:
        recorded = dd.index.read(lambda tx: tx.meta(f"applied/{t.group}/{t.input}"))
    assert {int(k): v for k, v in recorded.items()} == group_offsets
    assert sum(group_offsets.values()) == len(docs)


class Outage:
    """A TCP proxy in front of a broker that can drop every connection and refuse new
    ones for a while: the broker "goes away" without losing its (in-memory) data."""

    def __init__(self, target_port: int) -> None:
        import socket
        import threading

        from streamdedup.kafka.broker import free_port

        self.port, self.target = free_port(), target_port
        self.up = threading.Event()
        self.up.set()
        self.conns: list[socket.socket] = []
        self.lock = threading.Lock()
        self.server = socket.create_server(("127.0.0.1", self.port))
        self.server.settimeout(0.2)
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        import socket
        import threading

        while True:
            try:
                client, _ = self.server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            if not self.up.is_set():
                client.close()
                continue
            upstream = socket.create_connection(("127.0.0.1", self.target))
            with self.lock:
                self.conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=pipe, args=(a, b), daemon=True).start()

    def cut(self) -> None:
        import socket

        self.up.clear()
        with self.lock:
            for c in self.conns:
                with contextlib.suppress(OSError):
                    c.shutdown(socket.SHUT_RDWR)
            self.conns = []

    def restore(self) -> None:
        self.up.set()


@pytest.mark.slow
def test_broker_gone_for_a_while_mid_run(tmp_path: Path) -> None:
    """Connections to the broker drop and are refused for 15 seconds while the worker is
    busy; it waits, reconnects and goes on: every document gets the verdict of an
    uninterrupted run."""
    from streamdedup.kafka.broker import EmbeddedBroker, free_port

    real = free_port()
    proxy = Outage(real)
    broker = EmbeddedBroker(port=real, advertised_port=proxy.port)
    bootstrap = broker.start()
    try:
        # the cut comes after 1,000 documents: 2,000 more after it (20 batches) are
        # plenty to show that the worker went on
        docs = stream(3_000, seed=7)
        t = Topics(bootstrap)
        t.produce([orjson.dumps(d) for d in docs])
        port = free_port()
        proc = subprocess.Popen(
            t.worker_args(
                tmp_path / "idx",
                "--max-poll-records",
                "100",
                "--metrics-port",
                str(port),
                "--idle-exit",
                "5",
                "--transaction-timeout",
                "10",
            ),
            stderr=subprocess.PIPE,
        )
        import urllib.request

        cut_at = 0
        while cut_at < 1000:
            assert proc.poll() is None
            time.sleep(0.05)
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics") as r:
                    text = r.read().decode()
            except OSError:
                continue
            found = [x for x in text.splitlines() if x.startswith("streamdedup_documents_total")]
            cut_at = int(float(found[0].split()[1])) if found else 0
        proxy.cut()
        time.sleep(15)
        assert proc.poll() is None, "the worker gave up while the broker was away"
        proxy.restore()
        _, err = proc.communicate(timeout=400)
        assert proc.returncode == 0, err.decode()[-3000:]
        assert cut_at < len(docs) // 2, "the outage came after the work was done"
        assert b"more like it" in err, "kafka-python's repeated warnings are rate-limited"
        seen: dict[int, list[dict[str, Any]]] = {}
        for m in t.read_to_end(t.output):
            v = orjson.loads(m.value)
            seen.setdefault(v.pop("source")["offset"], []).append(v)
        expected = file_mode(tmp_path, docs)
        missing = sorted(set(range(len(docs))) - set(seen))
        assert not missing, f"{len(missing)} documents got no verdict: {missing[:10]}"
        for offset, verdicts in seen.items():
            assert all(v == expected[offset] for v in verdicts), (offset, verdicts)
        assert all(len(v) == 1 for v in seen.values()), "a document got two verdicts"
    finally:
        broker.stop()


@pytest.mark.parametrize("forgotten", ["replaced", "expired"])
def test_a_promotion_in_a_batch_redelivered_after_a_crash_reaches_the_changelog(
    kafka_bootstrap: str, tmp_path: Path, forgotten: str
) -> None:
    """A and B hold the same text; A re-sent with other content (or A expired by the
    time window, as C arrives) promotes B to owner of it (signature, postings, set,
    text).  The worker is killed after that batch's index commit and before its Kafka
    commit: the batch is published again from the stored verdicts, and the changelog
    must carry B's promotion (and A's forgetting) too, not only the present state of
    the batch's own documents, or an index restored from it misses near duplicates of
    that text."""
    import os

    from kafka import KafkaProducer

    from streamdedup.engine.deduplicator import Deduplicator
    from streamdedup.kafka.changelog import Restorer
    from streamdedup.kafka.settings import create_topics
    from streamdedup.store.index import Index
    from tests.support.store import dump

    t1 = " ".join(f"alpha{i}" for i in range(60))
    t2 = " ".join(f"beta{i}" for i in range(60))
    t = Topics(kafka_bootstrap)
    changelog = f"changelog-{t.group}"
    create_topics(t.bootstrap, [changelog], 1, {}, compacted=(changelog,))
    index = tmp_path / "idx"
    opts: tuple[str, ...] = ("--changelog-topic", changelog)
    if forgotten == "expired":  # each message moves stream time: three of them here
        opts += ("--ttl", "1h", "--clock-window", "1")
    now, minute = int(time.time() * 1000), 60_000

    def produce(doc_id: str, text: str, ago_minutes: int) -> None:
        p = KafkaProducer(bootstrap_servers=t.bootstrap)
        value = orjson.dumps({"id": doc_id, "text": text})
        p.send(t.input, value=value, timestamp_ms=now - ago_minutes * minute)
        p.flush()
        p.close()

    # A inside the window of B; the third document's clock puts A outside and B in
    produce("A", t1, 65)
    produce("B", t1, 30)
    r = t.run_worker(index, *opts)
    assert r.returncode == 0, r.stderr.decode()[-3000:]
    produce("A" if forgotten == "replaced" else "C", t2, 0)
    crash = subprocess.run(
        t.worker_args(index, *opts),
        env={**os.environ, "STREAMDEDUP_FAILPOINT": "index-written:1"},
        capture_output=True,
        timeout=300,
    )
    assert crash.returncode == -signal.SIGKILL, crash.stderr.decode()[-3000:]
    r = t.run_worker(index, *opts)
    assert r.returncode == 0, r.stderr.decode()[-3000:]
    assert len(t.read_to_end(t.output)) == 3

    assert changelog_state(t.bootstrap, changelog) == index_state(index)
    records = [(r.key or b"", r.value) for r in committed(t.bootstrap, changelog)]
    restored = Index(tmp_path / "restored")
    rest = Restorer(restored)
    rest.add(records)
    assert rest.params is not None
    rest.finish({}, "g/t", clock_window=1 if forgotten == "expired" else 31)
    restored.close()
    a, b = dump(index), dump(tmp_path / "restored")
    for table in a:
        assert a[table] == b[table], table
    words = t1.split()
    words[-1] = "changed"
    for path in (index, tmp_path / "restored"):
        with Deduplicator(path, changelog=changelog) as dd:
            v = dd.check("N", " ".join(words))
        assert (v.verdict, v.duplicate_of, v.exact) == ("duplicate", "B", False), path
