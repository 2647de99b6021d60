"""The batch's plain documents (new id, new content, no candidates) are decided and
stored in bulk (`Deduplicator._classify`, `_store_bulk`, `Tables.put_plain`); every
other document one by one.  The two paths must be indistinguishable: the same
verdicts, the same `changes` (content and order: a changelog mirrors them), the
same `touched` and outliers, and the same tables on disk, as an engine that takes
every document one by one (`bulk = False`).  Checked on real LMDB indexes, with
batches that mix plain documents with replays, replaced ids, exact copies, near
duplicates, empty and known (`resent`) documents."""

from __future__ import annotations

import random
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from streamdedup.config import EngineOptions, Verify
from streamdedup.engine.clock import quorum
from streamdedup.engine.deduplicator import Deduplicator
from streamdedup.models import Document, Verdict
from streamdedup.store.keys import MetaKey
from streamdedup.store.tables import DATA_TABLES, Tables
from tests.support.changelog import restore_from_changes

VOCAB = [f"w{i}" for i in range(300)]
T0 = 1_750_000_000_000


def _texts(seed: int) -> list[str]:
    """A pool of texts: distinct pages, near duplicates of them, one-liners that
    share words, and an empty one."""
    rnd = random.Random(seed)
    # the first six long enough that one word edited leaves them near (J > 0.8)
    base = [
        " ".join(rnd.choices(VOCAB, k=rnd.randint(80, 120) if i < 6 else rnd.randint(8, 60)))
        for i in range(10)
    ]
    near = []
    for t in base[:6]:
        words = t.split()
        words[rnd.randrange(len(words))] = "edited"
        near.append(" ".join(words))
    short = [" ".join(rnd.choices(VOCAB[:20], k=rnd.randint(1, 4))) for _ in range(6)]
    return [*base, *near, *short, "", "!!"]


def _tables(dd: Deduplicator) -> dict[str, Any]:
    def read(t: Tables) -> dict[str, Any]:
        out: dict[str, Any] = {n: list(t.items(n)) for n in DATA_TABLES if n != "postings"}
        out["postings"] = t.postings.live()
        for name in (MetaKey.NEXT_DOCNO, MetaKey.COUNTS, MetaKey.CLOCK, MetaKey.RECENT):
            out[name] = t.meta(name)
        return out

    return dd.index.read(read)


def _run(
    path: Path,
    batches: list[list[Document]],
    bulk: bool,
    options: EngineOptions | None = None,
    verify: Verify = "exact",
) -> tuple[list[Any], dict[str, Any], int]:
    """Each batch's verdicts, changes, touched ids and outliers; the tables at the
    end; how many documents went the bulk path."""
    seen: list[Any] = []
    with Deduplicator(path, options=options, verify=verify) as dd:
        dd.bulk = bulk
        for batch in batches:
            verdicts = dd.check_batch(batch)
            seen.append((verdicts, list(dd.changes), list(dd.changed_others), list(dd.outliers)))
        return seen, _tables(dd), dd.counters.bulk


def _both(
    batches: list[list[Document]], options: EngineOptions | None = None, verify: Verify = "exact"
) -> tuple[list[Any], int]:
    """The batches through an engine with the bulk path and one without: equal."""
    with tempfile.TemporaryDirectory(prefix="bulk-") as tmp:
        bulk, bulk_tables, plain = _run(Path(tmp) / "bulk", batches, True, options, verify)
        one, one_tables, none = _run(Path(tmp) / "one", batches, False, options, verify)
    assert none == 0
    assert bulk == one  # verdicts, changes (in order), touched, outliers
    assert bulk_tables == one_tables
    return bulk, plain


documents = st.lists(
    st.tuples(
        st.integers(0, 14),  # id: a small pool, so ids repeat within and across batches
        st.integers(0, 23),  # text from `_texts`
        st.one_of(st.none(), st.integers(-1, 50), st.just(10**9)),  # timestamp (minutes)
    ),
    min_size=1,
    max_size=40,
)


# 80 examples (was 120, 3 s of CPU): 25 ms an example, nearly all of it fixed cost --
# two new indexes opened, every table of both read back and compared -- where the
# property tests of the kernels that name larger counts take 3-7 ms an example.
@settings(max_examples=80, deadline=None)
@given(
    docs=documents,
    cuts=st.lists(st.integers(1, 40), min_size=1, max_size=6),
    seed=st.integers(0, 3),
    verify=st.sampled_from(["exact", "signature"]),
    # no window; a window of 20 minutes; one forgetting at most 2 documents a batch
    window=st.sampled_from([None, (20, 1000), (20, 2)]),
    # stream time: the newest timestamp; the median of 3; of 31 (the default)
    clock_window=st.sampled_from([1, 3, 31]),
)
def test_bulk_path_equals_one_by_one(
    docs: list[tuple[int, int, int | None]],
    cuts: list[int],
    seed: int,
    verify: Verify,
    window: tuple[int, int] | None,
    clock_window: int,
) -> None:
    texts = _texts(seed)
    stream = [
        Document(f"d{i}", texts[t], None if m is None else T0 + m * 60_000) for i, t, m in docs
    ]
    # the stream again after the first pass: replays, which `known` marks as resent
    stream = stream + stream[: len(stream) // 2]
    # the clock starts in the past, so an outlier is stored as of it, not of the
    # wall clock (which differs between the two runs)
    start = [Document(f"start{i}", "the stream starts", T0) for i in range(quorum(clock_window))]
    batches, at, k = [start], 0, 0
    while at < len(stream):
        size = cuts[k % len(cuts)]
        batches.append(stream[at : at + size])
        at, k = at + size, k + 1
    opts = (
        EngineOptions(clock_window=clock_window)
        if window is None
        else EngineOptions(
            ttl_ms=window[0] * 60_000, max_expire_per_batch=window[1], clock_window=clock_window
        )
    )
    _, plain = _both(batches, opts, verify=verify)
    event(f"plain documents: {'1' if plain == 1 else 'more than 1'}")


def test_a_batch_mixing_plain_and_other_documents() -> None:
    """Plain documents around every kind of other one in one batch: a replayed id,
    an id replaced with new content, an exact copy of a stored and of an earlier
    document of the batch, a near duplicate, an empty document."""
    texts = _texts(7)
    first = [Document("a", texts[0]), Document("b", texts[1]), Document("c", texts[2])]
    second = [
        Document("p1", texts[3]),
        Document("a", texts[0]),  # replay
        Document("p2", texts[4]),
        Document("b", texts[5]),  # replaced
        Document("x1", texts[2]),  # exact copy of a stored document
        Document("p3", texts[6]),
        Document("x2", texts[6]),  # exact copy of a plain document of the batch
        Document("n1", texts[10]),  # near duplicate of texts[0]
        Document("e", ""),
        Document("p4", texts[7]),
        Document("p1", texts[8]),  # p1 again, in the same batch: replaces it
        Document("p5", texts[9]),
    ]
    # a copy of a stored near duplicate: its cluster is the near duplicate's
    third = [Document("x3", texts[10]), Document("p6", texts[11])]
    seen, plain = _both([first, second, third])
    verdicts: list[Verdict] = seen[1][0]
    assert [v.verdict for v in verdicts] == [
        "unique",
        "unique",
        "unique",
        "unique",
        "duplicate",
        "unique",
        "duplicate",
        "duplicate",
        "unique",
        "unique",
        "unique",
        "unique",
    ]
    # first batch: all three; second: p2, p4, p5 plain, x1 a copy of a stored
    # document, p3 plain with its copy x2; not p1 (its id repeats), nor the others
    assert plain == 3 + 3 + 1 + 2 + 2
    x3 = seen[2][0][0]
    assert (x3.duplicate_of, x3.cluster, x3.exact) == ("n1", "a", True)


def test_plain_documents_carry_their_timestamps_and_outliers() -> None:
    """Without a window, timestamps are stored (expiry entries, the clock) and
    outliers corrected, for plain documents as for the others."""
    texts = _texts(3)
    batch = [
        Document("a", texts[0], T0),
        Document("b", texts[1], T0 + 5),
        Document("c", texts[2], 2 * 10**13),  # far in the future: an outlier
        Document("d", texts[3], -1),
        Document("e", texts[4], T0 + 1),
    ]
    seen, plain = _both([batch], EngineOptions(clock_window=1))  # "a" starts the clock
    assert plain == 5
    assert seen[0][3] == [(2, 2 * 10**13)]


def test_with_a_time_window_only_documents_it_cannot_reach_in_the_batch(tmp_path: Path) -> None:
    """With a window, documents stored as of a time the batch's last cutoff passes
    (here the first three: the batch spans more than the window) are checked one by
    one, as are copies of a stored owner the window reaches; the rest in bulk."""
    texts = _texts(5)
    minute = 60_000
    opts = EngineOptions(ttl_ms=30 * minute, clock_window=1)  # each message moves the clock
    first = [Document("old", texts[9], T0)]
    batch = [Document(f"d{i}", t, T0 + (i * 10 + 1) * minute) for i, t in enumerate(texts[:6])]
    batch.append(Document("copy", texts[9], T0 + 61 * minute))  # of "old": the window reaches it
    seen, plain = _both([first, batch], opts)
    assert plain == 1 + 3  # "old"; d3, d4, d5 (the last cutoff: 31 minutes)
    assert seen[1][0][-1].verdict == "unique"  # "old" expired before its copy came


def test_no_bulk_path_with_sealed_segments(tmp_path: Path) -> None:
    texts = _texts(6)
    with Deduplicator(tmp_path / "i") as dd:
        dd.check_batch([Document("a", texts[0])])
        assert dd.counters.bulk == 1
        dd.seal()
        dd.check_batch([Document(f"d{i}", t) for i, t in enumerate(texts[1:9])])
        assert dd.counters.bulk == 1


def test_a_known_document_that_changed_turns_the_bulk_path_off(tmp_path: Path) -> None:
    """A `resent` document whose stored content changed before its batch applies is
    prepared again inside the transaction, with a row no one foresaw: the batch's
    plain documents could meet it, so none is decided in bulk."""
    texts = _texts(8)
    with Deduplicator(tmp_path / "i") as dd:
        dd.check("x", texts[0])
        batch = [Document("x", texts[0]), Document("y", texts[1]), Document("z", texts[10])]
        prepared = dd.preparer.prepare(batch, known=dd.known)
        assert prepared.resent == {0}
        dd.check("x", texts[2])  # another writer changes "x" before the batch applies
        before = dd.counters.bulk
        x, y, z = dd.apply(prepared)
        assert dd.counters.bulk == before
    assert x.verdict == y.verdict == "unique"
    assert z.duplicate_of == "x"  # texts[10] is near texts[0]: found through x again


def test_a_rerun_transaction_after_map_full_gives_the_same_result(tmp_path: Path) -> None:
    """A batch larger than the map makes LMDB refuse it (MapFull): the transaction
    runs again in a grown map, and the bulk path starts over with it."""
    rnd = random.Random(2)
    pages = [" ".join(rnd.choices(VOCAB, k=400)) for _ in range(300)]
    batch = [Document(f"d{i}", t) for i, t in enumerate(pages)]
    opts = EngineOptions(map_size=1 << 18)
    seen, plain = _both([batch], opts)
    assert plain == 300
    assert len(seen[0][1]) == 300
    runs = []
    with Deduplicator(tmp_path / "i", options=opts) as dd:
        apply = dd._apply
        dd._apply = lambda t, parts: runs.append(1) or apply(t, parts)  # type: ignore[method-assign]
        dd.check_batch(batch)
    assert len(runs) > 1  # it did run again


@pytest.mark.parametrize("verify", ["exact", "signature"])
def test_changes_of_plain_documents_hold_their_data(tmp_path: Path, verify: str) -> None:
    texts = _texts(9)
    with Deduplicator(tmp_path / "i", verify=verify) as dd:  # type: ignore[arg-type]
        dd.check_batch([Document(f"d{i}", t) for i, t in enumerate(texts[:4])])
        assert dd.counters.bulk == 4
        for i, change in enumerate(dd.changes):
            assert change.docno == i and change.owns_content
            assert change.record is not None and change.record.doc_id == f"d{i}"
            assert change.signature is not None and len(change.signature) == 2 * 128
            assert (change.text is not None) == (verify == "exact")


def test_a_restore_from_the_changes_of_bulk_batches_reproduces_the_index(tmp_path: Path) -> None:
    """What a worker publishes to its changelog (`changes`) rebuilds the index, for
    batches mostly decided in bulk, with replaced ids and exact copies among them."""
    rnd = random.Random(5)
    texts = _texts(5)
    docs = [
        Document(f"d{rnd.randrange(i + 1)}" if rnd.random() < 0.05 else f"d{i}", rnd.choice(texts))
        for i in range(600)
    ]
    counters, _, _ = restore_from_changes(tmp_path, docs)
    assert counters.bulk > 300


# ------------------------------------------------------------ the bulk search


def _site_texts(seed: int) -> list[str]:
    """Pages as a templated crawl makes them: two site templates around short bodies
    (siblings share most of their buckets and sit below the threshold), edited
    re-emissions of those pages (near duplicates, some near the threshold), distinct
    pages and their edits, one-liners, an empty page."""
    rnd = random.Random(seed)
    templates = [rnd.choices(VOCAB, k=rnd.randint(40, 70)) for _ in range(2)]
    pages = []
    for j in range(14):
        body = rnd.choices(VOCAB, k=rnd.randint(8, 30))
        t = templates[j % 2]
        pages.append(" ".join(t[: len(t) // 2] + body + t[len(t) // 2 :]))
    pages += [" ".join(rnd.choices(VOCAB, k=rnd.randint(30, 90))) for _ in range(6)]
    edits = []
    for t in pages:
        words = t.split()
        for _ in range(rnd.randint(1, 4)):
            words[rnd.randrange(len(words))] = rnd.choice(["edited", "changed", "new"])
        edits.append(" ".join(words))
    short = [" ".join(rnd.choices(VOCAB[:12], k=rnd.randint(1, 3))) for _ in range(4)]
    return [*pages, *edits, *short, ""]


def _run_search(
    path: Path,
    batches: list[list[Document]],
    in_bulk: bool,
    options: EngineOptions,
    threshold: float,
    verify: Verify = "exact",
    room: tuple[int, int] | None = None,
) -> tuple[list[Any], dict[str, Any], int, int]:
    """Each batch's verdicts, changes, touched ids and counters (all but which path
    took a document); the tables at the end; how many documents were searched in bulk,
    and in how many batches with replays among them.  `room`: the exact sets (in 8-byte
    values) and the rows of sets let go that the engine's memory keeps (default: all)."""
    seen: list[Any] = []
    both = 0  # batches with replays searched in bulk
    with Deduplicator(path, options=options, threshold=threshold, verify=verify) as dd:
        dd.bulk_search = in_bulk
        if room is not None:
            dd._memory._budget, dd._memory._orphan_rows = room
        for batch in batches:
            verdicts = dd.check_batch(batch)
            c = dd.last_batch
            work = (c.candidates, c.most_candidates, c.exact_checks, c.bucket_capped)
            seen.append((verdicts, list(dd.changes), list(dd.changed_others), work, c.exact_capped))
            both += bool(c.searched and c.replayed)
        return seen, _tables(dd), dd.counters.searched, both


# 70 examples (was 100, 3 s of CPU): 30 ms an example, most of it two new indexes
# opened and every table of both read back and compared.
@settings(max_examples=70, deadline=None)
@given(
    picks=st.lists(st.integers(0, 44), min_size=8, max_size=60),
    cuts=st.lists(st.integers(1, 30), min_size=1, max_size=5),
    seed=st.integers(0, 5),
    # caps small enough to bite (a hot bucket, a long exact search), and none
    caps=st.sampled_from([(1, 1), (2, 1), (3, 2), (5, 3), (2000, 2000)]),
    threshold=st.sampled_from([0.5, 0.7, 0.8]),
    replays=st.booleans(),
    window=st.booleans(),
    verify=st.sampled_from(["exact", "exact", "signature"]),
    # the bulk side's memory: all sets kept, or room for a few sets (about 100 values
    # each) and a few rows of sets let go, or none (verify.py `VerifyCache`)
    room=st.sampled_from([None, (300, 3), (300, 0), (0, 0)]),
)
def test_the_bulk_search_equals_the_search_in_the_loop(
    picks: list[int],
    cuts: list[int],
    seed: int,
    caps: tuple[int, int],
    threshold: float,
    replays: bool,
    window: bool,
    verify: Verify,
    room: tuple[int, int] | None,
) -> None:
    """A batch of new ids searched at once (engine/search.py) gives what the
    loop's own searches give: verdicts, changes, counters and tables.  Batches mix
    near duplicates of earlier documents of the batch and of stored ones, template
    siblings sharing most buckets, exact copies, empty pages; `replays` sends some
    documents again among new ones (a replay keeps the bulk search; the same id
    twice in one batch turns it off), `window` dates documents so that some batches
    lie within a time window and some reach past it; `verify` by exact Jaccard or by
    the signature estimate alone; `room`: what the bulk side's memory keeps across
    batches (sets it lets go are read again; rows it keeps reject without a read)."""
    texts = _site_texts(seed)
    stream = [
        Document(f"d{k}", texts[t], T0 + k * 60_000 if window else None)
        for k, t in enumerate(picks)
    ]
    if replays:  # every third document sent again later, among new ones
        again = {k + 20: d for k, d in enumerate(stream) if k % 3 == 0}
        mixed = []
        for k, d in enumerate(stream):
            mixed += [again[k], d] if k in again else [d]
        stream = mixed
    batches, at, k = [], 0, 0
    while at < len(stream):
        size = cuts[k % len(cuts)]
        batches.append(stream[at : at + size])
        at, k = at + size, k + 1
    opts = EngineOptions(
        max_bucket_candidates=caps[0],
        max_exact_checks=caps[1],
        ttl_ms=20 * 60_000 if window else None,
    )
    with tempfile.TemporaryDirectory(prefix="search-") as tmp:
        bulk, bulk_tables, searched, both = _run_search(
            Path(tmp) / "a", batches, True, opts, threshold, verify, room
        )
        loop, loop_tables, none, _ = _run_search(
            Path(tmp) / "l", batches, False, opts, threshold, verify
        )
    assert none == 0
    assert bulk == loop
    assert bulk_tables == loop_tables
    event(f"searched in bulk: {'none' if not searched else 'some'}")
    event(f"replays in a batch searched in bulk: {'yes' if both else 'no'}")
    dup = sum(v.verdict == "duplicate" and not v.exact for b in bulk for v in b[0])
    event(f"near duplicates: {'none' if not dup else 'some'}")
    event(f"capped: {'yes' if any(b[3][3] or b[4] for b in bulk) else 'no'}")


def test_the_bulk_search_finds_duplicates_inside_the_batch_and_stored(tmp_path: Path) -> None:
    """One batch of new ids, searched in bulk: a near duplicate of a stored page, one of
    an earlier page of the batch (its cluster follows that page's verdict), and a
    near duplicate of that near duplicate; the counters say all went the new way."""
    texts = _site_texts(1)
    pages, edits = texts[:20], texts[20:40]
    with Deduplicator(tmp_path / "i", threshold=0.7) as dd:
        dd.check_batch([Document("stored", pages[15])])
        batch = [
            Document("a", pages[16]),
            Document("b", edits[15]),  # near the stored page
            Document("c", edits[16]),  # near "a", earlier in the batch
            Document("d", pages[17]),
        ]
        a, b, c, d = dd.check_batch(batch)
        assert dd.last_batch.searched >= 2
    assert (b.verdict, b.duplicate_of, b.cluster) == ("duplicate", "stored", "stored")
    assert (c.verdict, c.duplicate_of, c.cluster) == ("duplicate", "a", "a")
    assert a.verdict == d.verdict == "unique"


def _templated_batch(seed: int, n: int) -> list[Document]:
    texts = _site_texts(seed)
    rnd = random.Random(seed)
    return [Document(f"d{k}", texts[rnd.randrange(len(texts))]) for k in range(n)]


@pytest.mark.parametrize("in_bulk", [True, False])
def test_a_batch_of_several_parts_is_searched_as_one(tmp_path: Path, in_bulk: bool) -> None:
    """A batch given as several prepared parts (as `--workers` hands them over) is
    searched across its parts: the same verdicts, changes and tables as the loop's
    searches over the same parts."""
    docs = _templated_batch(3, 90)

    def run(path: Path, search: bool) -> tuple[Any, ...]:
        with Deduplicator(path, threshold=0.7) as dd:
            dd.bulk_search = search
            dd.check_batch(docs[:20])
            parts = [dd.preparer.prepare(docs[a : a + 25], known=dd.known) for a in (20, 45)]
            parts.append(dd.preparer.prepare(docs[70:], known=dd.known))
            verdicts = dd.apply(parts)
            c = dd.last_batch
            work = (c.candidates, c.most_candidates, c.exact_checks, c.bucket_capped)
            return verdicts, list(dd.changes), work, c.exact_capped, c.searched, _tables(dd)

    got = run(tmp_path / "a", in_bulk)
    want = run(tmp_path / "l", False)
    assert (got[4] > 0) == in_bulk
    assert got[:4] == want[:4] and got[5] == want[5]
    assert any(v.verdict == "duplicate" and not v.exact for v in got[0])


def test_a_rerun_transaction_searches_the_batch_again(tmp_path: Path) -> None:
    """A batch with near duplicates larger than the map: LMDB refuses it, the
    transaction runs again, and the search of the whole batch starts over with it
    (the memory of the first run is dropped): as the loop's searches would give."""
    rnd = random.Random(4)
    pages = [" ".join(rnd.choices(VOCAB, k=300)) for _ in range(60)]
    docs = []
    for k in range(240):
        words = pages[k % 60].split()
        for _ in range(rnd.randint(1, 4)):
            words[rnd.randrange(len(words))] = rnd.choice(VOCAB)
        docs.append(Document(f"d{k}", " ".join(words)))
    opts = EngineOptions(map_size=1 << 18)
    with tempfile.TemporaryDirectory(prefix="rerun-") as tmp:
        a, a_tables, searched, _ = _run_search(Path(tmp) / "a", [docs], True, opts, 0.8)
        b, b_tables, _, _ = _run_search(Path(tmp) / "b", [docs], False, opts, 0.8)
    assert searched > 50
    assert a == b and a_tables == b_tables
    assert sum(v.verdict == "duplicate" for v in a[0][0]) > 50
    runs = []
    with Deduplicator(tmp_path / "i", options=opts) as dd:
        apply = dd._apply
        dd._apply = lambda t, parts: runs.append(1) or apply(t, parts)  # type: ignore[method-assign]
        dd.check_batch(docs)
        assert dd.last_batch.searched == searched
    assert len(runs) > 1  # it did run again


def test_replays_among_new_ids_keep_the_bulk_search(tmp_path: Path) -> None:
    """Documents sent again with their stored content (`resent`: a redelivery) do not
    turn the bulk search off for the new documents of their batch; the result is the
    loop's."""
    texts = _site_texts(2)
    first = [Document(f"s{k}", texts[k]) for k in range(20)]
    second = [Document(f"n{k}", texts[20 + k]) for k in range(20)]  # edits of the first
    second[3:3] = [first[3], first[7]]  # replays
    second.append(first[11])
    opts = EngineOptions()
    a, a_tables, _, both = _run_search(tmp_path / "a", [first, second], True, opts, 0.7)
    b, b_tables, _, _ = _run_search(tmp_path / "b", [first, second], False, opts, 0.7)
    assert a == b and a_tables == b_tables
    assert both == 1
    with Deduplicator(tmp_path / "c", threshold=0.7) as dd:
        dd.check_batch(first)
        dd.check_batch(second)
        assert dd.last_batch.replayed == 3
        assert dd.last_batch.searched > 5
    assert sum(v.verdict == "duplicate" and not v.exact for v in a[1][0]) > 5
