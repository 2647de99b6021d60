"""The layout's rules, checked on every run: the layer contracts in pyproject.toml
(`lint-imports`), and the public API's surface."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import streamdedup

ROOT = Path(__file__).resolve().parents[1]


def test_import_contracts_hold() -> None:
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    if exe is None:
        pytest.fail("import-linter is not installed (it is a test dependency)")
    done = subprocess.run(
        [exe, "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert ", 0 broken." in done.stdout


def test_public_api_is_pinned() -> None:
    assert sorted(streamdedup.__all__) == [
        "ConfigError",
        "Deduplicator",
        "Document",
        "IndexOpenError",
        "ParameterMismatchError",
        "StreamDedupError",
        "Verdict",
        "__version__",
    ]
    for name in streamdedup.__all__:
        assert hasattr(streamdedup, name), name
