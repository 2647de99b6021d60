"""`backfill --segment` on a real local Spark (`local[2]`): the sealed segment it
writes holds, table by table and key by key, what `dedup` then `seal` leave over the
same input; and a new index started from it (`--base-segment`, in `dedup` and in the
worker) continues with the verdicts one `dedup` run over everything gives."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from streamdedup.backfill.job import run_backfill
from streamdedup.cli.backfill import backfill_job
from streamdedup.cli.main import parse
from streamdedup.store.keys import MetaKey
from tests.backfill.test_backfill import BENCH, awkward, failed_job, write
from tests.support.cli import run
from tests.support.docs import edited_stream
from tests.support.kafka import Topics, verdicts_by_offset
from tests.support.segment_tables import LEGITIMATE, assert_same_segments, segment_tables

# each test runs one Spark job (tens of seconds on a loaded 2-core host)
pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

STAGES = ["read", "ids", "contents", "verify", "clusters", "segment", "write"]


def backfill_segment(
    spark: Any, inputs: list[Path], out: Path, segment: Path, *flags: str
) -> list[str]:
    _, args, values = parse(
        [
            "backfill",
            *map(str, inputs),
            "--output",
            str(out),
            "--segment",
            str(segment),
            "--split-bytes",
            "40000",
            *flags,
        ]
    )
    stages: list[str] = []
    run_backfill(spark, backfill_job(args, values), stages.append)
    assert [s.split(":")[1].strip() for s in stages] == STAGES
    assert not list(segment.parent.glob(f"{segment.name}.*")), "a build directory was left"
    return stages


def dedup(inputs: list[Path], index: Path, out: Path, *flags: str) -> bytes:
    got = run("dedup", *map(str, inputs), "--index", str(index), "--output", str(out), *flags)
    assert got.returncode in (0, 1), got.stderr.decode()
    return out.read_bytes()


def replaced_ids(n: int, seed: int) -> list[dict[str, Any]]:
    """Ids sent again with changed text: owners replaced while copies live (a copy
    takes over their postings), one replaced by the very next document, texts coming
    back under old ids."""
    rnd = random.Random(seed)
    base = [str(d["text"]) for d in edited_stream(n // 4, seed, words=(40, 160))]
    docs: list[dict[str, Any]] = []
    for i in range(n):
        docs.append({"id": f"u{rnd.randrange(n // 5)}", "text": rnd.choice(base)})
        if i % 40 == 0:
            t = rnd.choice(base)
            docs += [
                {"id": f"own-{i}", "text": t},
                {"id": f"cpy-{i}", "text": t},
                {"id": f"near-{i}", "text": t + " with a tail"},
                {"id": f"near-{i}", "text": rnd.choice(base)},  # replaced at once
                {"id": f"own-{i}", "text": rnd.choice(base)},
                {"id": f"late-{i}", "text": t + " and one more sentence of text"},
            ]
    return docs


def templates(tmp: Path, n: int) -> Path:
    src = tmp / "templates.jsonl"
    subprocess.run(
        [sys.executable, str(BENCH / "templates.py"), "--docs", str(n), "--out", str(src)],
        check=True,
    )
    return src


def corpus(tmp: Path, kind: str) -> tuple[Path, tuple[str, ...]]:
    """A corpus file and the flags to run it with."""
    if kind == "crawl":
        return write(tmp / "crawl.jsonl", awkward(600, 3)), ()
    if kind == "replaced":
        return write(tmp / "replaced.jsonl", replaced_ids(600, 5)), ("--max-bucket-candidates", "4")
    if kind == "templates":
        return templates(tmp, 600), ("--max-bucket-candidates", "3", "--max-exact-checks", "2")
    return write(tmp / "sig.jsonl", awkward(300, 8)), (
        "--verify",
        "signature",
        "--shingle",
        "char:7",
    )


def _split(src: Path, tmp: Path, at: int) -> tuple[Path, Path]:
    lines = src.read_bytes().splitlines(keepends=True)
    a, b = tmp / "a.jsonl", tmp / "b.jsonl"
    a.write_bytes(b"".join(lines[:at]))
    b.write_bytes(b"".join(lines[at:]))
    return a, b


def _without_input(raw: bytes) -> list[bytes]:
    """Verdict lines of a two-input run without the `input` its error records name."""
    out = []
    for line in raw.splitlines():
        if b'"error"' in line:
            rec = orjson.loads(line)
            rec.pop("input", None)
            line = orjson.dumps(rec)
        out.append(line)
    return out


@pytest.mark.parametrize("kind", ["crawl", "replaced", "templates", "signature"])
def test_the_segment_holds_what_dedup_and_seal_leave_and_streams_on(
    spark: Any, tmp_path: Path, kind: str
) -> None:
    """One Spark job per kind, over the first two thirds of the corpus: its verdicts and
    segment are what `dedup` then `seal` leave over the same part, table by table; and
    `dedup --base-segment` over the last third gives the verdicts of one `dedup` run over
    the whole corpus."""
    src, flags = corpus(tmp_path, kind)
    n = len(src.read_bytes().splitlines())
    a, b = _split(src, tmp_path, n * 2 // 3)
    segment = tmp_path / "segment"
    backfill_segment(spark, [a], tmp_path / "va.jsonl", segment, *flags)
    va = (tmp_path / "va.jsonl").read_bytes()
    assert va == dedup([a], tmp_path / "index", tmp_path / "dedup.jsonl", *flags)
    sealed = run("seal", "--index", str(tmp_path / "index"), str(tmp_path / "sealed"))
    assert sealed.returncode == 0, sealed.stderr.decode()
    rows = assert_same_segments(tmp_path / "sealed", segment)
    assert LEGITIMATE  # the only allowances, spelled out in tests/support/segment_tables.py
    # the corpus holds what the test claims to cover
    tables, _ = segment_tables(segment)
    meta = tables["meta"]
    assert rows["docs"] > 0 and rows["postings"] > 0
    if kind in ("crawl", "replaced"):
        assert rows["copies"] > 0  # exact copies
    if kind == "replaced":  # documents replaced by their ids' later texts
        assert meta[MetaKey.NEXT_DOCNO] > rows["docs"]
    if kind == "templates":
        assert meta[MetaKey.CAPS]["bucket"] > 0 and meta[MetaKey.CAPS]["exact"] > 0
    if kind == "signature":
        assert rows["texts"] == 0  # signature verification stores no texts
    # streaming on from the segment: one run's verdicts
    vb = dedup([b], tmp_path / "new", tmp_path / "vb.jsonl", "--base-segment", str(segment), *flags)
    one = _without_input(dedup([a, b], tmp_path / "single", tmp_path / "all.jsonl", *flags))
    assert va.splitlines() == one[: len(va.splitlines())]
    assert vb.splitlines() == one[len(va.splitlines()) :]
    # B found duplicates of A's documents, which only the segment holds
    a_ids = {orjson.loads(x).get("id") for x in va.splitlines()}
    assert any(orjson.loads(x).get("duplicate_of") in a_ids for x in vb.splitlines())


def test_the_worker_streams_on_from_the_segment(
    spark: Any, kafka_bootstrap: str, tmp_path: Path
) -> None:
    docs = [d for d in awkward(300, 11) if isinstance(d, dict) and "text" in d]
    a = write(tmp_path / "a.jsonl", docs[:200])
    b = docs[200:]
    segment = tmp_path / "segment"
    backfill_segment(spark, [a], tmp_path / "va.jsonl", segment)
    t = Topics(kafka_bootstrap)
    t.produce([orjson.dumps(d) for d in b])
    r = t.run_worker(tmp_path / "worker-index", "--base-segment", str(segment))
    assert r.returncode == 0, r.stderr.decode()[-3000:]
    got = verdicts_by_offset(t.read(t.output, expect=len(b)))
    one = dedup(
        [a, write(tmp_path / "b.jsonl", b)], tmp_path / "single", tmp_path / "all.jsonl"
    ).splitlines()
    assert (tmp_path / "va.jsonl").read_bytes().splitlines() == one[:200]
    assert [got[(0, i)] for i in range(len(b))] == [orjson.loads(x) for x in one[200:]]
    assert any(v["verdict"] == "duplicate" for v in got.values())
    # a restart with the same options: the index keeps its base, nothing changes
    again = t.run_worker(tmp_path / "worker-index", "--base-segment", str(segment), idle=1.0)
    assert again.returncode == 0, again.stderr.decode()[-3000:]


def test_a_failed_job_leaves_no_segment(spark: Any, tmp_path: Path) -> None:
    """A Python worker killed in the segment's own stage (a local master does not
    retry): the job's error (exit 7 from the command), no SEGMENT_DIR, no .partial,
    no build directory, the old verdicts untouched.  (A job that fails earlier, in the
    bucket stage, has not begun a segment: tests/backfill/test_backfill.py kills one
    there.)"""
    src = write(tmp_path / "in.jsonl", awkward(80, 2))
    out = tmp_path / "out.jsonl"
    out.write_bytes(b"old verdicts\n")
    segment = str(tmp_path / "segment")
    failed_job(spark, [str(src), "--output", str(out), "--segment", segment], "backfill-segment:1")
    assert out.read_bytes() == b"old verdicts\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl", "out.jsonl"]
