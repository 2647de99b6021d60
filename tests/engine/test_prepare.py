"""Pieces of the preparing stage that have a shortcut for short documents."""

from __future__ import annotations

import dataclasses
import pickle

import numpy as np
import zstandard
from hypothesis import given
from hypothesis import strategies as st

from streamdedup.config import IndexParams
from streamdedup.engine.compressed import (
    _ZSTD_MAGIC,
    RAW_TEXT_BELOW,
    TEXT_LEVEL,
    Texts,
    compress_texts,
    decompress_text,
)
from streamdedup.engine.jaccard_text import SMALL_SET
from streamdedup.engine.jaccard_text import distinct as _distinct
from streamdedup.engine.prepare import Preparer
from streamdedup.models import Document
from streamdedup.sketch.shingle import normalise_utf8


@given(
    st.lists(st.integers(0, 2**64 - 1), max_size=3 * SMALL_SET).flatmap(
        lambda values: (
            st.lists(st.sampled_from(values), max_size=3 * SMALL_SET) if values else st.just([])
        )
    )
)
def test_distinct_is_sorted_unique_either_way(values: list[int]) -> None:
    """A short document's set takes the Python path, a long one numpy's: the same
    sorted distinct uint64 array, repeats and values past 2**63 included."""
    got = _distinct(np.array(values, dtype=np.uint64))
    assert got.dtype == np.uint64
    assert got.tolist() == sorted(set(values))


# what is stored: normalised text as UTF-8 (`encode`: lone surrogates pass)
utf8 = st.text(max_size=1000).map(lambda t: t.encode("utf-8", "surrogatepass"))
texts = st.lists(utf8 | st.sampled_from([b"", b"a b c", b"x" * 5000]), max_size=12)


@given(texts, st.data())
def test_texts_are_compress_texts_whenever_read(raw: list[bytes], data: st.DataObject) -> None:
    """Those left for later or not, any subset read in any order, and the rest after
    a pickle (what a `--workers` process sends back): each the bytes `compress_texts`
    stores, each decompressing to its text."""
    want = compress_texts(raw)
    later = data.draw(st.sets(st.integers(0, max(len(raw) - 1, 0))))
    lazy = Texts(raw, later)
    assert len(lazy) == len(raw)
    order = data.draw(st.permutations(range(len(raw))))[: data.draw(st.integers(0, len(raw)))]
    for i in order:
        assert lazy[i] == want[i]
    shipped = pickle.loads(pickle.dumps(lazy))
    assert list(shipped) == list(lazy) == want
    assert [decompress_text(t) for t in shipped] == raw
    assert lazy[1:3] == want[1:3] and lazy == want


@given(texts, st.data())
def test_texts_taken_together_are_each_as_read(raw: list[bytes], data: st.DataObject) -> None:
    """`take` (the bulk store's pick of many) gives what indexing one by one gives,
    texts left for later included, in the order asked, repeats too."""
    later = data.draw(st.sets(st.integers(0, max(len(raw) - 1, 0))))
    at = data.draw(st.lists(st.integers(0, len(raw) - 1), max_size=8)) if raw else []
    assert Texts(raw, later).take(at) == [compress_texts(raw)[i] for i in at]


@given(utf8)
def test_short_texts_are_stored_as_they_are_and_the_rest_as_zstd_frames(raw: bytes) -> None:
    """Below `RAW_TEXT_BELOW` bytes zstd's frame only adds bytes; a stored text is
    told apart by zstd's magic number, which no UTF-8 text starts with."""
    stored = compress_texts([raw])[0]
    assert (stored == raw) == (len(raw) < RAW_TEXT_BELOW)
    assert stored.startswith(_ZSTD_MAGIC) == (len(raw) >= RAW_TEXT_BELOW)
    assert decompress_text(stored) == raw


def test_texts_stored_before_short_ones_were_kept_raw_still_read() -> None:
    """Indexes written earlier hold every text as a zstd frame, short ones too."""
    for raw in (b"", b"a b c", "caf\u00e9 ok".encode()):
        old = zstandard.ZstdCompressor(level=TEXT_LEVEL).compress(raw)
        assert decompress_text(old) == raw


def test_texts_left_for_later_are_compressed_only_when_read() -> None:
    lazy = Texts([b"one two three" * 9, b"four five", b"six" * 40], later={0, 2})
    assert lazy._done[0] is None and lazy._done[1] is not None
    assert lazy[2] == compress_texts([b"six" * 40])[0] and lazy._done[0] is None


def test_prepare_leaves_for_later_the_texts_the_engine_does_not_store() -> None:
    """Empty documents and exact copies within the batch (after normalising)."""
    docs = [Document(i, t) for i, t in enumerate(["A b c", "", "a B c", "d e", "A b c"])]
    p = Preparer(IndexParams()).prepare(docs)
    assert p.texts is not None
    assert [t is None for t in p.texts._done] == [False, True, True, False, True]
    assert decompress_text(p.texts[4]) == b"a b c"


def test_prepared_texts_are_the_compressed_normalised_texts() -> None:
    docs = [Document(1, "Caf\u00e9 OK  here"), Document(2, ""), Document(3, "A b c d e f")]
    p = Preparer(IndexParams()).prepare(docs)
    assert p.texts is not None
    assert [decompress_text(p.texts[i]) for i in (2, 0, 1)] == [
        normalise_utf8(docs[i].text) for i in (2, 0, 1)
    ]


def test_a_pickled_prepared_batch_is_the_same_batch() -> None:
    """What a `--workers` process sends back: every field as prepared here (the
    signature rows and band keys are shipped as arrays and cut again)."""
    docs = [Document(i, t) for i, t in enumerate(["A b c d e f g", "", "x y", "A b c d e f g"])]
    p = Preparer(IndexParams()).prepare(docs)
    back = pickle.loads(pickle.dumps(p, protocol=pickle.HIGHEST_PROTOCOL))
    for f in dataclasses.fields(p):
        mine, theirs = getattr(p, f.name), getattr(back, f.name)
        if f.name == "sigs":
            assert np.array_equal(mine, theirs) and theirs.dtype == np.uint16
        elif f.name == "hashes":
            assert all(np.array_equal(mine.of(i), theirs.of(i)) for i in range(len(docs)))
        else:
            assert mine == theirs, f.name
    assert len(back.band_keys[0]) == 18 and all(len(k) == 8 for k in back.band_keys[3])
    assert back.band_rows == [b"".join(keys) for keys in p.band_keys]
    empty = pickle.loads(pickle.dumps(Preparer(IndexParams()).prepare([])))
    assert empty.band_keys == [] and empty.sig_bytes == [] and empty.sigs.shape == (0, 128)
