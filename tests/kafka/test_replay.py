"""`streamdedup replay` against a real broker."""

from __future__ import annotations

import re
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.support.kafka import Topics, stream, verdicts_by_offset

pytestmark = pytest.mark.integration


def replay(t: Topics, index: Path, *extra: str) -> subprocess.CompletedProcess[bytes]:
    r = subprocess.run(t.replay_args(index, *extra), capture_output=True, timeout=600)
    rejected = re.search(rb"([\d,]+) rejected", r.stderr)
    # as `dedup`: 1 when some records were rejected
    assert r.returncode == (1 if rejected and rejected[1] != b"0" else 0), r.stderr.decode()[-3000:]
    return r


def lines(path: Path) -> dict[tuple[int, int], dict[str, Any]]:
    out = {}
    for raw in path.read_bytes().splitlines():
        v = orjson.loads(raw)
        src = v.pop("source")
        key = (src["partition"], src["offset"])
        assert key not in out, f"two verdicts for {key}"
        out[key] = v
    return out


Live = tuple[Topics, dict[tuple[int, int], Any], Path]


def processed_live(kafka_bootstrap: str, directory: Path) -> Live:
    """A topic with 2 partitions that a live worker has processed, its verdicts, and
    the worker's index."""
    docs = stream(600, seed=21)
    t = Topics(kafka_bootstrap, partitions=2)
    t.produce([orjson.dumps(d) for d in docs], partitions=2)
    t.produce([b"not json"])
    index = directory / "live-index"
    r = t.run_worker(index)
    assert r.returncode == 0, r.stderr.decode()[-3000:]
    got = verdicts_by_offset(t.read(t.output, expect=len(docs)))
    assert len(got) == len(docs)
    return t, got, index


@pytest.fixture(scope="module")
def live(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Live:
    """`processed_live`, once per module (per xdist worker) for the tests that only
    read it; a test that adds to the topic or the index makes its own."""
    return processed_live(kafka_bootstrap, tmp_path_factory.mktemp("live"))


def test_rebuild_to_a_file_equals_the_live_run(live: Live, tmp_path: Path) -> None:
    t, expected, _ = live
    out = tmp_path / "replay.jsonl"
    r = replay(t, tmp_path / "rebuilt", "--from-beginning", "--output", str(out))
    got = lines(out)
    errors = {k: v for k, v in got.items() if v["verdict"] == "error"}
    assert [v["error"] for v in errors.values()] == ["malformed_json"]
    assert {k: v for k, v in got.items() if k not in errors} == expected
    assert b"replay done: 601 messages" in r.stderr
    # run again: it has nothing left to do, and the file is unchanged
    replay(t, tmp_path / "rebuilt", "--output", str(out))
    assert lines(out) == got


def test_rebuild_to_a_topic_equals_the_live_run(live: Live, tmp_path: Path) -> None:
    """... and `--keep-topic` gets the message of each unique document, as it came."""
    from streamdedup.kafka.settings import create_topics

    t, expected, _ = live
    out, kept = t.output + "-replay", t.output + "-kept"
    create_topics(t.bootstrap, [out, kept], 1, {})
    replay(t, tmp_path / "rebuilt", "--output-topic", out, "--keep-topic", kept)
    got = verdicts_by_offset(t.read(out, expect=len(expected)))
    assert got == expected
    unique = sorted(str(v["id"]) for v in expected.values() if v["verdict"] == "unique")
    messages = t.read(kept, expect=len(unique))
    assert sorted(str(orjson.loads(m.value)["id"]) for m in messages) == unique
    r = subprocess.run(
        t.replay_args(tmp_path / "other", "--output", str(tmp_path / "x"), "--keep-topic", kept),
        capture_output=True,
    )
    assert r.returncode == 2 and b"--keep-topic goes with --output-topic" in r.stderr


def test_rebuild_refuses_a_used_index(live: Live, tmp_path: Path) -> None:
    t, _, index = live
    r = subprocess.run(
        t.replay_args(index, "--output", str(tmp_path / "x.jsonl")),
        capture_output=True,
    )
    assert r.returncode == 2
    assert b"--mode rebuild needs a fresh index" in r.stderr


def test_reverdict_is_idempotent(kafka_bootstrap: str, tmp_path: Path) -> None:
    t, expected, index = processed_live(kafka_bootstrap, tmp_path)
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    args = ("--mode", "reverdict", "--group-id", "rv")
    replay(t, index, *args, "--output", str(first))
    replay(t, index, *args, "--restart", "--output", str(second))
    a, b = lines(first), lines(second)
    assert a == b
    assert {k: v for k, v in a.items() if v["verdict"] != "error"} == expected
    # new documents are checked against the index and inserted
    t.produce([orjson.dumps({"id": "new", "text": "words " * 40})], partitions=1)
    third = tmp_path / "c.jsonl"
    replay(t, index, *args, "--restart", "--output", str(third))
    c = lines(third)
    assert sum(v["id"] == "new" for v in c.values()) == 1
    assert len(c) == len(a) + 1


def test_from_offsets_and_from_timestamp(kafka_bootstrap: str, tmp_path: Path) -> None:
    from kafka import KafkaProducer

    t = Topics(kafka_bootstrap)
    p = KafkaProducer(bootstrap_servers=kafka_bootstrap)
    base = 1_700_000_000_000
    for i in range(50):
        doc = {"id": i, "text": f"document number {i} " + "padding words " * 5}
        p.send(t.input, value=orjson.dumps(doc), timestamp_ms=base + i * 60_000)
    p.flush()
    p.close()
    out = tmp_path / "o.jsonl"
    replay(t, tmp_path / "i1", "--from-offsets", "0:30", "--output", str(out))
    assert sorted(o for _, o in lines(out)) == list(range(30, 50))
    out2 = tmp_path / "o2.jsonl"
    when = "2023-11-14T22:23:20+00:00"  # base + 10 minutes
    assert base + 600_000 == 1_700_000_600_000
    replay(t, tmp_path / "i2", "--from-timestamp", when, "--output", str(out2))
    assert sorted(o for _, o in lines(out2)) == list(range(10, 50))


def test_an_interrupted_replay_resumes(kafka_bootstrap: str, tmp_path: Path) -> None:
    docs = stream(6000, seed=22)
    t = Topics(kafka_bootstrap)
    t.produce([orjson.dumps(d) for d in docs])
    whole = tmp_path / "whole.jsonl"
    replay(t, tmp_path / "whole-index", "--output", str(whole))
    out, index = tmp_path / "cut.jsonl", tmp_path / "cut-index"
    args = t.replay_args(index, "--output", str(out), "--max-poll-records", "300")
    for sig in (signal.SIGKILL, signal.SIGINT):
        proc = subprocess.Popen(args, stderr=subprocess.PIPE)
        deadline = time.time() + 120
        start = out.stat().st_size if out.exists() else 0
        while time.time() < deadline and (not out.exists() or out.stat().st_size <= start):
            time.sleep(0.05)
        time.sleep(0.3)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
        if sig == signal.SIGINT:
            assert proc.returncode in (0, 130), err.decode()[-2000:]
    replay(t, index, "--output", str(out), "--max-poll-records", "300")
    assert out.read_bytes() == whole.read_bytes()
    assert len(lines(out)) == len(docs)


def test_follow_keeps_going_until_stopped(kafka_bootstrap: str, tmp_path: Path) -> None:
    docs = stream(300, seed=23)
    t = Topics(kafka_bootstrap)
    t.produce([orjson.dumps(d) for d in docs[:100]])
    out = tmp_path / "follow.jsonl"
    proc = subprocess.Popen(
        t.replay_args(tmp_path / "idx", "--follow", "--output", str(out)), stderr=subprocess.PIPE
    )
    try:
        deadline = time.time() + 60
        while time.time() < deadline and (not out.exists() or len(lines(out)) < 100):
            time.sleep(0.2)
        t.produce([orjson.dumps(d) for d in docs[100:]])  # after the start's end offsets
        while time.time() < deadline and len(lines(out)) < len(docs):
            time.sleep(0.2)
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err.decode()[-2000:]
    assert b"replay interrupted" in err
    assert sorted(o for _, o in lines(out)) == list(range(len(docs)))


def test_an_interrupted_replay_to_a_topic_resumes(kafka_bootstrap: str, tmp_path: Path) -> None:
    from streamdedup.kafka.settings import create_topics
    from tests.support.kafka import file_mode

    docs = stream(8000, seed=24)
    t = Topics(kafka_bootstrap)
    t.produce([orjson.dumps(d) for d in docs])
    target = t.output + "-replay"
    create_topics(t.bootstrap, [target], 1, {})
    index = tmp_path / "idx"
    args = t.replay_args(index, "--output-topic", target, "--max-poll-records", "200")
    from kafka import KafkaConsumer, TopicPartition

    watch = KafkaConsumer(bootstrap_servers=t.bootstrap, isolation_level="read_committed")
    watch.assign([TopicPartition(target, 0)])
    proc = subprocess.Popen(args, stderr=subprocess.PIPE)
    seen_so_far, deadline = 0, time.time() + 120
    while seen_so_far < 1000 and time.time() < deadline:
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:]  # type: ignore[union-attr]
        seen_so_far += sum(len(b) for b in watch.poll(timeout_ms=50).values())
    proc.send_signal(signal.SIGKILL)
    watch.close()
    proc.wait()
    r = subprocess.run(args, capture_output=True, timeout=600)
    assert r.returncode == 0, r.stderr.decode()[-3000:]
    resumed = int(r.stderr.split(b"replay done: ")[1].split(b" messages")[0].replace(b",", b""))
    assert 0 < resumed < len(docs), "the first run was not interrupted mid-way"
    seen: dict[int, list[dict[str, Any]]] = {}
    for m in t.read_to_end(target):
        v = orjson.loads(m.value)
        seen.setdefault(v.pop("source")["offset"], []).append(v)
    expected = file_mode(tmp_path, docs)
    assert sorted(seen) == list(range(len(docs)))
    for offset, verdicts in seen.items():
        assert all(v == expected[offset] for v in verdicts), (offset, verdicts)
    assert all(len(v) == 1 for v in seen.values()), "a message got two verdicts"
