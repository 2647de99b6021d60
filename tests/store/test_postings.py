"""The posting runs against a plain model: key -> set of live docnos."""

from __future__ import annotations

from contextlib import nullcontext

import lmdb
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamdedup.store import postings
from streamdedup.store.postings import Postings, merge
from tests.support.kernels import compiled, needs_compiled, numpy_code

# few distinct keys, spread over a few partitions (the top byte), so buckets get hot
KEYS = st.sampled_from([(p << 56) | k for p in (0, 7, 255) for k in (1, 2, 3, 99)])
ADD = st.tuples(st.just("add"), st.lists(KEYS, min_size=1, max_size=6))
REMOVE = st.tuples(st.just("remove"), st.integers(0, 400))
TXNS = st.lists(st.lists(st.one_of(ADD, ADD, REMOVE), max_size=12), min_size=1, max_size=8)


# keys as a batch makes them (hashes: any top byte) and as adversaries might (a few
# partitions, many repeats, runs long enough for the radix passes and short enough for
# the insertion sort), with values that show where each pair went
PAIR_KEYS = st.one_of(
    st.integers(0, 2**64 - 1),
    st.builds(lambda p, k: (p << 56) | k, st.sampled_from([0, 1, 255]), st.integers(0, 300)),
    st.sampled_from([0, 2**64 - 1, 1 << 56, (1 << 56) - 1]),
)


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


@needs_compiled
@given(
    a=st.lists(st.tuples(PAIR_KEYS, st.integers(0, 2**40 - 1)), unique=True, max_size=60),
    b=st.lists(st.tuples(PAIR_KEYS, st.integers(0, 2**40 - 1)), unique=True, max_size=60),
    in_order=st.booleans(),
)
def test_merge_packed_is_merge_then_pack(a, b, in_order) -> None:
    """The compiled merge stores what numpy's merge and `pack` store, byte for byte:
    the older run first within a key when the docnos allow (a batch's are newer), and
    by docno when they do not (a restore's arrive in any order: `merge` sorts)."""
    if in_order and a and b:  # every newer docno above every older one, as in a batch
        top = max(d for _, d in a) + 1
        b = [(k, top + d) for k, d in b]

    def run(pairs):
        pairs = sorted(pairs, key=lambda p: p[0])  # by key; docnos as they came
        return (
            np.array([k for k, _ in pairs], dtype=np.uint64),
            np.array([d for _, d in pairs], dtype=np.uint64),
        )

    older = postings.unpack(postings.pack(*run(a)))  # as `_merge_into` reads a run
    got = postings.merge_packed(older, run(b))
    with numpy_code():
        want = postings.merge_packed(older, run(b))
    assert got == want == postings.pack(*merge(older, run(b)))


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


@needs_compiled
@settings(max_examples=300, deadline=None)
@given(st.lists(PAIR_KEYS, max_size=400), st.data())
def test_sort_pairs_is_numpys_stable_argsort(keys: list[int], data: st.DataObject) -> None:
    """The compiled sort gives numpy's stable order, pair for pair: ascending keys,
    equal keys in the order given (a key's docnos stay ascending in its run)."""
    k = np.array(keys, dtype=np.uint64)
    v = np.array(data.draw(st.permutations(range(len(keys)))), dtype=np.uint64)
    got = postings.sort_pairs(k, v)
    with numpy_code():
        want = postings.sort_pairs(k, v)
    assert got[0].tolist() == want[0].tolist() == sorted(keys)
    assert got[1].tolist() == want[1].tolist()
    assert got[0].dtype == got[1].dtype == np.uint64


@needs_compiled
def test_sort_pairs_refuses_what_does_not_pair() -> None:
    assert compiled is not None
    with pytest.raises(ValueError, match="as many"):
        compiled.sort_pairs(np.zeros(3, np.uint64), np.zeros(2, np.uint64))
    with pytest.raises(ValueError, match="whole number"):
        compiled.sort_pairs(b"\x00" * 12, b"\x00" * 12)


@settings(max_examples=200, deadline=None)
@given(st.lists(PAIR_KEYS, max_size=300), st.booleans())
def test_distinct_is_numpys_unique(keys: list[int], compiled_kernels: bool) -> None:
    k = np.array(keys, dtype=np.uint64)
    with nullcontext() if compiled_kernels else numpy_code():
        unique, inverse, counts = postings.distinct(k)
    want = np.unique(k, return_inverse=True, return_counts=True)
    assert unique.tolist() == want[0].tolist()
    assert inverse.tolist() == want[1].tolist()
    assert counts.tolist() == want[2].tolist()


@given(
    st.lists(st.tuples(st.integers(0, 40), st.integers(0, 2**40 - 1)), max_size=80),
    st.booleans(),
)
def test_newest_first_is_the_lexsort_it_replaces(pairs, many_keys) -> None:
    """One sort of (query, docno counted down) packed in 64 bits orders postings as
    lexsort((-docno, query)) does; past 2**24 queries it is that lexsort."""
    shift = 1 << 24 if many_keys else 0  # query indices too wide to pack
    query = np.array([q + shift for q, _ in pairs], dtype=np.int64)
    docnos = np.array([d for _, d in pairs], dtype=np.uint64)
    got_q, got_d = postings._newest_first(query, docnos)
    order = np.lexsort((-docnos.astype(np.int64), query))
    assert got_q.tolist() == query[order].tolist()
    assert got_d.tolist() == docnos[order].tolist()


@needs_compiled
@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.lists(st.tuples(PAIR_KEYS, st.integers(0, 2**40 - 1)), max_size=40), max_size=5),
    st.lists(PAIR_KEYS, max_size=40),
    st.integers(0, 4),
)
def test_probe_runs_takes_what_numpy_takes(runs, asked, cap) -> None:
    """The same postings of the asked keys from the same runs (each a partition's,
    ordered by key), in the same order, with the same cut flags, compiled or not:
    keys present or not, repeated in a run or not, before, inside and after a run."""
    stored = []
    for pairs in runs:
        part = pairs[0][0] >> 56 if pairs else 0
        pairs = sorted((k, d) for k, d in pairs if k >> 56 == part)
        keys = np.array([k for k, _ in pairs], dtype=np.uint64)
        stored.append(
            (part, memoryview(postings.pack(keys, np.array([d for _, d in pairs], np.uint64))))
        )
    # also asked: some keys the runs hold
    keys = np.array(sorted(set(asked) | {k for pairs in runs for k, _ in pairs[::3]}), np.uint64)
    got = postings.probe_runs(keys, stored, cap)
    with numpy_code():
        want = postings.probe_runs(keys, stored, cap)
    assert [g.dtype for g in got] == [w.dtype for w in want]
    assert all(g.tolist() == w.tolist() for g, w in zip(got, want, strict=True))


@needs_compiled
def test_probe_runs_refuses_what_is_not_a_run() -> None:
    assert compiled is not None
    keys = np.zeros(1, np.uint64)
    with pytest.raises(ValueError, match="16-byte"):
        compiled.probe_runs(keys, [(0, b"\x00" * 8)], 1)
    with pytest.raises(ValueError, match="partition"):
        compiled.probe_runs(keys, [(256, b"")], 1)
    with pytest.raises(TypeError, match="tuples"):
        compiled.probe_runs(keys, [b""], 1)  # type: ignore[list-item]
    with pytest.raises(ValueError, match="cap"):
        compiled.probe_runs(keys, [], -1)
