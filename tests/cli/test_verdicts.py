"""`streamdedup verdicts` on the real broker: the committed view (an aborted
transaction's verdicts are never printed, on Tansu too), --only, --follow, --partition,
msgpack verdicts, records that are not verdicts, and a worker's output end to end."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import msgpack
import orjson
import pytest

from tests.support.cli import run
from tests.support.kafka import Topics, file_mode, stream

pytestmark = pytest.mark.integration


def verdict(doc_id: str, kind: str, of: str | None = None) -> dict[str, Any]:
    return {
        "id": doc_id,
        "verdict": kind,
        "duplicate_of": of,
        "cluster": of or doc_id,
        "similarity": 0.9 if of else None,
        "exact": False,
    }


def new_topic(bootstrap: str, partitions: int = 1) -> str:
    from kafka.admin import KafkaAdminClient, NewTopic

    topic = f"verdicts-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic(topic, partitions, 1)])
    admin.close()
    return topic


def transaction(
    bootstrap: str, topic: str, values: list[bytes], *, commit: bool, partition: int = 0
) -> None:
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=f"t-{uuid.uuid4().hex[:8]}")
    p.init_transactions()
    p.begin_transaction()
    for v in values:
        p.send(topic, value=v, partition=partition).get(timeout=30)
    if commit:
        p.commit_transaction()
    else:
        p.abort_transaction()
    p.close()


def printed(stdout: bytes) -> list[str]:
    return [orjson.loads(x)["id"] for x in stdout.splitlines()]


@pytest.fixture(scope="module")
def mixed_topic(kafka_bootstrap: str) -> str:
    """committed a,b(dup of a) | aborted x,y | committed c (msgpack), d(dup of c)."""
    topic = new_topic(kafka_bootstrap)
    js = orjson.dumps
    transaction(
        kafka_bootstrap,
        topic,
        [js(verdict("a", "unique")), js(verdict("b", "duplicate", "a"))],
        commit=True,
    )
    transaction(
        kafka_bootstrap,
        topic,
        [js(verdict("x", "unique")), js(verdict("y", "duplicate", "x"))],
        commit=False,
    )
    transaction(
        kafka_bootstrap,
        topic,
        [msgpack.packb(verdict("c", "unique")), js(verdict("d", "duplicate", "c"))],
        commit=True,
    )
    return topic


def test_prints_the_committed_view_and_never_an_aborted_transaction(
    kafka_bootstrap: str, mixed_topic: str
) -> None:
    r = run("verdicts", "--bootstrap-servers", kafka_bootstrap, "--topic", mixed_topic)
    assert r.returncode == 0, r.stderr
    assert printed(r.stdout) == ["a", "b", "c", "d"]
    records = [orjson.loads(x) for x in r.stdout.splitlines()]
    assert records[2] == verdict("c", "unique")  # msgpack printed as JSON


def test_only_filters_by_verdict(kafka_bootstrap: str, mixed_topic: str, tmp_path: Path) -> None:
    common = ("verdicts", "--bootstrap-servers", kafka_bootstrap, "--topic", mixed_topic)
    r = run(*common, "--only", "duplicate")
    assert r.returncode == 0, r.stderr
    assert printed(r.stdout) == ["b", "d"]
    out = tmp_path / "unique.jsonl"
    r = run(*common, "--only", "unique", "--output", str(out))
    assert r.returncode == 0, r.stderr
    assert r.stdout == b""
    assert printed(out.read_bytes()) == ["a", "c"]


def test_partition_selects_and_unknown_partition_is_refused(kafka_bootstrap: str) -> None:
    topic = new_topic(kafka_bootstrap, partitions=2)
    transaction(
        kafka_bootstrap, topic, [orjson.dumps(verdict("p0", "unique"))], commit=True, partition=0
    )
    transaction(
        kafka_bootstrap, topic, [orjson.dumps(verdict("p1", "unique"))], commit=True, partition=1
    )
    common = ("verdicts", "--bootstrap-servers", kafka_bootstrap, "--topic", topic)
    assert sorted(printed(run(*common).stdout)) == ["p0", "p1"]
    assert printed(run(*common, "--partition", "1").stdout) == ["p1"]
    r = run(*common, "--partition", "5")
    assert r.returncode == 2
    assert b"has no partition 5" in r.stderr


def test_a_record_that_is_not_a_verdict_is_skipped_with_exit_1(kafka_bootstrap: str) -> None:
    topic = new_topic(kafka_bootstrap)
    transaction(
        kafka_bootstrap,
        topic,
        [b"not json at all \xff", orjson.dumps(verdict("ok", "unique")), b"[1, 2]"],
        commit=True,
    )
    r = run("verdicts", "--bootstrap-servers", kafka_bootstrap, "--topic", topic)
    assert r.returncode == 1
    assert printed(r.stdout) == ["ok"]
    assert b"offset 0 is not a verdict record" in r.stderr
    assert b"2 records of" in r.stderr


def test_follow_prints_new_commits_and_stops_on_ctrl_c(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    topic = new_topic(kafka_bootstrap)
    transaction(kafka_bootstrap, topic, [orjson.dumps(verdict("first", "unique"))], commit=True)
    out = tmp_path / "follow.jsonl"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "streamdedup.cli",
            "verdicts",
            "--bootstrap-servers",
            kafka_bootstrap,
            "--topic",
            topic,
            "--follow",
            "--output",
            str(out),
        ],
        stderr=subprocess.PIPE,
    )
    try:

        def wait_for(ids: list[str]) -> None:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                if out.exists() and printed(out.read_bytes()) == ids:
                    return
                assert proc.poll() is None, proc.stderr.read() if proc.stderr else b""
                time.sleep(0.1)
            raise AssertionError(f"--follow printed {out.read_bytes()!r}, expected {ids}")

        wait_for(["first"])
        transaction(
            kafka_bootstrap, topic, [orjson.dumps(verdict("aborted", "unique"))], commit=False
        )
        transaction(
            kafka_bootstrap,
            topic,
            [orjson.dumps(verdict("second", "duplicate", "first"))],
            commit=True,
        )
        wait_for(["first", "second"])
        started = time.monotonic()
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=15) == 0
        assert time.monotonic() - started < 5  # prompt
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_workers_verdicts_equal_the_file_modes(kafka_bootstrap: str, tmp_path: Path) -> None:
    t = Topics(kafka_bootstrap)
    docs = stream(120, seed=7)
    t.produce([orjson.dumps(d) for d in docs], keys=[str(d["id"]).encode() for d in docs])
    r = t.run_worker(tmp_path / "index")
    assert r.returncode == 0, r.stderr
    got = run("verdicts", "--bootstrap-servers", kafka_bootstrap, "--topic", t.output)
    assert got.returncode == 0, got.stderr
    records = [orjson.loads(x) for x in got.stdout.splitlines()]
    for rec in records:
        assert rec.pop("source")["topic"] == t.input
    assert records == file_mode(tmp_path, docs)
    assert any(rec["verdict"] == "duplicate" for rec in records)


def test_records_that_only_look_like_verdicts_are_skipped_and_counted(
    kafka_bootstrap: str,
) -> None:
    """Issue 35 item 15: anything with a "verdict" key was printed as a verdict.  A
    verdict has the contract's keys with their types; the rest is skipped, the
    first ten named, all counted, exit 1."""
    topic = new_topic(kafka_bootstrap)
    good = verdict("ok", "unique")
    bad = [
        {"verdict": 5},
        {"verdict": "unique"},  # no id
        {**good, "verdict": "maybe"},
        {**good, "id": None},
        {**good, "id": True},
        {**good, "exact": "no"},
        {k: v for k, v in good.items() if k != "cluster"},
        {k: v for k, v in good.items() if k != "duplicate_of"},
        {k: v for k, v in good.items() if k != "similarity"},
        {**good, "duplicate_of": [1]},
        {"id": "doc", "text": "a document, not its verdict"},
        "a string",
    ]
    values = [orjson.dumps(b) for b in bad]
    transaction(kafka_bootstrap, topic, [*values, orjson.dumps(good)], commit=True)
    r = run("verdicts", "--bootstrap-servers", kafka_bootstrap, "--topic", topic)
    assert r.returncode == 1, r.stderr.decode()
    assert printed(r.stdout) == ["ok"]
    warnings = [x for x in r.stderr.decode().splitlines() if "is not a verdict record" in x]
    assert len(warnings) == 10 and "further ones only counted" in warnings[-1]
    assert f"{len(bad)} records of {topic} were not verdicts" in r.stderr.decode()


def test_an_open_transaction_holding_verdicts_back_is_said(kafka_bootstrap: str) -> None:
    """Issue 35 item 15: a transaction left open (a worker mid-batch, or dead) holds
    back every later record, committed ones too, as for any read_committed reader:
    `verdicts` printed nothing more and exited 0 without a word.  It says so."""
    from kafka import KafkaProducer

    topic = new_topic(kafka_bootstrap)
    transaction(kafka_bootstrap, topic, [orjson.dumps(verdict("before", "unique"))], commit=True)
    held = KafkaProducer(bootstrap_servers=kafka_bootstrap, transactional_id=f"o-{topic}")
    held.init_transactions()
    held.begin_transaction()
    held.send(topic, value=orjson.dumps(verdict("open", "unique")), partition=0).get(timeout=30)
    try:
        transaction(kafka_bootstrap, topic, [orjson.dumps(verdict("after", "unique"))], commit=True)
        r = run("verdicts", "--bootstrap-servers", kafka_bootstrap, "--topic", topic)
        assert r.returncode == 0, r.stderr.decode()
        assert printed(r.stdout) == ["before"]
        (line,) = [x for x in r.stderr.decode().splitlines() if "holds back" in x]
        assert f"{topic}[0]: a transaction open since offset 2 holds back" in line
        assert "(1 committed record among them)" in line and "--follow" in line
    finally:
        held.abort_transaction()
        held.close()
    r = run("verdicts", "--bootstrap-servers", kafka_bootstrap, "--topic", topic)
    assert printed(r.stdout) == ["before", "after"] and b"holds back" not in r.stderr
