"""The metrics registry and the health endpoints, served over real HTTP."""

from __future__ import annotations

import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from streamdedup.metrics import HealthPolicy, Metrics


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
