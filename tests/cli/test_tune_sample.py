"""`tune --sample FILE` (cli/tune_sample.py, ops/sampling.py): the duplicates each
threshold would call among a file's first documents -- as many as `dedup` at that
threshold calls, measured in one run -- with example pairs near each threshold, as
text, JSON and a plot."""

from __future__ import annotations

import struct
from pathlib import Path

import orjson
import pytest

from streamdedup.cli.main import main
from tests.engine.test_containment import baskets, pages
from tests.support.segments import write_jsonl


def dedup_duplicates(src: Path, idx: Path, *options: str) -> int:
    out = idx.with_suffix(".out")
    assert main(["dedup", str(src), "--index", str(idx), "--output", str(out), *options]) == 0
    return sum(orjson.loads(x)["verdict"] == "duplicate" for x in out.read_bytes().splitlines())


def test_each_threshold_calls_what_dedup_calls(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = write_jsonl(
        tmp_path / "pages.jsonl", [{"id": i, "text": t} for i, t in enumerate(pages(700, seed=2))]
    )
    png = tmp_path / "t.png"
    args = ["tune", "--sample", str(src), "--shingle", "word:3", "--threshold", "0.72"]
    assert main([*args, "--json", "--plot", str(png)]) == 0
    got = orjson.loads(capsys.readouterr().out)
    assert got["documents"] == 700
    rows = {r["threshold"]: r for r in got["thresholds"]}
    assert sorted(rows) == sorted({0.72, *(round(0.5 + 0.05 * k, 2) for k in range(11))})
    counts = [rows[t]["duplicates"] for t in sorted(rows)]
    assert counts == sorted(counts, reverse=True) and counts[0] > counts[-1] > 0
    for t in (0.6, 0.72, 0.9):
        want = dedup_duplicates(
            src, tmp_path / f"idx-{t}", "--shingle", "word:3", "--threshold", str(t)
        )
        assert abs(rows[t]["duplicates"] - want) <= max(2, want // 100), (t, rows[t], want)
        for e in rows[t]["examples"]:
            assert abs(e["similarity"] - t) <= 0.025 and e["closest"] < e["id"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", png.read_bytes()[16:24])
    assert width > 300 and height > 200
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "<- --threshold" in text and f"  {rows[0.72]['duplicates']:10,}" in text
    assert "a passage they share" in text


def test_sets_by_containment_and_what_it_refuses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = write_jsonl(
        tmp_path / "sets.jsonl", [{"id": i, "set": s} for i, s in enumerate(baskets(400, seed=5))]
    )
    assert (
        main(["tune", "--sample", str(src), "--item", "set", "--metric", "containment", "--json"])
        == 0
    )
    rows = {r["threshold"]: r for r in orjson.loads(capsys.readouterr().out)["thresholds"]}
    want = dedup_duplicates(src, tmp_path / "idx", "--item", "set", "--metric", "containment")
    assert abs(rows[0.8]["duplicates"] - want) <= max(2, want // 100)
    assert main(["tune", "--sample", str(src), "--metric", "hamming"]) == 2
    assert "--sample measures texts or sets" in capsys.readouterr().err


def test_the_passage_a_pair_shares_is_their_longest_common_run() -> None:
    from streamdedup.ops.sampling import shared_passage

    body = " ".join(f"w{k}" for k in range(40))
    a = "Cookies banner here one two three four five six seven eight. " + body
    b = "Other opening entirely one two three four five six seven eight, then " + body
    assert shared_passage(a, b, 5) == "w0 w1 w2 w3 w4"  # (the body, not the shorter run)
    assert shared_passage("no shared words at all", "none", 3) == "no shared words"
