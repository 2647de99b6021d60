"""tests/support/forkserver.py: a command forked from the server behaves as one started
with `python -m streamdedup.cli`: its arguments, stdin, stdout, stderr, exit status,
working directory and environment are its own, and an environment that changes what a
module decides at import gets a fresh interpreter."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import orjson

from streamdedup import kernels
from tests.support import forkserver

LINE = orjson.dumps({"id": "a", "text": "the same words in the same order"}) + b"\n"


def fresh(argv: list[str], **kw: object) -> subprocess.CompletedProcess[bytes]:
    """The reference: a fresh interpreter."""
    return subprocess.run(
        [sys.executable, "-m", "streamdedup.cli", *argv], capture_output=True, **kw
    )  # type: ignore[call-overload]


def numbers_out(text: bytes) -> bytes:
    return re.sub(rb"[0-9][0-9.,]*", b"#", text)


def test_stdin_stdout_stderr_and_status_are_the_command_s(tmp_path: Path) -> None:
    argv = ["dedup", "-", "--output", "-", "--progress", "never"]
    got = forkserver.run([*argv, "--index", str(tmp_path / "a")], stdin=LINE * 3)
    want = fresh([*argv, "--index", str(tmp_path / "b")], input=LINE * 3)
    assert got.returncode == want.returncode == 0
    assert got.stdout == want.stdout and got.stdout.count(b"\n") == 3
    assert numbers_out(got.stderr) == numbers_out(want.stderr)  # the summary, timings aside
    usage = forkserver.run(["dedup", "x.jsonl", "--no-such-flag"])
    assert usage.returncode == 2 and b"--no-such-flag" in usage.stderr
    assert usage.stderr == fresh(["dedup", "x.jsonl", "--no-such-flag"]).stderr


def test_the_working_directory_and_environment_are_the_command_s(tmp_path: Path) -> None:
    """Relative paths resolve in `cwd`; the index comes from the environment given."""
    (tmp_path / "in.jsonl").write_bytes(LINE)
    got = forkserver.run(
        ["dedup", "in.jsonl", "--output", "out.jsonl"],
        env={"STREAMDEDUP_INDEX": "idx"},
        cwd=tmp_path,
    )
    assert got.returncode == 0, got.stderr
    assert (tmp_path / "idx").is_dir() and (tmp_path / "out.jsonl").read_bytes().count(b"\n") == 1
    missing = forkserver.run(["dedup", "in.jsonl", "--output", "out2.jsonl"], cwd=tmp_path)
    assert missing.returncode == 2 and b"--index DIR is required" in missing.stderr


def test_an_import_time_setting_gets_a_fresh_interpreter() -> None:
    """STREAMDEDUP_KERNELS is read when streamdedup.kernels is imported, which the
    server did without it: with it the command must start afresh to see it."""
    plain = forkserver.run(["--version"])
    numpy = forkserver.run(["--version"], env={"STREAMDEDUP_KERNELS": "numpy"})
    assert plain.returncode == numpy.returncode == 0
    assert plain.stdout == fresh(["--version"]).stdout
    if kernels.load("native") is not None:
        assert b"compiled kernels" in plain.stdout
    assert b"numpy" in numpy.stdout and b"compiled kernels" not in numpy.stdout
