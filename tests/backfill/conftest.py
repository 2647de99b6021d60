"""One SparkSession per test process (a JVM takes seconds to start), on `local[2]`,
made by the package's own `session` so that it listens as a user's run does (on
loopback only); failpoints armed in its task workers."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    pytest.importorskip("pyspark")
    from streamdedup.backfill.session import session as make_session

    session = make_session(
        "local[2]",
        "streamdedup-tests",
        {"spark.driver.memory": "1g", "spark.sql.shuffle.partitions": "4"},
    )
    yield session
    session.stop()


@contextlib.contextmanager
def armed(spark: Any, point: str) -> Iterator[None]:
    """A failpoint (streamdedup/failpoints.py) armed in the task workers of the jobs
    started inside the block: PySpark gives each job's workers `sc.environment`
    (workers of a daemon of their own), so the shared JVM serves a failing job too."""
    env = spark.sparkContext.environment
    env["STREAMDEDUP_FAILPOINT"] = point
    try:
        yield
    finally:
        del env["STREAMDEDUP_FAILPOINT"]
