"""Rebuilding an index from its change stream gives the same index (no Kafka here:
the records the worker would publish are applied directly)."""

from __future__ import annotations

import random
from pathlib import Path

from streamdedup.config import EngineOptions
from streamdedup.engine.deduplicator import Deduplicator
from streamdedup.kafka.changelog import Restorer, encode_changes, params_record
from streamdedup.models import Document
from streamdedup.store.index import Index
from tests.support.store import dump

VOCAB = [f"w{i}" for i in range(2000)]


def test_restore_from_changes_reproduces_the_index(tmp_path: Path) -> None:
    rnd = random.Random(3)
    texts: list[str] = []
    docs = []
    for i in range(1500):
        if texts and rnd.random() < 0.4:
            words = rnd.choice(texts).split()
            words[rnd.randrange(len(words))] = "x"
            text = " ".join(words)
        else:
            text = " ".join(rnd.choice(VOCAB) for _ in range(rnd.randint(1, 120)))
        texts.append(text)
        # some ids come again with other content (replaced), time moves on (expiry)
        doc_id = f"d{rnd.randrange(i + 1)}" if rnd.random() < 0.05 else f"d{i}"
        docs.append(Document(doc_id, text, 1000 * i))
    records = []
    opts = EngineOptions(ttl_ms=900_000)
    with Deduplicator(tmp_path / "orig", options=opts, threshold=0.7) as dd:
        records.append(params_record(dd.params))
        for i in range(0, len(docs), 100):
            dd.check_batch(docs[i : i + 100])
            records += encode_changes(dd.changes)
        params = dd.params
        assert dd.counters.expired > 0
    restored = Index(tmp_path / "copy")
    r = Restorer(restored)
    r.add(records)
    r.finish({}, "g/t")
    restored.close()
    assert r.params == params
    a, b = dump(tmp_path / "orig"), dump(tmp_path / "copy")
    for name in a:
        assert a[name] == b[name], name
