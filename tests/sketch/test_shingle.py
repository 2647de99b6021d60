"""The batch shingler must give exactly the reference shingle sets."""

import re

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from streamdedup.config import ShingleSpec
from streamdedup.errors import ConfigError
from streamdedup.sketch.shingle import (
    Shingler,
    encode,
    normalise,
    normalise_utf8,
    reference_hash,
    reference_shingles,
    split_by_length,
)
from streamdedup.sketch.words import WordTable

# every test here runs on the compiled kernels and on the numpy code (conftest)
pytestmark = pytest.mark.usefixtures("kernel")

ADVERSARIAL = [
    "e\u0301",  # combining acute
    "\ufb01 \ufb03",  # ligatures fi, ffi
    "\uff11\uff12\uff13",  # full-width digits
    "\U0001f600\U0001f1eb\U0001f1f7",  # emoji, flag
    "\u0130stanbul \u00df \u03a3\u0391\u03a3 \u01c5",  # casefold specials
    "\u00a0\u2003\u3000\t\n\r\x0b\x0c\u2028\u2029\x1c\x85",  # whitespace variants
    "\u0627\u0644\u0639\u0631\u0628\u064a\u0629 \u4e2d\u6587 \u0939\u093f\u0928\u094d\u0926\u0940",
    "x_y snake_case __dunder__ 1_000",
    "\ud800 lone \udfff surrogates",
    "\x00nul\x00 and \x7f del",
    "\u2460\u2461 \u00b2 \u2155",  # circled digits, superscript, fractions
]

texts = st.lists(
    st.one_of(
        st.text(max_size=200),
        st.sampled_from(ADVERSARIAL),
        st.text(alphabet=st.sampled_from("ab \u00a0\u0301\ufb01\uff11_-."), max_size=60),
    ),
    min_size=1,
    max_size=6,
).map("".join)

specs = st.sampled_from(
    [
        ShingleSpec("word", 1),
        ShingleSpec("word", 2),
        ShingleSpec("word", 5),
        ShingleSpec("word", 9),  # above HORNER_MAX_K: prefix sums
        ShingleSpec("char", 1),
        ShingleSpec("char", 3),
        ShingleSpec("char", 5),
        ShingleSpec("char", 12),
    ]
)


KEY = bytes(range(16))
keys = st.binary(min_size=16, max_size=16)


def _check(batch_texts: list[str], spec: ShingleSpec, key: bytes = KEY) -> None:
    shingler = Shingler(spec, key)
    results = [shingler.batch([normalise(t) for t in batch_texts], exact=True)]
    if spec.kind == "word":  # the engine's path: UTF-8 bytes only
        encoded = [normalise_utf8(t) for t in batch_texts]
        results.append(Shingler(spec, key).batch(None, encoded, exact=True))
    expected = []  # (public, secret) hash sets of each text, straight from the definition
    for text in batch_texts:
        strings = reference_shingles(text, spec)
        public = {reference_hash(s, spec, shingler.public) for s in strings}
        secret = {reference_hash(s, spec, shingler.key) for s in strings}
        assert len(public) == len(secret) == len(strings)  # no collisions in practice
        expected.append((public, secret))
    for result in results:
        assert len(result.offsets) == len(batch_texts) + 1
        for i, (public, secret) in enumerate(expected):
            assert set(result.of(i).tolist()) == public
            assert set(result.exact_batch().of(i).tolist()) == secret


@given(texts)
@example("".join(ADVERSARIAL))
@example("caf\u00e9 \u00c9T\u00c9")  # a folding character among non-folding ones
@example("\u00e9\u1e9e")  # capital sharp s folds to "ss"
def test_normalise_utf8_is_encode_of_normalise(text: str) -> None:
    assert normalise_utf8(text) == encode(normalise(text))


@given(st.lists(texts, min_size=1, max_size=8), specs, keys)
@example(ADVERSARIAL, ShingleSpec("word", 5), KEY)
@example(ADVERSARIAL, ShingleSpec("char", 5), KEY)
@example(["", " ", "a", "a b", "\u00a0"], ShingleSpec("word", 2), KEY)
@example(["a" * 4, "b" * 5, "c" * 8, "d" * 9, "e" * 4000], ShingleSpec("word", 1), KEY)
def test_batch_equals_reference(batch_texts: list[str], spec: ShingleSpec, key: bytes) -> None:
    _check(batch_texts, spec, key)


@given(texts, specs, keys)
@example("".join(ADVERSARIAL), ShingleSpec("word", 5), KEY)
@example("", ShingleSpec("word", 5), KEY)
def test_one_document_equals_reference(text: str, spec: ShingleSpec, key: bytes) -> None:
    """`Shingler.one`, the single-document path exact verification takes, gives the
    reference shingle set too (and the batch's hashes, in the batch's order)."""
    shingler = Shingler(spec, key)
    norm = normalise(text)
    got = shingler.one(norm, normalise_utf8(text))
    expected = {reference_hash(s, spec, shingler.key) for s in reference_shingles(text, spec)}
    assert set(got.tolist()) == expected
    assert got.tolist() == shingler.batch([norm], [encode(norm)], exact=True).exact.tolist()


def test_ascii_and_unicode_documents_in_one_batch() -> None:
    _check(["plain ascii words here and more", *ADVERSARIAL, "back to ascii"], ShingleSpec())


def test_batches_larger_than_one_chunk(monkeypatch: pytest.MonkeyPatch) -> None:
    import streamdedup.sketch.shingle as mod

    monkeypatch.setattr(mod, "CHUNK_CHARS", 50)
    docs = [f"document {i} " + "lorem ipsum dolor sit amet " * (i % 5) for i in range(30)]
    _check(docs, ShingleSpec("word", 3))
    _check(docs, ShingleSpec("char", 4))


def test_short_documents_have_one_shingle() -> None:
    spec = ShingleSpec("word", 5)
    assert reference_shingles("Hello, World!", spec) == {"hello world"}
    assert reference_shingles("  ...  ", spec) == set()
    assert reference_shingles("abc", ShingleSpec("char", 5)) == {"abc"}


def test_normalisation_is_nfkc_then_casefold() -> None:
    assert normalise("\ufb01NE \uff11 STRASSE Stra\u00dfe") == "fine 1 strasse strasse"


def test_char_shingles_collapse_whitespace() -> None:
    assert reference_shingles(" a\u00a0\u00a0b\n c ", ShingleSpec("char", 3)) == {
        "a b",
        " b ",
        "b c",
    }


@pytest.mark.parametrize("bad", ["word", "word:0", "words:5", "char:x", "", "word:-1"])
def test_bad_specs_are_refused(bad: str) -> None:
    with pytest.raises(ConfigError, match="shingle spec"):
        ShingleSpec.parse(bad)


def test_spec_round_trips() -> None:
    assert str(ShingleSpec.parse(" char:7 ")) == "char:7"


def test_word_table_is_re_word_on_every_code_point() -> None:
    """Every byte of every character, surrogates included, gets `re`'s \\w of its
    character; the code points come highest first, so the table grows out of order."""
    text = np.arange(0x10FFFF, -1, -1, dtype="<u4").tobytes().decode("utf-32-le", "surrogatepass")
    data = text.encode("utf-8", "surrogatepass")
    got = WordTable().classify(data)
    raw = np.frombuffer(data, dtype=np.uint8)
    sizes = np.array([len(c.encode("utf-8", "surrogatepass")) for c in text])
    expected = np.zeros(len(text), dtype=np.bool_)
    expected[[m.start() for m in re.finditer(r"\w", text)]] = True
    assert np.array_equal(got, np.repeat(expected, sizes))
    assert np.count_nonzero((raw & 0xC0) != 0x80) == len(text)  # one lead byte each


def test_long_tokens_read_all_their_chunks() -> None:
    words = ["a" * n for n in range(1, 40)] + ["\u00e9" * 9, "x" * 1000 + "y", "x" * 1001]
    _check([" ".join(words), " ".join(reversed(words))], ShingleSpec("word", 1))
    _check([" ".join(words)], ShingleSpec("word", 3))


def _greedy_runs(lengths: list[int], budget: int) -> list[slice]:
    """The rule `split_by_length` follows, one document at a time: a run takes the
    next document (n characters and a separator) unless it is not empty and would
    then hold more than `budget`."""
    out, first, used = [], 0, 0
    for i, n in enumerate(lengths):
        if used and used + n > budget:
            out.append(slice(first, i))
            first, used = i, 0
        used += n + 1
    out.append(slice(first, len(lengths)))
    return out


@given(st.lists(st.integers(0, 40), max_size=60), st.integers(0, 80))
@example([], 10)
@example([100, 0, 0, 100], 10)  # documents over the budget on their own
@example([4, 5, 4, 5], 9)  # a run exactly full (4 + 1 + 5... without the last separator)
def test_split_by_length_is_the_greedy_rule(lengths: list[int], budget: int) -> None:
    got = split_by_length(lengths, budget)
    assert got == _greedy_runs(lengths, budget)
