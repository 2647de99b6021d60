"""The compiled kernels (streamdedup/kernels/) against the numpy code they mirror,
on the same inputs, and their behaviour on inputs the numpy code never sees.

The modules' own tests (test_shingle, test_signature, test_jaccard) already run
every check against the definitions on both; here the two are held to each other
directly, bit for bit, including what an index stores."""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from streamdedup.config import ShingleSpec
from streamdedup.engine.deduplicator import Deduplicator
from streamdedup.sketch.jaccard import exact_jaccard
from streamdedup.sketch.shingle import ShingleBatch, Shingler, normalise_utf8
from streamdedup.sketch.signature import (
    FINGERPRINT_BITS,
    FingerprintSets,
    estimate_jaccard,
    probe_table,
    rank_gathered,
    rank_table,
    ranks_of,
    signatures,
    sketch,
    sketch_numpy,
)
from streamdedup.sketch.words import WordTable
from streamdedup.store.index import Index
from tests.support.kernels import compiled, needs_compiled, numpy_code

KEY = bytes(range(16))
WORD_KEY = (3, 5, 7, 11)  # token base and start, window base and start: one key


def test_the_kernels_are_built_where_required() -> None:
    """CI sets STREAMDEDUP_REQUIRE_KERNELS=1: there a failed build fails the run."""
    if compiled is None and not os.environ.get("STREAMDEDUP_REQUIRE_KERNELS"):
        pytest.skip("compiled kernels not built (no C compiler at install)")
    assert compiled is not None


# ------------------------------------------------------------------ shingling

texts = st.lists(
    st.one_of(
        st.text(max_size=300),
        st.text(alphabet=st.sampled_from("ab_ 9\u00e9\u0301\u4e2d\U0001f600.\n"), max_size=200),
        st.sampled_from(["x" * 63, "y" * 64, "z" * 65, "\u00e9" * 40, "w" * 9 + " "]),
    ),
    min_size=1,
    max_size=12,
)


@needs_compiled
@settings(max_examples=80)  # generating the texts is the cost; test_shingle checks both more
@given(texts, st.sampled_from([1, 2, 5, 9, 20]))
@example(["a" * 62 + "\u00e9\u00e9 b", "\u4e2d" * 30], 2)  # characters across 64-byte blocks
@example(["", "   ", "", "one"], 1)  # empty documents around a token
def test_word_shingles_equal_numpy(docs: list[str], k: int) -> None:
    encoded = [normalise_utf8(t) for t in docs]
    spec = ShingleSpec("word", k)
    got = Shingler(spec, KEY).batch(None, encoded)
    with numpy_code():
        want = Shingler(spec, KEY).batch(None, encoded)
    assert np.array_equal(got.offsets, want.offsets)
    assert np.array_equal(got.hashes, want.hashes)


@needs_compiled
@settings(max_examples=80)
@given(st.lists(st.text(max_size=80), min_size=1, max_size=8), st.sampled_from([1, 3, 5, 9, 20]))
@example(["", "a", "\x00\x00b", "\U0010ffff" * 30], 3)  # empty, zero code points, the top
def test_char_windows_equal_numpy(docs: list[str], k: int) -> None:
    spec = ShingleSpec("char", k)
    got = Shingler(spec, KEY).batch(docs)
    with numpy_code():
        want = Shingler(spec, KEY).batch(docs)
    assert np.array_equal(got.offsets, want.offsets)
    assert np.array_equal(got.hashes, want.hashes)


@needs_compiled
def test_ascii_word_class_is_re_word() -> None:
    """The kernel classifies ASCII by value: [0-9A-Za-z_] must be exactly `re`'s \\w."""
    table = WordTable().is_word
    assert compiled is not None
    for c in range(128):
        got = compiled.word_shingles(b"\x00" + bytes([c]), table, np.array([2]), 1, WORD_KEY)
        assert not isinstance(got, int)
        assert (len(got[0]) == 8) == bool(re.fullmatch(r"\w", chr(c))), hex(c)


@needs_compiled
def test_a_code_point_past_the_table_asks_for_it() -> None:
    assert compiled is not None
    table = WordTable()
    data = b"\x00ab \xf0\x9d\x94\x98x"  # U+1D518, a letter, past the first table block
    assert (
        compiled.word_shingles(data, table.is_word, np.array([len(data)]), 1, WORD_KEY) == 0x1D518
    )
    table.grow(0x1D518)
    got = compiled.word_shingles(data, table.is_word, np.array([len(data)]), 1, WORD_KEY)
    assert not isinstance(got, int)
    assert np.frombuffer(got[1], dtype=np.int64).tolist() == [2]  # "ab", "\U0001d518x"


@needs_compiled
def test_bytes_past_unicode_are_not_word_characters() -> None:
    """No encoder writes them, but the kernel must not ask for a table past U+10FFFF."""
    assert compiled is not None
    data = b"\x00ab\xf7\xbf\xbf\xbfcd"  # a 4-byte form of 0x1FFFFF
    got = compiled.word_shingles(data, WordTable().is_word, np.array([len(data)]), 1, WORD_KEY)
    assert not isinstance(got, int)
    assert np.frombuffer(got[1], dtype=np.int64).tolist() == [2]  # "ab", "cd"


@needs_compiled
def test_word_shingles_refuse_inconsistent_arguments() -> None:
    assert compiled is not None
    table = WordTable().is_word
    with pytest.raises(ValueError, match="doc_ends"):
        compiled.word_shingles(b"\x00ab", table, np.array([3, 2]), 1, WORD_KEY)
    with pytest.raises(ValueError, match="doc_ends"):
        compiled.word_shingles(b"\x00ab", table, np.array([9]), 1, WORD_KEY)
    with pytest.raises(ValueError, match="k must"):
        compiled.word_shingles(b"\x00ab", table, np.array([3]), 0, WORD_KEY)
    with pytest.raises(ValueError, match="8-byte"):
        compiled.word_shingles(b"\x00ab", table, b"\x03\x00", 1, WORD_KEY)


# ------------------------------------------------------- signatures and sets

fingerprint_sets = st.lists(
    st.lists(st.integers(0, (1 << FINGERPRINT_BITS) - 1), max_size=700, unique=True),
    min_size=1,
    max_size=8,
).map(
    lambda docs: FingerprintSets(
        np.concatenate([np.array(sorted(d), np.uint32) for d in docs]),
        np.concatenate([[0], np.cumsum([len(d) for d in docs])]).astype(np.int64),
    )
)


@needs_compiled
@given(fingerprint_sets, st.sampled_from([1, 3, 64, 128, 256]), st.integers(0, 2**32))
def test_signatures_equal_numpy(sets: FingerprintSets, num_perm: int, seed: int) -> None:
    got = signatures(sets, num_perm, seed)
    with numpy_code():
        want = signatures(sets, num_perm, seed)
    assert np.array_equal(got, want)


hash_sets = st.lists(st.integers(0, (1 << 64) - 1), max_size=700, unique=True).map(
    lambda v: np.array(sorted(v), np.uint64)
)


@needs_compiled
@given(hash_sets, hash_sets, st.data())
def test_exact_jaccard_equals_numpy(a: np.ndarray, b: np.ndarray, data: st.DataObject) -> None:
    shared = data.draw(st.sampled_from([a, b, np.union1d(a, b)]))  # overlapping sets too
    for x, y in [(a, b), (a, shared), (shared, b), (a, a)]:
        got = exact_jaccard(x, y)
        with numpy_code():
            want = exact_jaccard(x, y)
        assert got == want


@needs_compiled
def test_exact_jaccard_refuses_buffers_of_other_widths() -> None:
    """The kernel reads 8-byte items: a buffer of another length is an error, not a
    misread."""
    assert compiled is not None
    with pytest.raises(ValueError, match="8-byte items"):
        compiled.jaccard(b"\x00" * 12, np.zeros(2, np.uint64))


@needs_compiled
def test_probe_table_is_what_signatures_read() -> None:
    table = probe_table(128, 7)
    assert table.dtype == np.int64 and table.flags.c_contiguous and table.shape[0] == 128


# Shingle hashes as the shingler makes them: 64-bit, repeats within a document, empty
# documents, and documents of one to a few shingles (which fill few bins and densify).
hash_batches = st.lists(
    st.one_of(
        st.lists(st.integers(0, (1 << 64) - 1), max_size=3),
        st.lists(st.integers(0, (1 << 64) - 1), max_size=600),
        st.lists(st.sampled_from([0, 1, 2**63, 2**64 - 1, 12345]), max_size=8),
    ),
    min_size=1,
    max_size=8,
).map(
    lambda docs: ShingleBatch(
        np.array([h for d in docs for h in d], dtype=np.uint64),
        np.concatenate([[0], np.cumsum([len(d) for d in docs])]).astype(np.int64),
    )
)


@needs_compiled
@given(
    hash_batches,
    st.sampled_from([(1, 1, 1), (3, 1, 2), (64, 8, 8), (128, 18, 7), (256, 20, 10)]),
    st.integers(0, 2**32),
)
@example(ShingleBatch(np.zeros(0, np.uint64), np.zeros(3, np.int64)), (128, 18, 7), 1)
def test_fused_sketch_equals_sets_signatures_and_band_keys(
    batch: ShingleBatch, shape: tuple[int, int, int], seed: int
) -> None:
    """The fused kernel (no sets: a bin's minimum over all the hashes, repeats and all)
    against its definition, fingerprint sets -> signatures -> band keys in numpy."""
    num_perm, bands, rows = shape
    got = sketch(batch, num_perm, seed, bands, rows)
    with numpy_code():  # all numpy, densification included (the kernels share theirs)
        want = sketch_numpy(batch, num_perm, seed, bands, rows)
        fallback = sketch(batch, num_perm, seed, bands, rows)
    assert got.sigs.shape == want.sigs.shape == (len(batch.offsets) - 1, num_perm)
    assert np.array_equal(got.sigs, want.sigs)
    assert got.keys == want.keys == fallback.keys
    assert np.array_equal(fallback.sigs, want.sigs)


@needs_compiled
def test_fused_sketch_refuses_inconsistent_arguments() -> None:
    assert compiled is not None
    hashes, offsets = np.arange(5, dtype=np.uint64), np.array([0, 5], np.int64)
    probes, ranks = probe_table(16, 1), rank_table(16, 1)
    bases = np.zeros(5, np.uint64)
    with pytest.raises(ValueError, match="bands x rows"):
        compiled.sketch(hashes, offsets, 16, 7, probes, ranks, bases, 4)  # 5 x 4 > 16
    with pytest.raises(ValueError, match="offsets"):
        compiled.sketch(hashes, np.array([0, 6], np.int64), 16, 7, probes, ranks, bases, 2)
    with pytest.raises(ValueError, match="at least 1"):
        compiled.sketch(hashes, offsets, 16, 7, probes, ranks, bases, 0)
    with pytest.raises(ValueError, match="8-byte"):
        compiled.sketch(b"\x00" * 12, offsets, 16, 7, probes, ranks, bases, 2)


# ------------------------------------------------------------ a whole index


def _tables(path: Path) -> dict[str, list[tuple[bytes, bytes]]]:
    index = Index(path, readonly=True)
    try:
        return index.read(
            lambda t: {
                name: list(t.items(name))
                for name in ("ids", "docs", "sigs", "texts", "content", "postings")
            }
        )
    finally:
        index.close()


@needs_compiled
def test_an_index_is_byte_for_byte_the_same_either_way(tmp_path: Path) -> None:
    """Verdicts, and every stored table: an index written by one can be read by the other."""
    rng = np.random.default_rng(5)
    words = [f"w{i}" for i in range(400)] + ["caf\u00e9", "\u4e2d\u6587", "na\u00efve"]
    base = [" ".join(rng.choice(words, size=int(rng.integers(5, 400)))) for _ in range(150)]
    docs = [(f"d{i}", t) for i, t in enumerate(base)]
    docs += [(f"m{i}", t.replace("w1", "w2", 3) + " tail") for i, t in enumerate(base[::3])]
    verdicts = {}
    for name in ("compiled", "numpy"):
        with Deduplicator(tmp_path / name, threshold=0.7) as dedup:
            if name == "numpy":
                with numpy_code():
                    verdicts[name] = dedup.check_batch(docs)
            else:
                verdicts[name] = dedup.check_batch(docs)
    assert verdicts["compiled"] == verdicts["numpy"]
    assert sum(v.is_duplicate for v in verdicts["compiled"]) >= 40
    assert _tables(tmp_path / "compiled") == _tables(tmp_path / "numpy")


# ------------------------------------------------------------------ partitioning


@needs_compiled
@given(st.lists(st.binary(max_size=40), max_size=30), st.integers(1, 1000))
@example([b"", b"a", b"ab", b"abc", b"abcd", b"abcde", b"\xff" * 7], 7)
def test_kafka_partitions_are_the_default_partitioners(keys: list[bytes], n: int) -> None:
    """A verdict lands on the partition kafka-python (and the Java client) would pick
    for its key, so consumers keyed by document id see every verdict of an id on one
    partition whichever client wrote it."""
    from kafka.partitioner.default import murmur2

    assert compiled is not None
    assert compiled.kafka_partitions(keys, n) == [(murmur2(k) & 0x7FFFFFFF) % n for k in keys]


@needs_compiled
def test_kafka_partitions_refuses_nonsense() -> None:
    assert compiled is not None
    with pytest.raises(ValueError):
        compiled.kafka_partitions([b"a"], 0)
    with pytest.raises(TypeError):
        compiled.kafka_partitions(["text"], 3)  # type: ignore[list-item]


def _walk(values: list[int], num_perm: int, rows: list[list[int]]) -> list[int]:
    """The densification rule, plainly: each empty bin walks its probe sequence (its
    row) to the first filled bin (none on it: the first filled bin)."""
    minima: dict[int, int] = {}
    for v in sorted(values):
        minima.setdefault((v * num_perm) >> FINGERPRINT_BITS, v)
    out = []
    for b in range(num_perm):
        if b not in minima:
            src = next((c for c in rows[b] if c in minima), min(minima))
            out.append(minima[src] & 0xFFFF)
        else:
            out.append(minima[b] & 0xFFFF)
    return out


@functools.cache
def _real_table(num_perm: int, seed: int) -> tuple[np.ndarray, np.ndarray, list[list[int]]]:
    """A real probe table, its ranks and its rows as Python ints (a walk is a plain
    loop), made once per (K, seed): at K = 256 that takes a third of a second."""
    probes = probe_table(num_perm, seed)
    return probes, rank_table(num_perm, seed), probes.tolist()


@needs_compiled
@given(
    st.lists(st.integers(0, (1 << FINGERPRINT_BITS) - 1), min_size=1, max_size=40, unique=True),
    st.sampled_from([1, 2, 16, 64, 128, 256]),
    st.integers(0, 3),
    st.integers(0, 2**32),
    st.integers(1, 8),
    st.integers(1, 64),
)
def test_few_filled_bins_borrow_as_the_probe_walk_does(
    values: list[int], num_perm: int, table_seed: int, seed: int, alphabet: int, width: int
) -> None:
    """Short documents fill few bins, and the kernel then reads the rank table instead
    of walking the probes: the same bins must be borrowed, from the real tables (four
    seeds) and from random probe tables of any width that never visit some bins (a
    small `alphabet` of bins per row), where the walk falls back to the first filled
    bin."""
    assert compiled is not None
    rng = np.random.default_rng(seed)
    narrow = rng.integers(0, num_perm, size=(num_perm, alphabet))[
        np.arange(num_perm)[:, None], rng.integers(0, alphabet, size=(num_perm, width))
    ]
    narrow = np.ascontiguousarray(narrow, dtype=np.int64)
    values = sorted(values)
    offsets = np.array([0, len(values)], np.int64)
    for probes, ranks, rows in (
        _real_table(num_perm, table_seed),
        (narrow, ranks_of(narrow), narrow.tolist()),
    ):
        raw = compiled.signatures(np.array(values, np.uint32), offsets, num_perm, probes, ranks)
        assert np.frombuffer(raw, np.uint16).tolist() == _walk(values, num_perm, rows)


@functools.cache
def _sig_rows(k: int) -> st.SearchStrategy[tuple[npt.NDArray[np.uint16], npt.NDArray[np.uint16]]]:
    """A signature of length `k` and 1-20 rows of the matrix, over a tiny alphabet:
    made once a length (made afresh each example, they took 10-20% of the test's CPU)."""
    return st.tuples(
        hnp.arrays(np.uint16, k, elements=st.integers(0, 3)),
        hnp.arrays(
            np.uint16, st.tuples(st.integers(1, 20), st.just(k)), elements=st.integers(0, 3)
        ),
    )


_bars = st.sampled_from([-1.0, 0.0, 0.3, 0.5, 0.75, 1.0])


@needs_compiled
@settings(max_examples=300)
@given(
    # K up to 160: the compiled count's 8-lane steps and the lanes left after them
    st.integers(1, 160).flatmap(_sig_rows),
    st.data(),
)
def test_rank_gathered_equals_numpy(
    sig_rows: tuple[npt.NDArray[np.uint16], npt.NDArray[np.uint16]], data: st.DataObject
) -> None:
    """The same candidates in the same order (estimate down, docno up: few distinct
    values, so estimates tie often), the same estimates, value for value, the same
    count of those with a signature, for any bar and limit; and with `fill`, the same
    docnos left to read (no row, or past the slot table)."""
    sig = np.array(sig_rows[0], dtype=np.uint16)
    matrix = np.array(sig_rows[1], dtype=np.uint16)
    slot = np.array(
        data.draw(st.lists(st.integers(-1, len(matrix) - 1), max_size=40)), dtype=np.int32
    )
    docnos = np.array(
        sorted(data.draw(st.sets(st.integers(0, len(slot) + 3), max_size=30))), dtype=np.int64
    )
    bar = data.draw(_bars)
    limit = data.draw(st.integers(0, 35))
    fill = data.draw(st.booleans())
    got = rank_gathered(sig, matrix, slot, docnos, bar, limit, fill)
    with numpy_code():
        want = rank_gathered(sig, matrix, slot, docnos, bar, limit, fill)
    missing, kept, ranked, est = got
    assert (None if missing is None else missing.tolist()) == (
        None if want[0] is None else want[0].tolist()
    )
    assert (kept, ranked, est.tolist()) == (want[1], want[2], want[3].tolist())
    rows = np.array([slot[d] if d < len(slot) else -1 for d in docnos], dtype=np.int32)
    if fill and (rows < 0).any():
        assert missing is not None and missing.tolist() == docnos[rows < 0].tolist()
        return
    # what it means, spelled out: every candidate with a row, by estimate then docno
    has = rows >= 0
    full = estimate_jaccard(sig, matrix[rows[has]]).tolist()
    pairs = sorted(zip(full, docnos[has].tolist(), strict=True), key=lambda x: (-x[0], x[1]))
    pairs = [x for x in pairs if x[0] >= bar][:limit]
    assert kept == int(has.sum())
    assert ranked == [d for _, d in pairs] and est.tolist() == [e for e, _ in pairs]


@needs_compiled
def test_rank_refuses_what_the_engine_never_asks() -> None:
    assert compiled is not None
    matrix = np.zeros((3, 4), np.uint16)
    sig = np.zeros(4, np.uint16)
    slot = np.array([0, 3], np.int32)
    with pytest.raises(IndexError, match="outside"):
        compiled.rank(sig, matrix, slot, np.array([1], np.int64), 0.0, 5, False)
    with pytest.raises(ValueError, match="ascend"):
        compiled.rank(sig, matrix, slot, np.array([2, 0], np.int64), 0.0, 5, False)
    with pytest.raises(ValueError, match="ascend"):
        compiled.rank(sig, matrix, slot, np.array([-1], np.int64), 0.0, 5, False)
