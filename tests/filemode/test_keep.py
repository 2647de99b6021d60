"""`dedup --keep FILE` (DESIGN.md "Outputs users consume"): the input lines of the
documents whose verdict is `unique`, as read and in input order -- with and without
`--workers`, over several inputs, with rejected lines among them -- written again in
full by a re-run (which gets the stored verdicts back); refused where it would
overwrite something or cannot apply."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from streamdedup.cli.main import main
from tests.engine.test_containment import pages


def corpus(tmp_path: Path) -> tuple[list[Path], list[bytes]]:
    """Two input files of pages, excerpts and copies, with bad lines among them; and
    the lines a de-duplicated corpus keeps, found by the verdicts themselves."""
    texts = pages(600, seed=8)
    lines = [orjson.dumps({"id": i, "text": t}) for i, t in enumerate(texts)]
    lines[100:100] = [b"not json", b'{"id": "no text"}', b""]
    lines[400:400] = [orjson.dumps({"id": "copy", "text": texts[3]}) + b"\r"]  # (a CRLF line)
    paths = [tmp_path / "a.jsonl", tmp_path / "b.jsonl"]
    paths[0].write_bytes(b"\n".join(lines[:300]) + b"\n")
    paths[1].write_bytes(b"\n".join(lines[300:]))  # (its last line without a line end)
    return paths, lines


def kept_by_verdicts(verdicts: Path, lines: list[bytes]) -> bytes:
    """The lines whose verdict (not an error record) is unique, each ended by a line
    feed, a CR before it dropped."""
    out = [orjson.loads(x) for x in verdicts.read_bytes().splitlines()]
    assert len(out) == len(lines)
    return b"".join(
        ln.rstrip(b"\r") + b"\n"
        for ln, v in zip(lines, out, strict=True)
        if v.get("verdict") == "unique"
    )


@pytest.mark.parametrize("workers", [0, 2])
def test_the_unique_documents_input_lines_in_order(tmp_path: Path, workers: int) -> None:
    paths, lines = corpus(tmp_path)
    verdicts, keep, idx = tmp_path / "v.jsonl", tmp_path / "keep.jsonl", str(tmp_path / "idx")
    args = [*map(str, paths), "--index", idx, "--output", str(verdicts), "--keep", str(keep)]
    assert main(["dedup", *args, "--workers", str(workers), "--batch-size", "64"]) == 1
    want = kept_by_verdicts(verdicts, lines)
    assert keep.read_bytes() == want and want.count(b"\n") > 200
    assert b'"id":"copy"' not in want  # (an exact copy: a duplicate)
    keep.write_bytes(b"stale")
    assert main(["dedup", *args]) == 1  # a re-run: the stored verdicts, the same corpus
    assert keep.read_bytes() == want


def test_keep_to_stdout(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    paths, lines = corpus(tmp_path)
    verdicts = tmp_path / "v.jsonl"
    idx = str(tmp_path / "idx")
    assert (
        main(["dedup", str(paths[0]), "--index", idx, "--output", str(verdicts), "--keep", "-"])
        == 1
    )
    assert capfd.readouterr().out.encode() == kept_by_verdicts(verdicts, lines[:300])


def test_what_keep_refuses(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    paths, _ = corpus(tmp_path)
    idx = str(tmp_path / "idx")
    assert main(["dedup", str(paths[0]), "--index", idx, "--keep", "-"]) == 2
    assert "--keep and --output both go to stdout" in capsys.readouterr().err
    assert (
        main(["dedup", str(paths[0]), "--index", idx, "--keep", str(paths[0]), "--output", "x"])
        == 2
    )
    assert "would destroy it" in capsys.readouterr().err
    warc = tmp_path / "crawl.warc.gz"
    warc.write_bytes(b"")
    assert main(["dedup", str(warc), "--index", idx, "--output", "x", "--keep", "k"]) == 2
    assert "--keep copies JSON Lines input lines only" in capsys.readouterr().err
    assert not Path(idx).exists() and not Path("k").exists()


def test_keep_per_cluster_keeps_each_cluster_once_across_runs(tmp_path: Path) -> None:
    """`--keep-per-cluster`: each cluster's first document in the input, also of a
    cluster an earlier run started (whose new members `--keep` alone leaves out)."""
    paths, lines = corpus(tmp_path)
    idx = str(tmp_path / "idx")
    assert main(["dedup", str(paths[0]), "--index", idx, "--output", str(tmp_path / "a.out")]) == 1
    verdicts, keep = tmp_path / "b.out", tmp_path / "keep.jsonl"
    args = [str(paths[1]), "--index", idx, "--output", str(verdicts), "--keep", str(keep)]
    assert main(["dedup", *args, "--keep-per-cluster", "--dry-run"]) == 0
    got = [orjson.loads(x) for x in verdicts.read_bytes().splitlines()]
    later = lines[300:]  # (b.jsonl's lines)
    assert len(got) == len(later)
    seen: set[bytes] = set()
    want = []
    for line, v in zip(later, got, strict=True):
        key = orjson.dumps(v.get("cluster"))
        if "verdict" in v and key not in seen:
            seen.add(key)
            want.append(line.rstrip(b"\r") + b"\n")
    assert keep.read_bytes() == b"".join(want)
    unique = sum(v.get("verdict") == "unique" for v in got)
    assert len(want) > unique  # (clusters started by the first run, kept once each)
    assert main(["dedup", str(paths[1]), "--index", idx, "--keep-per-cluster"]) == 2
