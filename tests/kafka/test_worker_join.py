"""The worker's start on the embedded broker, with no timeouts of the test's own: it
says it is joining, joins in seconds (Tansu answers a join after about twice the
session timeout: 23-25 s with kafka-python's default), names partitions as
`topic[p]`, and stops promptly on Ctrl-C during the join."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest

from streamdedup.kafka.settings import probe_cluster
from tests.support.kafka import Topics

pytestmark = pytest.mark.integration


@pytest.fixture
def embedded(kafka_bootstrap: str) -> str:
    if not probe_cluster(kafka_bootstrap, "-", {}).embedded:
        pytest.skip("the short session applies to the embedded broker only")
    return kafka_bootstrap


def test_the_worker_says_it_joins_and_joins_in_seconds(embedded: str, tmp_path: Path) -> None:
    t = Topics(embedded)
    started = time.monotonic()
    r = subprocess.run(
        t.worker_args(tmp_path / "idx", "--idle-exit", "0.5", fast_group=False),
        capture_output=True,
        timeout=120,
    )
    elapsed = time.monotonic() - started
    assert r.returncode == 0, r.stderr.decode()[-3000:]
    log = r.stderr.decode()
    assert "embedded broker (Tansu): consumer-group session timeout 3s" in log
    assert f"joining consumer group '{t.group}' on topic '{t.input}' (session timeout 3s)" in log
    assert f"joined consumer group '{t.group}'; partitions assigned: {t.input}[0]" in log
    assert "TopicPartition(" not in log
    assert elapsed < 12, f"start, join and idle exit took {elapsed:.1f}s"


def test_ctrl_c_during_the_join_is_prompt(embedded: str, tmp_path: Path) -> None:
    t = Topics(embedded)
    proc = subprocess.Popen(
        t.worker_args(tmp_path / "idx", fast_group=False), stderr=subprocess.PIPE, text=True
    )
    assert proc.stderr is not None
    for line in proc.stderr:  # wait until it is joining
        if "joining consumer group" in line:
            break
    started = time.monotonic()
    proc.send_signal(signal.SIGINT)
    try:
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert time.monotonic() - started < 5
