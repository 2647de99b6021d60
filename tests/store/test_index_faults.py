"""Faults of the index and its parameters, as a user meets them: a full disk, a
damaged data file, out-of-range detection parameters.  Each must end in one line
saying what happened and what to do, with its exit status, and never a traceback
or a signal."""

from __future__ import annotations

import importlib.util
import random
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from streamdedup.engine.deduplicator import Deduplicator
from streamdedup.errors import ConfigError, IndexCorruptError
from streamdedup.models import Document
from streamdedup.store.index import Index
from streamdedup.store.keys import MetaKey, id_key

VOCAB = [f"w{i}" for i in range(3000)]


def run(*args: str, code: str | None = None) -> subprocess.CompletedProcess[bytes]:
    """The command line in a subprocess; `code` runs first in it (a test knob)."""
    prefix = [] if code is None else [f"{code}\n"]
    script = "".join(prefix) + "import sys\nfrom streamdedup.cli.main import main\nsys.exit(main())"
    return subprocess.run([sys.executable, "-c", script, *args], capture_output=True, timeout=600)


def write_corpus(path: Path, n: int, words: int = 200, seed: int = 3) -> list[str]:
    rnd = random.Random(seed)
    ids = [f"doc-{i:06d}" for i in range(n)]
    with open(path, "wb") as f:
        for doc_id in ids:
            text = " ".join(rnd.choice(VOCAB) for _ in range(words))
            f.write(orjson.dumps({"id": doc_id, "text": text}) + b"\n")
    return ids


def one_line_error(stderr: bytes) -> str:
    text = stderr.decode()
    assert "Traceback" not in text and "Bus error" not in text, text
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1, text
    return lines[0]


# ------------------------------------------------------------------ full disk


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """An 8 MiB tmpfs (root only: CI runs as root)."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    r = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mnt)], capture_output=True
    )
    if r.returncode != 0:
        pytest.skip(
            "mounting a small tmpfs is not permitted here (needs root): "
            + r.stderr.decode().strip()
        )
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


# A 1 MiB headroom instead of 64 MiB, so that an 8 MiB disk holds a few batches.
SMALL_HEADROOM = "import streamdedup.store.index as ix\nix.DISK_HEADROOM = 1 << 20"


def test_a_full_disk_stops_dedup_with_status_6_and_keeps_the_index(
    tmp_path: Path, small_disk: Path
) -> None:
    src, out1, out2 = tmp_path / "in.jsonl", tmp_path / "out1.jsonl", tmp_path / "out2.jsonl"
    ids = write_corpus(src, 8000)  # its index takes about 17 MB: twice the disk
    index = small_disk / "index"
    args = ["dedup", str(src), "--index", str(index), "--batch-size", "500"]

    r = run(*args, "--output", str(out1), code=SMALL_HEADROOM)
    assert r.returncode == 6, r.stderr.decode()[-2000:]
    line = one_line_error(r.stderr)
    assert "no space left" in line and str(index) in line and "run the same command" in line

    written = [orjson.loads(x) for x in out1.read_bytes().splitlines()]
    assert 0 < len(written) < len(ids)
    idx = Index(index, readonly=True)
    try:
        held = idx.read(
            lambda t: (t.count("docs"), [t.docno_for_id(id_key(v["id"])) for v in written])
        )
    finally:
        idx.close()
    assert held[0] == len(written)  # every batch whose verdicts were written, no more
    assert all(d is not None for d in held[1])
    stats = run("stats", "--index", str(index), "--check")
    assert stats.returncode == 0, stats.stderr.decode()
    assert f"documents    {len(written):,}" in stats.stdout.decode()

    # a bigger disk: the same input completes (default headroom), earlier verdicts kept
    subprocess.run(["mount", "-o", "remount,size=128m", str(small_disk)], check=True)
    r = run(*args, "--output", str(out2))
    assert r.returncode == 0, r.stderr.decode()[-2000:]
    again = out2.read_bytes().splitlines()
    assert len(again) == len(ids)
    assert again[: len(written)] == out1.read_bytes().splitlines()


def test_a_backup_onto_a_full_disk_exits_6(tmp_path: Path, small_disk: Path) -> None:
    build_index(tmp_path / "i", n=1000)
    subprocess.run(["mount", "-o", "remount,size=1m", str(small_disk)], check=True)
    r = run("backup", "--index", str(tmp_path / "i"), str(small_disk / "copy"))
    assert r.returncode == 6
    assert "no space left for the copy" in one_line_error(r.stderr)


# ------------------------------------------------------------------ damage


def build_index(path: Path, n: int = 3000) -> None:
    rnd = random.Random(1)
    with Deduplicator(path) as dd:
        docs = [
            Document(f"doc-{i:06d}", " ".join(rnd.choice(VOCAB) for _ in range(100)))
            for i in range(n)
        ]
        for start in range(0, n, 1000):
            dd.check_batch(docs[start : start + 1000])


def damage_docs_pages(path: Path, at: int = 10, raw: bytes = b"\x00\x00") -> int:
    """Overwrite bytes `at` of every leaf page of the `docs` table (found by its
    records' msgpack-coded ids), by default clearing the page-type flags: a
    deterministic torn write.  Returns pages damaged."""
    page = 4096
    data_file = path / "data.mdb"
    info_size = Index(path, readonly=True)
    try:
        used = (info_size.env.info()["last_pgno"] + 1) * page
    finally:
        info_size.close()
    damaged = 0
    with open(data_file, "r+b") as f:
        data = f.read(used)
        for pgno in range(2, used // page):
            raw = data[pgno * page : (pgno + 1) * page]
            stored_pgno, _, flags = struct.unpack_from("<QHH", raw)
            if stored_pgno == pgno and flags & 0x02 and b"\xaadoc-" in raw:
                f.seek(pgno * page + at)
                f.write(raw)
                damaged += 1
    assert damaged > 0
    return damaged


@pytest.fixture
def damaged_index(tmp_path: Path) -> Path:
    path = tmp_path / "damaged"
    build_index(path)
    damage_docs_pages(path)
    return path


def test_dedup_into_a_damaged_index_exits_5_with_what_to_do(
    tmp_path: Path, damaged_index: Path
) -> None:
    src = tmp_path / "more.jsonl"
    write_corpus(src, 50, seed=9)
    r = run("dedup", str(src), "--index", str(damaged_index), "--output", str(tmp_path / "o"))
    assert r.returncode == 5, r.stderr.decode()[-2000:]
    line = one_line_error(r.stderr)
    assert "damaged" in line and str(damaged_index) in line
    assert "backup" in line and "rebuild" in line


def test_the_python_api_raises_index_corrupt_error(damaged_index: Path) -> None:
    with Deduplicator(damaged_index) as dd, pytest.raises(IndexCorruptError, match="damaged"):
        dd.check("doc-000005", "some text that was never indexed before now")


def test_stats_check_finds_damage_and_passes_a_healthy_index(
    tmp_path: Path, damaged_index: Path
) -> None:
    healthy = tmp_path / "healthy"
    build_index(healthy)
    ok = run("stats", "--index", str(healthy), "--check")
    assert ok.returncode == 0, ok.stderr.decode()
    assert "check        ok: " in ok.stdout.decode()
    if importlib.util.find_spec("lmdb.verify") is not None:  # py-lmdb 3 or later
        assert "file structure verified" in ok.stdout.decode()
    plain = run("stats", "--index", str(healthy))
    assert plain.returncode == 0 and "check        ok" not in plain.stdout.decode()

    r = run("stats", "--index", str(damaged_index), "--check")
    assert r.returncode == 5
    line = one_line_error(r.stderr)
    assert "damaged" in line and str(damaged_index) in line


def test_stats_check_finds_damage_lmdb_reads_past(tmp_path: Path) -> None:
    """Overwritten node offsets: LMDB answers some reads of such a page with nothing
    at all (no error); the offline structure verifier finds it."""
    if importlib.util.find_spec("lmdb.verify") is None:
        pytest.skip("the offline structure verifier comes with py-lmdb 3")
    path = tmp_path / "i"
    build_index(path)
    damage_docs_pages(path, at=16, raw=b"\xff" * 64)
    r = run("stats", "--index", str(path), "--check")
    assert r.returncode == 5
    line = one_line_error(r.stderr)
    assert "damaged" in line and "docs" in line


def test_stats_check_finds_counters_that_disagree_with_the_records(tmp_path: Path) -> None:
    path = tmp_path / "i"
    build_index(path, n=200)
    index = Index(path)
    index.write(lambda t: t.set_meta(MetaKey.COUNTS, {**t.meta(MetaKey.COUNTS), "unique": 7}))
    index.close()
    r = run("stats", "--index", str(path), "--check")
    assert r.returncode == 5
    assert "7 unique counted" in one_line_error(r.stderr)


def test_an_overwritten_file_header_is_reported_as_damage(tmp_path: Path) -> None:
    path = tmp_path / "i"
    build_index(path, n=100)
    with open(path / "data.mdb", "r+b") as f:
        for meta_page in (0, 1):  # both meta pages: LMDB cannot find a valid root
            f.seek(meta_page * 4096 + 16)
            f.write(b"\x5a" * 64)
    for args in (["stats", "--index", str(path)], ["stats", "--index", str(path), "--check"]):
        r = run(*args)
        assert r.returncode == 5
        line = one_line_error(r.stderr)
        assert "damaged" in line and "backup" in line


def torn_copy(source: Path, dest: Path, keep: float = 0.4) -> None:
    """`dest`: a copy of the index at `source` whose data.mdb is cut short (a copy or
    a backup that stopped part-way), its meta pages intact."""
    dest.mkdir()
    used = Index(source, readonly=True)
    try:
        end = (used.env.info()["last_pgno"] + 1) * 4096
    finally:
        used.close()
    with open(source / "data.mdb", "rb") as f:  # the used pages, not the sparse GiB
        (dest / "data.mdb").write_bytes(f.read(int(end * keep)))


def test_a_torn_data_file_is_damage_for_every_command(tmp_path: Path) -> None:
    """Issue 35 item 10: a data file cut short killed every read-only open (stats,
    stats --check, inspect, restore, backup) with SIGBUS, exit 135 and no message,
    while dedup (a writer, whose open extends the file) exited 5.  Every command: 5,
    one line, and the torn file is left as it was."""
    healthy = tmp_path / "healthy"
    build_index(healthy, n=1000)
    torn = tmp_path / "torn"
    torn_copy(healthy, torn)
    before = (torn / "data.mdb").read_bytes()
    src = tmp_path / "more.jsonl"
    write_corpus(src, 20, seed=9)
    commands = [
        ["stats", "--index", str(torn)],
        ["stats", "--index", str(torn), "--check"],
        ["inspect", "--index", str(torn), "doc-000001"],
        ["backup", "--index", str(torn), str(tmp_path / "copy")],
        ["restore", str(torn), "--index", str(tmp_path / "restored")],
        ["seal", "--index", str(torn), str(tmp_path / "seg")],
        ["dedup", str(src), "--index", str(torn), "--output", str(tmp_path / "out")],
    ]
    for args in commands:
        r = run(*args)
        assert r.returncode == 5, (args, r.returncode, r.stderr.decode()[-2000:])
        line = one_line_error(r.stderr)
        assert "damaged" in line and "cut short" in line and str(torn) in line, line
        assert (torn / "data.mdb").read_bytes() == before, args  # nothing changed it
    assert not (tmp_path / "restored").exists() and not (tmp_path / "copy").exists()
    with pytest.raises(IndexCorruptError, match="cut short"):
        Index(torn, readonly=True)
    with pytest.raises(IndexCorruptError, match="cut short"):
        Deduplicator(torn)
    # the healthy original opens, also while a writer holds it open
    with Deduplicator(healthy):
        assert run("stats", "--index", str(healthy)).returncode == 0


# ------------------------------------------------------------------ parameters


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (["--num-perm", "70000"], "--num-perm must be between 2 and 1024, got 70000"),
        (["--num-perm", "1"], "--num-perm must be between 2 and 1024, got 1"),
        (["--num-perm", "0"], "--num-perm must be between 2 and 1024, got 0"),
        (["--seed", "99999999999999999999"], "--seed must be between 0 and 18446744073709551615"),
        (["--seed", "-1"], "--seed must be between 0 and 18446744073709551615"),
    ],
)
def test_out_of_range_parameters_are_a_config_error(
    tmp_path: Path, option: list[str], message: str
) -> None:
    src = tmp_path / "in.jsonl"
    write_corpus(src, 5)
    r = run("dedup", str(src), "--index", str(tmp_path / "i"), "--output", "-", *option)
    assert r.returncode == 2, r.stderr.decode()[-2000:]
    assert message in one_line_error(r.stderr)
    assert r.stdout == b""


def test_tune_checks_num_perm_too() -> None:
    r = run("tune", "--num-perm", "70000")
    assert r.returncode == 2
    assert "--num-perm must be between 2 and 1024" in one_line_error(r.stderr)


def test_the_python_api_validates_parameters(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="`num_perm` must be between"):
        Deduplicator(tmp_path / "a", num_perm=70000)
    with pytest.raises(ConfigError, match="`seed` must be between"):
        Deduplicator(tmp_path / "b", seed=10**20)
    with pytest.raises(ConfigError, match="needs 140 hash values"):
        Deduplicator(tmp_path / "c", bands=20, rows=7)
    with Deduplicator(tmp_path / "d", num_perm=1024, seed=(1 << 64) - 1) as dd:
        assert dd.check("x", "the extreme values are still accepted").verdict == "unique"


@pytest.mark.integration
def test_a_full_disk_stops_the_worker_with_status_6_before_its_kafka_commit(
    kafka_bootstrap: str, tmp_path: Path, small_disk: Path
) -> None:
    """The batch whose index transaction found no room is not published: the group's
    committed offsets and the committed verdicts stop where the index stops, and after
    the disk grows the worker goes on, one verdict per document."""
    from kafka import KafkaConsumer, TopicPartition

    from tests.support.kafka import FAST_GROUP, Topics

    src = tmp_path / "in.jsonl"
    ids = write_corpus(src, 6000)  # its index takes about 13 MB
    t = Topics(kafka_bootstrap)
    t.produce(src.read_bytes().splitlines())
    index = small_disk / "index"
    args = [
        "worker",
        "--bootstrap-servers",
        kafka_bootstrap,
        "--input-topic",
        t.input,
        "--output-topic",
        t.output,
        "--dead-letter-topic",
        t.dlq,
        "--group-id",
        t.group,
        "--index",
        str(index),
        "--max-poll-records",
        "300",
        "--idle-exit",
        "2",
        *FAST_GROUP,
    ]
    r = run(*args, code=SMALL_HEADROOM)
    err = r.stderr.decode()
    assert r.returncode == 6, err[-3000:]
    assert "Traceback" not in err and "Bus error" not in err
    assert "no space left" in err.strip().splitlines()[-1]

    idx = Index(index, readonly=True)
    try:
        indexed = idx.read(lambda t: t.count("docs"))
    finally:
        idx.close()
    assert 0 < indexed < len(ids)
    consumer = KafkaConsumer(bootstrap_servers=kafka_bootstrap, group_id=t.group)
    committed = consumer.committed(TopicPartition(t.input, 0)) or 0
    consumer.close()
    verdicts = [orjson.loads(m.value)["id"] for m in t.read_to_end(t.output)]
    assert committed <= indexed  # nothing committed past what the index holds
    assert len(verdicts) == committed and verdicts == ids[:committed]

    subprocess.run(["mount", "-o", "remount,size=128m", str(small_disk)], check=True)
    r = run(*args)
    assert r.returncode == 0, r.stderr.decode()[-3000:]
    verdicts = [orjson.loads(m.value)["id"] for m in t.read_to_end(t.output)]
    assert verdicts == ids
