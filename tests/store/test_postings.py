"""The posting runs against a plain model: key -> set of live docnos."""

from __future__ import annotations

import lmdb
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamdedup.store import postings
from streamdedup.store.postings import Postings, merge

# few distinct keys, spread over a few partitions (the top byte), so buckets get hot
KEYS = st.sampled_from([(p << 56) | k for p in (0, 7, 255) for k in (1, 2, 3, 99)])
ADD = st.tuples(st.just("add"), st.lists(KEYS, min_size=1, max_size=6))
REMOVE = st.tuples(st.just("remove"), st.integers(0, 400))
TXNS = st.lists(st.lists(st.one_of(ADD, ADD, REMOVE), max_size=12), min_size=1, max_size=8)


def newest(model: dict[int, set[int]], key: int, cap: int) -> list[int]:
    return sorted(model.get(key, ()), reverse=True)[:cap]


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(txns=TXNS, cap=st.integers(1, 5))
def test_runs_answer_like_the_model(tmp_path_factory, monkeypatch, txns, cap) -> None:
    # tiny levels and purges, so that merges across levels and purges happen (the
    # same settings for every example: the monkeypatch outliving one is harmless)
    monkeypatch.setattr(postings, "BASE", 4)
    monkeypatch.setattr(postings, "GROWTH", 2)
    monkeypatch.setattr(postings, "PURGE_MIN", 3)
    env = lmdb.open(str(tmp_path_factory.mktemp("runs")), max_dbs=1, map_size=1 << 26)
    db = env.open_db(b"postings")
    model: dict[int, set[int]] = {}
    docno = 0
    live_docs = 0
    all_keys = sorted({(p << 56) | k for p in (0, 7, 255) for k in (1, 2, 3, 99)})
    for ops in txns:
        with env.begin(write=True, buffers=True) as txn:
            runs = Postings(txn, db)
            for op, arg in ops:
                if op == "add":
                    keys = sorted(set(arg))
                    runs.add(np.array(keys, dtype=np.uint64), np.full(len(keys), docno, np.uint64))
                    for k in keys:
                        model.setdefault(k, set()).add(docno)
                    docno += 1
                    live_docs += 1
                elif any(arg in s for s in model.values()):
                    runs.remove(arg)
                    for s in model.values():
                        s.discard(arg)
                    live_docs -= 1
                got = runs.lookup(np.array(all_keys, dtype=np.uint64), cap)
                want = {k: newest(model, k, cap) for k in all_keys if model.get(k)}
                assert got == want
            runs.finish(live_docs)
        with env.begin(buffers=True) as txn:
            runs = Postings(txn, db)
            assert runs.live() == sorted((k, d) for k, s in model.items() for d in s)
            assert sorted(runs.sizes()) == sorted(len(s) for s in model.values() if s)
            # dead postings do not pile up: purged once they outnumber the live
            assert runs.stored() <= sum(map(len, model.values())) + 6 * max(3, live_docs // 4)
    env.close()


@given(
    a=st.lists(st.tuples(st.integers(0, 5), st.integers(0, 50)), unique=True),
    b=st.lists(st.tuples(st.integers(0, 5), st.integers(0, 50)), unique=True),
)
def test_merge_orders_by_key_then_docno_whatever_the_arrival(a, b) -> None:
    def run(pairs):
        pairs = sorted(pairs)
        return (
            np.array([k for k, _ in pairs], dtype=np.uint64),
            np.array([d for _, d in pairs], dtype=np.uint64),
        )

    keys, docnos = merge(run(a), run(b))
    assert list(zip(keys.tolist(), docnos.tolist(), strict=True)) == sorted(a + b)


@given(
    docs=st.lists(st.lists(KEYS, min_size=1, max_size=6, unique=True), min_size=1, max_size=60),
    cap=st.integers(1, 4),
)
def test_one_add_of_a_whole_batch_keeps_each_keys_docnos_ascending(tmp_path_factory, docs, cap):
    """How a batch is flushed: every document's keys in one call, docnos ascending in
    the order given; a lookup's newest `cap` are the last of each key's slice."""
    env = lmdb.open(str(tmp_path_factory.mktemp("batch")), max_dbs=1, map_size=1 << 24)
    db = env.open_db(b"postings")
    keys = np.array([k for d in docs for k in d], dtype=np.uint64)
    docnos = np.repeat(np.arange(len(docs), dtype=np.uint64), [len(d) for d in docs])
    with env.begin(write=True, buffers=True) as txn:
        runs = Postings(txn, db)
        runs.add(keys, docnos)
        for _, _, (rk, rd) in runs.runs():
            pairs = list(zip(rk.tolist(), rd.tolist(), strict=True))
            assert pairs == sorted(pairs)
        model: dict[int, set[int]] = {}
        for d, ks in enumerate(docs):
            for k in ks:
                model.setdefault(k, set()).add(d)
        wanted = np.array(sorted(model), dtype=np.uint64)
        assert runs.lookup(wanted, cap) == {k: newest(model, k, cap) for k in model}
    env.close()
