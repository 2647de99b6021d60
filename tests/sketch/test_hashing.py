import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from streamdedup.sketch.hashing import (
    CHAR_BASE,
    MASK64,
    PowerTable,
    fmix64,
    fmix64_np,
    poly_hash,
    range_poly_hashes,
)

u64 = st.integers(min_value=0, max_value=MASK64)


@given(st.lists(u64, min_size=1, max_size=50))
def test_fmix64_numpy_matches_python(values: list[int]) -> None:
    got = fmix64_np(np.array(values, dtype=np.uint64)).tolist()
    assert got == [fmix64(v) for v in values]


def test_fmix64_is_a_bijection_on_a_sample() -> None:
    x = np.arange(100_000, dtype=np.uint64)
    assert len(np.unique(fmix64_np(x))) == len(x)


@given(
    st.lists(st.integers(min_value=0, max_value=0x10FFFF), min_size=1, max_size=200),
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
    got = range_poly_hashes(arr, starts, ends, PowerTable(CHAR_BASE)).tolist()
    assert got == [poly_hash(values[s:e], CHAR_BASE) for s, e in ranges]


def test_power_table_does_not_keep_outsized_tables() -> None:
    table = PowerTable(CHAR_BASE, keep=1000)
    pw, ipw = table.get(5000)
    assert len(pw) >= 5000
    assert int(pw[10]) * int(ipw[10]) % (1 << 64) == 1
    assert len(table.pw) <= 1000


@given(st.integers(min_value=0, max_value=MASK64), st.integers(min_value=1, max_value=300))
def test_power_table_holds_the_powers(base: int, n: int) -> None:
    pw, _ = PowerTable(base | 1).get(n)
    assert pw[:n].tolist() == [pow(base | 1, i, 1 << 64) for i in range(n)]
