"""The candidate search of a document (engine/verify.py, sketch/jaccard.py, the
`choose_packed`, `rank`, `gather` and `summarise` kernels): the compiled rule gives
exactly `choose_exact`'s answer -- the definition the backfill also applies --
however the candidates' sets are spread over the memory's dicts, and the default caps
leave a templated site's near duplicates to the exact check instead of cutting them
off."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamdedup import Deduplicator
from streamdedup.config import EngineOptions
from streamdedup.engine.prepare import own_hashes
from streamdedup.engine.verify import VerifyCache, choose_exact
from streamdedup.models import Document
from streamdedup.sketch.jaccard import (
    Choices,
    SetTable,
    choose_all,
    choose_ranked,
    summarise,
    summary_values,
)
from streamdedup.sketch.shingle import Shingler
from streamdedup.store.tables import Tables

# Sets over a small range overlap a lot, so similarities land on both sides of the bar;
# some values spread over the slices of the hash range (the top 8 bits), some crowd
# into one, so the slice filter is sometimes tight and sometimes loose.
values = st.one_of(st.integers(0, 60), st.integers(0, 60).map(lambda v: v << 58))
sets = st.lists(values, min_size=0, max_size=40, unique=True).map(
    lambda v: np.array(sorted(v), np.uint64)
)


def _summary(values: np.ndarray, counted: bool) -> bytes:
    """`summarise`, or the form of a set too large to count (no slice filter)."""
    if counted:
        return summarise(values)
    return np.array([0], "<u8").tobytes() + values.astype("<u8").tobytes()


@st.composite
def searches(draw: st.DrawFn) -> tuple[object, ...]:
    n = draw(st.integers(1, 12))
    mine = draw(sets)

    def near() -> np.ndarray:  # mine with a few values dropped and a few added
        keep = [v for v in mine.tolist() if draw(st.integers(0, 9)) > 0]
        return np.array(sorted(set(keep) | set(draw(st.lists(values, max_size=3)))), np.uint64)

    theirs = [near() if draw(st.booleans()) else draw(sets) for _ in range(n)]
    est = np.array(sorted(draw(st.lists(st.floats(0, 1), min_size=n, max_size=n)), reverse=True))
    threshold = draw(st.sampled_from([0.3, 0.5, 0.8, 0.9]))
    margin = draw(st.sampled_from([0.0, 0.15, 0.5]))
    max_checks = draw(st.integers(0, n + 2))
    held = [draw(st.integers(0, 2)) for _ in range(n)]  # which dict holds it (2: none)
    counted = [draw(st.booleans()) for _ in range(n + 1)]
    tabled = draw(st.sampled_from([None, "some", "all"]))  # rows in a SetTable
    return mine, theirs, est, threshold, margin, max_checks, held, counted, tabled


@pytest.mark.usefixtures("kernel")
@given(searches())
def test_the_compiled_rule_is_choose_exact(search: tuple[object, ...]) -> None:
    """Resumed wherever a set is missing (the engine reads it, then calls again): the
    same best, similarity and check count as the definition, which tries every
    candidate in turn."""
    mine, theirs, est, threshold, margin, max_checks, held, counted, tabled = search
    assert isinstance(counted, list)
    assert isinstance(theirs, list) and isinstance(est, np.ndarray)
    assert isinstance(held, list)
    assert isinstance(mine, np.ndarray) and isinstance(max_checks, int)
    assert isinstance(threshold, float) and isinstance(margin, float)
    docnos = list(range(100, 100 + len(theirs)))
    order = list(range(len(theirs)))
    want = choose_exact(
        lambda: mine,
        lambda d: theirs[d - 100],
        docnos,
        est,
        order,
        threshold,
        margin,
        max_checks,
    )
    dicts: tuple[dict[int, bytes], ...] = ({}, {})
    table = None if tabled is None else SetTable()
    for d, where in zip(docnos, held, strict=True):
        if where < 2:
            dicts[where][d] = _summary(theirs[d - 100], counted[d - 100])
            if table is not None and (tabled == "all" or d % 2):
                table.put(d, dicts[where][d])  # (a set without counts gets no row)
    best, best_sim, checks, more, calls = -1, 0.0, 0, True, 0
    while more:
        best, best_sim, checks, more = choose_ranked(
            _summary(mine, counted[-1]),
            dicts,
            docnos,
            est,
            threshold,
            margin,
            max_checks,
            checks,
            best,
            best_sim,
            table,
        )
        calls += 1
        if more:  # the engine reads the missing set, then resumes
            assert docnos[checks] not in dicts[0] and docnos[checks] not in dicts[1]
            dicts[1][docnos[checks]] = _summary(theirs[checks], counted[checks])
            if table is not None:
                table.put(docnos[checks], dicts[1][docnos[checks]])
    got = (None if best < 0 else (best_sim, docnos[best]), checks)
    assert got == want
    assert calls <= 1 + held.count(2)


@pytest.mark.usefixtures("kernel")
@given(st.lists(searches(), min_size=1, max_size=5), st.sampled_from([0, 2, 40]))
def test_the_rule_over_a_batch_is_choose_exact_for_each(
    batch: list[tuple[object, ...]], max_checks: int
) -> None:
    """`choose_all` over several documents' candidates end to end, resumed wherever a
    set is missing (read, then the call goes on from that document): each document
    gets `choose_exact`'s best, similarity and check count; one table of rows for the
    whole batch (candidates of one document are never another's here)."""
    mines, ranked, ests, dicts, wants = [], [], [], ({}, {}), []
    table = SetTable() if any(b[-1] is not None for b in batch) else None
    theirs_of: dict[int, bytes] = {}
    threshold, margin = 0.0, 0.0
    for k, (mine, theirs, est, threshold, margin, _, held, counted, tabled) in enumerate(batch):
        assert isinstance(mine, np.ndarray) and isinstance(est, np.ndarray)
        assert isinstance(theirs, list) and isinstance(held, list) and isinstance(counted, list)
        assert isinstance(threshold, float) and isinstance(margin, float)
        threshold, margin = batch[0][3], batch[0][4]  # (one bar and margin a batch)
        assert isinstance(threshold, float) and isinstance(margin, float)
        docnos = list(range(100 * (k + 1), 100 * (k + 1) + len(theirs)))
        wants.append(
            choose_exact(
                lambda mine=mine: mine,
                lambda d, theirs=theirs, base=docnos[0]: theirs[d - base],
                docnos,
                est,
                list(range(len(theirs))),
                threshold,
                margin,
                max_checks,
            )
        )
        mines.append(_summary(mine, counted[-1]))
        ranked += docnos
        ests.append(est)
        for j, (d, where) in enumerate(zip(docnos, held, strict=True)):
            theirs_of[d] = _summary(theirs[j], counted[j])
            if where < 2:
                dicts[where][d] = theirs_of[d]
                if table is not None and (tabled == "all" or d % 2):
                    table.put(d, theirs_of[d])
    at = np.cumsum([0] + [len(e) for e in ests]).astype(np.int64)
    flat = np.array(ranked, np.int64)
    state = Choices.start(len(batch))
    j, calls = 0, 0
    while True:
        j = choose_all(
            mines,
            dicts,
            flat,
            np.concatenate(ests),
            at,
            threshold,
            margin,
            max_checks,
            state,
            j,
            table,
        )
        calls += 1
        if j == len(batch):
            break
        d = int(flat[at[j] + state.checks[j]])  # the engine reads the missing set
        assert d not in dicts[0] and d not in dicts[1]
        dicts[1][d] = theirs_of[d]
    got = [
        (None if b < 0 else (float(state.best_sim[k]), ranked[at[k] + b]), int(state.checks[k]))
        for k, b in enumerate(state.best.tolist())
    ]
    assert got == wants
    assert calls <= 1 + sum(b[6].count(2) for b in batch)  # type: ignore[attr-defined]


@pytest.mark.usefixtures("kernel")
@pytest.mark.parametrize("tabled", [False, True])
def test_a_candidate_left_half_way_is_one_that_could_not_pass(tabled: bool) -> None:
    """The merge stops early only on a proof: a candidate just at the bar is measured
    to the end and wins; one just under it loses, whatever the order of its values."""
    mine = np.arange(0, 100, dtype=np.uint64)
    at_bar = np.arange(0, 80, dtype=np.uint64)  # 80 / 100 = 0.8
    under = np.concatenate([np.arange(1, 80), [1000]]).astype(np.uint64)  # 79 / 101
    est = np.array([0.9, 0.9])
    sets = ({1: summarise(under), 2: summarise(at_bar)},)
    table = None
    if tabled:  # rejected by its row: the bound there is tight for `at_bar`
        table = SetTable()
        for d, got in sets[0].items():
            table.put(d, got)
    got = choose_ranked(summarise(mine), sets, [1, 2], est, 0.8, 0.2, 10, table=table)
    assert got == (1, 0.8, 2, False)


def test_refused_when_the_arrays_disagree() -> None:
    from streamdedup import kernels

    native = kernels.load("compiled")
    if native is None:
        pytest.skip("the compiled kernels were not built")
    one, mine = np.ones(1, dtype=np.float64), summarise(np.zeros(0, np.uint64))
    with pytest.raises(ValueError, match="disagree"):
        native.choose_packed(mine, ({},), [1, 2], one, 0.8, 0.1, 5, 0, -1, 0.0)
    with pytest.raises(TypeError, match="tuple of dicts"):
        native.choose_packed(mine, ([],), [1], one, 0.8, 0.1, 5, 0, -1, 0.0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="must be bytes"):
        native.choose_packed(
            mine, ({1: np.zeros(0, np.uint64)},), [1], one, 0.8, 0.1, 5, 0, -1, 0.0
        )  # type: ignore[dict-item]
    for wrong in (b"", mine[:-1], np.array([7], "<u8").tobytes() + mine[8:]):
        with pytest.raises(ValueError, match="layout"):
            native.choose_packed(mine, ({1: wrong},), [1], one, 0.8, 0.1, 5, 0, -1, 0.0)
    # the batch form: lengths, offsets and states checked before any is used
    ranked, at = np.array([1], np.int64), np.array([0, 1], np.int64)

    def batch(
        args: dict[int, object] | None = None,
        state: dict[int, object] | None = None,
        first: int = 0,
    ) -> int:
        """choose_batch on one document with one candidate, some arguments changed."""
        a = [[mine], ({},), ranked, one, at, 0.8, 0.1, 5]
        s = [np.full(1, -1, np.int64), np.zeros(1), np.zeros(1, np.int64)]
        for k, v in (args or {}).items():
            a[k] = v
        for k, v in (state or {}).items():
            s[k] = v
        return native.choose_batch(*a, *s, first)  # type: ignore[arg-type]

    assert batch() == 0  # its candidate's set is in no dict: document 0 wants it
    assert batch({1: ({1: mine},)}) == 1  # (both empty: J = 0, below the bar) all done
    with pytest.raises(ValueError, match="disagreeing"):
        batch({4: np.array([0, 2], np.int64)})  # an offset past the candidates
    with pytest.raises(ValueError, match="disagreeing"):
        batch({0: [mine, mine]})  # two documents, one's offsets
    with pytest.raises(ValueError, match="disagreeing"):
        batch(first=2)
    with pytest.raises(ValueError, match="out of range"):
        batch(state={0: np.ones(1, np.int64)})  # a best beyond its candidates
    with pytest.raises(ValueError, match="8-byte"):
        batch(state={2: np.zeros(1, np.int32)})
    with pytest.raises(BufferError):
        batch(state={1: b"\0" * 8})  # a state the call cannot write


def test_signatures_of_many_are_each_ones_signature(tmp_path: Path) -> None:
    """`Tables.signatures` (one call for a document's candidates) against `signature`
    one at a time, with document numbers that have none among them."""
    docs = [
        Document(f"d{i}", f"page {i} " + "shared words of a site template " * 8) for i in range(40)
    ]
    with Deduplicator(tmp_path / "idx", threshold=0.8) as dd:
        dd.check_batch(docs[:20])
        dd.check_batch(docs[20:])
        docnos = np.array([0, 3, 39, 7, 1000, 5, 5, 12], dtype=np.int64)

        def read(t: Tables) -> None:
            found, rows = t.signatures(docnos)
            for j, d in enumerate(docnos.tolist()):
                one = t.signature(d)
                assert found[j] == (one is not None)
                if one is not None:
                    assert rows[j].astype("<u2").tobytes() == one

        dd.index.read(read)


def test_exact_sets_of_a_batch_are_kept_only_once_it_commits(tmp_path: Path) -> None:
    """A run of the batch's transaction that does not commit (it is run again, or
    abandoned) leaves nothing behind: its documents' numbers may go to others."""
    with Deduplicator(tmp_path / "idx", threshold=0.8) as dd:
        p = dd.preparer.prepare([Document("a", "one two three four five six seven eight")])
        memory = VerifyCache(Shingler(dd.params.shingle, dd.params.hash_key))
        memory.clear(10)
        memory.remember(10, p, 0)
        assert memory.own(p, 0) is not None
        memory.remember(10, p, 0)  # stored: its own set is the batch's, pending
        assert 10 in memory.pending and 10 not in memory.exact
        memory.end_batch()
        memory.clear(11)  # the transaction ran again: the pending set is dropped
        memory.commit()
        assert 10 not in memory.exact
        memory.remember(10, p, 0)
        memory.own(p, 0)
        memory.remember(10, p, 0)
        memory.end_batch()
        memory.commit()  # committed: kept across batches
        assert 10 in memory.exact
        assert memory.tabled().rows[10] >= 0  # its row (`choose_ranked` filters by it)
        memory.forget(10)
        assert 10 not in memory.exact
        assert memory.table.rows[10] == -1


def test_rows_of_sets_let_go_reject_without_a_read_for_a_while(tmp_path: Path) -> None:
    """A set let go (`exact` full) keeps its table row, up to `orphan_rows` of them:
    a candidate its row proves below the bar is rejected without its set (no read
    asked for); one its row does not reject is asked for; a set read again owns its
    row once more; `forget` drops the row; past `orphan_rows`, the oldest rows go."""
    from streamdedup import kernels

    words = [f"w{j}" for j in range(400)]
    with Deduplicator(tmp_path / "idx", threshold=0.8) as dd:
        texts = [" ".join(words[: 60 + 4 * k]) for k in range(5)] + [" ".join(words[200:260])]
        p = dd.preparer.prepare([Document(f"d{k}", t) for k, t in enumerate(texts)])
        sets = [summarise(np.unique(own_hashes(p, k))) for k in range(6)]
        room = max(map(summary_values, sets))  # one set at a time
        memory = VerifyCache(
            Shingler(dd.params.shingle, dd.params.hash_key), exact_values=room, orphan_rows=2
        )
        memory.clear(100)

        def keep(d: int) -> None:
            memory._keep(d, sets[d])
            memory.tabled()

        for d in range(5):  # each set lets the one before it go
            keep(d)
        assert list(memory.exact) == [4] and list(memory._orphans) == [2, 3]
        assert (memory.table.rows[:5] >= 0).tolist() == [False, False, True, True, True]

        def asks(d: int, mine: bytes) -> bool:
            """Does the rule want candidate `d`'s set?"""
            sets_ = (memory.exact, memory.pending)
            est = np.ones(1)
            return choose_ranked(mine, sets_, [d], est, 0.8, 0.1, 5, 0, -1, 0.0, memory.tabled())[3]

        # disjoint: its row rejects it, no read (the numpy definition has no rows)
        assert asks(3, sets[5]) is (kernels.native is None)
        assert asks(3, sets[3])  # its row cannot reject its own set: read
        keep(3)  # read again: its set's row once more; 4 let go
        assert list(memory.exact) == [3] and list(memory._orphans) == [2, 4]
        memory.forget(2)
        assert memory.table.rows[2] == -1 and list(memory._orphans) == [4]
        keep(5)
        keep(0)  # 3 then 5 let go: 4's row, the oldest past two, dropped
        assert list(memory._orphans) == [3, 5]
        assert (memory.table.rows[[0, 3, 4, 5]] >= 0).tolist() == [True, True, False, True]


def test_a_set_table_row_is_its_sets_size_and_counts() -> None:
    """Rows of dropped sets are reused; a set's row holds its own size and counts;
    a set without counts gets none; sets put one by one or many at once (`put_many`,
    a docno twice among them, some with rows already) alike."""
    table = SetTable()
    rng = np.random.default_rng(5)
    kept: dict[int, bytes] = {}
    for step in range(3000):
        d = int(rng.integers(0, 2500))
        if d in kept and rng.random() < 0.5:
            table.drop(d)
            del kept[d]
        elif rng.random() < 0.2:  # a few at once
            many = [int(x) for x in rng.integers(0, 2500, int(rng.integers(0, 6)))]
            many += many[:1]
            for x in many:
                values = np.unique(rng.integers(0, 2**63, int(rng.integers(0, 50)), "u8"))
                kept.setdefault(x, summarise(values))
            table.put_many(many, [kept[x] for x in many])
        else:
            values = np.unique(rng.integers(0, 2**63, int(rng.integers(0, 50)), dtype=np.uint64))
            got = kept.setdefault(d, summarise(values))
            table.put(d, got)
        assert step < 100 or table.sizes.size <= 4096  # reused: no row per step
    uncounted = np.array([0], "<u8").tobytes()
    table.put(3000, uncounted)
    assert table.rows[3000] == -1
    rows = table.rows[list(kept)]
    assert len(set(rows.tolist())) == len(kept) and (rows >= 0).all()
    for d, got in kept.items():
        r = table.rows[d]
        assert table.sizes[r] == (len(got) - 8 - 256) // 8
        assert table.counts[r].tobytes() == got[8 : 8 + 256]


def _site(n: int, seed: int) -> list[Document]:
    """One templated site: a long shared template around short bodies, with edited
    re-emissions of earlier pages: the pages are about 0.7-0.8 similar through the
    template alone, so a re-emission's estimate does not stand out from its siblings',
    and they meet every sibling in their template-only buckets."""
    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(3000)]
    template = " ".join(rng.choice(vocab) for _ in range(300))
    bodies: list[str] = []
    out = []
    for i in range(n):
        if bodies and rng.random() < 0.35:
            words = rng.choice(bodies).split()
            for _ in range(rng.randint(4, 7)):  # edited: about 0.8-0.88 similar to it
                words[rng.randrange(len(words))] = rng.choice(vocab)
            body = " ".join(words)
        else:
            body = " ".join(rng.choice(vocab) for _ in range(rng.randint(40, 60)))
        bodies.append(body)
        out.append(Document(f"p{i}", f"{template[:900]} {body} {template[900:]}"))
    return out


def test_default_caps_leave_a_templated_site_to_the_exact_check(tmp_path: Path) -> None:
    """The same verdicts as with no caps at all, neither cap counted; the old caps
    (100 postings a bucket, 32 checks) shrunk to this stream's size do cut it short
    and lose near duplicates, so the test can tell the two apart."""
    docs = _site(400, seed=3)
    verdicts = {}
    runs = {
        "default": EngineOptions(),
        "none": EngineOptions(max_bucket_candidates=10**6, max_exact_checks=10**6),
        "tight": EngineOptions(max_bucket_candidates=5, max_exact_checks=2),
    }
    for name, options in runs.items():
        with Deduplicator(tmp_path / name, threshold=0.8, options=options) as dd:
            got = []
            for start in range(0, len(docs), 100):
                got += dd.check_batch(docs[start : start + 100])
            verdicts[name] = [(v.verdict, v.duplicate_of, v.similarity) for v in got]
            if name == "default":
                assert (dd.counters.bucket_capped, dd.counters.exact_capped) == (0, 0)
                assert dd.counters.most_candidates > 100  # a hot site: the old cap bit
    assert verdicts["default"] == verdicts["none"]
    duplicates = {name: sum(v[0] == "duplicate" for v in got) for name, got in verdicts.items()}
    assert duplicates["tight"] < duplicates["none"]


@pytest.mark.parametrize(
    "options",
    [
        EngineOptions(),
        EngineOptions(max_bucket_candidates=5, max_exact_checks=2),
        EngineOptions(max_bucket_candidates=1, max_exact_checks=0),
    ],
    ids=["default", "tight", "tightest"],
)
@pytest.mark.parametrize("verify", ["exact", "signature"])
@pytest.mark.parametrize("budget", [None, 3000], ids=["kept", "evicting"])
def test_the_compiled_search_counts_and_decides_as_numpy(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    options: EngineOptions,
    verify: str,
    budget: int | None,
) -> None:
    """The compiled candidate search (gather, rank, summarise, choose_packed) against
    the numpy and Python code it mirrors on a templated site, batch after batch (the
    batch's own documents among the candidates, earlier ones read from the index):
    the same verdicts, similarities and counters -- candidates, caps bitten, exact
    checks -- with caps that bite and caps that do not, and with room for a few dozen
    exact sets only (kept sets and their table rows dropped as they go)."""
    from streamdedup import kernels

    compiled = kernels.load("compiled")
    if compiled is None:
        pytest.skip("the compiled kernels were not built")
    # 150 pages in batches of 50 (it was 300 in 70s, 8 s of CPU, nearly all the numpy
    # run re-shingling the 23,000 sets let go that it read again): still a hot site,
    # every page a candidate of the next ones (most_candidates ~144, past the 32
    # checks that bring in the table), the tight caps still bite on ~140 pages, and the
    # small budget still lets sets go (both asserted below).
    docs = _site(150, seed=5)
    runs = {}
    for name, native in (("compiled", compiled), ("numpy", None)):
        monkeypatch.setattr(kernels, "native", native)
        with Deduplicator(tmp_path / name, threshold=0.8, verify=verify, options=options) as dd:
            if budget is not None:
                dd._memory._budget = budget  # (in 8-byte values: a page is about 700)
            got = []
            for start in range(0, len(docs), 50):
                got += dd.check_batch(docs[start : start + 50])
            c = dd.counters
            runs[name] = (
                [(v.verdict, v.duplicate_of, v.similarity) for v in got],
                (c.candidates, c.most_candidates, c.bucket_capped, c.exact_capped, c.exact_checks),
            )
            if native is not None and verify == "exact" and options.max_exact_checks > 32:
                assert dd._memory.table.sizes.any()  # the table was used
            if budget is not None and verify == "exact" and options.max_exact_checks:
                assert dd._memory._orphans  # sets were let go, their rows kept
            if options.max_bucket_candidates < 10:  # the tight caps bite
                assert c.bucket_capped and (c.exact_capped or verify == "signature")
    assert runs["compiled"] == runs["numpy"]
    if verify == "signature" or options.max_exact_checks:  # (0 checks: nothing passes)
        assert any(v[0] == "duplicate" for v in runs["compiled"][0])
