"""The worker on an index of another family than Jaccard on texts (Hamming on bit
strings, cosine on vectors, sets, containment), on the real broker: JSON records and msgpack records
with bins or arrays give the verdicts file mode gives, bad items go to the
dead-letter topic with their reason, and a text-only input format is refused before
anything is read."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import msgpack
import orjson
import pytest

from tests.engine.test_containment import pages
from tests.engine.test_hamming import fingerprints, hex_of
from tests.engine.test_sets import baskets
from tests.engine.test_vectors import clustered
from tests.support.cli import run
from tests.support.kafka import Topics

pytestmark = pytest.mark.integration

FAMILY = ["--metric", "hamming", "--bits", "64", "--max-distance", "3"]


def as_in_file_mode(
    t: Topics, tmp_path: Path, lines: list[bytes], family: list[str]
) -> list[dict[str, Any]]:
    """The worker over what `t`'s input topic holds (msgpack) and `dedup` over the same
    items as JSON `lines`, both with the `family` options: the worker's verdicts
    (without their source), which must be file mode's, record for record."""
    r = t.run_worker(tmp_path / "idx", "--input-format", "msgpack", *family)
    assert r.returncode == 0, r.stderr.decode()[-3000:]
    got = [orjson.loads(m.value) for m in t.read(t.output, expect=len(lines))]
    for v in got:
        v.pop("source")
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_bytes(b"".join(line + b"\n" for line in lines))
    file_run = run("dedup", str(src), "--index", str(tmp_path / "f"), "--output", str(out), *family)
    assert file_run.returncode == 0, file_run.stderr.decode()
    assert got == [orjson.loads(x) for x in out.read_bytes().splitlines()]
    return got


def dead_letter_reasons(t: Topics, n: int) -> list[bytes]:
    return [dict(m.headers)["streamdedup.reason"] for m in t.read(t.dlq, expect=n)]


def test_bit_strings_through_the_worker_as_in_file_mode(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    values = fingerprints(300, seed=11)
    t = Topics(kafka_bootstrap)
    records = [
        msgpack.packb({"id": i, "bits": v.to_bytes(8, "big")})
        if i % 2
        else msgpack.packb({"id": i, "bits": hex_of(v)})
        for i, v in enumerate(values)
    ]
    bad = [msgpack.packb({"id": "short", "bits": b"\x00" * 3}), msgpack.packb({"id": "no-bits"})]
    t.produce(records + bad)
    lines = [orjson.dumps({"id": i, "bits": hex_of(v)}) for i, v in enumerate(values)]
    got = as_in_file_mode(t, tmp_path, lines, FAMILY)
    assert sum(v["verdict"] == "duplicate" for v in got) > 100
    assert dead_letter_reasons(t, 2) == [b"bad_item_length", b"missing_item"]
    again = t.run_worker(tmp_path / "idx", "--input-format", "raw")
    assert again.returncode == 2, again.stderr.decode()[-3000:]
    assert b"--input-format raw carries a text; this index compares bits items" in again.stderr


COSINE = ["--metric", "cosine", "--dim", "16", "--threshold", "0.95"]


def test_vectors_through_the_worker_as_in_file_mode(kafka_bootstrap: str, tmp_path: Path) -> None:
    """Cosine on vectors: msgpack bins of float32 and msgpack arrays give the verdicts
    (and the exact cosines) file mode gives on the same vectors as JSON arrays; a
    vector of zeros and a NaN go to the dead-letter topic with their reasons."""
    rows = clustered(300, seed=12, dim=16, bases=30)
    t = Topics(kafka_bootstrap)
    records = [
        msgpack.packb({"id": str(i), "vector": r.astype("<f4").tobytes() if i % 2 else r.tolist()})
        for i, r in enumerate(rows)
    ]
    bad = [
        msgpack.packb({"id": "zero", "vector": [0.0] * 16}),
        msgpack.packb({"id": "nan", "vector": [float("nan")] * 16}),
    ]
    t.produce(records + bad)
    lines = [orjson.dumps({"id": str(i), "vector": r.tolist()}) for i, r in enumerate(rows)]
    got = as_in_file_mode(t, tmp_path, lines, COSINE)
    assert sum(v["verdict"] == "duplicate" for v in got) > 100
    assert dead_letter_reasons(t, 2) == [b"zero_vector", b"item_not_finite"]
    # replay into a fresh index: the same verdicts, the same two errors
    replayed = tmp_path / "replay.jsonl"
    args = t.replay_args(tmp_path / "rebuilt", "--input-format", "msgpack", *COSINE)
    r = subprocess.run([*args, "--from-beginning", "--output", str(replayed)], capture_output=True)
    assert r.returncode == 1, r.stderr.decode()[-3000:]  # (two rejected records)
    again = [orjson.loads(x) for x in replayed.read_bytes().splitlines()]
    for v in again:
        v.pop("source")
    assert again[:300] == got
    assert [v["error"] for v in again[300:]] == ["zero_vector", "item_not_finite"]


def test_sets_through_the_worker_as_in_file_mode(kafka_bootstrap: str, tmp_path: Path) -> None:
    """Jaccard on sets: msgpack arrays (half reversed, with a repeat) give the verdicts
    file mode gives on the JSON arrays; a set of strings and integers is a dead
    letter."""
    sets = baskets(300, seed=13)
    t = Topics(kafka_bootstrap)
    records = [
        msgpack.packb({"id": str(i), "set": (s[::-1] + s[:1]) if i % 2 else s})
        for i, s in enumerate(sets)
    ]
    t.produce([*records, msgpack.packb({"id": "mixed", "set": ["a", 1]})])
    lines = [orjson.dumps({"id": str(i), "set": s}) for i, s in enumerate(sets)]
    got = as_in_file_mode(t, tmp_path, lines, ["--item", "set"])
    assert sum(v["verdict"] == "duplicate" for v in got) > 50
    assert dead_letter_reasons(t, 1) == [b"mixed_set"]


def test_containment_through_the_worker_as_in_file_mode(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """Containment on texts (excerpts of earlier pages): the worker gives the verdicts
    file mode gives, each duplicate with its exact containment."""
    docs = pages(300, seed=17)
    t = Topics(kafka_bootstrap)
    t.produce([msgpack.packb({"id": str(i), "text": d}) for i, d in enumerate(docs)])
    lines = [orjson.dumps({"id": str(i), "text": d}) for i, d in enumerate(docs)]
    family = ["--metric", "containment", "--shingle", "word:3"]
    got = as_in_file_mode(t, tmp_path, lines, family)
    assert sum(v["verdict"] == "duplicate" and not v["exact"] for v in got) > 50
