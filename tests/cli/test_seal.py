"""`streamdedup seal` and the segments in `stats`: what they print, how they refuse,
and a seal while `dedup` writes the same index in another process."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import orjson
import pytest

from streamdedup.errors import IndexOpenError
from streamdedup.store.index import Index
from streamdedup.store.keys import MetaKey
from streamdedup.store.segment.manifest import Manifest
from streamdedup.store.segment.reading import SealedSegment
from streamdedup.store.segment.registry import SegmentEntry, segments, set_segments
from tests.support.cli import corpus, lines, run


def dedup(src: Path, index: Path, out: Path) -> None:
    r = run("dedup", str(src), "--index", str(index), "--output", str(out))
    assert r.returncode == 0, r.stderr.decode()


def error_line(stderr: bytes) -> str:
    return stderr.decode().strip().splitlines()[-1]


def test_seal_says_what_it_sealed_and_stats_lists_the_segments(tmp_path: Path) -> None:
    index, seg1, seg2 = tmp_path / "idx", tmp_path / "seg1", tmp_path / "seg2"
    corpus(tmp_path / "a.jsonl", 300, seed=1)
    later = corpus(tmp_path / "b.jsonl", 200, seed=2)  # ids of their own: nothing replaced
    (tmp_path / "b.jsonl").write_bytes(
        b"".join(orjson.dumps({**d, "id": f"b-{d['id']}"}) + b"\n" for d in later)
    )
    dedup(tmp_path / "a.jsonl", index, tmp_path / "a.out")

    r = run("seal", "--index", str(index), str(seg1))
    assert r.returncode == 0, r.stderr.decode()
    m = Manifest.read(seg1)
    text = r.stdout.decode()
    assert text.startswith("sealed segment 1: 300 documents (docnos 0..299), ")
    assert f"{m.bytes:,} bytes, {m.checksum}" in text and f"at {seg1} (local;" in text

    dedup(tmp_path / "b.jsonl", index, tmp_path / "b.out")
    r = run("seal", "--index", str(index), str(seg2), "--remote", "--json")
    assert r.returncode == 0, r.stderr.decode()
    out = orjson.loads(r.stdout)
    assert out["remote"] is True and out["path"] == str(seg2)
    assert {k: out[k] for k in Manifest.read(seg2).to_record()} == Manifest.read(seg2).to_record()
    assert (out["number"], out["first_docno"], out["next_docno"]) == (2, 300, 500)

    stats = orjson.loads(run("stats", "--index", str(index), "--json").stdout)
    assert stats["documents"] == 500 and stats["open_documents"] == 0
    assert [
        (s["number"], s["path"], s["remote"], s["documents"], s["found"]) for s in stats["segments"]
    ] == [
        (1, str(seg1), False, 300, True),
        (2, str(seg2), True, 200, None),
    ]
    text = run("stats", "--index", str(index)).stdout.decode()
    assert "documents    500: 0 in the open index" in text
    assert "segments     2 sealed, 500 documents" in text
    assert f"#1    docnos 0..299  300 documents  {m.bytes:,} bytes  local  {seg1}" in text
    assert f"remote  {seg2}" in text

    # a local segment gone from its place is flagged, not hidden
    seg1.rename(tmp_path / "elsewhere")
    text = run("stats", "--index", str(index)).stdout.decode()
    assert f"local, MISSING  {seg1}" in text


def test_seal_refuses_clearly(tmp_path: Path) -> None:
    index, dest = tmp_path / "idx", tmp_path / "seg"
    r = run("seal", "--index", str(index), str(dest))
    assert r.returncode == 5 and f"no index at {index}" in error_line(r.stderr)
    assert not index.exists() and not dest.exists()

    r = run("seal", str(dest))
    assert r.returncode == 2 and "--index DIR is required" in error_line(r.stderr)

    (tmp_path / "empty.jsonl").write_text("")
    dedup(tmp_path / "empty.jsonl", index, tmp_path / "out")
    r = run("seal", "--index", str(index), str(dest))
    assert r.returncode == 2 and "nothing to seal" in error_line(r.stderr)

    corpus(tmp_path / "a.jsonl", 50)
    dedup(tmp_path / "a.jsonl", index, tmp_path / "out")
    dest.mkdir()
    (dest / "x").write_text("taken")
    r = run("seal", "--index", str(index), str(dest))
    assert r.returncode == 2 and f"{dest} exists and is not empty" in error_line(r.stderr)

    idx = Index(index)
    idx.write(lambda t: t.set_meta(MetaKey.CHANGELOG, {"topic": "changes"}))
    idx.close()
    r = run("seal", "--index", str(index), str(tmp_path / "other"))
    assert r.returncode == 2
    assert "sealing an index mirrored to a changelog is not supported yet" in error_line(r.stderr)
    assert not (tmp_path / "other").exists()


def open_documents(index: Path) -> int:
    """Documents in the open index, read from this process while another writes."""
    try:
        idx = Index(index, readonly=True)
    except IndexOpenError:  # not made yet, or its tables not yet
        return 0
    try:
        return int(idx.read(lambda t: t.count("docs")))
    finally:
        idx.close()


@pytest.mark.slow
def test_seal_while_dedup_writes_the_same_index(tmp_path: Path) -> None:
    """`dedup` runs in its own process, in small batches, reading its input from a
    pipe; `seal` runs twice meanwhile, each time once the open index holds 500
    documents, while the writer waits for the rest of its input (so both seals overlap
    it, however loaded the machine).  Every document ends up in exactly one place (a
    segment or the open index), under its own number, and the segments' ranges follow
    one another."""
    n = 8000
    docs = corpus(tmp_path / "in.jsonl", n, seed=5)
    data = (tmp_path / "in.jsonl").read_bytes().splitlines(keepends=True)
    index, out = tmp_path / "idx", tmp_path / "out.jsonl"
    writer = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "streamdedup.cli",
            "dedup",
            "-",
            "--index",
            str(index),
            "--output",
            str(out),
            "--batch-size",
            "100",
        ],
        stdin=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert writer.stdin is not None
    try:
        for k, part in ((1, data[:2000]), (2, data[2000:4000])):
            writer.stdin.write(b"".join(part))
            writer.stdin.flush()
            deadline = time.time() + 120
            while open_documents(index) < 500:
                assert writer.poll() is None and time.time() < deadline, "dedup stopped"
                time.sleep(0.05)
            r = run("seal", "--index", str(index), str(tmp_path / f"seg{k}"))
            assert r.returncode == 0, r.stderr.decode()
            assert writer.poll() is None  # (it waits for the rest of its input)
    except BaseException:
        writer.kill()
        writer.communicate(timeout=60)
        raise
    _, err = writer.communicate(input=b"".join(data[4000:]), timeout=300)
    assert writer.returncode == 0, err.decode()
    assert len(lines(out)) == n

    idx = Index(index, readonly=True)
    try:
        entries = idx.read(segments)
        open_ids = idx.read(lambda t: [(d, r.doc_id) for d, r in t.records()])
    finally:
        idx.close()
    placed: list[tuple[int, object]] = []
    previous_end = 0
    for entry in entries:
        assert entry.first_docno >= previous_end
        previous_end = entry.next_docno
        with SealedSegment.open(entry.path) as segment:
            held = segment.index.read(lambda t: [(d, r.doc_id) for d, r in t.records()])
        assert len(held) == entry.documents
        assert all(entry.first_docno <= d < entry.next_docno for d, _ in held)
        placed += held
    assert all(d >= previous_end for d, _ in open_ids)
    placed += open_ids
    assert sorted(doc_id for _, doc_id in placed) == sorted(str(d["id"]) for d in docs)
    assert len({d for d, _ in placed}) == n  # one number each


def registry(index: Path) -> list[SegmentEntry]:
    idx = Index(index, readonly=True)
    try:
        return idx.read(segments)
    finally:
        idx.close()


def test_an_index_moved_with_its_segments_inside_keeps_working(tmp_path: Path) -> None:
    """Issue 35 item 11: segments that `--seal-every` makes inside the index were
    registered by absolute path only; after `mv idx idx2` every run exited 5 ("no
    manifest.json").  They move with the index: registered also relative to it, and
    an entry registered by absolute path only (before that) is found at the same
    place inside the moved index, by its manifest's id."""
    docs = corpus(tmp_path / "in.jsonl", 600, seed=7)
    first, rest = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    first.write_bytes(b"".join(orjson.dumps(d) + b"\n" for d in docs[:400]))
    rest.write_bytes(b"".join(orjson.dumps(d) + b"\n" for d in docs[400:]))
    one = tmp_path / "one"
    dedup(tmp_path / "in.jsonl", one, tmp_path / "one.out")  # the reference: one index

    index = tmp_path / "idx"
    r = run(
        "dedup", str(first), "--index", str(index), "--output", str(tmp_path / "a.out"),
        "--seal-every", "100", "--batch-size", "50",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr.decode()
    entries = registry(index)
    assert len(entries) >= 3
    assert all(e.inside == f"segments/{e.number:06d}" for e in entries)
    # one entry as an index sealed before `inside` existed registered it
    idx = Index(index)
    legacy = [replace(entries[0], inside=None), *entries[1:]]
    idx.write(lambda t: set_segments(t, legacy))
    idx.close()

    moved = tmp_path / "moved" / "idx2"
    moved.parent.mkdir()
    index.rename(moved)
    stats = orjson.loads(run("stats", "--index", str(moved), "--json").stdout)
    assert all(s["found"] for s in stats["segments"])
    assert all(s["path"].startswith(str(moved / "segments")) for s in stats["segments"])
    r = run(
        "dedup", str(rest), "--index", str(moved), "--output", str(tmp_path / "b.out"),
        "--seal-every", "100", "--batch-size", "50",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr.decode()
    assert lines(tmp_path / "a.out") + lines(tmp_path / "b.out") == lines(tmp_path / "one.out")
    # the seals since registered every segment inside the index relative to it again
    after = registry(moved)
    assert len(after) > len(entries)
    assert all(e.inside == f"segments/{e.number:06d}" for e in after)
    assert all(e.path == str(moved / "segments" / f"{e.number:06d}") for e in after)


def test_a_segment_moved_on_its_own_is_repointed(tmp_path: Path) -> None:
    """A segment outside the index, moved: the run names it missing and says what to
    do (exit 5); `repoint` registers it at its new place after verifying it there;
    a segment the index does not register is refused (exit 2), nothing changed."""
    corpus(tmp_path / "a.jsonl", 200, seed=3)
    index, seg = tmp_path / "idx", tmp_path / "disk1" / "seg"
    dedup(tmp_path / "a.jsonl", index, tmp_path / "a.out")
    assert run("seal", "--index", str(index), str(seg)).returncode == 0
    new = tmp_path / "disk2" / "seg"
    new.parent.mkdir()
    seg.rename(new)

    r = run("dedup", str(tmp_path / "a.jsonl"), "--index", str(index), "--output", os.devnull)
    assert r.returncode == 5
    assert "streamdedup repoint --index" in error_line(r.stderr) and str(seg) in error_line(
        r.stderr
    )

    other = tmp_path / "other"
    dedup(tmp_path / "a.jsonl", other, tmp_path / "o.out")
    assert run("seal", "--index", str(other), str(tmp_path / "foreign")).returncode == 0
    before = registry(index)
    r = run("repoint", "--index", str(index), str(new), str(tmp_path / "foreign"))
    assert r.returncode == 2 and "does not register" in error_line(r.stderr)
    r = run("repoint", "--index", str(index), str(tmp_path / "nothing"))
    assert r.returncode == 5
    assert registry(index) == before

    r = run("repoint", "--index", str(index), str(new))
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout.decode().strip() == f"segment 1: {new} (was {seg})"
    assert [e.path for e in registry(index)] == [str(new)]
    r = run("dedup", str(tmp_path / "a.jsonl"), "--index", str(index), "--output", os.devnull)
    assert r.returncode == 0, r.stderr.decode()
