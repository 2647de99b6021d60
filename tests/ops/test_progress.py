"""`dedup`'s progress bar (ops/progress.py): over files, the inputs' bytes with their
total known at the start (so a time left), moved by the lines decided, the
documents and their rate beside it; over stdin, a count of documents."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from streamdedup.ops.progress import InputProgress


def test_a_bar_over_the_files_bytes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_bytes(b"x" * 1000)
    b.write_bytes(b"y" * 3000)
    with a.open("rb") as fa, b.open("rb") as fb:
        bar = InputProgress("always", "dedup", [fa, fb])
        assert bar.bytes and bar.bar.total == 4000
        bar.reading(0, fa)
        bar.read(600)
        bar.set_postfix(dup=1)
        bar.update(6)
        assert bar.bar.n == 600
        bar.read(400)
        bar.update(4)
        bar.reading(1, fb)
        bar.read(1000)
        bar.update(10)
        assert bar.bar.n == 2000
        bar.close()
    shown = capsys.readouterr().err
    assert "1.95k/3.91k" in shown and "docs=20" in shown and "dup=1" in shown


def test_an_archive_moves_by_its_file_position(tmp_path: Path) -> None:
    warc = tmp_path / "a.warc.gz"
    warc.write_bytes(b"z" * 5000)
    with warc.open("rb") as f:
        bar = InputProgress("always", "dedup", [f])
        bar.reading(0, f)
        f.read(1234)
        bar.update(3)
        assert bar.bar.n == 1234
        bar.close()


def test_stdin_counts_documents() -> None:
    piped = io.BytesIO(b"a\nb\n")  # (no file behind it: no size)
    bar = InputProgress("always", "dedup", [piped])
    assert not bar.bytes and bar.bar.total is None
    bar.update(2)
    assert bar.bar.n == 2
    bar.close()
    assert InputProgress("never", "dedup", [piped]).bar is None
