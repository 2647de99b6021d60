"""`backfill`'s command line, checked before Spark starts (no JVM here)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from streamdedup.backfill.job import _write
from streamdedup.cli.backfill import backfill_job
from streamdedup.cli.main import parse
from streamdedup.errors import ConfigError, InputOutputError, SealRefusedError


def job(*argv: str) -> object:
    _, args, values = parse(["backfill", *argv])
    return backfill_job(args, values)


def test_the_job_carries_dedup_s_options(tmp_path: Path) -> None:
    src = tmp_path / "in.jsonl"
    src.write_bytes(b"")
    got = job(
        str(src),
        "--output",
        str(tmp_path / "out.jsonl"),
        "--threshold",
        "0.7",
        "--shingle",
        "char:6",
        "--verify",
        "signature",
        "--max-bucket-candidates",
        "7",
        "--text-field",
        "body",
    )
    params = got.params  # type: ignore[attr-defined]
    assert (params.threshold, str(params.shingle), params.verify) == (0.7, "char:6", "signature")
    assert got.options.max_bucket_candidates == 7  # type: ignore[attr-defined]
    assert got.fields.text_field == "body"  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("argv", "error", "message"),
    [
        (["IN"], ConfigError, "--output FILE is required"),
        (["IN", "--output", "-"], ConfigError, "--output FILE is required"),
        (["IN", "--output", "OUT", "--segment", "FULL"], ConfigError, "--segment .* not empty"),
        (["IN", "--output", "OUT", "--segment", "IN"], ConfigError, "--segment .* not empty"),
        (["IN", "--output", "OUT", "--segment", "OUT"], ConfigError, "is the --output file"),
        (["-", "--output", "OUT"], ConfigError, "not stdin"),
        (["x.warc.gz", "--output", "OUT"], ConfigError, "WARC"),
        (["missing.jsonl", "--output", "OUT"], InputOutputError, "cannot read"),
        (["IN", "--output", "IN"], ConfigError, "is the input file"),
        (["IN", "--output", "OUT", "--max-bucket-candidates", "0"], ConfigError, "at least 1"),
        (["IN", "--output", "OUT", "--bands", "3"], ConfigError, "go together"),
    ],
)
def test_usage_errors_before_spark(
    tmp_path: Path, argv: list[str], error: type[Exception], message: str
) -> None:
    src = tmp_path / "in.jsonl"
    src.write_bytes(b'{"id": 1, "text": "a"}\n')
    full = tmp_path / "full"
    full.mkdir()
    (full / "data.mdb").write_bytes(b"")
    names = {"IN": str(src), "OUT": str(tmp_path / "out.jsonl"), "FULL": str(full)}
    with pytest.raises(error, match=message):
        job(
            *[names.get(a, str(tmp_path / a) if a.endswith((".gz", ".jsonl")) else a) for a in argv]
        )


def test_the_segment_directory_is_new_or_empty(tmp_path: Path) -> None:
    src = tmp_path / "in.jsonl"
    src.write_bytes(b"")
    (tmp_path / "empty").mkdir()
    for name in ("empty", "new"):
        got = job(str(src), "--output", str(tmp_path / "o"), "--segment", str(tmp_path / name))
        assert got.segment == str(tmp_path / name)  # type: ignore[attr-defined]
    assert job(str(src), "--output", str(tmp_path / "o")).segment is None  # type: ignore[attr-defined]


def test_a_partial_in_the_way_is_refused_before_spark(tmp_path: Path) -> None:
    """Issue 35 item 6: `backfill --segment DIR` removed whatever was at DIR.partial
    (after the whole Spark job).  Refused before Spark starts, and left as it was."""
    src = tmp_path / "in.jsonl"
    src.write_bytes(b"")
    (tmp_path / "seg.partial").mkdir()
    (tmp_path / "seg.partial" / "precious.txt").write_text("keep me")
    with pytest.raises(SealRefusedError, match=r"seg\.partial is in the way"):
        job(str(src), "--output", str(tmp_path / "o"), "--segment", str(tmp_path / "seg"))
    assert (tmp_path / "seg.partial" / "precious.txt").read_text() == "keep me"


class _Records:
    """What `_write` reads of an RDD: its records in order, here from a list."""

    def __init__(self, records: list[tuple[int, tuple[bytes, str]]]) -> None:
        self.records = records

    def toLocalIterator(self) -> list[tuple[int, tuple[bytes, str]]]:  # (Spark's name)
        return self.records


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_the_verdict_file_follows_the_umask_like_dedup_s(tmp_path: Path, umask: int) -> None:
    """Issue 35 item 15: the output was written to a `mkstemp` file (mode 0600) and
    renamed over OUTPUT, so every backfill's verdicts were readable by their owner
    only.  A new file gets 0666 less the umask, as `dedup`'s does; an existing one
    keeps its mode."""
    records = _Records([(0, (b'{"id":1}', "unique"))])
    old = os.umask(umask)
    try:
        _write(records, str(tmp_path / "new.jsonl"), 1)  # type: ignore[arg-type]
        kept = tmp_path / "kept.jsonl"
        kept.write_bytes(b"old\n")
        kept.chmod(0o640)
        _write(records, str(kept), 1)  # type: ignore[arg-type]
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "new.jsonl").stat().st_mode) == 0o666 & ~umask
    assert stat.S_IMODE(kept.stat().st_mode) == 0o640
    assert kept.read_bytes() == b'{"id":1}\n'
