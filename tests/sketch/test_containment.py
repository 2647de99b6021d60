"""The maths of containment by MinHash per size class (sketch/containment.py): the
least Jaccard of a pair at the bar is a true lower bound for every pair of sizes in
the two classes, the plan reaches the recall target at it for every offset it
promises, size classes are exact, and the band keys of an item's two roles meet
those of an item in the right class exactly when a band agrees."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from streamdedup.sketch.containment import (
    MinHashContainment,
    containment,
    distinct_counts,
    least_jaccard,
    plan,
    size_classes,
)
from streamdedup.sketch.lsh import RECALL_TARGET
from streamdedup.sketch.shingle import ShingleBatch

thresholds = st.sampled_from([0.3, 0.5, 0.7, 0.8, 0.9, 1.0])


@given(thresholds, st.integers(0, 14), st.integers(-3, 5), st.data())
def test_the_least_jaccard_bounds_every_pair_of_the_two_classes(
    t: float, c: int, offset: int, data: st.DataObject
) -> None:
    """A new item of q elements in class c and an earlier one of s in class
    c + offset sharing m >= T q elements (containment at least T): their Jaccard
    m / (q + s - m) is at least `least_jaccard(T, offset)`."""
    q = data.draw(st.integers(2**c, 2 ** (c + 1) - 1))
    lo, hi = 2 ** max(c + offset, 0), 2 ** (c + offset + 1) - 1
    need = math.ceil(t * q - 1e-9)
    if hi < 1 or hi < need:
        return  # (no earlier item of that class can hold T of the new one)
    s = data.draw(st.integers(max(lo, need), hi))
    m = data.draw(st.integers(need, min(q, s)))
    assert m / (q + s - m) >= least_jaccard(t, offset) - 1e-12


@given(thresholds, st.sampled_from([64, 128, 256]))
def test_the_plan_reaches_the_target_at_every_offset_it_promises(t: float, k: int) -> None:
    pairings = plan(t, k)
    offsets = [p.offset for p in pairings]
    assert offsets == list(range(offsets[0], offsets[0] + len(offsets)))  # contiguous
    assert 2.0 ** (offsets[0] + 1) > t >= 2.0 ** offsets[0]  # from the lowest class possible
    for p in pairings:
        assert p.bands * p.rows <= k and p.recall >= RECALL_TARGET
        assert p.jaccard == least_jaccard(t, p.offset)
    beyond = least_jaccard(t, offsets[-1] + 1)  # the next offset: K single rows fall short
    assert 1.0 - (1.0 - beyond) ** k < RECALL_TARGET
    family = MinHashContainment(k, 1, t)
    assert family.bands == sum(p.bands * (1 if p.offset == 0 else 2) for p in pairings)


def test_the_default_plan_promises_eight_times_the_size() -> None:
    """T = 0.8, K = 128: an earlier item up to 8 times the new one's size (three
    classes up), with 391 keys an item (the figures the docs quote)."""
    pairings = plan(0.8, 128)
    assert [p.offset for p in pairings] == [-1, 0, 1, 2, 3]
    assert MinHashContainment(128, 1, 0.8).bands == 391


@given(st.lists(st.integers(0, 2**31 - 1), max_size=50))
def test_size_classes_are_the_exact_binary_logarithm(sizes: list[int]) -> None:
    edges = [2**k + d for k in range(31) for d in (-1, 0, 1)]
    values = np.array([*sizes, *edges], dtype=np.int64)
    want = [max(int(v), 1).bit_length() - 1 for v in values]
    assert size_classes(values).tolist() == want


@given(st.lists(st.lists(st.integers(0, 50), max_size=30), min_size=1, max_size=8))
def test_sizes_are_distinct_counts(items: list[list[int]]) -> None:
    hashes = np.array([h for it in items for h in it], dtype=np.uint64) * np.uint64(
        0x9E3779B97F4A7C15
    )
    offsets = np.concatenate([[0], np.cumsum([len(it) for it in items])]).astype(np.int64)
    assert distinct_counts(ShingleBatch(hashes, offsets)).tolist() == [len(set(it)) for it in items]


def _signature(minima: list[int], cls: int) -> np.ndarray:
    return np.array([[*minima, cls]], dtype=np.uint16)


@settings(max_examples=50)
@given(st.integers(0, 2**32), st.integers(1, 12))
def test_keys_meet_across_the_planned_classes_only_where_a_band_agrees(seed: int, c: int) -> None:
    """Two items whose signatures agree everywhere share keys exactly when their
    classes are planned for each other (an offset of the plan, either way round);
    signatures that agree nowhere share none.  Stored signatures give back the keys
    a batch was sketched with."""
    family = MinHashContainment(128, seed % 1000, 0.8)
    rng = np.random.default_rng(seed)
    minima = rng.integers(0, 2**16, 128).tolist()
    other = [(m + 1) % 2**16 for m in minima]
    offsets = {p.offset for p in family.pairings}
    for d in range(-3, 6):
        if c + d < 0:
            continue
        a = set(family.band_keys(_signature(minima, c))[0].tolist())
        b = set(family.band_keys(_signature(minima, c + d))[0].tolist())
        assert bool(a & b) == (d in offsets or -d in offsets or d == 0)
        far = set(family.band_keys(_signature(other, c + d))[0].tolist())
        assert not a & far
    texts = [rng.integers(0, 2**63, n, dtype=np.uint64) for n in (5, 300, 40)]
    batch = ShingleBatch(np.concatenate(texts), np.array([0, 5, 305, 345], dtype=np.int64))
    got = family.sketch(batch)
    assert got.sigs[:, -1].tolist() == [2, 8, 5]  # the size classes
    assert got.keys == family.band_keys(got.sigs).astype(">u8").tobytes()


@given(st.sets(st.integers(0, 40)), st.sets(st.integers(0, 40)))
def test_containment_is_the_share_of_the_new_item_inside(a: set[int], b: set[int]) -> None:
    x = np.array(sorted(a), dtype=np.uint64)
    y = np.array(sorted(b), dtype=np.uint64)
    assert containment(x, y) == (len(a & b) / len(a) if a else 0.0)
