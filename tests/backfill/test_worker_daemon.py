"""The daemon the task workers fork from: named by the session unless the operator
chose another, and what it loaded is frozen out of the collector in every worker."""

from __future__ import annotations

import gc
from typing import Any

from streamdedup.backfill.session import DAEMON_MODULE, WORKER_DAEMON, worker_settings


def test_the_operator_s_daemon_is_kept() -> None:
    assert worker_settings(set()) == {DAEMON_MODULE: WORKER_DAEMON}
    assert worker_settings({DAEMON_MODULE}) == {}


def test_the_tasks_run_in_workers_forked_from_a_frozen_daemon(spark: Any) -> None:
    """Each worker sees PySpark's and the package's objects frozen (tens of thousands;
    a worker forked from PySpark's own daemon sees none), so the collection PySpark
    runs after every task does not walk them."""
    sc = spark.sparkContext
    assert sc.getConf().get(DAEMON_MODULE) == WORKER_DAEMON
    frozen = sc.parallelize(range(4), 2).map(lambda _: gc.get_freeze_count()).collect()
    assert min(frozen) > 10_000, frozen
