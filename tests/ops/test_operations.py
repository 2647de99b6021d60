"""Operating a worker against a real broker: metrics and health, the time window,
backups, and recovery from the changelog."""

from __future__ import annotations

import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from streamdedup.engine.clock import quorum
from streamdedup.kafka.broker import free_port
from tests.support.kafka import FAST_GROUP, Topics, file_mode, stream, verdicts_by_offset
from tests.support.metrics import samples, scrape

pytestmark = pytest.mark.integration


def cli(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "streamdedup.cli", *args], capture_output=True, timeout=300
    )


def test_metrics_and_health_endpoints(kafka_bootstrap: str, tmp_path: Path) -> None:
    docs = stream(500, seed=31)
    t = Topics(kafka_bootstrap)
    t.produce([orjson.dumps(d) for d in docs] + [b"not json", b"{}", b"[1]"])
    port = free_port()
    proc = subprocess.Popen(
        t.worker_args(tmp_path / "idx", "--metrics-port", str(port), "--ready-max-lag", "0"),
        stderr=subprocess.PIPE,
    )
    try:
        got: dict[Any, float] = {}
        deadline = time.time() + 90
        while time.time() < deadline:
            time.sleep(0.5)
            try:
                text = scrape(port)[1]
            except OSError:
                continue
            got = samples(text)
            if (
                got.get(("streamdedup_documents_total", ())) == len(docs)
                and got.get(("streamdedup_consumer_lag", (("partition", "0"), ("topic", t.input))))
                == 0
            ):
                break
        verdicts = [orjson.loads(m.value) for m in t.read(t.output, expect=len(docs))]
        assert got[("streamdedup_documents_total", ())] == len(docs)
        assert got[("streamdedup_duplicates_total", ())] == sum(
            v["verdict"] == "duplicate" for v in verdicts
        )
        assert got[("streamdedup_dead_letters_total", ())] == 3
        assert got[("streamdedup_batch_seconds_count", ())] >= 1
        assert got[("streamdedup_consumer_lag", (("partition", "0"), ("topic", t.input)))] == 0
        assert got[("streamdedup_assigned_partitions", ())] == 1
        time.sleep(1.5)  # gauges refresh every second
        got = samples(scrape(port)[1])
        assert got[("streamdedup_indexed_documents", ())] == len(docs)
        assert got[("streamdedup_index_bytes", ())] > 0
        assert scrape(port, "/healthz")[0] == 200
        assert scrape(port, "/readyz") == (200, "ok, lag 0\n")
        assert scrape(port, "/nope")[0] == 404
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err.decode()[-2000:]


def test_json_logs(kafka_bootstrap: str, tmp_path: Path) -> None:
    t = Topics(kafka_bootstrap)
    t.produce([b'{"id": 1, "text": "hello there"}'])
    r = t.run_worker(tmp_path / "idx", "--log-format", "json", idle=2)
    assert r.returncode == 0, r.stderr.decode()[-2000:]
    records = [orjson.loads(line) for line in r.stderr.splitlines() if line.strip()]
    assert records, "no log lines"
    assert all({"time", "level", "logger", "message"} <= set(rec) for rec in records)
    assert any(rec["message"].startswith("stopped: 1 messages") for rec in records)


HOUR = 3_600_000


def test_ttl_bounds_a_long_running_index(kafka_bootstrap: str, tmp_path: Path) -> None:
    """48 hourly rounds; each revisits the previous round's pages (edited) and some
    pages from the first round verbatim.  With --ttl 6h the index never holds more
    than the window, and a page last seen more than 6h ago is unique again."""
    from kafka import KafkaProducer

    rnd = random.Random(33)
    vocab = [f"w{i}" for i in range(4000)]
    first = [" ".join(rnd.choice(vocab) for _ in range(80)) for _ in range(20)]
    t = Topics(kafka_bootstrap)
    p = KafkaProducer(bootstrap_servers=kafka_bootstrap, linger_ms=5)
    base = 1_750_000_000_000
    previous: list[str] = first
    n = 0
    for r in range(48):
        current = []
        for j in range(40):
            if rnd.random() < 0.5:
                words = rnd.choice(previous).split()
                words[rnd.randrange(len(words))] = "edited"
                text = " ".join(words)
            else:
                text = " ".join(rnd.choice(vocab) for _ in range(80))
            current.append(text)
            p.send(
                t.input,
                value=orjson.dumps({"id": f"r{r}-{j}", "text": text}),
                timestamp_ms=base + r * HOUR,
            )
            n += 1
        if r == 30:  # a verbatim copy of a round-0 page, long expired
            p.send(
                t.input,
                value=orjson.dumps({"id": "old-copy", "text": first[0]}),
                timestamp_ms=base + r * HOUR,
            )
            n += 1
        previous = current
    p.flush()
    p.close()
    r = t.run_worker(tmp_path / "idx", "--ttl", "6h", "--max-poll-records", "200")
    assert r.returncode == 0, r.stderr.decode()[-2000:]
    verdicts = {v["id"]: v for v in (orjson.loads(m.value) for m in t.read(t.output, expect=n))}
    assert len(verdicts) == n
    assert verdicts["old-copy"]["verdict"] == "unique"
    assert sum(v["verdict"] == "duplicate" for v in verdicts.values()) > 0.3 * n
    stats = orjson.loads(cli("stats", "--index", str(tmp_path / "idx"), "--json").stdout)
    # the window (6h) holds rounds 41..47: 7 rounds of 40
    assert stats["documents"] == 7 * 40
    assert stats["oldest_ms"] == base + 41 * HOUR
    assert stats["bucket_sizes"]["postings"] <= 7 * 40 * stats["parameters"]["bands"]


def test_ttl_window_survives_a_far_future_timestamp_and_keeps_untimestamped_documents(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """Messages without a timestamp (-1, or 0) never expire; 300 documents now, one
    dated 2100, then 300 exact copies now: with --ttl 1h every copy is a duplicate."""
    from kafka import KafkaProducer

    rnd = random.Random(36)
    vocab = [f"w{i}" for i in range(4000)]
    texts = [" ".join(rnd.choice(vocab) for _ in range(60)) for _ in range(300)]
    untimed = [" ".join(rnd.choice(vocab) for _ in range(60)) for _ in range(10)]
    t = Topics(kafka_bootstrap)
    p = KafkaProducer(bootstrap_servers=kafka_bootstrap, linger_ms=5)

    def send(doc_id: str, text: str, ts: int) -> None:
        p.send(t.input, value=orjson.dumps({"id": doc_id, "text": text}), timestamp_ms=ts)

    for j, text in enumerate(untimed):
        send(f"u{j}", text, 0 if j % 2 else -1)
    now = int(time.time() * 1000)
    for j, text in enumerate(texts):
        send(f"a{j}", text, now + j)
    send("future", " ".join(rnd.choice(vocab) for _ in range(60)), 4_102_444_800_000)  # 2100
    for j, text in enumerate(texts):
        send(f"b{j}", text, now + 1000 + j)
    for j, text in enumerate(untimed):
        send(f"c{j}", text, now + 2000 + j)
    p.flush()
    p.close()
    n = 2 * len(untimed) + 2 * len(texts) + 1
    port = free_port()
    args = ("--ttl", "1h", "--max-poll-records", "100", "--metrics-port", str(port))
    proc = subprocess.Popen(t.worker_args(tmp_path / "idx", *args), stderr=subprocess.PIPE)
    try:
        messages = t.read(t.output, expect=n, timeout=120)
        got = [orjson.loads(m.value) for m in messages]
        metrics: dict[Any, float] = {}
        deadline = time.time() + 30
        while metrics.get(("streamdedup_documents_total", ())) != n and time.time() < deadline:
            time.sleep(0.2)
            metrics = samples(scrape(port)[1])
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err.decode()[-2000:]
    assert metrics[("streamdedup_clock_outliers_total", ())] == 1
    verdicts = {v["id"]: v for v in got}
    assert len(verdicts) == n
    for j in range(len(texts)):
        assert verdicts[f"b{j}"]["duplicate_of"] == f"a{j}", verdicts[f"b{j}"]
    for j in range(len(untimed)):
        assert verdicts[f"c{j}"]["duplicate_of"] == f"u{j}", verdicts[f"c{j}"]
    stats = orjson.loads(cli("stats", "--index", str(tmp_path / "idx"), "--json").stdout)
    assert stats["documents"] == n
    # stream time: the newest time a majority of the last 31 timestamps reached
    recent = [now + 1000 + j for j in range(len(texts))][-(31 - len(untimed)) :]
    recent += [now + 2000 + j for j in range(len(untimed))]
    assert stats["clock_ms"] == sorted(recent)[-quorum(31)]
    offset = len(untimed) + len(texts)
    assert (
        f"message at partition 0, offset {offset} has timestamp 4102444800000 "
        "(2100-01-01T00:00:00Z), more than 3600000ms ahead of the wall clock"
    ).encode() in err
    # a rebuild replay of the topic gives the live run's verdicts
    assert _rebuilt(kafka_bootstrap, t.input, tmp_path) == verdicts_by_offset(messages)


def _rebuilt(bootstrap: str, topic: str, tmp_path: Path, *extra: str) -> dict[Any, Any]:
    """A `replay --ttl 1h` rebuild of `topic` into a new index: its verdicts by
    (partition, offset), without their `source`."""
    out = tmp_path / "replayed.jsonl"
    rp = cli(
        *("replay", "--bootstrap-servers", bootstrap, "--input-topic", topic),
        *("--index", str(tmp_path / "rebuilt"), "--output", str(out), "--ttl", "1h"),
        *("--progress", "never", *extra),
    )
    assert rp.returncode == 0, rp.stderr.decode()[-2000:]
    replayed = {}
    for line in out.read_bytes().splitlines():
        v = orjson.loads(line)
        src = v.pop("source")
        replayed[(src["partition"], src["offset"])] = v
    return replayed


def test_ttl_window_survives_a_message_ahead_inside_the_skew_bound(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """Issue 35: under --ttl 1h (default --max-clock-skew 1h), 200 documents stored 10
    minutes ago, one message dated +55 min, then 200 exact copies now.  On d62e5e5 the
    one message moved stream time: the 200 expired and every copy was `unique`.  Every
    copy is a duplicate, and a rebuild replay of the topic gives the worker's verdicts."""
    from kafka import KafkaProducer

    rnd = random.Random(37)
    vocab = [f"w{i}" for i in range(4000)]
    texts = [" ".join(rnd.choice(vocab) for _ in range(60)) for _ in range(200)]
    t = Topics(kafka_bootstrap)
    p = KafkaProducer(bootstrap_servers=kafka_bootstrap, linger_ms=5)

    def send(doc_id: str, text: str, ts: int) -> None:
        p.send(t.input, value=orjson.dumps({"id": doc_id, "text": text}), timestamp_ms=ts)

    now = int(time.time() * 1000)
    for j, text in enumerate(texts):
        send(f"a{j}", text, now - 10 * 60_000 + j)
    send("early", " ".join(rnd.choice(vocab) for _ in range(60)), now + 55 * 60_000)
    for j, text in enumerate(texts):
        send(f"b{j}", text, now + j)
    p.flush()
    p.close()
    r = t.run_worker(tmp_path / "idx", "--ttl", "1h", "--max-poll-records", "50")
    assert r.returncode == 0, r.stderr.decode()[-2000:]
    messages = t.read(t.output, expect=401)
    verdicts = {v["id"]: v for v in (orjson.loads(m.value) for m in messages)}
    assert len(verdicts) == 401
    for j in range(len(texts)):
        assert verdicts[f"b{j}"]["exact"] and verdicts[f"b{j}"]["duplicate_of"] == f"a{j}"
    replayed = _rebuilt(kafka_bootstrap, t.input, tmp_path, "--max-poll-records", "7")
    assert replayed == verdicts_by_offset(messages)


def test_backup_mid_run_restores_and_resumes(kafka_bootstrap: str, tmp_path: Path) -> None:
    docs = stream(4000, seed=34)
    t = Topics(kafka_bootstrap)
    t.produce([orjson.dumps(d) for d in docs[:1000]])
    index, backup = tmp_path / "idx", tmp_path / "backup"
    proc = subprocess.Popen(
        t.worker_args(index, "--idle-exit", "6", "--max-poll-records", "200"),
        stderr=subprocess.PIPE,
    )
    while len(t.read(t.output, timeout=1)) < 1000:
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:]  # type: ignore[union-attr]
        time.sleep(0.2)
    t.produce([orjson.dumps(d) for d in docs[1000:2000]])
    b = cli("backup", "--index", str(index), str(backup))  # while the worker goes on
    assert b.returncode == 0, b.stderr.decode()
    assert proc.poll() is None, "the worker stopped before the backup was taken"
    # (produced only now: the backup cannot hold them, however fast the worker is)
    t.produce([orjson.dumps(d) for d in docs[2000:3000]])
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err.decode()[-2000:]
    backed_up = orjson.loads(cli("stats", "--index", str(backup), "--json").stdout)
    assert 1000 <= backed_up["documents"] < 3000, "the backup was not taken mid-run"
    # the disk is lost; the backup goes back in place, and the stream goes on
    shutil.rmtree(index)
    r = cli("restore", str(backup), "--index", str(index))
    assert r.returncode == 0, r.stderr.decode()
    t.produce([orjson.dumps(d) for d in docs[3000:]])
    w = t.run_worker(index)
    assert w.returncode == 0, w.stderr.decode()[-2000:]
    assert b"applying that range again without publishing" in w.stderr
    got = verdicts_by_offset(t.read(t.output, expect=len(docs)))
    assert sorted(got) == [(0, i) for i in range(len(docs))]
    assert [got[(0, i)] for i in range(len(docs))] == file_mode(tmp_path, docs)
    final = orjson.loads(cli("stats", "--index", str(index), "--json").stdout)
    assert final["documents"] == len(docs)


def test_lost_index_is_restored_from_the_changelog(kafka_bootstrap: str, tmp_path: Path) -> None:
    docs = stream(2500, seed=35)
    docs[2100] = {"id": docs[5]["id"], "text": docs[5]["text"] + " changed"}  # replaced
    t = Topics(kafka_bootstrap)
    changelog = f"changelog-{t.group}"
    opts = ("--changelog-topic", changelog, "--create-topics", "--max-poll-records", "300")
    t.produce([orjson.dumps(d) for d in docs[:1800]])
    index = tmp_path / "idx"
    first = t.run_worker(index, *opts)
    assert first.returncode == 0, first.stderr.decode()[-2000:]
    shutil.rmtree(index)  # the pod lost its disk
    t.produce([orjson.dumps(d) for d in docs[1800:]])
    second = t.run_worker(index, *opts)
    assert second.returncode == 0, second.stderr.decode()[-2000:]
    assert b"restored 1800 documents" in second.stderr
    got = verdicts_by_offset(t.read(t.output, expect=len(docs)))
    assert sorted(got) == [(0, i) for i in range(len(docs))]
    assert [got[(0, i)] for i in range(len(docs))] == file_mode(tmp_path, docs)
    # and the restored index is the index an uninterrupted worker would have
    stats = orjson.loads(cli("stats", "--index", str(index), "--json").stdout)
    reference = orjson.loads(cli("stats", "--index", str(tmp_path / "file-index"), "--json").stdout)
    for key in ("documents", "indexed", "unique", "duplicate", "exact_duplicate", "clusters"):
        assert stats[key] == reference[key], key
    assert stats["bucket_sizes"] == reference["bucket_sizes"]


def operations_commands() -> list[str]:
    """The shell lines of docs/operations.md's code blocks, continuations joined."""
    body = (Path(__file__).resolve().parents[2] / "docs" / "operations.md").read_text()
    lines: list[str] = []
    for block in body.split("```bash\n")[1:]:
        pending = ""
        for raw in block.split("```", 1)[0].splitlines():
            line = raw.split("  #", 1)[0].rstrip() if not raw.startswith("python") else raw
            if line.endswith("\\"):
                pending += line[:-1] + " "
                continue
            line = (pending + line).strip()
            pending = ""
            if line and not line.startswith("#"):
                lines.append(line)
    return lines


def test_readme_operations_walkthrough(kafka_bootstrap: str, tmp_path: Path) -> None:
    """Every command of the operations page (docs/operations.md), in order, as written (the
    throwaway broker aside: the test's broker stands in for it)."""
    import os
    import shlex

    env = {
        **os.environ,
        "STREAMDEDUP_BOOTSTRAP_SERVERS": kafka_bootstrap,
        "STREAMDEDUP_CONSUMER_OPTION": ",".join(FAST_GROUP[1::2]),
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
    }
    ran = []
    for line in operations_commands():
        if line.startswith(("export ", "streamdedup broker")):
            continue
        args = shlex.split(line)
        r = subprocess.run(
            line, shell=True, cwd=tmp_path, env=env, capture_output=True, timeout=300
        )
        assert r.returncode == 0, (line, r.stderr.decode()[-2000:])
        ran.append(args[1] if args[0] == "streamdedup" else args[0])
    assert ran == [
        *("python", "produce", "worker", "stats", "replay", "replay", "backup", "restore"),
        *("seal", "stats"),
    ]
    rebuilt = (tmp_path / "rebuilt.jsonl").read_bytes().splitlines()
    assert len(rebuilt) == 2000
