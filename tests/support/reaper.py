"""A broker started by a test process dies with it, even when that process does not get
to stop it: an xdist worker that crashes (a segfault, a kill, pytest-timeout's thread
method, which ends it with `os._exit`) runs no `finally` and no fixture teardown, so
its embedded broker would be left listening (and holding memory) for the rest of the
machine's life."""

from __future__ import annotations

import os
import subprocess
import sys

# Runs in its own small process: polls its parent (the test process) once a second and
# terminates the broker when the parent is gone (or when the broker is gone, it ends).
_WATCH = """
import os, signal, sys, time
parent, child = int(sys.argv[1]), int(sys.argv[2])
def alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
while alive(child):
    if not alive(parent) or os.getppid() != parent:
        try:
            os.kill(child, signal.SIGTERM)
        except ProcessLookupError:
            pass
        break
    time.sleep(1)
"""


def reap_with_this_process(child_pid: int) -> subprocess.Popen[bytes]:
    """Watch `child_pid` from a separate process and terminate it once this process ends
    by any means.  The watcher ends by itself when the child does."""
    return subprocess.Popen(
        [sys.executable, "-c", _WATCH, str(os.getpid()), str(child_pid)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # a Ctrl-C to the test run is not meant for it
    )
