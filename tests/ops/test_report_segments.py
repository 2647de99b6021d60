"""`stats --check` over an index with sealed segments: the tombstones held to their
counts, the registry and the segments' ranges; the verdict counters, which count the
sealed documents too, left uncompared."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from streamdedup.config import EngineOptions
from streamdedup.engine.deduplicator import Deduplicator
from streamdedup.errors import IndexCorruptError
from streamdedup.models import Document
from streamdedup.ops.inspect import inspect_document, missing_text, render_inspect
from streamdedup.ops.report import index_stats, render_stats
from streamdedup.store.index import Index
from streamdedup.store.segment.sealing import seal
from streamdedup.store.tables import Tables
from tests.support.docs import edited_stream


@pytest.fixture
def sealed_index(tmp_path: Path) -> Path:
    path = tmp_path / "idx"
    with Deduplicator(path) as dd:
        dd.check_batch([Document(i, f"document {i} with its own words {i * 3}") for i in range(50)])
        seal(dd.index, tmp_path / "seg1")
        dd.check_batch(
            [Document(i, f"document {i} with its own words {i * 3}") for i in range(50, 60)]
        )
        dd.index.write(lambda t: [t.mask(1, d) for d in (3, 4, 49)])
    return path


def test_check_passes_with_tombstones_and_says_the_counters_were_not_compared(
    sealed_index: Path,
) -> None:
    stats = index_stats(str(sealed_index), check=True)
    assert stats["check"]["counters"] is False
    assert stats["documents"] == 60 - 3 and stats["open_documents"] == 10
    assert stats["segments"][0]["masked"] == 3
    text = render_stats(stats)
    assert "counters not compared" in text
    assert "#1    docnos 0..49  50 documents (3 masked)" in text
    # the batch after the seal asked the segment: the engine kept its last answer
    answer = stats["segments"][0]["last_answer"]
    assert set(answer) == {"at_ms", "round_trip_ms", "waited_ms"}
    assert answer["round_trip_ms"] >= 0 and answer["at_ms"] > 0
    assert f": round trip {answer['round_trip_ms']:,.1f} ms, the writer waited" in text


def corrupt_count(t: Tables) -> None:
    t.txn.put((1).to_bytes(2, "big"), (7).to_bytes(8, "big"), db=t.db["tombs"])


@pytest.mark.parametrize(
    ("damage", "match"),
    [
        (corrupt_count, "segment 1 has 3 tombstones, its count says 7"),
        (lambda t: t.mask(1, 50), "segment 1 masks docnos 3..50, outside its 0..49"),
        (lambda t: t.mask(9, 0), "tombstones for segment 9, which is not registered"),
        (
            lambda t: t.txn.put(b"\x00", b"", db=t.db["tombs"]),
            "an entry of 1 \\+ 0 bytes is no tombstone",
        ),
    ],
)
def test_check_finds_tombstones_that_do_not_add_up(
    sealed_index: Path, damage: Callable[[Tables], object], match: str
) -> None:
    index = Index(sealed_index)
    index.write(damage)
    index.close()
    with pytest.raises(IndexCorruptError, match=match):
        index_stats(str(sealed_index), check=True)


def test_inspect_sees_sealed_segments_as_dedup_does(tmp_path: Path) -> None:
    """Issue 35 item 14: `inspect` said "no document with id ..." (exit 1) for every
    document in a sealed segment, which `stats` counts and `dedup` matches.  Over an
    index sealed every 60 documents it finds each document where it is stored, with
    the verdict and neighbours (from every segment) an index never sealed shows; a
    document the open index masks (replaced) is neither found nor a neighbour."""
    docs = edited_stream(320, 11, words=(40, 80))
    one, sealed = tmp_path / "one", tmp_path / "sealed"
    with Deduplicator(one) as dd:
        dd.check_batch([Document(d["id"], d["text"]) for d in docs])
    with Deduplicator(sealed, options=EngineOptions(seal_every=60)) as dd:
        for k in range(0, 320, 30):
            dd.check_batch([Document(d["id"], d["text"]) for d in docs[k : k + 30]])
    stats = index_stats(str(sealed))
    assert len(stats["segments"]) >= 4 and stats["documents"] == 320

    where = set()
    for d in docs:
        got = inspect_document(str(sealed), str(d["id"]))
        want = inspect_document(str(one), str(d["id"]))
        assert got["found"] and want["found"], d["id"]
        where.add(got["segment"])
        for info in (got, want):
            del info["segment"]
            for n in info["neighbours"]:
                del n["segment"]
        assert got == want, d["id"]
    assert None in where and len(where) >= 4  # the open index and several segments
    assert "stored in   sealed segment" in render_inspect(
        inspect_document(str(sealed), str(docs[0]["id"]))
    )

    # an id sent again: its new document, in the open index; the old one masked
    first = docs[0]
    with Deduplicator(sealed) as dd:
        dd.check(first["id"], "something else entirely, nothing like before at all")
    got = inspect_document(str(sealed), str(first["id"]))
    assert got["segment"] is None and got["verdict"] == "unique"
    for d in docs[1:40]:
        info = inspect_document(str(sealed), str(d["id"]))
        assert first["id"] not in [n["id"] for n in info["neighbours"]]

    missing = inspect_document(str(sealed), "no such id")
    assert missing["found"] is False
    assert missing_text(missing) == "no document with id 'no such id' in the index"
