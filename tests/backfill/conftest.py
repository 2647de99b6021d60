"""One SparkSession per test process (a JVM takes seconds to start), on `local[2]`,
made by the package's own `session` so that it listens as a user's run does (on
loopback only)."""

from __future__ import annotations

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
