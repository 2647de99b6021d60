import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from streamdedup.sketch.hashing import (
    MASK64,
    P,
    Poly,
    PowerTable,
    ShingleKey,
    cumsum_mod,
    fmix64,
    fmix64_np,
    mulmod_np,
    range_poly_hashes,
    reduce_np,
)

u64 = st.integers(min_value=0, max_value=MASK64)
field = st.integers(min_value=0, max_value=P - 1)
POLY = ShingleKey.of(bytes(range(16))).chars


@given(st.lists(u64, min_size=1, max_size=50))
def test_fmix64_numpy_matches_python(values: list[int]) -> None:
    got = fmix64_np(np.array(values, dtype=np.uint64)).tolist()
    assert got == [fmix64(v) for v in values]


def test_fmix64_is_a_bijection_on_a_sample() -> None:
    x = np.arange(100_000, dtype=np.uint64)
    assert len(np.unique(fmix64_np(x))) == len(x)


@given(st.lists(u64, min_size=1, max_size=50))
def test_reduce_is_mod_p(values: list[int]) -> None:
    assert reduce_np(np.array(values, dtype=np.uint64)).tolist() == [v % P for v in values]


@given(st.lists(st.tuples(field, field), min_size=1, max_size=50))
def test_mulmod_is_the_field_product(pairs: list[tuple[int, int]]) -> None:
    a = np.array([x for x, _ in pairs], dtype=np.uint64)
    b = np.array([y for _, y in pairs], dtype=np.uint64)
    assert mulmod_np(a, b).tolist() == [x * y % P for x, y in pairs]
    assert mulmod_np(a, np.uint64(pairs[0][1])).tolist() == [x * pairs[0][1] % P for x, _ in pairs]


def test_mulmod_at_the_edges() -> None:
    edge = [0, 1, 2, P - 2, P - 1, (1 << 32) - 1, 1 << 32, (1 << 60) + 12345]
    a = np.array([x for x in edge for _ in edge], dtype=np.uint64)
    b = np.array(edge * len(edge), dtype=np.uint64)
    assert mulmod_np(a, b).tolist() == [x * y % P for x in edge for y in edge]


@given(st.lists(field, max_size=300))
def test_cumsum_mod_is_running_sums(values: list[int]) -> None:
    got = cumsum_mod(np.array(values, dtype=np.uint64)).tolist()
    want, acc = [], 0
    for v in values:
        acc = (acc + v) % P
        want.append(acc)
    assert got == want


@given(
    st.lists(st.integers(min_value=0, max_value=0xFFFFFFFF), min_size=1, max_size=200),
    st.data(),
)
def test_range_hashes_match_reference(values: list[int], data: st.DataObject) -> None:
    n = len(values)
    pairs = data.draw(
        st.lists(st.tuples(st.integers(0, n - 1), st.integers(1, n)), min_size=1, max_size=20)
    )
    ranges = [(min(a, b - 1), max(a + 1, b)) for a, b in pairs]
    starts = np.array([s for s, _ in ranges], dtype=np.int64)
    ends = np.array([e for _, e in ranges], dtype=np.int64)
    arr = np.array(values, dtype=np.uint32)
    got = range_poly_hashes(arr, starts, ends, PowerTable(POLY)).tolist()
    assert got == [POLY.of(values[s:e]) for s, e in ranges]


def test_power_table_does_not_keep_outsized_tables() -> None:
    table = PowerTable(POLY, keep=1000)
    pw, ipw = table.get(5000)
    assert len(pw) >= 5000
    assert int(pw[10]) * int(ipw[10]) % P == 1
    assert len(table.pw) <= 1000


@given(field, st.integers(min_value=1, max_value=300))
def test_power_table_holds_the_powers(base: int, n: int) -> None:
    base = max(base, 2)
    pw, _ = PowerTable(Poly(base, 0)).get(n)
    assert pw[:n].tolist() == [pow(base, i, P) for i in range(n)]


@given(st.binary(min_size=16, max_size=16))
def test_keys_give_usable_polynomials(key: bytes) -> None:
    k = ShingleKey.of(key)
    for poly in (k.token, k.window, k.chars):
        assert 2 <= poly.base < P and 0 <= poly.start < P
    assert k == ShingleKey.of(key)  # derived, not drawn: the stored key is all there is


def test_a_start_value_tells_leading_zero_digits_apart() -> None:
    assert POLY.of([0, 5]) != POLY.of([5])
