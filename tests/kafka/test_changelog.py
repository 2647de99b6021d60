"""Rebuilding an index from its change stream gives the same index (no Kafka here:
the records the worker would publish are applied directly)."""

from __future__ import annotations

import random
from pathlib import Path

from streamdedup.config import EngineOptions
from streamdedup.models import Document
from tests.support.changelog import restore_from_changes

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
    opts = EngineOptions(ttl_ms=900_000)
    counters, params, restored = restore_from_changes(tmp_path, docs, options=opts, threshold=0.7)
    assert counters.expired > 0
    assert restored == params
