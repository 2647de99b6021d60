"""Exact verification is exact: a `duplicate` verdict means the Jaccard of the 64-bit
shingle sets is at least the threshold, and the similarity reported is that Jaccard.

The fingerprint sets (24 bits a shingle) are only a filter; these tests build
documents whose fingerprints collide, found by brute force with the package's own
hashing, where the fingerprints alone give the wrong answer."""

from __future__ import annotations

import random
from collections import defaultdict

import lmdb
import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamdedup.config import IndexParams, ShingleSpec
from streamdedup.engine.deduplicator import Deduplicator
from streamdedup.errors import IndexOpenError
from streamdedup.models import Document
from streamdedup.ops.report import index_stats
from streamdedup.sketch import setcodec
from streamdedup.sketch.shingle import Shingler, encode, normalise, reference_shingles
from streamdedup.sketch.signature import fingerprint_sets

SEED = IndexParams().seed
SPEC = ShingleSpec()  # word:5


def fingerprints(texts: list[str], spec: ShingleSpec = SPEC) -> list[list[int]]:
    """Each text's fingerprint set, as the index computes it."""
    norm = [normalise(t) for t in texts]
    batch = Shingler(spec).batch(norm, [encode(t) for t in norm])
    sets = fingerprint_sets(batch, SEED)
    return [sets.of(i).tolist() for i in range(len(texts))]


def colliding(texts: list[str], spec: ShingleSpec = SPEC) -> list[tuple[str, str]]:
    """Pairs of one-shingle texts whose (distinct) shingles share a fingerprint."""
    by_fp: dict[int, list[str]] = defaultdict(list)
    for text, fps in zip(texts, fingerprints(texts, spec), strict=True):
        assert len(fps) == 1
        by_fp[fps[0]].append(text)
    return [(g[0], g[1]) for g in by_fp.values() if len(g) > 1]


def reference_jaccard(a: str, b: str) -> float:
    sa, sb = reference_shingles(a, SPEC), reference_shingles(b, SPEC)
    return len(sa & sb) / len(sa | sb)


def test_short_documents_with_colliding_fingerprints_are_unique(tmp_path) -> None:
    texts = [f"product sku {n}" for n in range(30_000)]  # one shingle each (3 tokens)
    pairs = colliding(texts)
    assert len(pairs) >= 5  # the birthday bound: about 27 expected
    docs = [Document(f"{i}-{j}", t) for i, pair in enumerate(pairs) for j, t in enumerate(pair)]
    with Deduplicator(tmp_path / "i") as dd:
        verdicts = dd.check_batch(docs[: len(docs) // 2])  # within one batch ...
        verdicts += dd.check_batch(docs[len(docs) // 2 :])  # ... and across batches
        # the fingerprints do collide: the same signature, so each pair is a candidate
        assert dd.counters.exact_checks >= len(pairs)
    assert [v.verdict for v in verdicts] == ["unique"] * len(docs)


def test_colliding_char_shingles_are_unique(tmp_path) -> None:
    """The same with `char` shingling (the stored text is decoded to be shingled)."""
    spec = ShingleSpec.parse("char:8")
    texts = [f"é{n:06d}" for n in range(30_000)]  # 7 characters: one shingle each
    pairs = colliding(texts, spec)
    assert pairs
    docs = [Document(f"{i}-{j}", t) for i, pair in enumerate(pairs) for j, t in enumerate(pair)]
    with Deduplicator(tmp_path / "i", shingle=spec) as dd:
        verdicts = dd.check_batch(docs[:1])
        verdicts += dd.check_batch(docs[1:])
    assert [v.verdict for v in verdicts] == ["unique"] * len(docs)


def _template_pages(
    rnd: random.Random, s1: str, s2: str, private_a: int, private_b: int
) -> tuple[str, str]:
    """Two pages of one template holding shingle s1; B also holds s2, whose
    fingerprint is s1's, so B's fingerprint set is one short and the pages' Jaccard
    on fingerprints is above the true one."""
    template = " ".join(f"tpl{i}" for i in range(900))
    a = f"{template} . {s1} . " + " ".join(f"pa{rnd.randrange(10**9)}" for _ in range(private_a))
    b = f"{template} . {s1} . {s2} . " + " ".join(
        f"pb{rnd.randrange(10**9)}" for _ in range(private_b)
    )
    return a, b


def _five_token_collision() -> tuple[str, str]:
    rnd = random.Random(5)
    texts = [" ".join(f"q{rnd.randrange(10**9)}" for _ in range(5)) for _ in range(20_000)]
    pairs = colliding(texts)
    assert pairs
    return pairs[0]


@pytest.mark.parametrize("side", ["below", "above"])
def test_template_pages_get_their_exact_jaccard(tmp_path, side: str) -> None:
    """Pages sharing a template with a fingerprint collision inside it: just below
    the threshold they are unique (the fingerprints say duplicate: 0.8992 against
    0.9001 when A has 10 and B 86 private tokens), just above they are duplicates
    with the exact Jaccard of the reference shingler."""
    threshold = 0.9
    s1, s2 = _five_token_collision()
    chosen = None
    for private_b in range(60, 120):
        a, b = _template_pages(random.Random(private_b), s1, s2, 10, private_b)
        exact = reference_jaccard(a, b)
        fa, fb = fingerprints([a, b])
        fp = len(set(fa) & set(fb)) / len(set(fa) | set(fb))
        if side == "below" and exact < threshold <= fp:
            chosen = (a, b, exact, fp)
        if side == "above" and threshold <= exact < fp - 1e-4 and chosen is None:
            chosen = (a, b, exact, fp)
    assert chosen is not None
    a, b, exact, fp = chosen
    with Deduplicator(tmp_path / "i", threshold=threshold) as dd:
        first, second = dd.check_batch([Document("a", a), Document("b", b)])
    with Deduplicator(tmp_path / "j", threshold=threshold) as dd:
        dd.check("a", a)
        third = dd.check("b", b)  # against the stored page, not the batch's copy
    assert first.verdict == "unique"
    for v in (second, third):
        if side == "below":
            assert v.verdict == "unique", (exact, fp)
        else:
            assert v.verdict == "duplicate" and v.duplicate_of == "a", (exact, fp)
            assert v.similarity == pytest.approx(exact, abs=1e-4)
            assert not v.exact


def test_the_best_match_is_the_highest_exact_jaccard(tmp_path) -> None:
    """Of two earlier pages, the one whose fingerprints look closer (a collision)
    is not the one reported when the other is closer on the shingles themselves."""
    s1, s2 = _five_token_collision()
    base = [f"w{i}" for i in range(400)]
    extra = [f"x{i}" for i in range(20)]
    new = " ".join([*base, s1, *extra])
    fake = " ".join([*base, s2, *extra])  # s2 is not s1, though its fingerprint is
    fake_exact = reference_jaccard(new, fake)
    (fake_fp,) = [
        len(set(x) & set(y)) / len(set(x) | set(y)) for x, y in [fingerprints([new, fake])]
    ]
    near = None
    for cut in range(1, 20):  # one token replaced in the middle, the last few cut
        words = [*base, s1, *extra][:-cut]
        words[200] = "changed"
        candidate = " ".join(words)
        if fake_exact < reference_jaccard(new, candidate) < fake_fp:
            near = candidate
            break
    assert near is not None
    with Deduplicator(tmp_path / "i", threshold=0.8) as dd:
        dd.check_batch([Document("fake", fake), Document("near", near)])
        v = dd.check("new", new)
    assert v.duplicate_of == "near", (fake_exact, fake_fp, reference_jaccard(new, near))
    assert v.similarity == pytest.approx(reference_jaccard(new, near), abs=1e-4)


@given(
    a=st.sets(st.integers(0, 200), max_size=60),
    b=st.sets(st.integers(0, 200), max_size=60),
    bits=st.integers(1, 7),
)
def test_the_fingerprint_bound_is_never_below_the_exact_jaccard(
    a: set[int], b: set[int], bits: int
) -> None:
    """With a fingerprint of a few bits (many collisions) the bound still holds."""
    f = lambda x: (x * 2654435761) % (1 << 32) >> (32 - bits)  # noqa: E731
    fa, fb = sorted({f(x) for x in a}), sorted({f(x) for x in b})
    fp_j = len(set(fa) & set(fb)) / len(set(fa) | set(fb)) if fa and fb else 0.0
    exact = len(a & b) / len(a | b) if a and b else 0.0
    bound = setcodec.jaccard_bound(fp_j, len(fa), len(fb), len(a))
    assert bound >= exact
    if not (a and b) or (a == b and len(fa) == len(a)):
        assert bound == exact  # nothing to loosen: no collisions, or an empty set


def test_an_index_of_format_5_is_refused_with_the_rebuild_command(tmp_path) -> None:
    """A format-5 index (no `texts` or `copies` table) is refused, read-write or
    read-only, by a message naming the formats and how to rebuild."""
    with Deduplicator(tmp_path / "i") as dd:
        dd.check("a", "one two three four five six")
        rec = dd.params.to_record()
    rec["format"] = 5
    env = lmdb.open(str(tmp_path / "i"), max_dbs=16)
    with env.begin(write=True) as txn:
        txn.put(b"params", msgpack.packb(rec), db=env.open_db(b"meta", txn=txn))
        for name in (b"texts", b"copies"):
            txn.drop(env.open_db(name, txn=txn), delete=True)
    env.close()
    for opener in (
        lambda: index_stats(str(tmp_path / "i")),
        lambda: Deduplicator(tmp_path / "i"),
    ):
        with pytest.raises(IndexOpenError) as err:
            opener()
        message = str(err.value)
        assert "format 5" in message and "format 6" in message
        assert "streamdedup replay --mode rebuild" in message
        assert "streamdedup dedup" in message
