"""The metrics registry and the health endpoints, served over real HTTP."""

from __future__ import annotations

import contextlib
import http.client
import json
import logging
import socket
import struct
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from streamdedup.ops import metrics
from streamdedup.ops.logs import setup_logging
from streamdedup.ops.metrics import HealthPolicy, Metrics


def get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_endpoints_follow_the_loop_and_the_lag() -> None:
    m = Metrics(HealthPolicy(stall_s=0.2, ready_max_lag=10))
    port = m.serve("127.0.0.1", 0)
    try:
        assert get(port, "/healthz")[0] == 200
        assert get(port, "/readyz") == (503, "no partitions assigned\n")
        m.set_lag({("t", 0): 4, ("t", 1): 7})
        assert get(port, "/readyz") == (503, "lag 11 above 10\n")
        m.set_lag({("t", 0): 4})  # partition 1 moved away: its series goes too
        assert get(port, "/readyz") == (200, "ok, lag 4\n")
        m.documents.inc(5)
        m.batch_seconds.observe(0.3)
        families = {f.name: f for f in text_string_to_metric_families(get(port, "/metrics")[1])}
        lag = {s.labels["partition"]: s.value for s in families["streamdedup_consumer_lag"].samples}
        assert lag == {"0": 4.0}
        assert families["streamdedup_documents"].samples[0].value == 5
        import time

        time.sleep(0.3)
        assert get(port, "/healthz")[0] == 503
        m.heartbeat()
        assert get(port, "/healthz")[0] == 200
    finally:
        m.close()


def test_registries_are_separate() -> None:
    a, b = Metrics(), Metrics()
    a.documents.inc()
    assert b"streamdedup_documents_total 1.0" in a.render()
    assert b"streamdedup_documents_total 0.0" in b.render()


def test_a_taken_port_is_a_clear_error() -> None:
    import pytest

    from streamdedup.errors import ConfigError

    first = Metrics()
    port = first.serve("127.0.0.1", 0)
    try:
        with pytest.raises(ConfigError, match=f"cannot serve metrics on 127.0.0.1:{port}"):
            Metrics().serve("127.0.0.1", port)
    finally:
        first.close()


def test_clock_outliers_are_counted_and_warned_about_once_a_minute(caplog, monkeypatch) -> None:

    from streamdedup.config import EngineOptions
    from streamdedup.kafka import observer as observer_module
    from streamdedup.kafka.observer import WorkerObserver

    clock = [1000.0]
    monkeypatch.setattr(observer_module.time, "monotonic", lambda: clock[0])
    w = WorkerObserver(Metrics(), EngineOptions().max_clock_skew_ms)
    with caplog.at_level("WARNING", logger="streamdedup.kafka.worker"):
        w.warn_outliers([(0, 7, 4_102_444_800_000)])
        clock[0] += 30
        w.warn_outliers([(1, 8, 4_102_444_800_001), (1, 9, 4_102_444_800_002)])
        clock[0] += 31
        w.warn_outliers([(2, 5, 4_102_444_800_003)])
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2
    assert lines[0].startswith("message at partition 0, offset 7 has timestamp 4102444800000")
    assert "(1 such messages since the last warning)" in lines[0]
    assert lines[1].startswith("message at partition 2, offset 5 has timestamp 4102444800003")
    assert "(3 such messages since the last warning)" in lines[1]
    assert b"streamdedup_clock_outliers_total 4.0" in w.metrics.render()


@contextlib.contextmanager
def json_log() -> Iterator[None]:
    """The package's JSON log on stderr for the test, then the old handlers back."""
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    setup_logging("info", "json")
    try:
        yield
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])


def test_client_hangups_and_handler_errors_keep_the_log_json(
    capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    m = Metrics()
    with json_log():
        port = m.serve("127.0.0.1", 0)
        try:
            for payload in (b"GET /metrics HTTP/1.1\r\nHost: x\r\n", b"GET /metri"):
                s = socket.create_connection(("127.0.0.1", port))
                s.sendall(payload)
                time.sleep(0.2)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                s.close()  # a reset in the middle of the request
            monkeypatch.setattr(m, "render", lambda: 1 / 0)
            with contextlib.suppress(OSError, http.client.HTTPException):
                get(port, "/metrics")  # the server hangs up without an answer
            time.sleep(0.5)
        finally:
            m.close()
    err = capfd.readouterr().err
    records = [json.loads(line) for line in err.splitlines()]  # every line is JSON
    assert [r["message"] for r in records] == ["metrics request from 127.0.0.1 failed"]
    assert "ZeroDivisionError" in records[0]["exception"]


def test_idle_connections_are_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(metrics, "IDLE_TIMEOUT_S", 0.5, raising=False)
    m = Metrics()
    port = m.serve("127.0.0.1", 0)
    try:
        before = threading.active_count()
        idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(5)]
        time.sleep(0.2)
        assert threading.active_count() == before + 5  # a thread per open connection
        started = time.monotonic()
        for s in idle:
            s.settimeout(5)
            assert s.recv(1) == b""  # closed by the server, not by our timeout
            s.close()
        assert time.monotonic() - started < 3
        time.sleep(0.2)
        assert threading.active_count() == before
        assert get(port, "/healthz")[0] == 200  # and it still serves
    finally:
        m.close()


def test_trouble_fails_health_until_cleared() -> None:
    """A loop that turns without progress (transactions failing in a row) is unhealthy
    however recent its heartbeat."""
    m = Metrics()
    port = m.serve("127.0.0.1", 0)
    try:
        m.trouble("5 Kafka transactions in a row failed, the last with: boom")
        m.heartbeat()
        assert get(port, "/healthz") == (
            503,
            "5 Kafka transactions in a row failed, the last with: boom\n",
        )
        m.trouble(None)
        assert get(port, "/healthz") == (200, "ok\n")
    finally:
        m.close()
