"""The engine half of the similarity-family seam (engine/similarity.py), with
Jaccard on text shingles (engine/jaccard_text.py): through the interface it is the
path the engine took before the seam, value for value -- canonical bytes, sizes,
signatures, band keys, exact sets, stored and own sets alike -- and the exact-check
rule, written on `Bar` scores, picks what the plain comparison picked."""

from __future__ import annotations

import pickle

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from streamdedup.config import IndexParams, ShingleSpec
from streamdedup.engine.compressed import compress_texts
from streamdedup.engine.families import family_of
from streamdedup.engine.jaccard_text import JaccardText, TextItems, exact_shingles
from streamdedup.engine.prepare import Preparer, own_shingles, stored_band_keys
from streamdedup.engine.verify import choose_exact, exact_margin
from streamdedup.models import Document
from streamdedup.sketch.family import Bar
from streamdedup.sketch.jaccard import numpy_jaccard, summary_of, values_of
from streamdedup.sketch.shingle import Shingler, encode, normalise, normalise_utf8
from streamdedup.sketch.signature import band_keys, sketch

words = st.sampled_from(["alpha", "beta", "gamma", "delta", "Éclair", "ß", "x1", "  ", "\n"])
texts = st.lists(words, max_size=40).map(" ".join)
specs = st.sampled_from(
    [ShingleSpec.parse("word:5"), ShingleSpec.parse("word:2"), ShingleSpec.parse("char:4")]
)


@settings(max_examples=40, deadline=None)
@given(st.lists(texts, min_size=1, max_size=10), specs)
def test_jaccard_text_through_the_interface_is_the_old_path(
    batch: list[str], spec: ShingleSpec
) -> None:
    """`canonical` + `sketch` equal what the Preparer computed before the seam:
    normalised UTF-8, `Shingler.batch` under both keys, `signature.sketch`."""
    params = IndexParams(shingle=spec, seed=7)
    family = family_of(params)
    assert isinstance(family, JaccardText)
    items = family.canonical([Document(str(k), t) for k, t in enumerate(batch)])
    if spec.kind == "word":
        assert items.raw == [normalise_utf8(t) for t in batch]
        norm = None
    else:
        norm = [normalise(t) for t in batch]
        assert items.raw == [encode(t) for t in norm]
    got = family.sketch(items, slice(0, len(batch)), exact=True)
    shingled = Shingler(spec, params.hash_key).batch(norm, items.raw, exact=True)
    want = sketch(shingled, params.num_perm, params.seed, params.bands, params.rows)
    assert np.array_equal(got.sizes, shingled.counts)
    assert np.array_equal(got.sketches.sigs, want.sigs) and got.sketches.keys == want.keys
    assert got.exact is not None
    for j in range(len(batch)):
        assert np.array_equal(got.exact.of(j), shingled.exact_batch().of(j))


@settings(max_examples=30, deadline=None)
@given(st.lists(texts, min_size=1, max_size=8), specs, st.sets(st.integers(0, 7)))
def test_a_stored_item_checks_as_it_did_when_new(
    batch: list[str], spec: ShingleSpec, resent: set[int]
) -> None:
    """The exact set a stored item gives back (`kept_stored`, `exact_stored`, from
    its compressed canonical bytes) is the one it had when prepared (`kept_own`),
    and both are `summary_of` / the sorted distinct secret-keyed hashes; blanked
    (`without`) items are empty."""
    params = IndexParams(shingle=spec)
    family = family_of(params)
    items = family.canonical([Document(str(k), t) for k, t in enumerate(batch)])
    items = items.without(resent)
    assert isinstance(items, TextItems)
    got = family.sketch(items, slice(0, len(batch)), exact=True)
    assert got.exact is not None
    stored = compress_texts(items.raw)
    shingler = Shingler(spec, params.hash_key)
    for j in range(len(batch)):
        own = family.kept_own(got.exact, j)
        assert own == family.kept_stored(stored[j]) == summary_of(got.exact.of(j))
        assert [own] == family.kept_own_many(got.exact, [j])
        assert np.array_equal(values_of(own), family.exact_stored(stored[j]))
        assert np.array_equal(family.exact_stored(stored[j]), exact_shingles(shingler, stored[j]))
        assert family.kept_size(own) == len(own) // 8
        if j in resent:
            assert got.sizes[j] == 0 and items.raw[j] == b""


def test_the_preparer_obtains_its_family_and_ships_it() -> None:
    """The Preparer's family is the one the parameters name; pickled (to
    `--workers`) it prepares the same; the stored band keys of a signature are
    those the family's maths gives, and the margin the engine uses is the
    family's."""
    params = IndexParams()
    preparer = Preparer(params)
    docs = [Document("a", "one two three four five six"), Document("b", ""), Document("c", "x")]
    p = preparer.prepare(docs)
    again = pickle.loads(pickle.dumps(preparer)).prepare(docs)
    assert again.sig_bytes == p.sig_bytes and again.band_rows == p.band_rows
    assert p.shingles == [2, 0, 1]
    for i in range(len(docs)):
        keys = stored_band_keys(p.sig_bytes[i], params)
        want = band_keys(p.sigs[i : i + 1], params.bands, params.rows, params.seed)[0]
        assert keys == [int(k).to_bytes(8, "big") for k in want.tolist()]
        assert b"".join(keys) == p.band_rows[i]
    family = family_of(params)
    assert p.hashes is not None
    own = family.kept_own(p.hashes.parts[0], 0)
    assert own_shingles(p, 0).tolist() == values_of(own).tolist()
    for t in (0.5, 0.8, 0.95):
        assert family.lsh.margin(t) == exact_margin(t, params.num_perm)


dyadic = st.integers(0, 64).map(lambda k: k / 64)  # exact in binary: no rounding anywhere


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(dyadic, dyadic), max_size=12),
    dyadic,
    st.integers(0, 8).map(lambda k: k / 64),
    st.integers(0, 14),
)
def test_the_rule_on_scores_is_the_comparison_for_either_measure(
    cands: list[tuple[float, float]], threshold: float, margin: float, max_checks: int
) -> None:
    """`choose_exact` written on `Bar` scores: with a plain threshold it is the old
    rule (`sim >= threshold`, best highest, stop below `floor - margin`); a distance
    bar over the same candidates as distances 1 - s and estimates in score units
    (s - 1) makes the same checks and picks the same candidate, at distance 1 - s."""
    cands = sorted(cands, key=lambda c: -c[1])  # ranked by estimate
    docnos = list(range(len(cands)))
    sims = [s for s, _ in cands]
    est = np.array([e for _, e in cands], dtype=np.float64)
    order = list(range(len(cands)))

    def old_rule() -> tuple[tuple[float, int] | None, int]:
        best: tuple[float, int] | None = None
        for checks, j in enumerate(order):
            floor = threshold if best is None else best[0]
            if checks >= max_checks or est[j] < floor - margin:
                return best, checks
            if sims[j] >= threshold and (best is None or sims[j] > best[0]):
                best = (sims[j], j)
        return best, len(order)

    def mine() -> int:
        return -1

    got = choose_exact(
        mine, lambda d: d, docnos, est, order, threshold, margin, max_checks, lambda _, d: sims[d]
    )
    assert got == old_rule()
    far = choose_exact(
        mine,
        lambda d: d,
        docnos,
        est - 1.0,
        order,
        Bar(1.0 - threshold, "distance"),
        margin,
        max_checks,
        lambda _, d: 1.0 - sims[d],
    )
    want_best, want_checks = old_rule()
    assert far[1] == want_checks
    assert far[0] == (None if want_best is None else (1.0 - want_best[0], want_best[1]))


@settings(max_examples=50, deadline=None)
@given(st.lists(texts, min_size=2, max_size=6))
def test_the_family_measure_is_jaccard_of_the_stored_sets(batch: list[str]) -> None:
    """`lsh.exact` over `exact_stored` sets is the Jaccard of the shingle sets,
    the definition (`numpy_jaccard`)."""
    params = IndexParams(shingle=ShingleSpec.parse("word:2"))
    family = family_of(params)
    stored = compress_texts(family.canonical([Document("d", t) for t in batch]).raw)
    sets = [family.exact_stored(s) for s in stored]
    for a in sets:
        for b in sets:
            assert family.lsh.exact(a, b) == numpy_jaccard(a, b)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(texts, min_size=2, max_size=10),
    st.data(),
    st.sampled_from([0.3, 0.5, 0.8]),
    st.integers(0, 12),
)
def test_the_familys_choose_is_choose_exact(
    batch: list[str], data: st.DataObject, threshold: float, max_checks: int
) -> None:
    """Through the interface, the compiled rule (`choose`, with and
    without the pre-filter table, resumed where a set is missing) gives
    `choose_exact`'s best, measure and check count, measured by `lsh.exact` on
    `exact_stored` sets."""
    params = IndexParams(shingle=ShingleSpec.parse("word:2"))
    family = family_of(params)
    items = family.canonical([Document(str(k), t) for k, t in enumerate(batch)])
    stored = compress_texts(items.raw)
    mine_text, cands = stored[0], stored[1:]
    docnos = list(range(10, 10 + len(cands)))
    est = np.sort(
        np.array(data.draw(st.lists(st.floats(0, 1), min_size=len(cands), max_size=len(cands))))
    )[::-1].copy()
    margin = 0.2
    want = choose_exact(
        lambda: family.exact_stored(mine_text),
        lambda d: family.exact_stored(cands[d - 10]),
        docnos,
        est,
        list(range(len(cands))),
        threshold,
        margin,
        max_checks,
        family.lsh.exact,
    )
    mine = family.kept_stored(mine_text)
    kept = {d: family.kept_stored(cands[d - 10]) for d in docnos}
    some = {d: k for d, k in kept.items() if data.draw(st.booleans())}
    bar = family.lsh.bar(threshold)
    for table in (None, family.table()):
        if table is not None:
            table.put_many(list(kept), list(kept.values()))
        best, sim, checks, more = -1, 0.0, 0, True
        loose: dict[int, bytes] = {}
        while more:
            best, sim, checks, more = family.choose(
                mine, (some, loose), docnos, est, bar, margin, max_checks, checks, best, sim, table
            )
            if more:
                loose[docnos[checks]] = kept[docnos[checks]]
        assert (None if best < 0 else (sim, docnos[best]), checks) == want
