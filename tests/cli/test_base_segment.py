"""`--base-segment` on the command line: what it refuses, with which exit status and
words, and that a refused start leaves no index behind."""

from __future__ import annotations

from pathlib import Path

import lmdb
import pytest

from streamdedup.cli.main import parse
from streamdedup.cli.settings import engine_settings
from streamdedup.errors import EXIT_INDEX, EXIT_USAGE, ConfigError
from tests.support.cli import corpus, lines, run


@pytest.fixture
def segment(tmp_path: Path) -> Path:
    src = tmp_path / "a.jsonl"
    corpus(src, 150, seed=3)
    got = run("dedup", str(src), "--index", str(tmp_path / "x"), "--output", str(tmp_path / "va"))
    assert got.returncode == 0, got.stderr.decode()
    got = run("seal", "--index", str(tmp_path / "x"), str(tmp_path / "segment"))
    assert got.returncode == 0, got.stderr.decode()
    return tmp_path / "segment"


def test_dedup_continues_from_a_base_segment(segment: Path, tmp_path: Path) -> None:
    src = tmp_path / "b.jsonl"
    corpus(src, 60, seed=4)
    new = tmp_path / "new"
    got = run(
        "dedup",
        str(src),
        "--index",
        str(new),
        "--base-segment",
        str(segment),
        "--output",
        str(tmp_path / "vb"),
    )
    assert got.returncode == 0, got.stderr.decode()
    want = run("dedup", str(src), "--index", str(tmp_path / "x"), "--output", str(tmp_path / "w"))
    assert want.returncode == 0, want.stderr.decode()
    assert lines(tmp_path / "vb") == lines(tmp_path / "w")  # the index that sealed it
    stats = run("stats", "--index", str(new)).stdout.decode()
    assert "1 sealed" in stats and f"local  {segment}" in stats


@pytest.mark.parametrize(
    ("case", "status", "words"),
    [
        ("mismatch", EXIT_USAGE, "the base segment {seg}: this index was built with --threshold"),
        ("not empty", EXIT_USAGE, "--base-segment starts a NEW index from the sealed segment"),
        ("missing", EXIT_INDEX, "is not a sealed segment: it has no manifest.json"),
    ],
)
def test_refused_with_a_clear_error(
    segment: Path, tmp_path: Path, case: str, status: int, words: str
) -> None:
    src = tmp_path / "b.jsonl"
    corpus(src, 20, seed=5)
    index = tmp_path / "new"
    if case == "not empty":  # an index holding documents of its own
        index = tmp_path / "other"
        got = run("dedup", str(src), "--index", str(index), "--output", str(tmp_path / "o"))
        assert got.returncode == 0, got.stderr.decode()
    base = tmp_path / "nowhere" if case == "missing" else segment
    extra = ["--threshold", "0.7"] if case == "mismatch" else []
    before = _used_pages(index) if index.exists() else b""
    got = run(
        "dedup",
        str(src),
        "--index",
        str(index),
        "--base-segment",
        str(base),
        "--output",
        str(tmp_path / "out"),
        *extra,
    )
    assert got.returncode == status, got.stderr.decode()
    assert words.format(seg=segment) in got.stderr.decode()
    assert not (tmp_path / "new").exists()  # a failed start leaves no index behind
    if before:
        assert _used_pages(index) == before


def _used_pages(index: Path) -> bytes:
    """The pages of the index's data file in use (meta pages included): reading the
    whole file, 1 GiB and sparse, cost 7 s a test."""
    env = lmdb.open(str(index), readonly=True, lock=False, subdir=True, max_dbs=64)
    try:
        end = (env.info()["last_pgno"] + 1) * env.stat()["psize"]
    finally:
        env.close()
    with open(index / "data.mdb", "rb") as f:
        return f.read(end)


def test_not_with_a_changelog() -> None:
    _, _, values = parse(
        ["worker", "--index", "i", "--base-segment", "s", "--changelog-topic", "c"]
    )
    with pytest.raises(ConfigError, match="--base-segment and --changelog-topic"):
        engine_settings(values)
    _, _, values = parse(["worker", "--index", "i", "--base-segment", "s"])
    assert engine_settings(values).base_segment == "s"
