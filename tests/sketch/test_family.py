"""The maths half of the similarity-family seam (sketch/family.py): the threshold
rule (`Bar`) and the laws every `LshFamily` keeps, checked here for MinHash /
Jaccard (sketch/minhash.py) and bit sampling / Hamming (sketch/bitsampling.py).  A
new family joins `FAMILIES` with a strategy for its batches and must pass every test
parametrised over it (docs/architecture.md, "How a similarity family plugs in")."""

from __future__ import annotations

import pickle
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamdedup.sketch.bitsampling import BitSampling, hamming, hamming_rows
from streamdedup.sketch.family import Bar, LshFamily
from streamdedup.sketch.jaccard import numpy_jaccard
from streamdedup.sketch.minhash import MinHashJaccard
from streamdedup.sketch.projections import PStable, RandomHyperplanes
from streamdedup.sketch.shingle import ShingleBatch, offsets_of
from streamdedup.sketch.signature import band_keys, estimate_jaccard, estimate_rows, sketch

values = st.floats(-1e6, 1e6, allow_nan=False)


@given(values, values, st.sampled_from(["similarity", "distance"]))
def test_a_bar_is_its_comparison(value: float, x: float, measure: Any) -> None:
    """Similarity: met at `x >= value`; distance: at `x <= value`; the score
    orders closer first either way, and a similarity's score is `x` itself (so
    Jaccard's rule, written on scores, is the plain comparison, bit for bit)."""
    bar = Bar(value, measure)
    assert bar.meets(x) == (x >= value if measure == "similarity" else x <= value)
    assert bar.meets(value)
    assert bar.measured(bar.score(x)) == x  # (an estimate in score units reads back)
    if measure == "similarity":
        assert bar.score(x) == x and bar.floor == value
    else:
        assert bar.score(x) == -x


@given(values, values, st.sampled_from(["similarity", "distance"]))
def test_better_is_strictly_closer(x: float, y: float, measure: Any) -> None:
    bar = Bar(0.5, measure)
    closer = x > y if measure == "similarity" else x < y
    assert bar.better(x, y) == closer
    assert not (bar.better(x, y) and bar.better(y, x))


@dataclass(frozen=True)
class Case:
    """A family under test: how to draw a batch of its representations, and how to
    turn one item of a batch into what `exact` measures."""

    family: LshFamily[Any, Any]
    batches: st.SearchStrategy[Any]
    rep: Callable[[Any, int], Any]
    size: Callable[[Any], int]


def _element_batches() -> st.SearchStrategy[ShingleBatch]:
    """Ragged batches of 64-bit element hashes from a small universe (so items
    overlap), empty items included."""
    item = st.lists(st.integers(0, 40).map(lambda v: (v * 0x9E3779B97F4A7C15) % 2**64), max_size=30)

    def batch(items: list[list[int]]) -> ShingleBatch:
        counts = np.array([len(x) for x in items], dtype=np.int64)
        flat = np.array([v for x in items for v in x], dtype=np.uint64)
        return ShingleBatch(flat, offsets_of(counts))

    return st.lists(item, min_size=1, max_size=8).map(batch)


def _elements(batch: ShingleBatch, i: int) -> Any:
    return MinHashJaccard.elements(batch.of(i))


def _bit_batches(num_bits: int) -> st.SearchStrategy[np.ndarray]:
    """(n, N/8) packed bit strings: a few bases, each item a base with a few bits
    flipped (so items lie near each other as well as far apart)."""
    base = st.binary(min_size=num_bits // 8, max_size=num_bits // 8)
    flips = st.lists(st.integers(0, num_bits - 1), max_size=6)

    def batch(bases: list[bytes], items: list[tuple[int, list[int]]]) -> np.ndarray:
        rows = np.frombuffer(b"".join(bases[k % len(bases)] for k, _ in items), np.uint8)
        rows = rows.reshape(len(items), num_bits // 8).copy()
        for row, (_, bits) in zip(rows, items, strict=True):
            for b in bits:
                row[b >> 3] ^= np.uint8(0x80 >> (b & 7))
        return rows

    items = st.lists(st.tuples(st.integers(0, 3), flips), min_size=1, max_size=8)
    return st.builds(batch, st.lists(base, min_size=1, max_size=3), items)


def _vector_batches(dim: int) -> st.SearchStrategy[np.ndarray]:
    """(n, D) float32 vectors: a few integer bases, each item a base moved by a unit
    in a few coordinates (so items lie near each other as well as far apart, and two
    different items never measure as the same one), zero vectors possible."""
    base = st.lists(st.integers(-5, 5), min_size=dim, max_size=dim)
    moves = st.lists(st.tuples(st.integers(0, dim - 1), st.sampled_from([-1, 1])), max_size=3)

    def batch(bases: list[list[int]], items: list[tuple[int, list[tuple[int, int]]]]) -> Any:
        rows = np.array([bases[k % len(bases)] for k, _ in items], dtype=np.float32)
        for row, (_, step) in zip(rows, items, strict=True):
            for j, by in step:
                row[j] += by
        return rows

    items = st.lists(st.tuples(st.integers(0, 3), moves), min_size=1, max_size=8)
    return st.builds(batch, st.lists(base, min_size=1, max_size=3), items)


FAMILIES = [
    Case(
        MinHashJaccard(128, 18, 7, 1), _element_batches(), _elements, lambda b: len(b.offsets) - 1
    ),
    Case(MinHashJaccard(64, 8, 8, 99), _element_batches(), _elements, lambda b: len(b.offsets) - 1),
    Case(BitSampling(64, 8, 16, 1), _bit_batches(64), lambda b, i: b[i], len),
    Case(BitSampling(256, 11, 22, 7), _bit_batches(256), lambda b, i: b[i], len),
    Case(RandomHyperplanes(16, 256, 23, 11, 1), _vector_batches(16), lambda b, i: b[i], len),
    Case(RandomHyperplanes(5, 64, 8, 8, 3), _vector_batches(5), lambda b, i: b[i], len),
    Case(PStable(16, 256, 32, 8, 1, 4.0), _vector_batches(16), lambda b, i: b[i], len),
    Case(PStable(5, 64, 16, 4, 3, 0.5), _vector_batches(5), lambda b, i: b[i], len),
]
ids = [f"{c.family.name}-{c.family.num_perm}-{c.family.bands}" for c in FAMILIES]


@pytest.mark.parametrize("case", FAMILIES, ids=ids)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_sketches_have_the_shapes_and_keys_of_the_contract(case: Case, data: st.DataObject) -> None:
    """(n, K) uint16 signatures; n x bands 8-byte big-endian keys, those of
    `band_keys` on the signatures (a stored signature gives its postings back)."""
    f = case.family
    batch = data.draw(case.batches)
    n = case.size(batch)
    got = f.sketch(batch)
    assert got.sigs.shape == (n, f.num_perm) and got.sigs.dtype == np.uint16
    assert len(got.keys) == n * f.bands * 8
    assert f.band_keys(got.sigs).shape == (n, f.bands)
    assert f.band_keys(got.sigs).astype(">u8").tobytes() == got.keys


@pytest.mark.parametrize("case", FAMILIES, ids=ids)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_the_estimate_is_a_function_of_agreeing_positions(case: Case, data: st.DataObject) -> None:
    """`estimate` is `estimate_table` at the count of agreeing positions (what lets
    one compiled ranking serve every family), the table rises strictly, and
    `estimate_rows` gives the same numbers for many at once."""
    f = case.family
    sigs = f.sketch(data.draw(case.batches)).sigs
    table = f.estimate_table()
    assert table.shape == (f.num_perm + 1,) and np.all(np.diff(table) > 0)
    for i in range(len(sigs)):
        agree = (sigs == sigs[i]).sum(axis=1)
        assert np.array_equal(f.estimate(sigs[i], sigs), table[agree])
    rows = f.estimate_rows(sigs, np.broadcast_to(sigs, (len(sigs), *sigs.shape)))
    assert np.array_equal(rows, np.stack([f.estimate(s, sigs) for s in sigs]))


@pytest.mark.parametrize("case", FAMILIES, ids=ids)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_the_exact_measure_is_symmetric_and_closest_to_itself(
    case: Case, data: st.DataObject
) -> None:
    f = case.family
    batch = data.draw(case.batches)
    reps = [case.rep(batch, i) for i in range(case.size(batch))]
    bar = f.bar(0.5)
    for a in reps:
        for b in reps:
            assert f.exact(a, b) == f.exact(b, a)
            if len(a):  # (an empty item is never measured: it is never a candidate)
                assert not bar.better(f.exact(a, b), f.exact(a, a))


@pytest.mark.parametrize("case", FAMILIES, ids=ids)
def test_a_family_is_a_picklable_value(case: Case) -> None:
    """Shipped to `--workers` processes: equal after a pickle, and its margin is
    non-negative at every threshold."""
    f = case.family
    assert pickle.loads(pickle.dumps(f)) == f
    assert all(f.margin(t) >= 0 for t in (0.1, 0.5, 0.8, 0.99))


@settings(max_examples=60, deadline=None)
@given(_element_batches())
def test_minhash_is_the_path_the_engine_always_took(batch: ShingleBatch) -> None:
    """Through the interface, MinHash/Jaccard is `signature.sketch`, `band_keys`,
    `estimate_jaccard`, `estimate_rows` and exact Jaccard,
    value for value."""
    f = MinHashJaccard(128, 18, 7, 3)
    got, want = f.sketch(batch), sketch(batch, 128, 3, 18, 7)
    assert np.array_equal(got.sigs, want.sigs) and got.keys == want.keys
    assert np.array_equal(f.band_keys(got.sigs), band_keys(got.sigs, 18, 7, 3))
    assert np.array_equal(
        f.estimate(got.sigs[0], got.sigs), estimate_jaccard(got.sigs[0], got.sigs)
    )
    many = np.broadcast_to(got.sigs, (len(got.sigs), *got.sigs.shape))
    assert np.array_equal(f.estimate_rows(got.sigs, many), estimate_rows(got.sigs, many))
    a, b = _elements(batch, 0), _elements(batch, len(batch.offsets) - 2)
    assert f.exact(a, b) == numpy_jaccard(a, b)
    for t in (0.5, 0.8, 0.9):
        assert f.bar(t) == Bar(t, "similarity")


@settings(max_examples=60, deadline=None)
@given(_bit_batches(64), st.integers(0, 2**32))
def test_bit_sampling_signatures_are_the_bits(batch: np.ndarray, seed: int) -> None:
    """The signature is the string's bits (most significant bit of byte 0 first, as
    hex reads); band j hashes the bits h(j r) .. h(j r + r - 1) with MinHash's keyed
    band hash, so two strings share band j exactly when they agree in all its bits
    (probability (1 - d/N)**r); the estimate is minus the distance, exactly, and the
    exact measure is the XOR's popcount."""
    f = BitSampling(64, 4, 16, seed)
    bits = np.unpackbits(batch, axis=1)
    got = f.sketch(batch)
    assert np.array_equal(got.sigs, bits.astype(np.uint16))
    assert np.array_equal(f.band_keys(got.sigs), band_keys(got.sigs[:, f.positions], 4, 16, seed))
    picked = bits[:, f.positions].reshape(len(batch), 4, 16)
    keys = f.band_keys(got.sigs)
    for i in range(len(batch)):
        want = (bits != bits[i]).sum(axis=1)
        assert np.array_equal(hamming_rows(batch[i], batch), want)
        assert [hamming(batch[i], row) for row in batch] == want.tolist()
        assert np.array_equal(f.estimate(got.sigs[i], got.sigs), -want.astype(np.float64))
        same_bits = (picked == picked[i]).all(axis=2)
        assert np.array_equal(keys == keys[i], same_bits)  # (no 64-bit key collides here)
    assert f.bar(3) == Bar(3, "distance") and f.bar(3).meets(3) and not f.bar(3).meets(4)


def test_bit_sampling_positions_are_uniform_and_seeded() -> None:
    """h is uniform over the N positions (a chi-square test at 0.1% over 64,000
    draws) and a function of the seed alone."""
    f = BitSampling(64, 32, 32, 5)
    assert np.array_equal(f.positions, BitSampling(64, 32, 32, 5).positions)
    assert not np.array_equal(f.positions, BitSampling(64, 32, 32, 6).positions)
    counts = np.zeros(64)
    for seed in range(64):
        counts += np.bincount(BitSampling(64, 1, 1000, seed).positions, minlength=64)
    expected = counts.sum() / 64
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 103.4  # the 99.9% point of chi-square with 63 degrees of freedom
