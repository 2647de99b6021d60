"""tests/support/reaper.py: what a test process starts ends with it, however it ends."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# A "test process" that starts a long-lived child, has it watched, and dies without
# any cleanup (as pytest-timeout's thread method ends an xdist worker).
CRASHING = """
import os, subprocess, sys
sys.path.insert(0, sys.argv[1])
from tests.support.reaper import reap_with_this_process
child = subprocess.Popen(["sleep", "60"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
reap_with_this_process(child.pid)
print(child.pid, flush=True)
os._exit(1)
"""


def running(pid: int) -> bool:
    """Whether `pid` is a live process (a zombie waiting for its reaper is not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_the_child_of_a_crashed_process_is_terminated() -> None:
    done = subprocess.run(
        [sys.executable, "-c", CRASHING, str(ROOT)], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 1, done.stderr
    child = int(done.stdout)
    assert running(child), "the child died with its parent by itself: nothing tested"
    deadline = time.monotonic() + 10
    while running(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not running(child), "the child outlived the process that started it"


def test_the_watcher_leaves_when_the_child_does() -> None:
    from tests.support.reaper import reap_with_this_process

    child = subprocess.Popen(["sleep", "0.5"])
    watcher = reap_with_this_process(child.pid)
    child.wait()
    assert watcher.wait(timeout=10) == 0  # it ended by itself, in about a second
