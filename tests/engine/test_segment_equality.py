"""The segmented index's promise (issue 24, DESIGN.md "Segments"): whatever the number
and placement of sealed segments, `dedup` gives exactly the verdicts of one index over
the same stream -- verdict, duplicate_of, cluster, similarity, exact, record for record.

Each test runs `dedup` over one index, then over the same stream with the index sealed
along the way (explicit `seal` between `dedup` runs over consecutive slices, and
`--seal-every` within them), the segments opened locally or served by separate
`segment-server` processes on the real broker.  The streams hold what segments make
hard: ids sent again with changed content after they were sealed (tombstones), content
passing from a sealed owner to a copy in another segment, replays of sealed documents,
hot buckets where `--max-bucket-candidates` decides, and exact ties between candidates
in different segments (tests/support/segments.py)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.support.segments import (
    Crafted,
    Servers,
    assert_same_verdicts,
    crafted_stream,
    dedup,
    dedup_in_slices,
    kinds,
    mixed_stream,
    read_jsonl,
    registry,
    write_jsonl,
)

# small caps, so that the merged candidate lists' order and cut-off decide verdicts
CAPS = ("--max-bucket-candidates", "3", "--max-exact-checks", "2")


def single_index(docs: list[dict[str, Any]], work: Path, *extra: str) -> list[dict[str, Any]]:
    work.mkdir(parents=True, exist_ok=True)
    src = write_jsonl(work / "all.jsonl", docs)
    dedup(src, work / "index", work / "verdicts.jsonl", *extra)
    return read_jsonl(work / "verdicts.jsonl")


def by_role(c: Crafted, verdicts: list[dict[str, Any]], role: str) -> dict[str, Any]:
    return verdicts[c.roles[role]]


def check_crafted_reference(c: Crafted, ref: list[dict[str, Any]]) -> None:
    """The crafted stream does, in one index, what it is meant to exercise; so the
    equality below covers those cases and not some degenerate stream."""
    v = lambda role: by_role(c, ref, role)  # noqa: E731
    assert (v("B")["duplicate_of"], v("B")["exact"]) == ("A", True)
    # A's content passed to its oldest copy B, then (B replaced) to B2
    assert (v("C1")["duplicate_of"], v("C1")["exact"], v("C1")["cluster"]) == ("B", True, "A")
    assert (v("N1")["duplicate_of"], v("N1")["exact"]) == ("B", False)
    assert (v("C2")["duplicate_of"], v("C2")["cluster"]) == ("B2", "A")
    assert v("N2")["duplicate_of"] == "B2"
    # a changed id is checked again, never against its own earlier version
    assert v("R-edited")["verdict"] == "unique" and v("R-again") == v("R-edited")
    assert v("P3-again") == v("P3-third") == ref[3]
    # W ties exactly with Y and Z (the same edit size, disjoint places)
    assert v("W")["similarity"] == v("Z")["similarity"] and v("W")["duplicate_of"] in ("Y", "Z")
    replaced = {f"site-{k}" for k in (13, 14, 15)}
    for role in ("W1", "W2"):
        assert v(role)["verdict"] == "duplicate" and v(role)["duplicate_of"] not in replaced


def test_crafted_cases_sealed_locally(tmp_path: Path) -> None:
    """Sealed after each of the first three phases, segments opened locally, small caps
    and small batches: every case of `crafted_stream` gives the single index's verdict.
    The caps bite in this stream (the verdicts differ with larger caps)."""
    c = crafted_stream()
    ref = single_index(c.docs, tmp_path / "one", *CAPS)
    check_crafted_reference(c, ref)
    uncapped = single_index(c.docs, tmp_path / "uncapped")
    assert uncapped != ref, "the caps should decide some verdicts of this stream"
    sealed = dedup_in_slices(c.docs, tmp_path / "sealed", c.cuts, *CAPS, "--batch-size", "4")
    assert len(sealed.segments) == 3
    assert_same_verdicts(sealed.verdicts, ref)


def test_a_mixed_stream_sealed_locally_by_hand_and_by_seal_every(tmp_path: Path) -> None:
    """2,000 documents of the benchmark's crawl-like and template streams with the
    segment-crossing cases mixed in: explicit seals at two points, `--seal-every`
    within the slices; small caps."""
    docs = mixed_stream(2000, seed=21)
    ref = single_index(docs, tmp_path / "one", *CAPS)
    got = kinds(ref)
    assert got["duplicate"] > 300 and got["exact"] > 30 and got["empty"] > 0, got
    sealed = dedup_in_slices(
        docs,
        tmp_path / "sealed",
        [500, 1300],
        *CAPS,
        "--batch-size",
        "100",
        "--seal-every",
        "300",
        "--segments-dir",
        str(tmp_path / "auto"),
    )
    auto = sorted(p for p in (tmp_path / "auto").iterdir() if p.is_dir())
    assert len(sealed.segments) == 2 and len(auto) >= 3, auto
    assert_same_verdicts(sealed.verdicts, ref)


# ------------------------------------------------------------------ 50,000 documents

BIG = 50_000


@pytest.fixture(scope="session")
def big_reference(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[dict[str, Any]], Any]:
    """The 50,000-document stream and its single-index verdicts (once per test
    process: ~20 s on the 2-core machine)."""
    docs = mixed_stream(BIG, seed=5)
    return docs, single_index(docs, tmp_path_factory.mktemp("big-one"))


@pytest.mark.slow
def test_50000_documents_sealed_locally(
    big_reference: tuple[list[dict[str, Any]], Any], tmp_path: Path
) -> None:
    """The issue's proof, local segments: sealed by hand after 15,000 and 35,000
    documents and by `--seal-every 10000` within the slices (batches of 4,000, where
    the reference ran 8,000: five segments)."""
    docs, ref = big_reference
    sealed = dedup_in_slices(
        docs,
        tmp_path,
        [15_000, 35_000],
        "--batch-size",
        "4000",
        "--seal-every",
        "10000",
        "--segments-dir",
        str(tmp_path / "auto"),
    )
    auto = [p for p in (tmp_path / "auto").iterdir() if p.is_dir()]
    assert len(sealed.segments) == 2 and len(auto) >= 2, auto
    assert_same_verdicts(sealed.verdicts, ref)


# ------------------------------------------------------------------ remote segments


def remote_run(
    docs: list[dict[str, Any]],
    work: Path,
    cuts: list[int],
    bootstrap: str,
    *extra: str,
    replicas: int = 1,
) -> tuple[list[dict[str, Any]], Servers]:
    """`dedup_in_slices` with every segment sealed `--remote` and served by `replicas`
    separate `segment-server` processes, started as soon as it is sealed."""
    servers = Servers(bootstrap)

    def serve(segment: Path) -> None:
        for _ in range(replicas):
            servers.start(segment)

    try:
        run = dedup_in_slices(
            docs,
            work,
            cuts,
            "--bootstrap-servers",
            bootstrap,
            *extra,
            seal_args=("--remote",),
            between=serve,
        )
        servers.alive()
    finally:
        servers.stop()
    return run.verdicts, servers


@pytest.mark.integration
def test_crafted_cases_on_remote_segments(kafka_bootstrap: str, tmp_path: Path) -> None:
    """As `test_crafted_cases_sealed_locally`, each segment answered by its own
    `segment-server` process pair (replicas of one segment share the work) over the
    broker."""
    c = crafted_stream()
    ref = single_index(c.docs, tmp_path / "one", *CAPS)
    check_crafted_reference(c, ref)
    got, _ = remote_run(
        c.docs,
        tmp_path / "remote",
        c.cuts,
        kafka_bootstrap,
        *CAPS,
        "--batch-size",
        "4",
        replicas=2,
    )
    assert_same_verdicts(got, ref)


@pytest.mark.integration
def test_a_mixed_stream_on_remote_segments(kafka_bootstrap: str, tmp_path: Path) -> None:
    docs = mixed_stream(1500, seed=22)
    ref = single_index(docs, tmp_path / "one", *CAPS)
    got, _ = remote_run(
        docs, tmp_path / "remote", [400, 800, 1100], kafka_bootstrap, *CAPS, "--batch-size", "150"
    )
    assert_same_verdicts(got, ref)


@pytest.mark.slow
@pytest.mark.integration
def test_50000_documents_on_remote_segments(
    big_reference: tuple[list[dict[str, Any]], Any], kafka_bootstrap: str, tmp_path: Path
) -> None:
    """The issue's proof, remote segments: sealed after 15,000, 30,000 and 40,000
    documents, each segment served by a separate `segment-server` process."""
    docs, ref = big_reference
    got, servers = remote_run(docs, tmp_path, [15_000, 30_000, 40_000], kafka_bootstrap)
    assert len(servers.procs) == 3
    assert_same_verdicts(got, ref)


# ------------------------------------------------------------------ a time window


@pytest.mark.integration
def test_a_time_window_over_segments(kafka_bootstrap: str, tmp_path: Path) -> None:
    """`worker --ttl` over messages 1 s apart with a 200 s window, sealed every 150
    documents, a small expiry budget per batch: the documents that expire in sealed
    segments are masked, fully expired segments are dropped, and the verdicts are
    those of one index with the same window."""
    from kafka import KafkaProducer

    from tests.support.kafka import Topics

    docs = mixed_stream(1000, seed=23)
    base = int(time.time() * 1000) - 86_400_000  # a day ago: no clock-skew bound applies
    window = ("--ttl", "200s", "--max-expire-per-batch", "20", "--max-poll-records", "50")
    runs: dict[str, list[dict[str, Any]]] = {}
    for name, extra in (
        ("one", ()),
        ("sealed", ("--seal-every", "150", "--segments-dir", str(tmp_path / "auto"))),
    ):
        t = Topics(kafka_bootstrap)
        producer = KafkaProducer(bootstrap_servers=kafka_bootstrap, linger_ms=5)
        for i, d in enumerate(docs):
            producer.send(t.input, orjson.dumps(d), timestamp_ms=base + 1000 * i)
        producer.close()
        r = t.run_worker(tmp_path / name, *window, *extra, idle=4)
        assert r.returncode == 0, r.stderr.decode()[-3000:]
        runs[name] = [
            {k: v for k, v in orjson.loads(m.value).items() if k != "source"}
            for m in t.read_to_end(t.output)
        ]
    assert len(runs["one"]) == len(docs)
    untimed = single_index(docs, tmp_path / "untimed")
    assert untimed != runs["one"], "the window should change some verdicts"
    made = sorted(p for p in (tmp_path / "auto").iterdir() if p.is_dir())
    assert len(made) >= 5
    assert len(registry(tmp_path / "sealed")) < len(made), "no expired segment was dropped"
    assert_same_verdicts(runs["sealed"], runs["one"])
