"""The caps on a search (`max_bucket_candidates`, `max_exact_checks`) are counted
when they cut a document's search short, kept in the index and shown by `stats`:
a user learns that near duplicates may have been missed, and which cap to raise."""

from __future__ import annotations

from pathlib import Path

from streamdedup import Deduplicator
from streamdedup.config import EngineOptions
from streamdedup.ops.report import index_stats, render_stats
from tests.support.docs import hostile_stream


def run(path: Path, options: EngineOptions) -> Deduplicator:
    dd = Deduplicator(path, threshold=0.7, num_perm=64, options=options)
    docs = hostile_stream(800, seed=11)
    for start in range(0, len(docs), 100):
        dd.check_batch(docs[start : start + 100])
    return dd


def test_caps_that_cut_a_search_are_counted_and_reported(tmp_path: Path) -> None:
    with run(tmp_path / "tight", EngineOptions(max_bucket_candidates=3, max_exact_checks=1)) as dd:
        c = dd.counters
    assert c.bucket_capped > 0 and c.exact_capped > 0
    assert c.bucket_capped <= c.documents and c.exact_capped <= c.documents
    stats = index_stats(str(tmp_path / "tight"))
    assert stats["capped"] == {"bucket": c.bucket_capped, "exact": c.exact_capped}
    assert f"caps         {c.bucket_capped:,} documents read a bucket cut" in render_stats(stats)


def test_no_cap_line_when_nothing_was_cut(tmp_path: Path) -> None:
    roomy = EngineOptions(max_bucket_candidates=100_000, max_exact_checks=100_000)
    with run(tmp_path / "roomy", roomy) as dd:
        assert (dd.counters.bucket_capped, dd.counters.exact_capped) == (0, 0)
    stats = index_stats(str(tmp_path / "roomy"))
    assert stats["capped"] == {"bucket": 0, "exact": 0}
    assert "caps" not in render_stats(stats)
