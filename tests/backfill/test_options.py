"""`backfill`'s command line, checked before Spark starts (no JVM here)."""

from __future__ import annotations

from pathlib import Path

import pytest

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
