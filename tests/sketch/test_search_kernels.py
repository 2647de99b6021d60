"""The compiled kernels of the candidate search (`summarise`, `choose_packed`, `gather`)
against the numpy and Python code they mirror, on the same inputs: the engine's
verdicts must not depend on which of the two ran (`STREAMDEDUP_KERNELS=numpy`)."""

from __future__ import annotations

from array import array

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamdedup.sketch.jaccard import (
    SLICES,
    SetTable,
    counts_of,
    numpy_containment,
    numpy_jaccard,
    sorted_distinct,
    summaries_of,
    summarise,
    summary_of,
    summary_values,
    values_of,
)
from streamdedup.store.tables import gather_newest
from tests.support.kernels import compiled, needs_compiled, numpy_code, subsets

# Hashes spread over the whole range, crowded into a few slices (long runs for the
# per-slice sort), or tiny; repeats drawn on purpose (a page repeats shingles).
hashes = st.lists(
    st.one_of(
        st.integers(0, 2**64 - 1),
        st.integers(0, 40).map(lambda v: (v << 58) | 12345),
        st.integers(0, 3),
        st.integers(2**64 - 4, 2**64 - 1),
    ),
    max_size=300,
).flatmap(lambda v: st.permutations(v + v[: len(v) // 3]))


@needs_compiled
@settings(max_examples=300)
@given(hashes)
def test_summary_of_equals_numpy(values: list[int]) -> None:
    """Byte for byte: the compiled summary of unsorted hashes with repeats is
    `summarise` of numpy's sorted distinct values."""
    h = np.array(values, dtype=np.uint64)
    got = summary_of(h)
    with numpy_code():
        want = summary_of(h)
    assert got == want == summarise(np.unique(h))
    assert values_of(got).tolist() == sorted(set(values))
    assert (
        counts_of(got).tolist()
        == np.bincount(
            np.array([v >> 56 for v in set(values)], dtype=np.intp), minlength=SLICES
        ).tolist()
    )
    assert summary_values(got) == 1 + SLICES // 8 + len(set(values))


@needs_compiled
@needs_compiled
@settings(max_examples=200)
@given(st.lists(hashes, min_size=1, max_size=6), st.data())
def test_summaries_of_many_equal_numpy(docs: list[list[int]], data: st.DataObject) -> None:
    """A batch's documents' summaries in one call (`summaries_of`), picked in any
    order and more than once: each one's `summary_of`, byte for byte."""
    flat = np.array([v for d in docs for v in d], dtype=np.uint64)
    offsets = np.cumsum([0] + [len(d) for d in docs]).astype(np.int64)
    picks = data.draw(st.lists(st.integers(0, len(docs) - 1), max_size=8))
    got = summaries_of(flat, offsets, picks)
    with numpy_code():
        want = summaries_of(flat, offsets, picks)
    assert got == want == [summary_of(np.array(docs[j], dtype=np.uint64)) for j in picks]


@needs_compiled
def test_summaries_of_many_refuse_what_does_not_fit() -> None:
    assert compiled is not None
    h, off = np.arange(4, dtype=np.uint64), np.array([0, 2, 4], dtype=np.int64)
    with pytest.raises(ValueError, match="fit"):
        compiled.summarise_many(h, np.array([0, 5], dtype=np.int64), np.zeros(1, np.int64))
    with pytest.raises(ValueError, match="past"):
        compiled.summarise_many(h, off, np.array([2], dtype=np.int64))


@needs_compiled
@settings(max_examples=40, deadline=None)
@given(st.integers(200, 12_000), st.integers(0, 2**32), st.sampled_from([0, 0.05, 0.5]))
def test_summary_of_large_sets_equals_numpy(n: int, seed: int, crowded: float) -> None:
    """Sets of pages and of long documents (the compiled sort deals them by up to 11
    top bits, then one insertion pass), spread evenly or partly crowded into a narrow
    range (a bucket of many, sorted on its own), with repeats."""
    rng = np.random.default_rng(seed)
    h = rng.integers(0, 2**64 - 1, n, dtype=np.uint64, endpoint=True)
    close = rng.random(n) < crowded
    h[close] = (np.uint64(9) << np.uint64(56)) | rng.integers(0, 5000, int(close.sum()), np.uint64)
    h = np.concatenate([h, h[: n // 5]])
    rng.shuffle(h)
    got = summary_of(h)
    with numpy_code():
        want = summary_of(h)
    assert got == want


@needs_compiled
@settings(max_examples=300, deadline=None)
@given(
    st.integers(0, 2**32),
    st.integers(40, 900),
    st.floats(0.0, 0.35),
    st.floats(0.0, 0.35),
    st.sampled_from([0.5, 0.8, 0.9]),
    st.sampled_from([0, 8, 56]),
    st.booleans(),
)
def test_the_exact_check_of_page_sized_sets_near_the_bar_is_their_measure(
    seed: int, n: int, drop: float, add: float, threshold: float, spread: int, contain: bool
) -> None:
    """A page's set against a sibling (some values dropped, some added: J from about
    0.5 to 1, many near the bar), in the compiled check with every bound on (sizes,
    slice counts, the merge's early exit): a candidate wins iff its exact Jaccard
    reaches the bar, with that Jaccard -- or, `contain`, its containment |A n B| / |A|
    (the sibling then up to twice as large: a page inside a longer one).  `spread`:
    how many of the top bits the values vary in (56: each slice a few values; 0: all
    in slice 0, where the slice counts bound nothing; 8: a few slices of many)."""
    assert compiled is not None
    rng = np.random.default_rng(seed)
    bits = rng.integers(0, 2**63, size=2 * n, dtype=np.uint64) * np.uint64(2)
    low = np.uint64((1 << (64 - spread)) - 1) if spread else np.uint64(2**64 - 1)
    pool = rng.permutation(np.unique(bits & low))
    mine = np.sort(pool[:n])
    extra = pool[n : n + int(min(1.0, add * (3 if contain else 1)) * n)]
    theirs = np.union1d(mine[rng.random(len(mine)) >= drop], extra)
    want = (numpy_containment if contain else numpy_jaccard)(mine, theirs)
    est, kept = np.array([1.0]), {5: summarise(theirs)}
    table = SetTable()  # its row alone in the table, its set read on request
    table.put(5, kept[5])
    for sets, rows in (
        ((kept,), (None, None, None)),
        (({},), (table.rows, table.counts, table.sizes)),
    ):
        args = (summarise(mine), sets, [5], est, threshold, 0.1, 4, 0, -1, 0.0, *rows, contain)
        got = compiled.choose_packed(*args)  # type: ignore[arg-type]
        if got[3]:  # wanted (not rejected by its row): read, and the rule resumes
            got = compiled.choose_packed(summarise(mine), (kept,), *args[2:])  # type: ignore[arg-type]
        assert got == ((0, want, 1, False) if want >= threshold else (-1, 0.0, 1, False))


@pytest.mark.parametrize("crowd", [255, 256])
def test_a_slice_past_a_byte_leaves_the_set_without_counts(crowd: int) -> None:
    """Counts are bytes: a set with more than 255 values in one slice has none, both
    ways (the check then skips the slice filter); 255 still fits."""
    rng = np.random.default_rng(crowd)
    spread = rng.integers(0, 2**64 - 1, 3000, dtype=np.uint64, endpoint=True)
    spread = spread[(spread >> np.uint64(56)) != 7]
    crowded = (np.uint64(7) << np.uint64(56)) | np.arange(crowd, dtype=np.uint64)
    h = np.concatenate([spread, crowded, crowded[:50]])  # repeats do not count
    rng.shuffle(h)
    got = summary_of(h)
    with numpy_code():
        want = summary_of(h)
    assert got == want
    assert len(counts_of(got)) == (SLICES if crowd <= 255 else 0)
    assert np.array_equal(values_of(got), sorted_distinct(h))


# -- gather: a document's candidates from the batch's read-ahead and buffer

keys = [bytes([k]) * 8 for k in range(6)]
docnos = st.lists(st.integers(0, 3000), max_size=40, unique=True)
# The strategies `batches` draws from, made once: made afresh in every example (and
# the hot keys' for every set of keys) their construction and validation took a third
# of the gather test's CPU; the same strategies, so the same examples.
_caps = st.sampled_from([0, 1, 3, 10, 2000])
_bases = st.sampled_from([0, 2**30 - 6000, 2**40])
_key_sets = st.sets(st.sampled_from(keys))
_band_keys = st.lists(st.sampled_from(keys), min_size=1, max_size=8)
_forms = st.sampled_from(["lists", "arrays", "mixed"])


@st.composite
def batches(draw: st.DrawFn) -> tuple[object, ...]:
    """A batch's read-ahead (stored docnos, newest first, at most `cap`, as
    `batch_postings` cuts them) and buffer (the batch's docnos, oldest first, all
    newer than stored ones), over a few keys shared by the document's buckets."""
    cap = draw(_caps)
    # docnos of one digit of a Python int (read in place) and past it (a bigger index)
    base = draw(_bases)
    read_ahead = {
        k: sorted((base + d for d in draw(docnos)), reverse=True)[: max(cap, 0)]
        for k in draw(_key_sets)
    }
    added = {k: sorted(base + d + 5000 for d in draw(docnos)) for k in draw(_key_sets)}
    hot = draw(subsets(tuple(read_ahead) or tuple(keys[:1])))
    band_keys = draw(_band_keys)
    # as a batch keeps them (int64 arrays: store.batch `Docnos`) or as lists, mixed
    as_arrays = draw(_forms)
    for postings in (read_ahead, added):
        for k in postings:
            if as_arrays == "arrays" or (as_arrays == "mixed" and draw(st.booleans())):
                postings[k] = array("q", postings[k])  # type: ignore[assignment]
    return band_keys, read_ahead, added, hot, cap


@needs_compiled
@settings(max_examples=400)
@given(batches())
def test_gather_equals_the_python_definition(batch: tuple[object, ...]) -> None:
    """The same docnos, ascending and distinct, and the same `capped`, for caps that
    bite or not, hot keys, buckets the batch added to or not, and keys repeated."""
    band_keys, read_ahead, added, hot, cap = batch
    assert isinstance(band_keys, list) and isinstance(read_ahead, dict)
    assert isinstance(added, dict) and isinstance(hot, set) and isinstance(cap, int)
    got, got_capped = gather_newest(band_keys, read_ahead, added, hot, cap)
    with numpy_code():
        want, want_capped = gather_newest(band_keys, read_ahead, added, hot, cap)
    assert got.dtype == want.dtype == np.int64
    assert got.tolist() == want.tolist() and got_capped == want_capped
    # what it means: each bucket's newest `cap` docnos (the batch's are the newest)
    if cap:  # (a cap of 0 keeps the batch's whole buffer, as it always did)
        plain: set[int] = set()
        for bk in band_keys:
            both = [*read_ahead.get(bk, []), *added.get(bk, [])]
            plain |= set(sorted(both, reverse=True)[:cap])
        assert got.tolist() == sorted(plain)
    assert got_capped == (
        bool(set(band_keys) & hot)
        or any(
            added.get(bk) and len(added[bk]) + len(read_ahead.get(bk, [])) > cap for bk in band_keys
        )
    )


@needs_compiled
def test_gather_refuses_what_is_not_postings() -> None:
    assert compiled is not None
    with pytest.raises(TypeError, match="lists or int64 arrays"):
        compiled.gather([keys[0]], {keys[0]: (1, 2)}, {}, set(), 10)
    for wrong in (array("i", [1, 2]), array("d", [1.0]), b"\x01" * 8, np.ones(2, np.uint32)):
        with pytest.raises(TypeError, match="lists or int64 arrays"):
            compiled.gather([keys[0]], {keys[0]: wrong}, {}, set(), 10)  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="below 0"):
        compiled.gather([keys[0]], {keys[0]: array("q", [3, -1])}, {}, set(), 10)
    # a numpy int64 array is an int64 array too
    raw, _ = compiled.gather([keys[0]], {keys[0]: np.array([9, 4], np.int64)}, {}, set(), 10)  # type: ignore[dict-item]
    assert np.frombuffer(raw, np.int64).tolist() == [4, 9]
    with pytest.raises(ValueError, match="below 0"):
        compiled.gather([keys[0]], {keys[0]: [-1]}, {}, set(), 10)
    with pytest.raises(TypeError, match="hot must be a set"):
        compiled.gather([keys[0]], {}, {}, [], 10)  # type: ignore[arg-type]
    with pytest.raises(OverflowError):
        compiled.gather([keys[0]], {keys[0]: [2**70]}, {}, set(), 10)


@needs_compiled
@settings(max_examples=60, deadline=None)
@given(st.integers(1, 1024), st.integers(1, 40), st.integers(0, 2**32))
def test_the_compiled_ranking_counts_agreeing_positions_at_any_length(
    k: int, n: int, seed: int
) -> None:
    """Whichever lanes the CPU offers (AVX2's 16, SSE2's 8, the tail one by one), the
    compiled ranking orders candidates by their agreeing positions, most first, ties
    by docno, with MinHash's estimate of that count: numpy's lexsort, value for value."""
    from streamdedup.sketch.signature import estimate_of_agreeing

    assert compiled is not None
    rng = np.random.default_rng(seed)
    sig = rng.integers(0, 3, size=k).astype(np.uint16)
    matrix = np.where(rng.random((n, k)) < rng.random((n, 1)), sig, rng.integers(0, 3, (n, k)))
    matrix = matrix.astype(np.uint16)
    docnos = np.arange(n, dtype=np.int64)
    _, kept, ranked, est = compiled.rank(
        sig, matrix, np.arange(n, dtype=np.int32), docnos, -1.0, n, False
    )
    agree = (matrix == sig).sum(axis=1)
    assert kept == n and list(ranked) == np.lexsort((docnos, -agree)).tolist()
    want = estimate_of_agreeing(np.sort(agree)[::-1].astype(np.int64), k)
    assert np.frombuffer(est, dtype=np.float64).tolist() == want.tolist()
