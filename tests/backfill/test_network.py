"""A backfill on a local master listens on loopback only (issue 35, item 13): Spark's
driver RPC and block manager are unauthenticated, and by default bind to the host's
routable address for the whole job."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from streamdedup.backfill.session import LOOPBACK, is_local, network_settings
from tests.backfill.test_backfill import dedup
from tests.support.cli import corpus, lines
from tests.support.sockets import is_loopback, listeners

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(
    ("master", "local"),
    [
        ("local", True),
        ("local[2]", True),
        ("local[*]", True),
        ("local[4,3]", True),
        ("yarn", False),
        ("spark://10.0.0.5:7077", False),
        ("k8s://https://api:6443", False),
        ("local-cluster[2,1,1024]", False),
    ],
)
def test_which_masters_are_local(master: str, local: bool) -> None:
    assert is_local(master) is local
    got = network_settings(master, set())
    assert got["spark.ui.enabled"] == "false"
    assert (got.get("spark.driver.bindAddress") == LOOPBACK) is local
    assert (got.get("spark.driver.host") == LOOPBACK) is local


def test_an_address_the_operator_set_is_kept() -> None:
    got = network_settings("local[2]", {"spark.driver.bindAddress"})
    assert "spark.driver.bindAddress" not in got and "spark.driver.host" not in got


def _outside(found: dict[tuple[int, Any, int], str]) -> list[str]:
    return [
        f"{name} (pid {p}) on {a}:{port}"
        for (p, a, port), name in found.items()
        if not is_loopback(a)
    ]


@pytest.mark.spark_command
def test_the_command_listens_on_loopback_only(tmp_path: Path) -> None:
    """The command itself on `local[2]` (a JVM of its own): its listening sockets (the
    JVM's RPC endpoint, block manager and Py4J gateway, the Python side's) sampled for
    the whole run; and what it writes and says, as `dedup` would (a rejected line:
    exit 1)."""
    src = tmp_path / "in.jsonl"
    corpus(src, 200, seed=4)
    with src.open("ab") as f:
        f.write(b"not json\n")
    out = tmp_path / "out.jsonl"
    cmd = [sys.executable, "-m", "streamdedup.cli", "backfill", str(src), "--output", str(out)]
    proc = subprocess.Popen(
        [*cmd, "--spark-master", "local[2]", "--split-bytes", "20000"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    seen: dict[tuple[int, Any, int], str] = {}
    try:
        while proc.poll() is None:
            seen.update(listeners(proc.pid))
            time.sleep(0.05)
        err = proc.stderr.read().decode() if proc.stderr else ""
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    assert proc.returncode == 1, err  # a rejected line: exit 1, like dedup
    assert "backfill: read: 201 lines" in err and "rejected 1 (malformed_json 1)" in err
    assert out.read_bytes() == dedup(tmp_path, [src])
    assert len(lines(out)) == 201
    java = {port for (_, _, port), name in seen.items() if name == "java"}
    # Py4J's gateway, the driver's RPC endpoint and its block manager at least
    assert len(java) >= 3, f"too few JVM listeners seen to judge: {seen}"
    assert not _outside(seen), f"listening beyond loopback: {_outside(seen)}"


def test_the_tests_session_listens_on_loopback_only(spark: Any) -> None:
    """The tests' shared session (and CI's) comes from the same `session`."""
    sc = spark.sparkContext
    assert sc.parallelize(range(100), 4).map(lambda x: (x % 7, x)).groupByKey().count() == 7
    conf = sc.getConf()
    assert conf.get("spark.driver.bindAddress") == LOOPBACK
    assert conf.get("spark.driver.host") == LOOPBACK
    found = listeners(sc._gateway.proc.pid)
    assert any(name == "java" for name in found.values()), found
    assert not _outside(found), f"listening beyond loopback: {_outside(found)}"
