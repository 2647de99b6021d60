"""The worker's `--keep-topic` (DESIGN.md "Outputs users consume"): each unique
document's message, as it came -- key, value and headers -- published in the
transaction of its verdict, in input order; duplicates and dead letters are not kept.
(Exactly once across a crash at each step of a batch: tests/kafka/test_worker.py.)"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from tests.support.kafka import Topics, stream

pytestmark = pytest.mark.integration


def test_the_keep_topic_holds_the_unique_messages_as_they_came(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    from kafka import KafkaProducer

    docs = stream(400, seed=21)
    t = Topics(kafka_bootstrap)
    keep = f"keep-{t.group}"
    sent = []
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap)
    for i, d in enumerate(docs):
        value = orjson.dumps(d) if i != 50 else b"not json"
        key = str(d["id"]).encode() if i % 3 else None
        headers = [("crawl", f"run-{i % 4}".encode())] if i % 2 else []
        producer.send(t.input, key=key, value=value, headers=headers)
        sent.append((key, value, headers))
    producer.flush()
    producer.close()
    r = t.run_worker(tmp_path / "idx", "--keep-topic", keep, "--create-topics")
    assert r.returncode == 0, r.stderr.decode()[-3000:]
    verdicts = {}
    for m in t.read(t.output, expect=399):
        v = orjson.loads(m.value)
        verdicts[v["source"]["offset"]] = v["verdict"]
    unique = [sent[o] for o in range(len(sent)) if verdicts.get(o) == "unique"]
    assert 100 < len(unique) < 399 and 50 not in verdicts  # (offset 50: a dead letter)
    got = [(m.key, m.value, list(m.headers)) for m in t.read(keep, expect=len(unique))]
    assert got == unique
