"""A small filesystem to fill: a tmpfs mounted for one test (root only: CI runs as root)."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def small_tmpfs(where: Path, size: str) -> Iterator[Path]:
    """A tmpfs of `size` ("1m") mounted at `where` (made), unmounted afterwards; the
    test is skipped where mounting is not permitted."""
    where.mkdir()
    r = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True
    )
    if r.returncode != 0:
        pytest.skip("mounting a small tmpfs is not permitted here: " + r.stderr.decode().strip())
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)
