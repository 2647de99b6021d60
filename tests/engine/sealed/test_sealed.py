"""An index with sealed segments decides exactly as one index over the same stream:
ids replaced and expired after sealing, exact copies whose owner goes, hot buckets
whose newest postings were tombstoned, candidates on both sides of a seal."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamdedup import Deduplicator
from streamdedup.config import EngineOptions
from streamdedup.models import Document
from streamdedup.store.segment.registry import segments
from tests.support.docs import hostile_stream


def run(
    path: Path,
    docs: list[Document],
    batch: int,
    seal_at: set[int],
    options: EngineOptions,
    *,
    ahead: bool = False,
) -> list[dict[str, Any]]:
    """Verdicts of the stream in batches, sealed before the batches starting at
    `seal_at`; `ahead`: each batch's questions sent before the one before it is
    decided, as `dedup` does."""
    out: list[dict[str, Any]] = []
    with Deduplicator(path, threshold=0.7, num_perm=64, options=options) as dd:
        batches = [docs[s : s + batch] for s in range(0, len(docs), batch)]
        prepared = dd.preparer.prepare(batches[0])
        for b in range(len(batches)):
            if b and b * batch in seal_at:
                dd.seal()
            following = dd.preparer.prepare(batches[b + 1]) if b + 1 < len(batches) else None
            if ahead and following is not None:
                dd.ask_ahead(following)
            out += [v.to_dict() for v in dd.apply(prepared)]
            if following is not None:
                prepared = following
    return out


OPTIONS = EngineOptions(max_bucket_candidates=3, max_exact_checks=3)


@pytest.mark.parametrize("ttl", [None, 20_000])
def test_sealed_at_three_points_decides_as_one_index(tmp_path: Path, ttl: int | None) -> None:
    docs = hostile_stream(1200, seed=3, timestamps=ttl is not None)
    options = EngineOptions(
        max_bucket_candidates=4, max_exact_checks=3, ttl_ms=ttl, max_expire_per_batch=7
    )
    one = run(tmp_path / "one", docs, 40, set(), options)
    three = run(tmp_path / "three", docs, 40, {200, 480, 800}, options)
    assert len(one) == len(docs)
    assert three == one
    ahead = run(tmp_path / "ahead", docs, 40, {200, 480, 800}, options, ahead=True)
    assert ahead == one
    kinds = {(v["verdict"], v["exact"]) for v in one}
    assert kinds == {("unique", False), ("duplicate", False), ("duplicate", True)}


def test_seal_every_keeps_the_open_segment_small(tmp_path: Path) -> None:
    docs = hostile_stream(900, seed=5)
    one = run(tmp_path / "one", docs, 30, set(), OPTIONS)
    opts = dataclasses.replace(OPTIONS, seal_every=150)
    every = run(tmp_path / "every", docs, 30, set(), opts, ahead=True)
    assert every == one
    with Deduplicator(tmp_path / "every", options=opts) as dd:
        assert dd.sealed is not None and len(dd.sealed.readers) >= 5
        assert dd.index.read(lambda t: t.count("docs")) < 150


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    seed=st.integers(0, 10_000),
    seals=st.sets(st.integers(1, 14), max_size=4),
    batch=st.integers(5, 40),
)
def test_any_seal_points_any_batches(
    tmp_path_factory: Any, seed: int, seals: set[int], batch: int
) -> None:
    tmp = tmp_path_factory.mktemp("s")
    docs = hostile_stream(300, seed=seed)
    one = run(tmp / "one", docs, batch, set(), OPTIONS)
    many = run(tmp / "many", docs, batch, {s * batch for s in seals}, OPTIONS)
    assert many == one


def test_batch_size_does_not_change_verdicts(tmp_path: Path) -> None:
    """Regression: a copy that takes over its owner's postings is older than the
    batch's stored postings; it was counted among a bucket's newest, so verdicts
    depended on the batch size (found by the segment equality tests)."""
    docs = hostile_stream(600, seed=3)
    one_by_one = run(tmp_path / "a", docs, 1, set(), OPTIONS)
    assert run(tmp_path / "b", docs, 100, set(), OPTIONS) == one_by_one


def _pages(n: int, tag: str) -> list[Document]:
    return [
        Document(i, f"{tag} page {i} " + " ".join(f"w{(i * 13 + j) % 997}" for j in range(30)))
        for i in range(n)
    ]


@pytest.mark.parametrize("inside", [True, False])
def test_a_dropped_segment_s_directory_is_removed_when_the_index_made_it(
    tmp_path: Path, inside: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 35 item 15: a sealed segment all of whose documents expired or were
    replaced is dropped from the registry, and its directory stayed on disk for
    ever.  One inside the index directory (`--seal-every`'s) is removed; one
    elsewhere is left to the operator, with a warning saying it can be deleted."""
    index = tmp_path / "idx"
    elsewhere = None if inside else str(tmp_path / "elsewhere")
    opts = EngineOptions(seal_every=40, segments_dir=elsewhere)
    first = (index / "segments" if inside else tmp_path / "elsewhere") / "000001"
    with Deduplicator(index, options=opts) as dd:
        dd.check_batch(_pages(40, "old"))  # sealed: segment 1
        assert first.is_dir() and [e.number for e in dd.index.read(segments)] == [1]
        caplog.set_level(logging.INFO, logger="streamdedup.engine.deduplicator")
        dd.check_batch(_pages(40, "new"))  # every id again: segment 1 fully masked
        numbers = [e.number for e in dd.index.read(segments)]
    assert 1 not in numbers
    assert first.exists() != inside
    said = [r for r in caplog.records if "sealed segment 1 dropped" in r.getMessage()]
    assert len(said) == 1
    if inside:
        assert said[0].levelno == logging.INFO and "was removed" in said[0].getMessage()
    else:
        assert said[0].levelno == logging.WARNING
        assert f"nothing reads {first} any more: delete it" in said[0].getMessage()


def test_the_secret_hash_key_goes_with_the_index_and_nowhere_else(tmp_path: Path) -> None:
    """Each new index draws its own shingle hash key, keeps it on reopen, hands it to
    its sealed segments and to an index started from one of them, and `stats` does not
    show it (issue 35, item 1)."""
    import orjson

    from streamdedup.ops.report import index_stats

    with Deduplicator(tmp_path / "a") as a, Deduplicator(tmp_path / "b") as b:
        assert a.params.hash_key != b.params.hash_key
        key = a.params.hash_key
        a.check("x", "one two three four five six seven")
        manifest = a.seal(tmp_path / "seg")
    assert manifest.params["hash_key"] == key.hex()
    with Deduplicator(tmp_path / "a") as again:
        assert again.params.hash_key == key
    with Deduplicator(tmp_path / "c", base_segment=tmp_path / "seg") as c:
        assert c.params.hash_key == key
        assert c.check("y", "one two three four five six seven").duplicate_of == "x"
    shown = orjson.dumps(index_stats(str(tmp_path / "a")))
    assert key.hex().encode() not in shown and b'"hash_key"' not in shown
