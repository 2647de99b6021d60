"""`Deduplicator.open` (a frozen `Detection` record) opens what the keyword
constructor opens, and the methods the Kafka layer calls answer from the index."""

from dataclasses import replace
from pathlib import Path

import pytest

from streamdedup.config import EngineOptions
from streamdedup.engine.deduplicator import Deduplicator, Detection
from streamdedup.errors import ParameterMismatchError
from streamdedup.models import Document
from streamdedup.store.keys import MetaKey


def test_open_takes_the_keyword_constructors_options(tmp_path: Path) -> None:
    with Deduplicator(tmp_path / "a", threshold=0.9, num_perm=64, seed=3) as a:
        a.check("x", "the quick brown fox jumps over the lazy dog")
        params = a.params
    with Deduplicator.open(tmp_path / "b", Detection(threshold=0.9, num_perm=64, seed=3)) as b:
        # (each new index draws its own hash key)
        assert replace(b.params, hash_key=params.hash_key) == params
    with Deduplicator.open(tmp_path / "a") as again:  # the index's own parameters
        assert again.params == params
        assert again.indexed() == 1
    with pytest.raises(ParameterMismatchError):
        Deduplicator.open(tmp_path / "a", Detection(threshold=0.5))


def test_the_kafka_layers_methods(tmp_path: Path) -> None:
    opts = EngineOptions(max_clock_skew_ms=1234)
    with Deduplicator.open(tmp_path / "i", options=opts) as dd:
        assert dd.path == tmp_path / "i"
        assert dd.max_clock_skew_ms == 1234
        first = dd.prepare([Document("a", "some words of a first document here")])
        dd.apply(first)
        assert dd.indexed() == 1
        assert dd.file_bytes() > 0
        dd.write(lambda t: t.set_meta("test-key", 7))
        assert dd.read(lambda t: t.meta("test-key")) == 7
        assert dd.read(lambda t: t.meta(MetaKey.NEXT_DOCNO)) == 1
        again = dd.prepare([Document("a", "some words of a first document here")])
        assert again.resent  # known: same id, same content
