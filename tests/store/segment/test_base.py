"""A segment built from sorted rows (`SegmentBuilder`, what `backfill --segment`
writes through) and a new index started from a sealed segment (`attach`,
`Deduplicator(base_segment=...)`, `--base-segment`): without Spark, against what
`seal` makes and leaves."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamdedup.backfill import rules
from streamdedup.engine.deduplicator import Deduplicator
from streamdedup.errors import ConfigError, ParameterMismatchError, SealRefusedError, SegmentError
from streamdedup.models import Document
from streamdedup.store.index import Index
from streamdedup.store.keys import MetaKey
from streamdedup.store.postings import PARTITIONS
from streamdedup.store.segment.building import SegmentBuilder
from streamdedup.store.segment.claim import Claim
from streamdedup.store.segment.manifest import DATA, partial_path
from streamdedup.store.segment.reading import SealedSegment
from streamdedup.store.segment.registry import attach, segments
from streamdedup.store.tables import TABLES, Tables
from tests.support.segment_tables import assert_same_segments
from tests.support.store import dump


def docs(start: int, n: int, *, replace_every: int = 0) -> list[Document]:
    """Near copies among each other; with `replace_every`, every so many an earlier
    id (from 0) sent again with other text, so a later batch replaces documents."""
    out = []
    for i in range(start, start + n):
        # documents 50 apart share all but their last word: near duplicates
        text = " ".join(f"word{(i % 50) * 7 + j}" for j in range(80)) + f" n{i}"
        doc_id = i
        if replace_every and i % replace_every == 0:
            doc_id = i % 150
            text = "replaced " + text
        out.append(Document(doc_id, text))
    out.append(Document(f"copy-{start}", out[0].text))  # an exact copy
    return out


def sealed_index(tmp_path: Path) -> tuple[Path, Path]:
    """An index of 300 documents sealed into a segment: (index, segment)."""
    index, segment = tmp_path / "index", tmp_path / "segment"
    with Deduplicator(index) as dd:
        for k in range(0, 300, 100):
            dd.check_batch(docs(k, 100))
        dd.seal(segment)
    return index, segment


def meta(index: Index | Path) -> dict[str, Any]:
    """Every `meta` entry but the per-answer timings, a segment's path left out."""
    ix = index if isinstance(index, Index) else Index(index, readonly=True)
    try:
        got = ix.read(lambda t: {k.decode(): msgpack.unpackb(v) for k, v in t.items("meta")})
    finally:
        if ix is not index:
            ix.close()
    got.pop(MetaKey.SEGMENT_ANSWERS, None)
    for entry in got.get(MetaKey.SEGMENTS, []):
        entry.pop("path")
    return got


def test_a_new_index_from_a_segment_is_the_index_that_sealed_it(tmp_path: Path) -> None:
    """Attached, a new index holds the meta `seal` left in the index it emptied; a
    stream on both then gives the same verdicts and leaves the same tables (the
    tombstones of replaced documents of the segment too)."""
    index, segment = sealed_index(tmp_path)
    new = tmp_path / "new"
    with Deduplicator(new, base_segment=segment) as dd:
        assert meta(dd.index) == meta(index)
        assert dd.index.read(segments)[0].path == str(segment.absolute())
        more = docs(300, 200, replace_every=7)
        got = [dd.check_batch(more[k : k + 50]) for k in range(0, len(more), 50)]
        assert dd.index.read(lambda t: t.count("tombs")) > 0  # documents of the segment replaced
    with Deduplicator(index) as dd:
        want = [dd.check_batch(more[k : k + 50]) for k in range(0, len(more), 50)]
    assert got == want
    assert any(
        v.is_duplicate and isinstance(v.duplicate_of, int) and v.duplicate_of < 300
        for batch in got
        for v in batch
    )
    assert dump(new) == dump(index)
    assert meta(new) == meta(index)
    assert tombs(new) == tombs(index)


def tombs(path: Path) -> list[tuple[bytes, bytes]]:
    ix = Index(path, readonly=True)
    try:
        return ix.read(lambda t: list(t.items("tombs")))
    finally:
        ix.close()


def test_the_same_base_again_changes_nothing_another_index_is_refused(tmp_path: Path) -> None:
    index, segment = sealed_index(tmp_path)
    new = tmp_path / "new"
    with Deduplicator(new, base_segment=segment) as dd:
        dd.check_batch(docs(300, 20))
    before = dump(new), meta(new)
    with Deduplicator(new, base_segment=segment):  # a restart with the same options
        pass
    assert (dump(new), meta(new)) == before
    # an index holding documents or other segments: refused, unchanged
    other = tmp_path / "other"
    with Deduplicator(other) as dd:
        dd.check_batch(docs(0, 10))
    was = dump(other), meta(other)
    with pytest.raises(ConfigError, match="starts a NEW index"):
        Deduplicator(other, base_segment=segment)
    assert (dump(other), meta(other)) == was
    # the index that sealed it starts from it too: nothing to do
    was = dump(index), meta(index)
    with Deduplicator(index, base_segment=segment):
        pass
    assert (dump(index), meta(index)) == was
    with Deduplicator(other) as dd:
        dd.seal(tmp_path / "other-segment")
    with pytest.raises(ConfigError, match="already holds documents or segments"):
        Deduplicator(other, base_segment=segment)  # an index with another segment


def test_explicit_options_must_match_the_segment(tmp_path: Path) -> None:
    _, segment = sealed_index(tmp_path)
    new = tmp_path / "new"
    with pytest.raises(ParameterMismatchError, match=r"the base segment .*`threshold` 0\.8") as exc:
        Deduplicator(new, base_segment=segment, threshold=0.7)
    assert "--threshold" in exc.value.for_command_line()
    ix = Index(new)
    try:
        assert meta(ix) == {}  # nothing attached
    finally:
        ix.close()
    with Deduplicator(new, base_segment=segment, threshold=0.8, num_perm=128) as dd:
        assert dd.params.threshold == 0.8 and len(dd.index.read(segments)) == 1


def test_a_damaged_segment_is_not_attached(tmp_path: Path) -> None:
    _, segment = sealed_index(tmp_path)
    data = segment / DATA
    raw = bytearray(data.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    data.write_bytes(bytes(raw))
    ix = Index(tmp_path / "new")
    try:
        with pytest.raises(SegmentError, match="checksum"):
            attach(ix, segment)
        assert meta(ix) == {}
    finally:
        ix.close()


def _rows(t: Tables) -> dict[str, Any]:
    out: dict[str, Any] = {n: list(t.items(n)) for n in TABLES if n not in ("postings", "tombs")}
    out["runs"] = [
        (part, *t.postings.pairs(part))
        for part in range(PARTITIONS)
        if len(t.postings.pairs(part)[0])
    ]
    return out


def test_a_segment_built_from_sorted_rows_equals_the_sealed_one(tmp_path: Path) -> None:
    """Every table of a sealed segment, read in key order and written again through
    `SegmentBuilder`, gives a segment equal to it (what `backfill --segment` relies
    on), committed only by the rename."""
    _, segment = sealed_index(tmp_path)
    with SealedSegment.open(segment) as seg:
        rows = seg.index.read(_rows)
    dest = tmp_path / "built"
    with SegmentBuilder(dest) as b:
        for table in TABLES:
            if table not in ("postings", "tombs", "meta"):
                assert b.put_sorted(table, rows[table]) == len(rows[table])
        b.put_runs(rows["runs"])
        b.set_meta({k.decode(): msgpack.unpackb(v) for k, v in rows["meta"]})
        b.finish()
        assert not dest.exists() and partial_path(dest).is_dir()
        b.commit()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["built", "index", "segment"]
    assert_same_segments(segment, dest)


def test_a_failed_build_leaves_nothing(tmp_path: Path) -> None:
    dest = tmp_path / "seg"
    # what a build killed before its rename left (marked, no lock): removed by the next
    owner = f"segment {dest}"
    Claim(tmp_path / ".seg.build-killed", "backfill scratch", owner).release()
    (tmp_path / ".seg.build-killed" / "data.mdb").write_bytes(b"x")
    Claim(partial_path(dest), "backfill", owner).release()
    with pytest.raises(ValueError, match="not past the last one"), SegmentBuilder(dest) as b:
        b.put_sorted("ids", [(b"b", b"1"), (b"a", b"2")])  # out of order
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(SealRefusedError, match="no documents"), SegmentBuilder(dest) as b:
        b.finish()
    assert list(tmp_path.iterdir()) == []
    dest.mkdir()
    (dest / "something").write_bytes(b"x")
    with pytest.raises(SealRefusedError, match="not empty"):
        SegmentBuilder(dest)


def test_a_build_removes_only_what_is_provably_its_own(tmp_path: Path) -> None:
    """Issue 35 item 6: a build removed whatever was at SEGMENT_DIR.partial and every
    `.SEGMENT_DIR.build-*`.  A `.partial` without a dead build's mark is refused and
    left as it was; so is one a build at work holds; a scratch-like directory without
    the mark is left alone."""
    dest = tmp_path / "seg"
    partial_path(dest).mkdir()
    (partial_path(dest) / "precious.txt").write_text("keep me")
    (tmp_path / ".seg.build-mine").mkdir()
    (tmp_path / ".seg.build-mine" / "notes").write_text("mine")
    with pytest.raises(SealRefusedError, match=r"is in the way .* no \.streamdedup-owner mark"):
        SegmentBuilder(dest)
    with pytest.raises(SealRefusedError, match="is in the way"):
        SegmentBuilder.check(dest)
    assert (partial_path(dest) / "precious.txt").read_text() == "keep me"
    (partial_path(dest) / "precious.txt").unlink()
    partial_path(dest).rmdir()

    with SegmentBuilder(dest) as first:  # at work: a second build is refused
        with pytest.raises(SealRefusedError, match="still at work"):
            SegmentBuilder(dest)
        assert first.partial.is_dir()
        first.abort()
    assert (tmp_path / ".seg.build-mine" / "notes").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == [".seg.build-mine"]


@given(
    st.lists(
        st.tuples(st.integers(0, 40), st.integers(0, 45)), max_size=12, unique_by=lambda m: m[0]
    )
)
def test_the_live_owner_is_the_content_rule_s_last_owner(raw: list[tuple[int, int]]) -> None:
    """`live_content` (what the segment stores) agrees with `content_rule` (what the
    verdicts followed): the owner at the end owns the last stretch, open-ended."""
    members = [(pos, gone if gone > pos else rules.NEVER) for pos, gone in raw]
    owner, copies = rules.live_content(members)
    _, postings = rules.content_rule(members)
    last = [p[0] for p in postings if p[2] == rules.NEVER]
    assert last == ([owner] if owner >= 0 else [])
    live = sorted(p for p, g in members if g == rules.NEVER)
    assert sorted(itertools.chain([owner] if owner >= 0 else [], copies)) == live
