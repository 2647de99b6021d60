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
import uuid
from pathlib import Path
from typing import Any

import pytest

from streamdedup import Deduplicator
from streamdedup.config import EngineOptions
from streamdedup.kafka.broker import free_port
from streamdedup.kafka.segment_client import RemoteSegments
from streamdedup.kafka.segments import SegmentLink
from streamdedup.ops.metrics import Metrics
from tests.engine.test_sealed import hostile_stream, run
from tests.support.kafka import FAST_GROUP
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
