"""The Spark session a backfill runs in, and where it listens.

A Spark driver opens listening sockets for the whole job: its RPC endpoint and its
block manager (shuffle blocks, broadcast pieces, cached partitions).  Neither is
authenticated unless `spark.authenticate` is on, and by default Spark binds them to
the host's routable address (with a hostname that resolves to loopback it picks the
first non-loopback interface).  With a local master (`local`, `local[N]`,
`local[*]`, `local[N,F]`) every executor lives in the driver's JVM, so nothing ever
needs to reach those sockets from another host: they are bound to loopback, where no
other host can send a job or read the archive's texts out of a block.  With a cluster
master the executors must reach the driver, so the addresses (and Spark's own
authentication and encryption) are the operator's choice (docs/backfill.md).

An address the operator set explicitly (`spark-submit --conf`, spark-defaults.conf,
or `SPARK_LOCAL_IP`) is kept: loopback is the default, not a lock.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Container
from typing import Any

from streamdedup.errors import ConfigError

LOOPBACK = "127.0.0.1"
# the driver's RPC endpoint binds to `bindAddress` and advertises `host`; its block
# manager (BlockTransferService) binds and advertises the same pair
DRIVER_ADDRESSES = ("spark.driver.host", "spark.driver.bindAddress")
# the daemon the Python task workers fork from (worker_daemon.py says why ours; named,
# not imported: it imports PySpark, which this module must not need to be imported)
DAEMON_MODULE = "spark.python.daemon.module"
WORKER_DAEMON = "streamdedup.backfill.worker_daemon"
_LOCAL = re.compile(r"local(\[[^\]]*\])?")


def is_local(master: str) -> bool:
    """Whether `master` runs every executor inside the driver's JVM."""
    return _LOCAL.fullmatch(master.strip()) is not None


def network_settings(master: str, present: Container[str]) -> dict[str, str]:
    """The settings that keep a `master`'s listeners off the network: for a local
    master, the driver's addresses on loopback unless `present` (the keys the
    operator set) names one of them; always no web UI (several backfills may run on
    one host, and a UI is another unauthenticated listener)."""
    out = {"spark.ui.enabled": "false"}
    if is_local(master) and not any(key in present for key in DRIVER_ADDRESSES):
        out.update(dict.fromkeys(DRIVER_ADDRESSES, LOOPBACK))
    return out


def worker_settings(present: Container[str]) -> dict[str, str]:
    """The daemon the Python task workers fork from: `worker_daemon` unless `present`
    (the keys the operator set) names one."""
    return {} if DAEMON_MODULE in present else {DAEMON_MODULE: WORKER_DAEMON}


def session(
    master: str | None, app: str = "streamdedup-backfill", extra: dict[str, str] | None = None
) -> Any:
    """A Spark session on `master`, else spark-submit's, else `local[*]`; quiet
    (warnings only), executors on this Python forked from `worker_settings`' daemon,
    listening as `network_settings` says.
    The tests' shared session comes from here too, so they listen as a user's run."""
    try:
        from pyspark import SparkConf
        from pyspark.sql import SparkSession
    except ImportError as exc:
        raise ConfigError(
            "backfill needs PySpark: pip install 'streamdedup[spark]' (and a Java runtime)"
        ) from exc
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    local_ip = os.environ.get("SPARK_LOCAL_IP")
    if master is not None and is_local(master) and local_ip is None:
        # read by the JVM that SparkConf() starts below (when this process starts it):
        # Spark then also logs and names its host by the loopback address
        os.environ["SPARK_LOCAL_IP"] = LOOPBACK
    conf = SparkConf()
    chosen = master or conf.get("spark.master", "local[*]") or "local[*]"
    present = {key for key in (*DRIVER_ADDRESSES, DAEMON_MODULE) if conf.contains(key)}
    if local_ip not in (None, LOOPBACK):  # the operator's own address for this host
        present.update(DRIVER_ADDRESSES)
    builder = SparkSession.builder.appName(app).master(chosen)
    settings = {
        **network_settings(chosen, present),
        "spark.ui.showConsoleProgress": "false",
        **worker_settings(present),
        **(extra or {}),
    }
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
