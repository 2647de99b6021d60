"""Probes and answers of remote sealed segments over a real broker: the writer's
`RemoteSegments` against `SegmentServer` processes -- round trips, a replica taking
over from a server killed with SIGKILL, a probe answered twice, a segment without a
server (the writer waits, logs, reports not ready, and completes once a server
starts), multi-megabyte payloads, and the errors a writer must see rather than wait
for ever.  The servers here answer with `tests.support.segment_transport.fake_answer`
(the transport never looks inside a probe); the command-line server on a real sealed
segment is tested in tests/cli/test_segment_server.py."""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from streamdedup.errors import BrokerUnavailableError, RemoteSegmentError, SegmentWaitInterrupted
from streamdedup.kafka.broker import free_port
from streamdedup.kafka.segment_service.client import RemoteSegments
from streamdedup.kafka.segment_service.server import SegmentServer
from streamdedup.kafka.segment_service.wire import MAX_MESSAGE_BYTES, SegmentLink
from streamdedup.ops.metrics import Metrics, SegmentServerMetrics
from streamdedup.store.segment.registry import SegmentEntry
from tests.support.segment_transport import FAST_OPTIONS, check_answer, fake_answer, spawn


def remote_entry(segment_id: str, number: int) -> SegmentEntry:
    """A remote segment's registry entry (no path on this host)."""
    return SegmentEntry(number, segment_id, "", True, 0, 0, 0, 0)


@dataclass
class Setup:
    bootstrap: str
    link: SegmentLink
    entry: SegmentEntry
    tmp: Path
    servers: list[subprocess.Popen[bytes]]

    def spawn(self, *extra: str) -> subprocess.Popen[bytes]:
        log = self.tmp / f"server-{len(self.servers)}.log"
        proc = spawn(log, self.bootstrap, self.link.prefix, self.entry.id, *extra)
        self.servers.append(proc)
        return proc

    def log(self, i: int) -> str:
        return (self.tmp / f"server-{i}.log").read_text(errors="replace")

    def read(self, topic: str, timeout: float = 10.0) -> list[tuple[bytes, bytes]]:
        """(key, value) of every message of `topic` now."""
        from kafka import KafkaConsumer, TopicPartition

        c = KafkaConsumer(bootstrap_servers=self.bootstrap, **_fetch_sizes())
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        c.seek_to_beginning(tp)
        end = c.end_offsets([tp])[tp]
        out: list[tuple[bytes, bytes]] = []
        deadline = time.monotonic() + timeout
        while c.position(tp) < end and time.monotonic() < deadline:
            for batch in c.poll(timeout_ms=200).values():
                out.extend((m.key, m.value) for m in batch)
        c.close()
        return out


def _fetch_sizes() -> dict[str, int]:
    return {"max_partition_fetch_bytes": MAX_MESSAGE_BYTES, "fetch_max_bytes": MAX_MESSAGE_BYTES}


@pytest.fixture
def setup(kafka_bootstrap: str, tmp_path: Path) -> Iterator[Setup]:
    tag = uuid.uuid4().hex
    link = SegmentLink(kafka_bootstrap, prefix=f"seg-{tag[:8]}", consumer_options=FAST_OPTIONS)
    s = Setup(kafka_bootstrap, link, remote_entry(tag, 1), tmp_path, [])
    yield s
    for proc in s.servers:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def payloads(n: int, seed: int, size: int = 20_000) -> list[bytes]:
    rng = __import__("random").Random(seed)
    return [rng.randbytes(rng.randrange(1, size)) for _ in range(n)]


def sample(metrics: Metrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


def wait_until(what: Callable[[], object], timeout: float, why: str) -> None:
    deadline = time.monotonic() + timeout
    while not what():
        assert time.monotonic() < deadline, why
        time.sleep(0.05)


@pytest.mark.integration
def test_round_trip_through_a_server_process(setup: Setup) -> None:
    """Thirty probes in flight at once, answered by one server process: each waiter
    gets its own probe's answer; round trips are measured per segment."""
    server = setup.spawn()
    metrics = Metrics()
    probes = payloads(30, seed=1)
    with RemoteSegments(setup.link, timeout_s=30, metrics=metrics.segments) as remote:
        reader = remote.reader(setup.entry)
        assert remote.reader(setup.entry) is reader
        waiters = [reader.submit(f"round-{i}", p) for i, p in enumerate(probes)]
        answers = [w() for w in waiters]
        latencies = remote.latencies()
    assert {check_answer(p, a) for p, a in zip(probes, answers, strict=True)} == {server.pid}
    assert sample(metrics, "streamdedup_segment_probe_seconds_count", segment="1") == 30
    assert sample(metrics, "streamdedup_segment_answers_pending", segment="1") == 0
    assert latencies[1] is not None and latencies[1] > 0
    assert reader.last_answer_s == latencies[1]
    server.send_signal(signal.SIGTERM)
    assert server.wait(timeout=30) == 0, setup.log(0)
    assert "answered 30 skipped 0" in setup.log(0)


@pytest.mark.integration
def test_a_replica_takes_over_from_a_server_killed_mid_stream(
    setup: Setup, record_property: Callable[..., None]
) -> None:
    """Two servers of one segment; the one answering is killed with SIGKILL while
    probes are in flight.  The other takes the probe partition over: every probe is
    answered, the later ones all by the survivor."""
    first, second = setup.spawn(), setup.spawn()
    metrics = Metrics()
    probes = payloads(45, seed=2)
    answered_by: list[int] = []
    with RemoteSegments(setup.link, timeout_s=2, metrics=metrics.segments) as remote:
        reader = remote.reader(setup.entry)

        def wave(lo: int, hi: int, then: Callable[[], None] = lambda: None) -> None:
            waiters = [reader.submit(f"kill-{i}", probes[i]) for i in range(lo, hi)]
            then()
            for i, w in zip(range(lo, hi), waiters, strict=True):
                answered_by.append(check_answer(probes[i], w()))

        wave(0, 15)
        (victim,) = set(answered_by)
        assert victim in (first.pid, second.pid)
        survivor = second if victim == first.pid else first
        started = time.monotonic()
        wave(15, 30, then=lambda: os.kill(victim, signal.SIGKILL))
        record_property("failover_s", round(time.monotonic() - started, 2))
        wave(30, 45)
    assert len(answered_by) == 45
    assert set(answered_by[30:]) == {survivor.pid}, answered_by
    assert survivor.poll() is None
    assert sample(metrics, "streamdedup_segment_probe_seconds_count", segment="1") == 45


@pytest.mark.integration
def test_a_probe_answered_twice_is_harmless(setup: Setup) -> None:
    """Answers the writer does not wait for are dropped: a second copy of an answer
    (a probe answered by two replicas, or again after a redelivery), a different late
    answer, an answer to a request not sent yet.  And a server does not answer a
    re-sent copy of a probe it has answered already."""
    from kafka import KafkaProducer

    server = setup.spawn()
    topics = setup.link.topics(setup.entry.id)
    probe, later = payloads(2, seed=3)
    with RemoteSegments(setup.link, timeout_s=30) as remote:
        reader = remote.reader(setup.entry)
        producer = KafkaProducer(bootstrap_servers=setup.bootstrap)
        # an answer to a request nobody waits for yet: dropped, not kept for later
        producer.send(topics.answers, key=b"twice-2", value=b"not the answer").get(timeout=10)
        answer = reader.submit("twice-1", probe)()
        assert check_answer(probe, answer) == server.pid
        for value in (answer, b"forged"):  # a copy of the answer, and another one
            producer.send(topics.answers, key=b"twice-1", value=value).get(timeout=10)
        # the probe sent again: the server has answered it, and skips it
        producer.send(topics.probes, key=b"twice-1", value=probe).get(timeout=10)
        producer.close()
        # answered after the copy of twice-1 (one partition: in order)
        assert check_answer(later, reader.submit("twice-2", later)()) == server.pid
        assert remote._pending == {}
    answers = [v for k, v in setup.read(topics.answers) if k == b"twice-1"]
    assert answers == [answer, answer, b"forged"]  # the server's, then the two sent here
    server.send_signal(signal.SIGTERM)
    assert server.wait(timeout=30) == 0
    assert "answered 2 skipped 1" in setup.log(0)


@pytest.mark.integration
def test_a_segment_without_a_server_stalls_the_writer_until_one_starts(
    setup: Setup, caplog: pytest.LogCaptureFixture
) -> None:
    """No server: the waiter keeps waiting (it never returns without the answer),
    warns naming the segment, counts a stall, fails /readyz and sends the probe
    again after each timeout; a server started later answers, and the segment is
    ready again."""
    caplog.set_level(logging.WARNING, logger="streamdedup.kafka.segments")
    metrics = Metrics()
    probe = payloads(1, seed=4)[0]
    got: list[bytes] = []
    with RemoteSegments(setup.link, timeout_s=1, metrics=metrics.segments) as remote:
        reader = remote.reader(setup.entry)
        waiter = reader.submit("stalled-1", probe)
        thread = threading.Thread(target=lambda: got.append(waiter()))
        thread.start()
        wait_until(lambda: metrics.segments.stalled(), 10, "no stall reported")
        ready, why = metrics.ready()
        assert not ready and f"segment 1 ({setup.entry.id}) has not answered" in why
        assert remote.stalled() == [f"segment 1 ({setup.entry.id})"]
        wait_until(
            lambda: sample(metrics, "streamdedup_segment_stalls_total", segment="1") >= 3,
            10,
            "the waiter stopped counting stalls",
        )
        assert thread.is_alive() and not got
        assert sample(metrics, "streamdedup_segment_stalled", segment="1") == 1
        server = setup.spawn()
        thread.join(timeout=60)
        assert not thread.is_alive()
        assert check_answer(probe, got[0]) == server.pid
        assert metrics.segments.stalled() is None and remote.stalled() == []
        assert sample(metrics, "streamdedup_segment_stalled", segment="1") == 0
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(setup.entry.id in w and "sending the probe again" in w for w in warnings)
    sent = setup.read(setup.link.topics(setup.entry.id).probes)
    assert len(sent) >= 3 and {k for k, _ in sent} == {b"stalled-1"}
    # the copies sent while no server ran are answered once
    server.send_signal(signal.SIGTERM)
    assert server.wait(timeout=30) == 0
    answered = re.search(r"answered (\d+) skipped (\d+)", setup.log(0))
    assert answered is not None and int(answered[1]) == 1, setup.log(0)
    assert int(answered[2]) <= len(sent) - 1  # (a last copy may come after the stop)


@pytest.mark.integration
def test_large_probes_and_answers(setup: Setup, record_property: Callable[..., None]) -> None:
    """Probes and answers of 3 and 24 MB (half random bytes, half text, compressed
    with zstd on the way) make the round trip; one over the 64 MB limit is refused
    at once with a clear error instead of stalling."""
    server = setup.spawn()
    rng = __import__("random").Random(5)
    with RemoteSegments(setup.link, timeout_s=60) as remote:
        reader = remote.reader(setup.entry)
        reader.submit("warm-up", b"x")()  # the server's group join is not measured
        for mb in (3, 24):
            probe = rng.randbytes(mb << 19) + b"shingle text " * ((mb << 19) // 13)
            started = time.perf_counter()
            answer = reader.submit(f"large-{mb}", probe)()
            record_property(f"round_trip_{mb}mb_s", round(time.perf_counter() - started, 3))
            assert check_answer(probe, answer) == server.pid
        with pytest.raises(RemoteSegmentError, match="larger than the producer or broker"):
            reader.submit("too-large", bytes(MAX_MESSAGE_BYTES + 1))()


@pytest.mark.integration
def test_a_probe_the_server_cannot_answer_stops_the_writer(setup: Setup) -> None:
    """A probe the segment side fails on is answered with the server's reason; the
    waiter raises it (exit status 7) instead of waiting for ever, and the server
    goes on answering the next."""
    setup.spawn()
    with RemoteSegments(setup.link, timeout_s=30) as remote:
        reader = remote.reader(setup.entry)
        with pytest.raises(RemoteSegmentError, match="not a probe") as failed:
            reader.submit("bad-1", b"bad probe")()
        assert failed.value.exit_status == 7
        assert f"segment 1 ({setup.entry.id})" in str(failed.value)
        probe = payloads(1, seed=6)[0]
        check_answer(probe, reader.submit("good-1", probe)())


@pytest.mark.integration
def test_stopping_ends_a_wait_with_a_clear_error(setup: Setup) -> None:
    """No server and a stop (SIGTERM in the worker): the waiter raises at once."""
    stop = threading.Event()
    with RemoteSegments(setup.link, timeout_s=30, stop=stop) as remote:
        waiter = remote.reader(setup.entry).submit("stop-1", b"probe")
        threading.Timer(0.5, stop.set).start()
        started = time.monotonic()
        with pytest.raises(SegmentWaitInterrupted, match="stopped while waiting for segment 1"):
            waiter()
        assert time.monotonic() - started < 5
        assert remote._pending == {}


@pytest.mark.integration
def test_the_server_skips_stale_probes_and_reports_its_metrics(
    setup: Setup, caplog: pytest.LogCaptureFixture
) -> None:
    """A probe more than --max-probe-age older than a later probe of the same writer
    is skipped (its writer has sent it again since), logged and counted; ages are
    never compared across writers (their clocks may differ), nor with the server's
    own clock; a request skipped as stale and sent again is answered (its writer
    still waits: a clock that jumped back must not wedge it); /readyz is green once
    the server is in its group."""
    from kafka import KafkaProducer

    from streamdedup.kafka.segment_service.wire import WRITER_HEADER, ensure_topics

    topics = setup.link.topics(setup.entry.id)
    ensure_topics(setup.link, topics)
    producer = KafkaProducer(bootstrap_servers=setup.bootstrap)
    now = int(time.time() * 1000)
    hour_ago = now - 3_600_000
    a, b = [(WRITER_HEADER, b"writer-a")], [(WRITER_HEADER, b"writer-b")]
    for key, stamp, headers in [
        (b"a-new", now, a),
        (b"a-old", hour_ago, a),  # stale: writer a sent a probe an hour newer since
        (b"b-old", hour_ago, b),  # writer b's clock is an hour behind: not stale
        (None, now, a),
        (b"a-old", hour_ago + 10_000, a),  # sent again: its writer still waits
    ]:
        producer.send(topics.probes, key=key, value=b"probe", timestamp_ms=stamp, headers=headers)
    producer.flush()
    producer.close()
    metrics = SegmentServerMetrics()
    assert not metrics.ready()[0]
    server = SegmentServer(
        setup.link, setup.entry.id, fake_answer, metrics=metrics, max_age_s=60, idle_exit_s=1
    )
    caplog.set_level(logging.INFO, logger="streamdedup.kafka.segment_server")
    stats = server.run()
    logged = [r.getMessage() for r in caplog.records]
    assert (stats.probes, stats.skipped) == (3, 2)
    assert metrics.ready() == (True, "ok, answering probes")
    assert metrics.registry.get_sample_value("streamdedup_segment_probes_total") == 3
    for reason in ("stale", "no-request-id"):
        got = metrics.registry.get_sample_value(
            "streamdedup_segment_probes_skipped_total", {"reason": reason}
        )
        assert got == 1
    assert [k for k, _ in setup.read(topics.answers)] == [b"a-new", b"b-old", b"a-old"]
    assert any("b'a-old'" in m and "is stale" in m for m in logged), logged


def test_an_unreachable_broker_is_reported_not_waited_for() -> None:
    """Nothing listens at the address: both ends give up after --connect-timeout
    with the broker error (exit status 3)."""
    link = SegmentLink(f"127.0.0.1:{free_port()}", connect_timeout_s=0.5)
    with pytest.raises(BrokerUnavailableError, match="no Kafka broker answered") as failed:
        SegmentServer(link, "abc", fake_answer).run()
    assert failed.value.exit_status == 3
    with RemoteSegments(link) as remote, pytest.raises(BrokerUnavailableError):
        remote.reader(remote_entry("abc", 1))
