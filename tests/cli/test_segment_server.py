"""`streamdedup segment-server` on real sealed segments: an index whose segments are
sealed as remote and answered only by segment-server processes (started with the
command line, on the real broker) decides every document exactly as one index;
its health and metrics endpoints; and the refusals before anything is served (no
segment at the path, no broker at the address)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import urllib.error
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest

from streamdedup import Deduplicator
from streamdedup.config import EngineOptions
from streamdedup.kafka.broker import free_port
from streamdedup.kafka.segment_service.client import RemoteSegments
from streamdedup.kafka.segment_service.wire import SegmentLink
from streamdedup.ops.metrics import Metrics
from tests.engine.sealed.test_sealed import hostile_stream, run
from tests.support.kafka import FAST_GROUP, Topics, stream, verdicts_by_offset
from tests.support.metrics import samples, scrape

OPTIONS = EngineOptions(max_bucket_candidates=4, max_exact_checks=3)


def server_args(segment: Path, bootstrap: str, prefix: str, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "streamdedup.cli",
        "segment-server",
        str(segment),
        "--bootstrap-servers",
        bootstrap,
        "--segment-prefix",
        prefix,
        *FAST_GROUP,
        *extra,
    ]


@pytest.mark.integration
def test_remote_segments_served_by_the_command_decide_as_one_index(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """600 hostile documents in batches of 40, sealed twice as remote segments, each
    answered by its own `segment-server` process: the verdicts equal one index's;
    the servers report on /readyz and /metrics, and stop on SIGTERM with status 0."""
    docs = hostile_stream(600, seed=11)
    one = run(tmp_path / "one", docs, 40, set(), OPTIONS)
    prefix = f"seg-{uuid.uuid4().hex[:8]}"
    link = SegmentLink(kafka_bootstrap, prefix)
    metrics = Metrics()
    servers: list[tuple[subprocess.Popen[bytes], int, Path]] = []
    out: list[dict[str, Any]] = []
    try:
        with (
            RemoteSegments(link, timeout_s=30, metrics=metrics.segments) as remote,
            Deduplicator(
                tmp_path / "remote",
                threshold=0.7,
                num_perm=64,
                options=OPTIONS,
                remote=remote.reader,
            ) as dd,
        ):
            for start in range(0, len(docs), 40):
                if start in (200, 440):
                    segment = tmp_path / f"segment-{start}"
                    dd.seal(segment, remote=True)
                    port = free_port()
                    log = tmp_path / f"server-{start}.log"
                    with log.open("wb") as err:
                        proc = subprocess.Popen(
                            server_args(
                                segment, kafka_bootstrap, prefix, "--metrics-port", str(port)
                            ),
                            stderr=err,
                        )
                    servers.append((proc, port, log))
                out += [v.to_dict() for v in dd.check_batch(docs[start : start + 40])]
            latencies = remote.latencies()
        assert out == one
        assert sorted(latencies) == [1, 2] and all(v is not None for v in latencies.values())
        asked = metrics.registry.get_sample_value(
            "streamdedup_segment_probe_seconds_count", {"segment": "1"}
        )
        assert asked is not None and asked >= (600 - 200) / 40
        for proc, port, log in servers:
            assert proc.poll() is None, log.read_text()
            status, body = scrape(port, "/readyz")
            assert (status, body) == (200, "ok, answering probes\n")
            answered = samples(scrape(port)[1])[("streamdedup_segment_probes_total", ())]
            assert answered >= 1
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=30) == 0, log.read_text()
            text = log.read_text()
            assert "segment-" in text and "documents, docnos" in text
            assert f"stopped: {int(answered)} probes answered" in text
    finally:
        for proc, _, _ in servers:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def sealed_segment(tmp_path: Path) -> Path:
    segment = tmp_path / "segment"
    with Deduplicator(tmp_path / "index", threshold=0.7, num_perm=64) as dd:
        dd.check_batch(hostile_stream(50, seed=1))
        dd.seal(segment)
    return segment


def test_no_segment_at_the_path_is_refused_before_connecting(tmp_path: Path) -> None:
    empty = tmp_path / "not-a-segment"
    empty.mkdir()
    started = time.monotonic()
    r = subprocess.run(
        server_args(empty, f"127.0.0.1:{free_port()}", "p", "--connect-timeout", "30"),
        capture_output=True,
    )
    assert r.returncode == 5, r.stderr
    err = r.stderr.decode()
    assert "streamdedup: error:" in err and str(empty) in err
    assert time.monotonic() - started < 20  # not the 30 s of waiting for the broker


def test_an_unreachable_broker_is_reported(tmp_path: Path) -> None:
    segment = sealed_segment(tmp_path)
    r = subprocess.run(
        server_args(segment, f"127.0.0.1:{free_port()}", "p", "--connect-timeout", "0.5"),
        capture_output=True,
    )
    assert r.returncode == 3, r.stderr
    assert "no Kafka broker answered" in r.stderr.decode()


def test_bad_option_values_are_refused(tmp_path: Path) -> None:
    segment = sealed_segment(tmp_path)
    r = subprocess.run(
        server_args(segment, "127.0.0.1:1", "p", "--max-probe-age", "0"), capture_output=True
    )
    assert r.returncode == 2
    assert "--max-probe-age must be above 0" in r.stderr.decode()


def dedup(tmp: Path, name: str, docs: list[dict[str, Any]], *extra: str) -> Any:
    """`streamdedup dedup` of `docs`: the completed process and the verdicts."""
    src = tmp / f"{name}.jsonl"
    src.write_bytes(b"".join(orjson.dumps(d) + b"\n" for d in docs))
    out = tmp / f"{name}-verdicts.jsonl"
    r = subprocess.run(
        [sys.executable, "-m", "streamdedup.cli", "dedup", str(src), "--output", str(out), *extra],
        capture_output=True,
    )
    verdicts = [orjson.loads(x) for x in out.read_bytes().splitlines()] if out.exists() else []
    return r, verdicts


def seal_remote(index: Path, dest: Path, link: SegmentLink) -> str:
    """Seal everything `index` holds into `dest` as a remote segment; its id."""
    with RemoteSegments(link) as remote, Deduplicator(index, remote=remote.reader) as dd:
        return dd.seal(dest, remote=True).id


@pytest.mark.integration
def test_dedup_reaches_remote_segments_with_bootstrap_servers(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """`dedup` of a second file against an index whose first file went to a remote
    segment: refused without --bootstrap-servers, and with it (a segment-server
    answering) the verdicts of one `dedup` over both files."""
    docs = stream(240, seed=12)
    prefix = f"seg-{uuid.uuid4().hex[:8]}"
    index = tmp_path / "index"
    r, _ = dedup(tmp_path, "first", docs[:120], "--index", str(index))
    assert r.returncode == 0, r.stderr
    seal_remote(index, tmp_path / "segment", SegmentLink(kafka_bootstrap, prefix))
    r, _ = dedup(tmp_path, "refused", docs[120:], "--index", str(index))
    assert r.returncode == 2 and b"give --bootstrap-servers" in r.stderr
    log = tmp_path / "server.log"
    with log.open("wb") as err:
        server = subprocess.Popen(
            server_args(tmp_path / "segment", kafka_bootstrap, prefix), stderr=err
        )
    try:
        remote_args = ("--bootstrap-servers", kafka_bootstrap, "--segment-prefix", prefix)
        r, second = dedup(tmp_path, "second", docs[120:], "--index", str(index), *remote_args)
        assert r.returncode == 0, r.stderr
    finally:
        server.kill()
        server.wait()
    _, single = dedup(tmp_path, "single", docs, "--index", str(tmp_path / "single"))
    assert second == single[120:]
    # the segment mattered: many of the second file's duplicates are of the first's
    older = [v for v in second if v["duplicate_of"] and int(v["duplicate_of"][1:]) < 120]
    assert len(older) >= 10, len(older)


@pytest.mark.integration
@pytest.mark.parametrize("stop_first", [False, True], ids=["wait", "sigterm-then-restart"])
def test_a_worker_waits_for_a_remote_segment_and_says_so_on_readyz(
    kafka_bootstrap: str, tmp_path: Path, stop_first: bool
) -> None:
    """A worker on an index with a remote segment and no server for it: its batch
    waits, /readyz answers 503 naming the segment and the stall metric counts; once a
    segment-server starts, every verdict is published, equal to one `dedup` run.
    (`stop_first`: SIGTERM during the wait stops the worker at once, status 0, the
    batch undecided; a new worker decides it once the server is there.)"""
    docs = stream(200, seed=13)
    prefix = f"seg-{uuid.uuid4().hex[:8]}"
    index = tmp_path / "index"
    r, _ = dedup(tmp_path, "first", docs[:100], "--index", str(index))
    assert r.returncode == 0, r.stderr
    segment_id = seal_remote(index, tmp_path / "segment", SegmentLink(kafka_bootstrap, prefix))
    t = Topics(kafka_bootstrap)
    t.produce([orjson.dumps(d) for d in docs[100:]])
    port = free_port()
    worker_log = tmp_path / "worker.log"
    worker_args = t.worker_args(
        index,
        "--segment-prefix",
        prefix,
        "--segment-timeout",
        "1",
        "--metrics-port",
        str(port),
        "--idle-exit",
        "3",
    )
    with worker_log.open("wb") as err:
        worker = subprocess.Popen(worker_args, stderr=err)
    server = None
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                status, why = scrape(port, "/readyz")
            except urllib.error.URLError:  # not listening yet
                status, why = 0, ""
            if status == 503 and "has not answered" in why:
                break
            assert time.monotonic() < deadline, (status, why, worker_log.read_text())
            time.sleep(0.2)
        assert f"segment 1 ({segment_id})" in why
        stalls = samples(scrape(port)[1])[("streamdedup_segment_stalls_total", (("segment", "1"),))]
        assert stalls >= 1
        assert t.read(t.output, timeout=1) == []  # nothing decided without the segment
        if stop_first:  # SIGTERM ends the wait; the batch goes to the next worker
            worker.send_signal(signal.SIGTERM)
            assert worker.wait(timeout=15) == 0, worker_log.read_text()
            assert "stopped while waiting for segment 1" in worker_log.read_text()
            with worker_log.open("ab") as err:
                worker = subprocess.Popen(worker_args, stderr=err)
        with (tmp_path / "server.log").open("wb") as err:
            server = subprocess.Popen(
                server_args(tmp_path / "segment", kafka_bootstrap, prefix), stderr=err
            )
        assert worker.wait(timeout=120) == 0, worker_log.read_text()
    finally:
        for proc in (worker, server):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
    assert "sending the probe again" in worker_log.read_text()
    got = verdicts_by_offset(t.read(t.output, expect=100))
    _, single = dedup(tmp_path, "single", docs, "--index", str(tmp_path / "single"))
    assert [got[(0, i)] for i in range(100)] == single[100:]


def test_a_writers_client_options_stay_out_of_its_probe_clients() -> None:
    """`--producer-option transactional_id=...` is the worker's transactional
    producer's; given to the probe producer it would make every probe wait for a
    transaction.  The segment server's own options do reach its clients."""
    from streamdedup.cli.main import parse
    from streamdedup.cli.segment_server import link_from_options, remote_for

    common = ["--bootstrap-servers", "b:9092", "--segment-prefix", "pre"]
    pairs = ["--producer-option", "transactional_id=t", "--consumer-option", "fetch_min_bytes=2"]
    _, _, worker = parse(["worker", "--index", "i", "--segment-timeout", "4", *common, *pairs])
    remote = remote_for(worker)
    assert remote is not None and remote.timeout_s == 4
    assert remote.link.prefix == "pre" and remote.link.bootstrap_servers == "b:9092"
    assert remote.link.producer_options == {} and remote.link.consumer_options == {}
    _, _, server = parse(["segment-server", "seg", *common, *pairs])
    link = link_from_options(server)
    assert link.producer_options == {"transactional_id": "t"}
    assert link.consumer_options == {"fetch_min_bytes": 2}
    _, _, plain = parse(["dedup", "in.jsonl", "--index", "i"])
    assert remote_for(plain) is None  # dedup of an index without remote segments
