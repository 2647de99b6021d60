"""Sealed segments (store.segment): the manifest, the checks `SealedSegment.open`
makes, the registry, tombstones, and `seal`'s atomicity under SIGKILL at each step."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import lmdb
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamdedup.engine.deduplicator import Deduplicator
from streamdedup.errors import (
    EXIT_INDEX,
    EXIT_USAGE,
    DiskFullError,
    SealRefusedError,
    SegmentError,
)
from streamdedup.models import Document
from streamdedup.store.index import Index
from streamdedup.store.keys import MetaKey, docno_key, tomb_key, tomb_of
from streamdedup.store.segment.claim import Claim
from streamdedup.store.segment.manifest import MANIFEST, Manifest, partial_path
from streamdedup.store.segment.reading import SealedSegment
from streamdedup.store.segment.registry import (
    SegmentEntry,
    drop_segment,
    next_number,
    segments,
    set_segments,
)
from streamdedup.store.segment.sealing import recover, seal
from streamdedup.store.tables import DATA_TABLES, TABLES, Tables
from tests.support.disk import small_tmpfs
from tests.support.store import dump

DOCS = 300


def add(dd: Deduplicator, start: int = 0, n: int = DOCS) -> None:
    """`n` documents (ids start..start+n), some near copies of others, 100 a batch."""
    docs = [
        Document(
            i,
            f"page {i % 97} of the site about topic {i % 13}: "
            + " ".join(f"word{(i * 7 + j) % 211}" for j in range(40)),
        )
        for i in range(start, start + n)
    ]
    for k in range(0, n, 100):
        dd.check_batch(docs[k : k + 100])


def build(path: Path) -> None:
    with Deduplicator(path) as dd:
        add(dd)


def segment_dump(dest: Path) -> dict[str, list[tuple[bytes, bytes]]]:
    with SealedSegment.open(dest) as segment:
        return dump(segment.index)


def count(index: Index, table: str = "docs") -> int:
    return index.read(lambda t: t.count(table))


@pytest.fixture
def engine(index_dir: Path):
    """An engine over an index of DOCS documents; `seal` runs on its own `Index` (one
    process opens an LMDB environment once)."""
    with Deduplicator(index_dir) as dd:
        add(dd)
        yield dd


@pytest.fixture
def index(engine: Deduplicator) -> Index:
    return engine.index


# ---------------------------------------------------------------------- seal


def test_seal_moves_every_document_into_a_verified_segment(index: Index, tmp_path: Path) -> None:
    before = dump(index)
    dest = tmp_path / "seg1"
    manifest = seal(index, dest)

    # the segment holds exactly what the open index held, table by table
    after = segment_dump(dest)
    for name in (*DATA_TABLES, "meta"):
        assert after[name] == before[name], name
    assert manifest.documents == len(before["docs"]) == DOCS
    assert (manifest.first_docno, manifest.next_docno) == (0, DOCS)
    with open(dest / "data.mdb", "rb") as f:  # an independent reading of the checksum
        digest = hashlib.file_digest(f, lambda: hashlib.blake2b(digest_size=32)).hexdigest()
    assert manifest.checksum == f"blake2b-256:{digest}"
    assert manifest.bytes == (dest / "data.mdb").stat().st_size
    assert Manifest.read(dest) == manifest
    assert sorted(p.name for p in dest.iterdir()) == ["data.mdb", MANIFEST]
    assert not partial_path(dest).exists()

    # the open index: no documents, the counters and next number kept, one entry
    for name in DATA_TABLES:
        assert count(index, name) == 0, name
    assert index.read(lambda t: t.meta(MetaKey.NEXT_DOCNO)) == DOCS
    assert index.read(segments) == [
        SegmentEntry(1, manifest.id, str(dest), False, 0, DOCS, DOCS, manifest.bytes)
    ]

    with SealedSegment.open(dest) as segment:
        assert segment.manifest == manifest and segment.path == dest
        assert segment.index.read(lambda t: t.count("docs")) == DOCS
    assert sorted(p.name for p in dest.iterdir()) == ["data.mdb", MANIFEST]  # no lock file


def test_seals_number_segments_and_their_ranges_follow_on(
    engine: Deduplicator, tmp_path: Path
) -> None:
    index = engine.index
    first = seal(index, tmp_path / "seg1")
    add(engine, start=DOCS, n=200)  # docnos go on from where the seal left them
    (tmp_path / "seg2").mkdir()  # an empty directory will do
    second = seal(index, tmp_path / "seg2")
    assert (first.number, second.number) == (1, 2)
    assert (second.first_docno, second.next_docno, second.documents) == (DOCS, DOCS + 200, 200)
    assert [e.number for e in index.read(segments)] == [1, 2]
    assert first.id != second.id

    # numbers never repeat, also after the newest segment is dropped
    index.write(lambda t: drop_segment(t, 2))
    assert index.read(next_number) == 3
    add(engine, start=DOCS + 200, n=100)
    assert seal(index, tmp_path / "seg3").number == 3
    assert [e.number for e in index.read(segments)] == [1, 3]


def test_a_leftover_partial_is_removed_by_the_next_seal(index: Index, tmp_path: Path) -> None:
    """What a seal of this index left and then died (its mark, no lock: the lock went
    with its process) is removed; see also the SIGKILL tests below."""
    dest = tmp_path / "seg"
    claim = Claim(partial_path(dest), "seal", f"index {index.path.resolve()}")
    (partial_path(dest) / "data.mdb").write_bytes(b"half a copy")
    claim.release()  # as its process's death would
    seal(index, dest)
    assert not partial_path(dest).exists()
    assert sorted(p.name for p in dest.iterdir()) == ["data.mdb", MANIFEST]  # no mark left
    SealedSegment.open(dest).close()


@pytest.mark.parametrize(
    ("case", "why"),
    [
        ("a user's directory", "it holds no .streamdedup-owner mark"),
        ("a file", "not a directory"),
        ("a symlink", "a symbolic link"),
        ("another index's seal", "made by seal for index /elsewhere"),
        ("a backfill's", "made by backfill for segment"),
        ("a seal at work", "the run that made it is still at work"),
    ],
)
def test_a_partial_not_provably_a_dead_seals_is_refused_and_left_alone(
    index: Index, tmp_path: Path, case: str, why: str
) -> None:
    """Issue 35 item 6: `seal` removed whatever was at SEGMENT_DIR.partial (`rm -rf`),
    a user's directory too.  Only a dead seal of this index's leftover is removed;
    anything else is refused, exit 2, byte for byte as it was, the index unchanged."""
    dest = tmp_path / "seg"
    partial = partial_path(dest)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "precious.txt").write_text("keep me")
    claim = None
    if case == "a user's directory":
        partial.mkdir()
        (partial / "precious.txt").write_text("keep me")
    elif case == "a file":
        partial.write_text("keep me")
    elif case == "a symlink":
        partial.symlink_to(mine)
    else:
        kind, owner = {
            "another index's seal": ("seal", "index /elsewhere"),
            "a backfill's": ("backfill", f"segment {dest}"),
            "a seal at work": ("seal", f"index {index.path.resolve()}"),
        }[case]
        claim = Claim(partial, kind, owner)
        (partial / "precious.txt").write_text("keep me")
        if case != "a seal at work":
            claim.release()
    before = dump(index)
    try:
        with pytest.raises(SealRefusedError, match="is in the way") as err:
            seal(index, dest)
    finally:
        if claim is not None:
            claim.release()
    assert err.value.exit_status == EXIT_USAGE and why in str(err.value)
    assert "left as it was" in str(err.value)
    assert dump(index) == before and index.read(segments) == [] and not dest.exists()
    assert (mine / "precious.txt").read_text() == "keep me"
    if case == "a file":
        assert partial.read_text() == "keep me"
    else:
        assert (partial / "precious.txt").read_text() == "keep me"


def test_a_seal_onto_a_full_disk_leaves_nothing_behind(index: Index, tmp_path: Path) -> None:
    """Issue 35 item 15: a seal whose copy ran out of space left SEGMENT_DIR.partial
    filling the disk.  What it made is removed; the index keeps its documents."""
    before = dump(index)
    with small_tmpfs(tmp_path / "disk", "256k") as disk:
        dest = disk / "seg"
        with pytest.raises(DiskFullError):
            seal(index, dest)
        assert list(disk.iterdir()) == []
    assert dump(index) == before and index.read(segments) == []
    seal(index, tmp_path / "seg")  # and a seal elsewhere goes through
    assert count(index) == 0


def changelog_bound(index: Index) -> None:
    index.write(lambda t: t.set_meta(MetaKey.CHANGELOG, {"topic": "changes"}))


@pytest.mark.parametrize(
    ("case", "match"),
    [
        ("empty", "nothing to seal: the index at .* is empty"),
        ("changelog", "mirrored to a changelog is not supported yet"),
        ("not empty", "exists and is not empty; give a new or empty directory"),
        ("a file", "exists and is not empty"),
        ("registered", "a sealed segment of this index is already at"),
    ],
)
def test_seal_refuses_and_changes_nothing(
    case: str, match: str, index_dir: Path, tmp_path: Path
) -> None:
    dest = tmp_path / "seg"
    if case == "empty":
        Deduplicator(index_dir).close()  # parameters, no documents
    else:
        build(index_dir)
    index = Index(index_dir)
    try:
        if case == "changelog":
            changelog_bound(index)
        elif case == "not empty":
            dest.mkdir()
            (dest / "notes.txt").write_text("mine")
        elif case == "a file":
            dest.write_text("mine")
        elif case == "registered":
            entry = SegmentEntry(1, "x" * 32, str(dest), False, 0, 1, 1, 1)
            index.write(lambda t: set_segments(t, [entry]))
        before = dump(index)
        registry = index.read(segments)
        with pytest.raises(SealRefusedError, match=match) as err:
            seal(index, dest)
        assert err.value.exit_status == EXIT_USAGE
        assert dump(index) == before and index.read(segments) == registry
        assert not partial_path(dest).exists()
        assert case in ("not empty", "a file") or not dest.exists()
    finally:
        index.close()


# ---------------------------------------------------------------------- opening a segment


def rewrite_manifest(dest: Path, **changes: object) -> None:
    rec = orjson.loads((dest / MANIFEST).read_bytes())
    for name, value in changes.items():
        if value is KeyError:
            del rec[name]
        else:
            rec[name] = value
    (dest / MANIFEST).write_bytes(orjson.dumps(rec))


def flip_a_byte(dest: Path) -> None:
    data = dest / "data.mdb"
    with open(data, "r+b") as f:
        f.seek(data.stat().st_size // 2)
        b = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([b[0] ^ 0xFF]))


DAMAGE = {
    "no manifest": (lambda d: (d / MANIFEST).unlink(), "is not a sealed segment: it has no"),
    "not JSON": (lambda d: (d / MANIFEST).write_bytes(b'{"kind": "str'), "is not valid JSON"),
    "a list": (lambda d: (d / MANIFEST).write_bytes(b"[]"), "not a segment manifest"),
    "other kind": (
        lambda d: rewrite_manifest(d, kind="something-else"),
        "is not a streamdedup segment manifest",
    ),
    "newer format": (lambda d: rewrite_manifest(d, format=2), "has format 2; this streamdedup"),
    "field missing": (lambda d: rewrite_manifest(d, documents=KeyError), "'documents' is missing"),
    "bool for a number": (lambda d: rewrite_manifest(d, bytes=True), "'bytes' is missing or"),
    "other checksum kind": (lambda d: rewrite_manifest(d, checksum="md5:00"), "is not blake2b"),
    "more documents than numbers": (
        lambda d: rewrite_manifest(d, documents=10**6),
        "document numbers 0..300 for 1000000 documents make no sense",
    ),
    "number 0": (lambda d: rewrite_manifest(d, number=0), "number 0 or size .* out of range"),
    "an id unfit for a topic name": (
        lambda d: rewrite_manifest(d, id="../../x"),
        "id '../../x' is not 32 hex digits",
    ),
    "no data file": (lambda d: (d / "data.mdb").unlink(), "has no data.mdb"),
    "another segment's manifest": (
        lambda d: rewrite_manifest(d, documents=299, params={"num_perm": 64}),
        "does not match its manifest: its data holds 300 documents with parameters",
    ),
    "truncated": (
        lambda d: os.truncate(d / "data.mdb", 8192),
        "is damaged: data.mdb holds 8,192 bytes, its manifest says",
    ),
    "a byte flipped": (flip_a_byte, "is damaged: data.mdb has checksum blake2b-256:"),
}


@pytest.fixture
def sealed(index: Index, tmp_path: Path) -> Path:
    seal(index, tmp_path / "seg")
    return tmp_path / "seg"


@pytest.mark.parametrize("case", list(DAMAGE))
def test_a_damaged_segment_is_refused_naming_it_and_what_is_wrong(case: str, sealed: Path) -> None:
    damage, match = DAMAGE[case]
    expected = Manifest.read(sealed).checksum
    damage(sealed)
    with pytest.raises(SegmentError, match=match) as err:
        SealedSegment.open(sealed)
    assert str(sealed) in str(err.value)
    assert err.value.exit_status == EXIT_INDEX
    if case == "a byte flipped":  # names both checksums, so the operator can compare
        assert f"manifest expects {expected}" in str(err.value)
        # verify=False trusts the file (the size still matches): it opens
        SealedSegment.open(sealed, verify=False).close()


def test_a_missing_segment_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SegmentError, match=r"no manifest.json \(no such directory\)"):
        SealedSegment.open(tmp_path / "nowhere")


# ---------------------------------------------------------------------- manifest: properties

TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=20)
JSON_SCALAR = st.none() | st.booleans() | st.integers(-(2**53), 2**53) | TEXT
JSON = st.recursive(
    JSON_SCALAR | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=10,
)


@st.composite
def manifests(draw: st.DrawFn) -> Manifest:
    first = draw(st.integers(0, 2**40 - 2))
    end = draw(st.integers(first + 1, 2**40 - 1))
    return Manifest(
        id=draw(st.uuids()).hex,
        number=draw(st.integers(1, 65535)),
        index=draw(st.none() | st.uuids().map(lambda u: u.hex)),
        params=draw(st.dictionaries(TEXT, JSON, max_size=8)),
        first_docno=first,
        next_docno=end,
        documents=draw(st.integers(1, end - first)),
        offsets=draw(
            st.dictionaries(
                TEXT, st.dictionaries(st.integers(0, 999).map(str), st.integers(0, 2**62))
            )
        ),
        created=draw(TEXT),
        bytes=draw(st.integers(0, 2**50)),
        checksum="blake2b-256:" + draw(st.binary(min_size=32, max_size=32)).hex(),
    )


@given(manifests())
def test_a_manifest_survives_its_file(manifest: Manifest) -> None:
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / MANIFEST).write_bytes(manifest.to_json())
        assert Manifest.read(d) == manifest
    assert list(orjson.loads(manifest.to_json()))[:3] == ["kind", "format", "id"]


@given(manifests(), st.sampled_from(sorted(Manifest.__dataclass_fields__)), JSON)
def test_a_garbled_manifest_field_is_read_or_refused_never_a_crash(
    manifest: Manifest, name: str, value: object
) -> None:
    rec = {**manifest.to_record(), name: value}
    try:
        read = Manifest.from_record(rec, Path("/seg"))
    except SegmentError as exc:
        assert "/seg" in str(exc)
    else:
        assert read.to_record() == rec


@given(JSON)
def test_any_json_that_is_no_manifest_is_refused(value: object) -> None:
    with pytest.raises(SegmentError):
        Manifest.from_record(value, Path("/seg"))


# ---------------------------------------------------------------------- registry


def test_drop_segment_forgets_the_entry_and_only_its_tombstones(index: Index) -> None:
    entries = [SegmentEntry(n, f"{n:032x}", f"/segs/{n}", n == 2, 0, 10, 10, 4096) for n in (1, 2)]

    def setup(t: Tables) -> None:
        set_segments(t, entries)
        for n in (1, 2):
            for d in (3, 5, 7):
                t.mask(n, d)

    index.write(setup)
    assert index.read(segments) == entries
    assert index.write(lambda t: drop_segment(t, 1)) == entries[0]
    assert index.write(lambda t: drop_segment(t, 1)) is None
    assert index.read(segments) == entries[1:]
    assert index.read(lambda t: (t.mask_count(1), list(t.masked(1)))) == (0, [])
    assert index.read(lambda t: (t.mask_count(2), list(t.masked(2)))) == (3, [3, 5, 7])


# ---------------------------------------------------------------------- tombstones


@given(st.lists(st.tuples(st.integers(0, 2**16 - 1), st.integers(0, 2**40 - 1)), max_size=40))
def test_tombstone_keys_round_trip_and_sort_by_segment_then_docno(
    pairs: list[tuple[int, int]],
) -> None:
    keys = [tomb_key(n, d) for n, d in pairs]
    assert [tomb_of(k) for k in keys] == pairs
    assert sorted(keys) == [tomb_key(n, d) for n, d in sorted(pairs)]
    assert all(k[2:] == docno_key(d) for k, (_, d) in zip(keys, pairs, strict=True))


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory):
    index = Index(tmp_path_factory.mktemp("tombs") / "idx")
    yield index
    index.close()


NUMBERS = st.sampled_from([1, 2, 255, 256, 65535])
DOCNOS = st.integers(0, 20) | st.integers(0, 2**40 - 1)


@given(masks=st.lists(st.tuples(NUMBERS, DOCNOS), max_size=60), dropped=NUMBERS)
def test_tombstones_mask_one_docno_in_one_segment(
    scratch: Index, masks: list[tuple[int, int]], dropped: int
) -> None:
    with scratch.env.begin(write=True, buffers=True) as txn:  # aborted: nothing kept
        t = Tables(txn, scratch.dbs)
        seen: set[tuple[int, int]] = set()
        for n, d in masks:
            assert t.mask(n, d) == ((n, d) not in seen)
            seen.add((n, d))
        for n in (1, 2, 255, 256, 65535, 3):
            want = sorted(d for m, d in seen if m == n)
            assert t.masked(n).tolist() == want and t.masked(n).dtype.name == "uint64"
            assert t.mask_count(n) == len(want)
        assert t.clear_masks(dropped) == len([1 for m, _ in seen if m == dropped])
        for n in (1, 2, 255, 256, 65535):
            want = [] if n == dropped else sorted(d for m, d in seen if m == n)
            assert t.masked(n).tolist() == want and t.mask_count(n) == len(want)
        txn.abort()


def test_an_index_from_before_segments_has_no_tombstones_until_opened_for_writing(
    tmp_path: Path,
) -> None:
    class Older(Index):
        TABLES = tuple(name for name in TABLES if name != "tombs")

    path = tmp_path / "old"
    older = Older(path)
    older.write(lambda t: t.set_meta(MetaKey.NEXT_DOCNO, 5))
    older.close()
    readonly = Index(path, readonly=True)
    try:
        assert "tombs" not in readonly.dbs
        assert readonly.read(lambda t: (t.mask_count(1), t.masked(1).tolist())) == (0, [])
    finally:
        readonly.close()
    index = Index(path)
    try:
        assert index.write(lambda t: t.mask(1, 4)) is True
        assert index.read(lambda t: t.masked(1).tolist()) == [4]
    finally:
        index.close()


# ---------------------------------------------------------------------- kill -9 during seal

CHILD = """
import sys
from streamdedup.store.index import Index
from streamdedup.store.segment.sealing import seal
seal(Index(sys.argv[1]), sys.argv[2])
print("sealed", flush=True)
"""


def killed_at(point: str, index_dir: Path, dest: Path) -> None:
    env = {**os.environ, "STREAMDEDUP_FAILPOINT": f"{point}:1"}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(index_dir), str(dest)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == -signal.SIGKILL, done.stderr
    assert "sealed" not in done.stdout


def documents_anywhere(index: Index) -> tuple[int, int]:
    """(documents in the open index, documents in its registered segments, each opened
    and verified): one of the two holds them all."""
    in_segments = 0
    for entry in index.read(segments):
        with SealedSegment.open(entry.path) as segment:
            assert segment.manifest.id == entry.id
            in_segments += segment.index.read(lambda t: t.count("docs"))
    return count(index), in_segments


@pytest.mark.parametrize("point", ["seal-copied", "seal-written"])
def test_killed_before_the_commit_the_old_state_remains(
    point: str, index_dir: Path, tmp_path: Path
) -> None:
    build(index_dir)
    before = dump(index_dir)
    dest = tmp_path / "seg"
    killed_at(point, index_dir, dest)
    index = Index(index_dir)  # the writer lock of the dead process is recovered
    try:
        assert dump(index) == before
        assert index.read(segments) == [] and not dest.exists()
        assert partial_path(dest).is_dir()  # not a segment: nothing registers it
        assert (partial_path(dest) / MANIFEST).exists() == (point == "seal-written")
        assert recover(index) == [] and not dest.exists()
        assert documents_anywhere(index) == (DOCS, 0)

        manifest = seal(index, dest)  # sealing again just works, and tidies up
        assert not partial_path(dest).exists()
        assert documents_anywhere(index) == (0, DOCS) and manifest.documents == DOCS
        assert {k: v for k, v in segment_dump(dest).items() if k != "meta"} == {
            k: v for k, v in before.items() if k != "meta"
        }
    finally:
        index.close()


def test_killed_after_the_commit_the_new_state_is_completed_by_recover(
    index_dir: Path, tmp_path: Path
) -> None:
    build(index_dir)
    before = dump(index_dir)
    dest = tmp_path / "seg"
    killed_at("seal-committed", index_dir, dest)
    index = Index(index_dir)
    try:
        [entry] = index.read(segments)
        assert entry.path == str(dest) and entry.documents == DOCS
        assert count(index) == 0
        assert not dest.exists() and Manifest.read(partial_path(dest)).id == entry.id

        assert recover(index) == [dest]
        assert not partial_path(dest).exists()
        assert documents_anywhere(index) == (0, DOCS)
        assert {k: v for k, v in segment_dump(dest).items() if k != "meta"} == {
            k: v for k, v in before.items() if k != "meta"
        }
        assert recover(index) == []  # done once
    finally:
        index.close()


def test_a_seal_after_an_interrupted_one_first_finishes_it(index_dir: Path, tmp_path: Path) -> None:
    build(index_dir)
    killed_at("seal-committed", index_dir, tmp_path / "seg1")
    index = Index(index_dir)
    try:
        with pytest.raises(SealRefusedError, match="1 sealed segment\\)"):
            seal(index, tmp_path / "seg2")  # nothing left to seal, but it recovered seg1
        assert documents_anywhere(index) == (0, DOCS)
        assert not (tmp_path / "seg2").exists()
    finally:
        index.close()


def test_the_lmdb_copy_runs_inside_the_write_transaction_without_waiting_for_itself(
    index: Index, tmp_path: Path
) -> None:
    """What `seal` relies on: py-lmdb's compacting copy may run while this thread holds
    the write transaction, and copies the last committed state."""
    with index.env.begin(write=True) as txn:
        txn.put(b"uncommitted", b"1", db=index.dbs["meta"])
        index.env.copy(str(tmp_path), compact=True)
        txn.abort()
    copy = lmdb.open(str(tmp_path), readonly=True, lock=False, max_dbs=len(TABLES))
    try:
        meta = copy.open_db(b"meta", create=False)
        docs = copy.open_db(b"docs", create=False)
        with copy.begin() as txn:
            assert txn.get(b"uncommitted", db=meta) is None
            assert txn.stat(docs)["entries"] == DOCS
    finally:
        copy.close()
