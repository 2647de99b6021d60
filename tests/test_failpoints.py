"""Crash points: armed only by STREAMDEDUP_FAILPOINT, and then exactly at the Nth pass."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from streamdedup import failpoints
from streamdedup.errors import ConfigError

SCRIPT = """
from streamdedup import failpoints
for i in range(1, 4):
    failpoints.reach("verdicts-sent")
    failpoints.reach("committed", before=lambda: print("flushed", flush=True))
    print("passed", i, flush=True)
"""


def run(spec: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "STREAMDEDUP_FAILPOINT"}
    if spec is not None:
        env["STREAMDEDUP_FAILPOINT"] = spec
    return subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=60
    )


def test_unarmed_points_do_nothing() -> None:
    r = run(None)
    assert r.returncode == 0 and r.stdout.split("\n")[:3] == ["passed 1", "passed 2", "passed 3"]


def test_the_armed_point_kills_at_its_nth_pass_after_its_hook() -> None:
    r = run("committed:2")
    assert r.returncode == -signal.SIGKILL
    assert r.stdout.splitlines() == ["passed 1", "flushed"]


@pytest.mark.parametrize("spec", ["committed", "committed:0", "nowhere:1", "committed:x"])
def test_a_malformed_setting_is_a_config_error(spec: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STREAMDEDUP_FAILPOINT", spec)
    failpoints._armed.cache_clear()
    try:
        with pytest.raises(ConfigError, match="NAME:N"):
            failpoints.reach("committed")
    finally:
        failpoints._armed.cache_clear()
