"""Segments under faults (issue 24, item 4): a segment server killed mid-stream, the
writer killed during `seal` and while a batch waits for answers, probes answered twice,
segments built with other parameters or damaged.  Every run ends with the verdicts a
single index gives over the same stream; the worker's read_committed output holds
exactly one verdict per input message (none lost, none repeated)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from streamdedup.kafka.broker import free_port
from tests.support.kafka import Topics, file_mode
from tests.support.metrics import scrape
from tests.support.segments import (
    Servers,
    assert_same_verdicts,
    cli,
    cli_args,
    crafted_stream,
    dedup,
    dedup_in_slices,
    mixed_stream,
    ok,
    read_jsonl,
    registry,
    seal,
    wait_for,
    write_jsonl,
)
from tests.support.txnlog import committed

EXIT_INDEX = 5  # streamdedup.errors: the index or one of its segments cannot be used


def open_documents(index: Path) -> int:
    from streamdedup.store.index import Index

    idx = Index(index, readonly=True)
    try:
        return int(idx.read(lambda t: t.count("docs")))
    finally:
        idx.close()


# ------------------------------------------------------------------ the writer killed in `seal`


@pytest.mark.parametrize("point", ["seal-copied", "seal-written", "seal-committed"])
def test_seal_killed_at_each_step_leaves_the_old_state_or_the_new(
    tmp_path: Path, point: str
) -> None:
    """`seal` SIGKILLs itself at one step (streamdedup.failpoints).  Before the commit
    the index is as it was (every document, no segment) and `seal` run again works;
    after it, the segment is registered and the open index empty, and the next writer
    (`dedup`) finishes the rename before it opens the segment.  Either way the rest of
    the stream gets the single index's verdicts, and the segment opens with its
    checksum verified."""
    from streamdedup.store.segment.reading import SealedSegment

    c = crafted_stream()
    docs = c.docs
    ref = file_mode(tmp_path, docs)
    index, segment = tmp_path / "index", tmp_path / "segment-1"
    first = write_jsonl(tmp_path / "first.jsonl", docs[: c.cuts[1]])
    dedup(first, index, tmp_path / "first.out")
    held = open_documents(index)
    crash = seal(index, segment, env={"STREAMDEDUP_FAILPOINT": f"{point}:1"})
    assert crash.returncode == -signal.SIGKILL, crash.stderr.decode()[-2000:]
    partial = segment.with_name(segment.name + ".partial")
    assert not segment.exists() and partial.is_dir()
    rest = write_jsonl(tmp_path / "rest.jsonl", docs[c.cuts[1] :])
    if point == "seal-committed":
        assert [e.path for e in registry(index)] == [str(segment)]
        assert open_documents(index) == 0
        dedup(rest, index, tmp_path / "rest.out")  # the next writer finishes the rename
        assert segment.is_dir() and not partial.exists()
        again = seal(index, segment)  # what an operator would try: it is sealed already
        assert again.returncode == 2 and b"already" in again.stderr, again.stderr
    else:
        assert registry(index) == [] and open_documents(index) == held
        ok(seal(index, segment))
        dedup(rest, index, tmp_path / "rest.out")
    assert [e.path for e in registry(index)] == [str(segment)]
    SealedSegment.open(segment).close()
    got = read_jsonl(tmp_path / "first.out") + read_jsonl(tmp_path / "rest.out")
    assert_same_verdicts(got, ref)


# ------------------------------------------------------------------ damaged or foreign segments


def flip_bytes(path: Path, at: float = 0.5, count: int = 16) -> None:
    """Invert `count` bytes in the middle of a file (its size unchanged)."""
    with open(path, "r+b") as f:
        f.seek(int(path.stat().st_size * at))
        old = f.read(count)
        f.seek(-len(old), os.SEEK_CUR)
        f.write(bytes(b ^ 0xFF for b in old))


def sealed_index(tmp_path: Path, *params: str) -> tuple[Path, Path, list[dict[str, Any]]]:
    """An index with one local sealed segment, and the documents still to come."""
    c = crafted_stream()
    run = dedup_in_slices(c.docs[: c.cuts[1]], tmp_path, [c.cuts[0]], *params)
    return tmp_path / "index", run.segments[0], c.docs[c.cuts[1] :]


def test_damaged_missing_or_foreign_segments_are_refused_naming_them(tmp_path: Path) -> None:
    """One local sealed segment, spoilt in turn: bytes flipped in data.mdb (checksum),
    the directory moved away, replaced by a segment sealed from an index with other
    parameters (--num-perm 64: the wrong volume mounted there), its own manifest
    saying other parameters.  Each time `dedup` exits 5 naming the segment, before
    checking any document, and leaves the index as it was: with the segment put back,
    the rest of the stream gets the single index's verdicts."""
    c = crafted_stream()
    ref = file_mode(tmp_path, c.docs)
    index, segment, _ = sealed_index(tmp_path / "ours")
    _, foreign, _ = sealed_index(tmp_path / "theirs", "--num-perm", "64")
    rest = write_jsonl(tmp_path / "rest.jsonl", c.docs[c.cuts[1] :])
    kept = tmp_path / "kept"
    shutil.copytree(segment, kept)
    manifest = orjson.loads((segment / "manifest.json").read_bytes())
    manifest["params"]["num_perm"] = 64

    def flipped() -> None:
        flip_bytes(segment / "data.mdb")

    def moved() -> None:
        shutil.move(segment, tmp_path / "elsewhere")

    def replaced() -> None:
        shutil.rmtree(segment)
        shutil.copytree(foreign, segment)

    def misdescribed() -> None:
        (segment / "manifest.json").write_bytes(orjson.dumps(manifest))

    cases = [(flipped, "checksum"), (moved, ""), (replaced, ""), (misdescribed, "num_perm")]
    held = open_documents(index)
    for spoil, says in cases:
        spoil()
        out = tmp_path / f"{spoil.__name__}.jsonl"
        r = cli("dedup", str(rest), "--index", str(index), "--output", str(out))
        err = r.stderr.decode()
        assert r.returncode == EXIT_INDEX, (spoil.__name__, r.returncode, err[-2000:])
        assert str(segment) in err and says in err.replace("num-perm", "num_perm"), err
        assert not out.exists() or out.read_bytes() == b"", spoil.__name__
        assert open_documents(index) == held, spoil.__name__
        shutil.rmtree(segment, ignore_errors=True)
        shutil.copytree(kept, segment)
    dedup(rest, index, tmp_path / "rest.out")
    got = read_jsonl(tmp_path / "ours" / "slice-0.verdicts.jsonl")
    got += read_jsonl(tmp_path / "ours" / "slice-1.verdicts.jsonl")
    assert_same_verdicts(got + read_jsonl(tmp_path / "rest.out"), ref)


@pytest.mark.integration
def test_a_segment_server_refuses_a_damaged_segment(kafka_bootstrap: str, tmp_path: Path) -> None:
    _, segment, _ = sealed_index(tmp_path)
    flip_bytes(segment / "data.mdb")
    r = cli("segment-server", str(segment), "--bootstrap-servers", kafka_bootstrap)
    assert r.returncode == EXIT_INDEX, r.stderr.decode()[-2000:]
    err = r.stderr.decode()
    assert str(segment) in err and "checksum" in err, err


# ------------------------------------------------------------------ remote segments, faults


def answers_topic(segment: Path, prefix: str = "streamdedup-segments") -> str:
    seg_id = orjson.loads((segment / "manifest.json").read_bytes())["id"]
    return f"{prefix}.{seg_id}.answers"


class Echo(threading.Thread):
    """Sends every answer on a segment's answers topic a second time (same key, same
    bytes): what a redelivered probe answered by two replicas looks like to the
    writer.  `echoed` counts them."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.topic = bootstrap, topic
        self.echoed = 0
        self.done = threading.Event()

    def run(self) -> None:
        from kafka import KafkaConsumer, KafkaProducer, TopicPartition

        consumer = KafkaConsumer(bootstrap_servers=self.bootstrap, enable_auto_commit=False)
        producer = KafkaProducer(bootstrap_servers=self.bootstrap, linger_ms=0)
        tp = TopicPartition(self.topic, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        mine: set[int] = set()  # offsets of our own copies
        try:
            while not self.done.is_set():
                for batch in consumer.poll(timeout_ms=100).values():
                    for m in batch:
                        if m.offset in mine:
                            continue
                        sent = producer.send(self.topic, key=m.key, value=m.value, partition=0)
                        mine.add(sent.get(timeout=10).offset)
                        self.echoed += 1
        finally:
            consumer.close()
            producer.close()


@pytest.mark.integration
def test_every_probe_answered_twice_changes_nothing(kafka_bootstrap: str, tmp_path: Path) -> None:
    """Every answer of the first segment arrives twice: the verdicts are the single
    index's all the same."""
    c = crafted_stream()
    ref = file_mode(tmp_path, c.docs)
    echoes: list[Echo] = []
    with Servers(kafka_bootstrap) as servers:

        def serve(segment: Path, _: object) -> None:
            servers.start(segment)
            if not echoes:
                from streamdedup.kafka.settings import create_topics

                topic = answers_topic(segment)
                create_topics(kafka_bootstrap, [topic], 1, {})
                echoes.append(Echo(kafka_bootstrap, topic))
                echoes[0].start()

        try:
            run = dedup_in_slices(
                c.docs,
                tmp_path / "remote",
                c.cuts,
                "--bootstrap-servers",
                kafka_bootstrap,
                "--batch-size",
                "3",
                seal_args=("--remote",),
                between=serve,
            )
        finally:
            for e in echoes:
                e.done.set()
                e.join(timeout=10)
        servers.alive()
    assert echoes[0].echoed >= 3, "the writer asked the first segment about every batch"
    assert_same_verdicts(run.verdicts, ref)


def exactly_once(t: Topics, n: int) -> list[dict[str, Any]]:
    """The read_committed verdicts, one per input offset 0..n-1 (else fails saying
    which are missing or repeated), in offset order, `source` removed."""
    seen: dict[int, list[dict[str, Any]]] = {}
    for m in t.read_to_end(t.output):
        v = orjson.loads(m.value)
        seen.setdefault(v.pop("source")["offset"], []).append(v)
    missing = sorted(set(range(n)) - set(seen))
    assert not missing, f"{len(missing)} documents got no verdict: {missing[:10]}"
    twice = sorted(o for o, vs in seen.items() if len(vs) > 1)
    assert not twice, f"{len(twice)} documents got two verdicts: {twice[:10]}"
    assert sorted(seen) == list(range(n)), sorted(set(seen) - set(range(n)))[:10]
    return [seen[o][0] for o in range(n)]


def published(bootstrap: str, topic: str) -> Any:
    """A counter of the records on the output topic so far (aborted ones included)."""
    from kafka import KafkaConsumer, TopicPartition

    watcher = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    watcher.assign([TopicPartition(topic, 0)])
    count = [0]

    def poll() -> int:
        count[0] += sum(len(b) for b in watcher.poll(timeout_ms=20).values())
        return count[0]

    poll.close = watcher.close  # type: ignore[attr-defined]
    return poll


def worker_on_segments(
    t: Topics,
    index: Path,
    docs: list[dict[str, Any]],
    cuts: list[int],
    servers: Servers,
    replicas: list[int],
) -> list[Path]:
    """A worker's index with the documents before each cut sealed `--remote` (the
    worker run to idle on each part, then `seal`), segment k served by replicas[k]
    `segment-server` processes from then on; the documents after the last cut
    produced, not consumed yet."""
    segments: list[Path] = []
    bounds = [0, *cuts]
    for k in range(len(cuts)):
        t.produce([orjson.dumps(d) for d in docs[bounds[k] : bounds[k + 1]]])
        r = t.run_worker(index, "--max-poll-records", "200")
        assert r.returncode == 0, r.stderr.decode()[-3000:]
        segment = index.parent / f"segment-{k + 1}"
        ok(seal(index, segment, "--remote"))
        segments.append(segment)
        for _ in range(replicas[k]):
            servers.start(segment)
    t.produce([orjson.dumps(d) for d in docs[cuts[-1] :]])
    return segments


@pytest.mark.integration
def test_segment_servers_killed_mid_stream(kafka_bootstrap: str, tmp_path: Path) -> None:
    """Two sealed segments, the first served by two replicas, the second by one.  While
    the worker consumes the rest of the stream, one replica of the first is killed -9
    (the other answers) and then the second's only server (a new one is started): the
    worker stalls on the second and goes on; nothing is lost or repeated, and the
    verdicts are the single index's."""
    docs = mixed_stream(1800, seed=31)
    t = Topics(kafka_bootstrap)
    index = tmp_path / "index"
    with Servers(kafka_bootstrap) as servers:
        segments = worker_on_segments(t, index, docs, [500, 1000], servers, [2, 1])
        count = published(kafka_bootstrap, t.output)
        log = tmp_path / "worker.log"
        with open(log, "wb") as sink:
            worker = subprocess.Popen(
                t.worker_args(
                    index,
                    "--max-poll-records",
                    "40",
                    "--idle-exit",
                    "6",
                    "--segment-timeout",
                    "2",
                ),
                stdout=subprocess.DEVNULL,
                stderr=sink,
            )
        second = orjson.loads((segments[1] / "manifest.json").read_bytes())["id"]
        try:
            wait_for(lambda: count() >= 150, 120, "the worker's first verdicts")
            servers.kill(servers.procs[0])  # a replica of segment 1
            wait_for(lambda: count() >= 400, 120, "verdicts after the replica died")
            servers.kill(servers.procs[2])  # segment 2's only server
            wait_for(lambda: second in log.read_text(), 60, "the worker stalled on segment 2")
            stalled = count()
            servers.start(segments[1])
            worker.wait(timeout=240)
        finally:
            if worker.poll() is None:
                worker.kill()
            count.close()
        assert worker.returncode == 0, log.read_text()[-3000:]
        assert stalled < len(docs) - 1000, "the kills came after the end of the stream"
        servers.alive()
    got = exactly_once(t, len(docs))
    assert_same_verdicts(got, file_mode(tmp_path, docs))


@pytest.mark.integration
def test_the_worker_killed_while_a_batch_waits_for_answers(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """The only server of a segment is stopped (SIGSTOP): the worker's first batch waits
    for its answer, warns naming the segment, fails /readyz and publishes nothing; the
    worker is killed -9 there, the server resumes, the worker is started again: one
    verdict per document, the single index's."""
    docs = mixed_stream(900, seed=32)
    t = Topics(kafka_bootstrap)
    index = tmp_path / "index"
    with Servers(kafka_bootstrap) as servers:
        (segment,) = worker_on_segments(t, index, docs, [500], servers, [1])
        decided = len(t.read_to_end(t.output))  # the first part's verdicts
        server = servers.procs[0]
        server.send_signal(signal.SIGSTOP)
        log = tmp_path / "stalled-worker.log"
        port = free_port()
        try:
            with open(log, "wb") as sink:
                worker = subprocess.Popen(
                    t.worker_args(
                        index,
                        "--max-poll-records",
                        "100",
                        "--segment-timeout",
                        "2",
                        "--metrics-port",
                        str(port),
                    ),
                    stdout=subprocess.DEVNULL,
                    stderr=sink,
                )
            seg_id = orjson.loads((segment / "manifest.json").read_bytes())["id"]
            wait_for(lambda: seg_id in log.read_text(), 60, "a warning naming the silent segment")
            time.sleep(3)  # and a re-sent probe, still unanswered
            assert worker.poll() is None
            status, body = scrape(port, "/readyz")
            assert status == 503, (status, body)
            assert len(t.read_to_end(t.output)) == decided, "decided without an answer"
            worker.send_signal(signal.SIGKILL)
            worker.wait(timeout=30)
        finally:
            server.send_signal(signal.SIGCONT)
            if "worker" in locals() and worker.poll() is None:  # a failed check: no leak
                worker.kill()
                worker.wait(timeout=30)
        r = t.run_worker(index, "--max-poll-records", "100", idle=4)
        assert r.returncode == 0, r.stderr.decode()[-3000:]
        servers.alive()
    got = exactly_once(t, len(docs))
    assert_same_verdicts(got, file_mode(tmp_path, docs))


@pytest.mark.integration
@pytest.mark.parametrize("point", ["seal-copied", "seal-committed"])
def test_the_worker_killed_during_an_automatic_seal(
    kafka_bootstrap: str, tmp_path: Path, point: str
) -> None:
    """`--seal-every`: the worker SIGKILLs itself in its second seal, before the seal
    commits or after; started again it goes on: one verdict per document, the single
    index's, and the segments registered are whole."""
    from streamdedup.store.segment.reading import SealedSegment

    docs = mixed_stream(1200, seed=33)
    t = Topics(kafka_bootstrap)
    t.produce([orjson.dumps(d) for d in docs])
    index, auto = tmp_path / "index", tmp_path / "auto"
    opts = ("--max-poll-records", "100", "--seal-every", "300", "--segments-dir", str(auto))
    crash = subprocess.run(
        t.worker_args(index, *opts),
        env={**os.environ, "STREAMDEDUP_FAILPOINT": f"{point}:2"},
        capture_output=True,
        timeout=300,
    )
    assert crash.returncode == -signal.SIGKILL, crash.stderr.decode()[-3000:]
    assert len(registry(index)) == (2 if point == "seal-committed" else 1)
    r = t.run_worker(index, *opts, idle=4)
    assert r.returncode == 0, r.stderr.decode()[-3000:]
    entries = registry(index)
    assert len(entries) >= 3
    for e in entries:
        SealedSegment.open(e.path).close()
    got = exactly_once(t, len(docs))
    assert_same_verdicts(got, file_mode(tmp_path, docs))


@pytest.mark.integration
def test_seal_while_the_worker_runs(kafka_bootstrap: str, tmp_path: Path) -> None:
    """`seal` run by hand while a worker consumes (the way a deployment grows): once
    locally, once `--remote` with a `segment-server` started right after.  The worker
    picks up each new segment between batches: one verdict per document, the single
    index's."""
    docs = mixed_stream(1500, seed=34)
    t = Topics(kafka_bootstrap)
    t.produce([orjson.dumps(d) for d in docs])
    index = tmp_path / "index"
    count = published(kafka_bootstrap, t.output)
    log = tmp_path / "worker.log"
    with Servers(kafka_bootstrap) as servers:
        with open(log, "wb") as sink:
            worker = subprocess.Popen(
                t.worker_args(index, "--max-poll-records", "30", "--idle-exit", "5"),
                stdout=subprocess.DEVNULL,
                stderr=sink,
            )
        try:
            wait_for(lambda: count() >= 300, 120, "the worker's first verdicts")
            ok(seal(index, tmp_path / "segment-1"))
            wait_for(lambda: count() >= 700, 120, "verdicts after the first seal")
            ok(seal(index, tmp_path / "segment-2", "--remote"))
            servers.start(tmp_path / "segment-2")
            at_second = count()
            worker.wait(timeout=240)
        finally:
            if worker.poll() is None:
                worker.kill()
            count.close()
        assert worker.returncode == 0, log.read_text()[-3000:]
        servers.alive()
    assert at_second < len(docs), "the second seal came after the end of the stream"
    assert [e.remote for e in registry(index)] == [False, True]
    got = exactly_once(t, len(docs))
    assert_same_verdicts(got, file_mode(tmp_path, docs))


@pytest.mark.integration
def test_a_stopped_replica_and_its_partner_both_answer(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """Two servers of one segment.  The one answering is stopped (SIGSTOP) while
    `dedup` runs: the writer re-sends the unanswered probe, the partner takes the
    partition over and answers it; the stopped one then resumes and answers what it
    held as well.  The answers topic shows probes answered twice; the verdicts are
    the single index's."""
    docs = mixed_stream(1600, seed=35)
    ref = file_mode(tmp_path, docs)
    index = tmp_path / "index"
    dedup(write_jsonl(tmp_path / "a.jsonl", docs[:600]), index, tmp_path / "a.out")
    segment = tmp_path / "segment-1"
    ok(seal(index, segment, "--remote"))
    with Servers(kafka_bootstrap, "--log-every", "5") as servers:
        for _ in range(2):
            servers.start(segment)

        def answering() -> list[int]:
            return [
                k for k, log in enumerate(servers.logs) if "answering probes" in log.read_text()
            ]

        wait_for(lambda: len(answering()) == 1, 60, "one of the two servers answering")
        (first,) = answering()
        log = tmp_path / "dedup.log"
        with open(log, "wb") as sink:
            writer = subprocess.Popen(
                [
                    *cli_args("dedup", str(write_jsonl(tmp_path / "b.jsonl", docs[600:]))),
                    *("--index", str(index), "--output", str(tmp_path / "b.out")),
                    *("--bootstrap-servers", kafka_bootstrap, "--batch-size", "10"),
                    *("--segment-timeout", "1", "--progress", "never"),
                ],
                stderr=sink,
            )
        try:
            wait_for(
                lambda: "probes answered" in servers.logs[first].read_text(),
                60,
                "the first server's answers",
            )
            servers.procs[first].send_signal(signal.SIGSTOP)
            wait_for(lambda: len(answering()) == 2, 60, "the partner taking over")
            servers.procs[first].send_signal(signal.SIGCONT)
            writer.wait(timeout=300)
        finally:
            servers.procs[first].send_signal(signal.SIGCONT)
            if writer.poll() is None:
                writer.kill()
        assert writer.returncode == 0, log.read_text()[-3000:]
        servers.alive()
    keys = [r.key for r in committed(kafka_bootstrap, answers_topic(segment))]
    assert len(keys) > len(set(keys)), "no probe was answered twice"
    got = read_jsonl(tmp_path / "a.out") + read_jsonl(tmp_path / "b.out")
    assert_same_verdicts(got, ref)


def test_a_segment_server_whose_clock_runs_ahead_answers_every_probe(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """The segment server's host clock runs 400 s ahead of the writer's,
    beyond --max-probe-age (300 s): it must answer every probe as a server in step
    does, not skip them as stale and leave the writer waiting for ever.  Staleness is
    judged on the writer's clock alone."""
    from tests.support.skewed_clock import wrap

    docs = mixed_stream(600, seed=36)
    ref = file_mode(tmp_path, docs)
    index = tmp_path / "index"
    dedup(write_jsonl(tmp_path / "a.jsonl", docs[:300]), index, tmp_path / "a.out")
    segment = tmp_path / "segment-1"
    ok(seal(index, segment, "--remote"))
    with Servers(kafka_bootstrap, "--log-every", "5") as servers:
        servers.start(segment, wrap=lambda argv: wrap(400.0, argv))
        log = tmp_path / "dedup.log"
        with open(log, "wb") as sink:
            writer = subprocess.Popen(
                [
                    *cli_args("dedup", str(write_jsonl(tmp_path / "b.jsonl", docs[300:]))),
                    *("--index", str(index), "--output", str(tmp_path / "b.out")),
                    *("--bootstrap-servers", kafka_bootstrap, "--batch-size", "50"),
                    *("--segment-timeout", "2", "--progress", "never"),
                ],
                stderr=sink,
            )
        try:
            writer.wait(timeout=120)
        except subprocess.TimeoutExpired:
            writer.kill()
            writer.wait()
            raise AssertionError(
                "the writer waited for ever: " + servers.logs[0].read_text(errors="replace")[-2000:]
            ) from None
        assert writer.returncode == 0, log.read_text()[-3000:]
        servers.alive()
        server_log = servers.logs[0].read_text(errors="replace")
    assert "stale" not in server_log, server_log[-2000:]
    got = read_jsonl(tmp_path / "a.out") + read_jsonl(tmp_path / "b.out")
    assert_same_verdicts(got, ref)
