"""The vector families' maths (sketch/projections.py): each family's row
probability is what its signatures show on pairs of known cosine or distance (the
curve `tune` draws is the index's), the exact measures are the double-precision
ones, and the estimate inverts the row probability."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamdedup.sketch.projections import (
    PStable,
    RandomHyperplanes,
    cosine,
    cosine_rows,
    euclidean,
    euclidean_rows,
    hyperplane_probability,
    pstable_probability,
)


def pair_at_angle(theta: float, dim: int, rng: np.random.Generator) -> tuple[np.ndarray, ...]:
    """Two unit vectors at angle `theta`, in a random plane."""
    q, _ = np.linalg.qr(rng.standard_normal((dim, 2)))
    a = q[:, 0]
    b = math.cos(theta) * q[:, 0] + math.sin(theta) * q[:, 1]
    return a.astype(np.float32), b.astype(np.float32)


@pytest.mark.parametrize("cos", [0.99, 0.9, 0.7, 0.3, 0.0, -0.5])
def test_hyperplanes_agree_with_probability_one_minus_theta_over_pi(cos: float) -> None:
    """Over many pairs at one angle, the share of agreeing positions is 1 - theta/pi
    within five standard deviations."""
    rng = np.random.default_rng(int((cos + 1) * 1000))
    f = RandomHyperplanes(24, 512, 32, 16, 7)
    pairs = [pair_at_angle(math.acos(cos), 24, rng) for _ in range(40)]
    a = f.signatures(np.stack([p[0] for p in pairs]))
    b = f.signatures(np.stack([p[1] for p in pairs]))
    share = float((a == b).mean())
    p = float(hyperplane_probability(cos))
    assert p == pytest.approx(1 - math.acos(cos) / math.pi)
    assert abs(share - p) <= 5 * math.sqrt(p * (1 - p) / a.size) + 1e-9


@pytest.mark.parametrize("ratio", [0.1, 0.5, 1.0, 2.0, 5.0])
def test_pstable_buckets_agree_with_the_formula(ratio: float) -> None:
    """Pairs at distance c = ratio x w share a bucket with probability p(c) (Datar et
    al. 2004) within five standard deviations; p(0) = 1 and p falls with c."""
    rng = np.random.default_rng(int(ratio * 100))
    width, dim = 2.0, 12
    f = PStable(dim, 512, 32, 16, 3, width)
    x = rng.standard_normal((40, dim)) * 10
    step = rng.standard_normal((40, dim))
    step *= (ratio * width) / np.linalg.norm(step, axis=1, keepdims=True)
    a, b = f.signatures(x.astype(np.float32)), f.signatures((x + step).astype(np.float32))
    share = float((a == b).mean())
    p = float(pstable_probability(ratio * width, width))
    assert abs(share - p) <= 5 * math.sqrt(p * (1 - p) / a.size) + 2e-3
    curve = pstable_probability(np.linspace(0, 20, 50), width)
    assert curve[0] == 1.0 and np.all(np.diff(curve) < 0)


@settings(max_examples=100, deadline=None)
@given(st.floats(0.01, 100.0), st.floats(0.01, 100.0))
def test_the_pstable_estimate_inverts_the_row_probability(width: float, distance: float) -> None:
    """The estimate at agreeing count a is the distance whose row probability is a/K:
    read back at the count nearest p(c) K, it is within a position's worth of c."""
    f = PStable(4, 128, 16, 8, 1, width)
    table = f.estimate_table()
    p = float(pstable_probability(distance, width))
    a = round(p * 128)
    if 0 < a < 128:
        back = -float(table[a])
        assert float(pstable_probability(back, width)) == pytest.approx(a / 128, abs=1e-9)
    assert table[-1] == 0.0 and np.all(np.isfinite(table))


finite = st.floats(-1e3, 1e3, width=32)


@settings(max_examples=100, deadline=None)
@given(
    st.integers(1, 40).flatmap(lambda d: st.tuples(*[st.lists(finite, min_size=d, max_size=d)] * 3))
)
def test_exact_measures_are_double_precision_of_the_float32_values(
    rows: tuple[list[float], list[float], list[float]],
) -> None:
    """cosine and L2 of float32 vectors as math.fsum computes them from the same
    values, one pair at a time and row by row."""
    a, b, c = (np.array(r, dtype=np.float32) for r in rows)
    x, y = [float(v) for v in a], [float(v) for v in b]
    dot = math.fsum(p * q for p, q in zip(x, y, strict=True))
    nx, ny = math.fsum(p * p for p in x), math.fsum(q * q for q in y)
    if nx and ny:
        assert cosine(a, b) == pytest.approx(dot / math.sqrt(nx * ny), abs=1e-9)
    else:
        assert cosine(a, b) == 0.0
    l2 = math.sqrt(math.fsum((p - q) ** 2 for p, q in zip(x, y, strict=True)))
    assert euclidean(a, b) == pytest.approx(l2, rel=1e-12, abs=1e-12)
    both = np.stack([b, c])
    assert cosine_rows(a, both).tolist() == pytest.approx([cosine(a, b), cosine(a, c)], abs=1e-12)
    assert euclidean_rows(a, both).tolist() == pytest.approx(
        [euclidean(a, b), euclidean(a, c)], rel=1e-12, abs=1e-12
    )


def test_projections_are_pure_functions_of_the_seed() -> None:
    a = RandomHyperplanes(8, 64, 8, 8, 5)
    assert np.array_equal(a.planes, RandomHyperplanes(8, 64, 8, 8, 5).planes)
    assert not np.array_equal(a.planes, RandomHyperplanes(8, 64, 8, 8, 6).planes)
    b = PStable(8, 64, 8, 8, 5, 1.0)
    assert np.array_equal(b.offsets, PStable(8, 64, 8, 8, 5, 1.0).offsets)
    assert b.offsets.min() >= 0.0 and b.offsets.max() < 1.0


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 50), st.integers(1, 70), st.integers(0, 2**32))
def test_a_pairs_measure_does_not_depend_on_the_rows_beside_it(dim: int, n: int, seed: int) -> None:
    """Bit for bit: a candidate's cosine and distance are the same measured alone or
    among others (a segment's answer and the writer's own index check different
    lists of candidates; BLAS would sum in another order)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(dim).astype(np.float32)
    ys = rng.standard_normal((n, dim)).astype(np.float32)
    many_c, many_d = cosine_rows(x, ys), euclidean_rows(x, ys)
    for i in range(n):
        assert many_c[i] == cosine(x, ys[i]) and many_d[i] == euclidean(x, ys[i])
