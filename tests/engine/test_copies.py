"""Exact copies outlive their content's first owner: when the owner is replaced or
expires, the oldest live copy takes its place, for exact and near duplicates, and
the changelog carries that promotion so a restore gives the same index."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from streamdedup.config import EngineOptions, ShingleSpec
from streamdedup.engine.deduplicator import Deduplicator
from streamdedup.kafka.changelog import Restorer, encode_changes, params_record
from streamdedup.models import Document, Verdict
from streamdedup.sketch.shingle import reference_shingles
from streamdedup.store.index import Index
from streamdedup.store.keys import MetaKey

MINUTE = 60_000
T0 = 1_750_000_000_000  # 2025-06-15: timestamps of 0 or below count as none
T1 = " ".join(f"alpha{i}" for i in range(60))
T2 = " ".join(f"beta{i}" for i in range(60))


def run(dd: Deduplicator, docs: list[Document], batched: bool) -> list[Verdict]:
    """In one batch, or a batch each."""
    return dd.check_batch(docs) if batched else [dd.check_batch([d])[0] for d in docs]


def jaccard(a: str, b: str) -> float:
    sa, sb = reference_shingles(a, ShingleSpec()), reference_shingles(b, ShingleSpec())
    return len(sa & sb) / len(sa | sb)


def near(text: str) -> str:
    """`text` with its last word changed: Jaccard 55/57 on word:5 shingles."""
    words = text.split()
    words[-1] = "changed"
    return " ".join(words)


@pytest.mark.parametrize("batched", [True, False])
def test_a_copy_outlives_the_owner_replaced_by_new_content(tmp_path, batched: bool) -> None:
    docs = [Document("A", T1), Document("B", T1), Document("A", T2), Document("C", T1)]
    with Deduplicator(tmp_path / "i") as dd:
        verdicts = run(dd, docs, batched)
    a, b, a2, c = verdicts
    assert a.verdict == "unique"
    assert b.duplicate_of == "A" and b.exact
    assert a2.verdict == "unique"  # T2 shares nothing with T1
    assert c.verdict == "duplicate" and c.exact and c.duplicate_of == "B"
    assert c.cluster == "A"  # B's cluster: it began with A's first version


def test_a_copy_outlives_the_owner_expired_by_the_window(tmp_path) -> None:
    opts = EngineOptions(ttl_ms=60 * MINUTE, clock_window=1)  # each message moves the clock
    with Deduplicator(tmp_path / "i", options=opts) as dd:
        a = dd.check("A", T1, T0)
        b = dd.check("B", T1, T0 + 50 * MINUTE)
        c = dd.check("C", T1, T0 + 70 * MINUTE)  # A has expired, B is in the window
    assert a.verdict == "unique" and b.duplicate_of == "A" and b.exact
    assert c.verdict == "duplicate" and c.exact and c.duplicate_of == "B"


def test_a_copy_outlives_the_owner_expired_in_a_batch_over_its_budget(tmp_path) -> None:
    """The window is behind (one expiry a batch): the expired owner is passed over,
    its copy inside the window answers, exactly and as a near duplicate."""
    opts = EngineOptions(ttl_ms=60 * MINUTE, max_expire_per_batch=1, clock_window=1)
    with Deduplicator(tmp_path / "i", options=opts) as dd:
        dd.check_batch([Document("X", "an unrelated page about other things entirely", T0)])
        dd.check_batch([Document("A", T1, T0 + 1), Document("B", T1, T0 + 50 * MINUTE)])
        v = dd.check_batch(
            [Document("N", near(T1), T0 + 70 * MINUTE), Document("C", T1, T0 + 70 * MINUTE)]
        )
    assert v[0].verdict == "duplicate" and v[0].duplicate_of == "B" and not v[0].exact
    assert v[1].verdict == "duplicate" and v[1].duplicate_of == "B" and v[1].exact


@pytest.mark.parametrize("batched", [True, False])
def test_a_promoted_copy_is_found_as_a_near_duplicate(tmp_path, batched: bool) -> None:
    docs = [Document("A", T1), Document("B", T1), Document("A", T2), Document("N", near(T1))]
    with Deduplicator(tmp_path / "i") as dd:
        verdicts = run(dd, docs, batched)
        # later copies still find it, and in a later run too
        again = dd.check("M", near(T1))
    n = verdicts[3]
    assert n.verdict == "duplicate" and n.duplicate_of == "B" and not n.exact
    assert n.similarity == pytest.approx(jaccard(T1, near(T1)), abs=1e-4)
    assert again.duplicate_of in ("B", "N")


def test_removing_copies_and_owners_in_turn(tmp_path) -> None:
    """Copies promoted one after the other; a removed copy is no longer an next_owner."""
    with Deduplicator(tmp_path / "i") as dd:
        dd.check_batch([Document(n, T1) for n in "ABCD"])
        dd.check("B", T2)  # a copy replaced: not an next_owner any more
        dd.check("A", T2 + " x")  # the owner replaced: C, the oldest copy left, owns T1
        first = dd.check("E", T1)
        dd.check("C", T2 + " y")  # and then D
        second = dd.check("F", T1)
        dd.check("D", T2 + " z")
        dd.check("E", T2 + " w")
        dd.check("F", T2 + " v")  # no copy left
        last = dd.check("G", T1)
        tables = dd.index.read(lambda t: (t.count("content"), t.count("copies")))
    assert first.duplicate_of == "C" and first.exact
    assert second.duplicate_of == "D" and second.exact
    assert last.verdict == "unique"
    assert tables == (7, 0)  # G and six distinct new texts own theirs; no copies left


def dump(path: Path) -> dict[str, object]:
    index = Index(path, readonly=True)
    try:

        def read(t):
            out: dict[str, object] = {}
            for name in ("ids", "docs", "sigs", "texts", "content", "copies", "expiry"):
                out[name] = list(t.items(name))
            out["postings"] = t.postings.live()
            return out

        return index.read(read)
    finally:
        index.close()


def test_the_changelog_restores_promotions(tmp_path) -> None:
    rnd = random.Random(9)
    pages = [" ".join(f"p{j}w{i}" for i in range(40)) for j in range(12)]
    docs = []
    for i in range(600):
        # few distinct texts, ids re-sent with other content, time moving on
        text = rnd.choice(pages) if rnd.random() < 0.8 else near(rnd.choice(pages))
        docs.append(Document(f"d{rnd.randrange(150)}", text, T0 + i * MINUTE))
    opts = EngineOptions(ttl_ms=200 * MINUTE)
    records = []
    with Deduplicator(tmp_path / "orig", options=opts) as dd:
        records.append(params_record(dd.params))
        promotions = 0
        for i in range(0, len(docs), 37):
            verdicts = dd.check_batch(docs[i : i + 37])
            promotions += sum(
                c.owns_content and c.record is not None and c.record.exact for c in dd.changes
            )
            records += encode_changes(dd.changes)
            assert all(v.verdict in ("unique", "duplicate") for v in verdicts)
        params = dd.params
    assert promotions > 10
    # records of different ids come in any order across partitions: shuffle them,
    # keeping each id's own records in order (one partition per id)
    by_key: dict[bytes, list[tuple[bytes, bytes | None]]] = {}
    for key, value in records[1:]:
        by_key.setdefault(key, []).append((key, value))
    queues = list(by_key.values())
    shuffled = [records[0]]
    while queues:
        q = rnd.choice(queues)
        shuffled.append(q.pop(0))
        if not q:
            queues.remove(q)
    for name, stream in (("in-order", records), ("shuffled", shuffled)):
        restored = Index(tmp_path / name)
        r = Restorer(restored)
        r.add(stream)
        r.finish({}, "g/t")
        restored.close()
        assert r.params == params
        a, b = dump(tmp_path / "orig"), dump(tmp_path / name)
        for table in a:
            assert a[table] == b[table], (name, table)


def test_the_changelog_restores_stream_time(tmp_path) -> None:
    """Stream time is derived again from the restored documents' timestamps in
    document order (engine/clock.py): a stream of new ids, some of them ahead of the
    rest, gives the restored index the clock and recent timestamps of the original,
    so the window goes on as it would have (the newest timestamp, as restored before,
    would be one of the early messages)."""
    rnd = random.Random(10)
    docs = []
    for i in range(300):
        ahead = 50 * MINUTE if rnd.random() < 0.1 else 0
        docs.append(Document(f"d{i}", f"page {i} " + T1, T0 + i * MINUTE + ahead))
    records = []
    with Deduplicator(tmp_path / "orig", options=EngineOptions(ttl_ms=100 * MINUTE)) as dd:
        records.append(params_record(dd.params))
        for i in range(0, len(docs), 37):
            dd.check_batch(docs[i : i + 37])
            records += encode_changes(dd.changes)
        want = dd.index.read(lambda t: (t.meta(MetaKey.CLOCK), t.meta(MetaKey.RECENT)))
    restored = Index(tmp_path / "restored")
    r = Restorer(restored)
    r.add(records)
    r.finish({}, "g/t")
    got = restored.read(lambda t: (t.meta(MetaKey.CLOCK), t.meta(MetaKey.RECENT)))
    restored.close()
    assert got == want
    assert want[0] < max(d.timestamp_ms or 0 for d in docs)
