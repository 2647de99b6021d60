"""The compiled kernels of a whole batch's search (`gather_batch`, `rank_batch`,
engine/search.py `gather_all`, `rank_all`) against the Python loops that define them
(`gather_newest` and `rank_gathered` document by document), on the same inputs: the
engine's verdicts must not depend on which of the two ran (`STREAMDEDUP_KERNELS=numpy`)."""

from __future__ import annotations

import copy
import functools
from array import array

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from streamdedup.engine.search import _distinct_below, gather_all, rank_all
from tests.support.kernels import needs_compiled, numpy_code, subsets

KEYS = [bytes([k]) * 8 for k in range(8)]
FIRST = 5000  # the batch's first docno: stored ones below


def _int64s(values: list[int]) -> array[int]:
    return array("q", values)


# The strategies `gathers` draws from, made once: made afresh in every example (and
# the hot keys' for every set of keys) their construction and validation took about
# 40% of the gather test's CPU; the same strategies, so the same examples.
_caps = st.sampled_from([0, 1, 2, 5, 2000])
_forms = st.sampled_from([list, _int64s])
_stored = st.lists(st.integers(0, FIRST - 1), max_size=30, unique=True)
_key_sets = st.sets(st.sampled_from(KEYS))
_rows = st.lists(st.lists(st.sampled_from(KEYS), min_size=1, max_size=6), min_size=0, max_size=25)


@functools.cache
def _gaps(n: int) -> st.SearchStrategy[list[int]]:
    return st.lists(st.integers(1, 3), min_size=n, max_size=n)


@st.composite
def gathers(draw: st.DrawFn) -> tuple[object, ...]:
    """A batch's read-ahead (stored docnos newest first, at most `cap`), its shared
    keys (`added`, empty: the batch's documents join them as they are gathered),
    hot keys, and the band keys of its searching documents, numbered in order with
    gaps (documents the search skips).  The read-ahead's postings as lists or as the
    int64 arrays a batch keeps them in (`store.batch.docnos`), and the batch's lists
    (`added`) either way too: the kernel reads and grows both."""
    cap = draw(_caps)
    kept = draw(_forms)
    grown = draw(_forms)
    read_ahead = {k: sorted(draw(_stored))[::-1][: max(cap, 0)] for k in draw(_key_sets)}
    read_ahead = {k: kept(v) for k, v in read_ahead.items()}
    added = {k: grown([]) for k in draw(_key_sets)}
    hot = draw(subsets(tuple(read_ahead) or tuple(KEYS[:1])))
    rows = draw(_rows)
    gaps = draw(_gaps(len(rows)))
    docnos = FIRST + np.cumsum(np.asarray(gaps, dtype=np.int64)).astype(np.int64)
    return rows, docnos, read_ahead, added, hot, cap


@needs_compiled
@settings(max_examples=300)
@given(gathers())
def test_gather_all_equals_the_loop(case: tuple[object, ...]) -> None:
    """The same candidates, offsets and caps; the shared keys' lists grown alike."""
    rows, docnos, read_ahead, added, hot, cap = case
    assert isinstance(rows, list) and isinstance(docnos, np.ndarray)
    assert isinstance(read_ahead, dict) and isinstance(added, dict)
    assert isinstance(hot, set) and isinstance(cap, int)
    mine = copy.deepcopy(added)
    got = gather_all(rows, docnos, read_ahead, mine, hot, cap)
    theirs = copy.deepcopy(added)
    with numpy_code():
        want = gather_all(rows, docnos, read_ahead, theirs, hot, cap)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.tolist() == w.tolist()
    assert mine == theirs
    # what it means: a document meets only earlier ones of the batch
    flat, offsets, _ = got
    for j in range(len(rows)):
        batch = [d for d in flat[offsets[j] : offsets[j + 1]].tolist() if d >= FIRST]
        assert all(d < docnos[j] for d in batch)


@st.composite
def ranks(draw: st.DrawFn) -> tuple[object, ...]:
    """Signatures over a tiny alphabet (estimates on both sides of the bar), a
    matrix some docnos have no row of, and each document's candidates ascending."""
    k = draw(st.sampled_from([1, 4, 16]))
    n = draw(st.integers(0, 12))
    n_rows = draw(st.integers(1, 20))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    sigs = rng.integers(0, 3, (n, k), dtype=np.uint16)
    matrix = rng.integers(0, 3, (n_rows, k), dtype=np.uint16)
    top = draw(st.integers(1, 60))
    slot = np.full(top, -1, dtype=np.int32)
    held = rng.random(top) < 0.8
    slot[held] = rng.integers(0, n_rows, int(held.sum()), dtype=np.int32)
    lists = [
        sorted(draw(st.lists(st.integers(0, top + 5), max_size=15, unique=True))) for _ in range(n)
    ]
    flat = np.asarray([d for x in lists for d in x], dtype=np.int64)
    offsets = np.cumsum([0, *map(len, lists)]).astype(np.int64)
    bar = draw(st.sampled_from([0.0, 0.3, 0.5, 0.9, float("inf")]))
    limit = draw(st.integers(0, 6))
    return sigs, matrix, slot, flat, offsets, bar, limit


@needs_compiled
@settings(max_examples=300)
@given(ranks())
def test_rank_all_equals_the_loop(case: tuple[object, ...]) -> None:
    """The same kept counts, ranked docnos, estimates (bit for bit) and offsets, for
    candidates with and without a row, past the map, limits and bars that cut."""
    sigs, matrix, slot, flat, offsets, bar, limit = case
    assert isinstance(sigs, np.ndarray) and isinstance(matrix, np.ndarray)
    assert isinstance(slot, np.ndarray) and isinstance(flat, np.ndarray)
    assert isinstance(offsets, np.ndarray) and isinstance(bar, float)
    assert isinstance(limit, int)
    got = rank_all(sigs, matrix, slot, flat, offsets, bar, limit)
    with numpy_code():
        want = rank_all(sigs, matrix, slot, flat, offsets, bar, limit)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.tobytes() == w.tobytes()


@given(
    st.lists(
        st.one_of(st.integers(0, 300), st.integers(10**6, 10**6 + 300), st.integers(0, 10**7)),
        max_size=200,
    ),
    st.one_of(st.integers(0, 10**7), st.integers(10**6, 10**6 + 300)),
)
def test_the_stored_candidates_are_the_distinct_ones_below_the_batch(
    values: list[int], first: int
) -> None:
    """By a mask (close docnos, near 0 or far from it) or a sort (spread ones): numpy's
    unique of those below."""
    flat = np.asarray(values, dtype=np.int64)
    got = _distinct_below(flat, first)
    assert got.dtype == np.int64
    assert got.tolist() == np.unique(flat[flat < first]).tolist()
