"""Running the `streamdedup` command in the tests, and corpora to run it on."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson

from tests.support import forkserver
from tests.support.docs import edited_stream


def run(
    *args: str,
    env: dict[str, str] | None = None,
    stdin: bytes | None = None,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[bytes]:
    """`python -m streamdedup.cli *args` in a process of its own, with os.environ plus
    `env` (forked from a process that has imported the package: forkserver.py)."""
    return forkserver.run(list(args), env=env, stdin=stdin, cwd=cwd)


def start_dedup(
    src: Path, index: Path, out: Path, batch_size: str, stderr: int
) -> subprocess.Popen[bytes]:
    """`dedup` in the background, to be interrupted."""
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "streamdedup.cli",
            "dedup",
            str(src),
            "--index",
            str(index),
            "--output",
            str(out),
            "--batch-size",
            batch_size,
        ],
        stderr=stderr,
    )


def corpus(path: Path, n: int, seed: int = 1) -> list[dict[str, object]]:
    """A JSON Lines file of `n` generated documents (longer than the worker tests')."""
    docs: list[dict[str, object]] = edited_stream(n, seed, words=(80, 300))
    path.write_bytes(b"".join(orjson.dumps(d) + b"\n" for d in docs))
    return docs


def lines(path: Path) -> list[dict[str, object]]:
    return [orjson.loads(x) for x in path.read_bytes().splitlines()]
