"""Where a consumer stands in the index (`Progress`), on a real LMDB index: the
verdicts of an applied batch must come back for any redelivery of it, however the
broker cuts the redelivered batches."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamdedup.errors import StreamDedupError
from streamdedup.kafka.ledger import Progress
from streamdedup.models import DistanceVerdict, Verdict
from streamdedup.store.index import Index


def verdict(p: int, off: int) -> Verdict:
    if off % 3 == 0:
        return Verdict(f"d{p}-{off}", "duplicate", f"d{p}-0", f"d{p}-0", 0.8125, off % 2 == 0)
    return Verdict(f"d{p}-{off}", "unique", None, f"d{p}-{off}", None, False, "empty")


def keep(index: Index, prog: Progress, first: int, fresh: range) -> None:
    """One batch of partition 0 from `first`, whose offsets in `fresh` are new."""
    kept = [(0, o, verdict(0, o)) for o in fresh]
    index.write(lambda t: prog.keep_verdicts(t, {0: first}, kept))


def stored(index: Index, prog: Progress, wanted: list[tuple[int, int]]) -> list[Verdict]:
    return index.write(lambda t: prog.stored_verdicts(t, wanted))


@pytest.fixture
def index(tmp_path: Path) -> Index:
    return Index(tmp_path / "idx")


def test_a_batch_comes_back_whole_and_in_part(index: Index) -> None:
    prog = Progress("g", "docs")
    batch = [(0, o) for o in range(100, 120)] + [(1, o) for o in range(7, 12)]
    kept = [(p, o, verdict(p, o)) for p, o in batch]
    index.write(lambda t: prog.keep_verdicts(t, {0: 100, 1: 7}, kept))
    assert stored(index, prog, batch) == [verdict(p, o) for p, o in batch]
    assert stored(index, prog, [(1, 9), (0, 115)]) == [verdict(1, 9), verdict(0, 115)]


def test_a_distance_familys_verdicts_come_back_with_their_distance(index: Index) -> None:
    """A Hamming index's verdicts carry `distance`: kept and read back whole, so a
    redelivery republishes the record first published (and a Jaccard verdict of the
    same batch stays a plain one)."""
    prog = Progress("g", "bits")
    kept = [
        (0, 5, DistanceVerdict("a", "duplicate", "b", "b", 1 - 3 / 64, False, None, 3.0)),
        (0, 6, DistanceVerdict("c", "unique", None, "c", None, False, None, None)),
        (0, 7, verdict(0, 9)),
    ]
    index.write(lambda t: prog.keep_verdicts(t, {0: 5}, kept))
    back = stored(index, prog, [(0, 5), (0, 6), (0, 7)])
    assert back == [v for _, _, v in kept]
    assert [type(v) for v in back] == [DistanceVerdict, DistanceVerdict, Verdict]
    assert back[0].to_dict()["distance"] == 3.0 and "distance" in back[1].to_dict()


def test_a_redelivery_cut_short_keeps_the_rest_of_the_stored_batch(index: Index) -> None:
    """Applied 100-119 and crashed; the redelivery brings 100-109 only (published
    from the store), then 110-129, whose 110-119 must still come from the store."""
    prog = Progress("g", "docs")
    keep(index, prog, 100, range(100, 120))
    keep(index, prog, 100, range(0))
    keep(index, prog, 110, range(120, 130))
    wanted = [(0, o) for o in range(110, 130)]
    assert stored(index, prog, wanted) == [verdict(0, o) for o in range(110, 130)]


def test_published_batches_are_dropped(index: Index) -> None:
    prog = Progress("g", "docs")
    keep(index, prog, 0, range(0, 10))
    keep(index, prog, 10, range(10, 20))  # 0-9 went out: dropped
    with pytest.raises(StreamDedupError, match="partition 0 offset 5"):
        stored(index, prog, [(0, 5)])
    assert stored(index, prog, [(0, 10)]) == [verdict(0, 10)]


def test_gaps_and_other_consumers_are_not_mistaken_for_verdicts(index: Index) -> None:
    prog, other = Progress("g", "docs"), Progress("g", "other-topic")
    kept = [(0, o, verdict(0, o)) for o in (3, 5, 9)]  # 4, 6-8: dead letters, markers
    index.write(lambda t: prog.keep_verdicts(t, {0: 3}, kept))
    keep(index, other, 0, range(0, 20))
    assert stored(index, prog, [(0, 5), (0, 9)]) == [verdict(0, 5), verdict(0, 9)]
    for missing in (4, 8, 10):
        with pytest.raises(StreamDedupError):
            stored(index, prog, [(0, missing)])
    with pytest.raises(StreamDedupError):
        stored(index, prog, [(1, 3)])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 40), st.booleans()), min_size=1, max_size=10))
def test_any_pattern_of_crashes_and_redeliveries(
    tmp_path_factory: pytest.TempPathFactory, polls: list[tuple[int, bool]]
) -> None:
    """Each poll starts where the last published batch ended (a crash rewinds there)
    and is cut at any length; its already applied offsets get the verdicts stored
    when they were first applied."""
    index = Index(tmp_path_factory.mktemp("idx"))
    prog = Progress("g", "docs")
    applied = published = 0
    for length, publish_ok in polls:
        batch = range(published, published + length)
        keep(index, prog, batch[0], range(max(applied, batch[0]), batch[-1] + 1))
        again = [(0, o) for o in batch if o < applied]
        assert stored(index, prog, again) == [verdict(0, o) for _, o in again]
        applied = max(applied, batch[-1] + 1)
        if publish_ok:
            published = batch[-1] + 1
    index.close()


def test_the_ids_a_batch_touched_come_back_with_any_part_of_it(index: Index) -> None:
    """Ids of documents a batch changed beyond its own (promoted copies, forgotten
    documents) are kept under each partition's part of it, come back with a
    redelivery of any part, and go when the batch does."""
    prog = Progress("g", "docs")
    kept = [(0, o, verdict(0, o)) for o in range(100, 110)]
    kept += [(1, o, verdict(1, o)) for o in range(7, 9)]
    index.write(lambda t: prog.keep_verdicts(t, {0: 100, 1: 7}, kept, [b"sX", b"sY", b"sX"]))
    # redelivered with more, which touches nothing: nothing kept for that part
    keep(index, prog, 100, range(110, 120))

    def touched(wanted: list[tuple[int, int]]) -> list[bytes]:
        out: list[bytes] = []
        index.write(lambda t: prog.stored_verdicts(t, wanted, out))
        return out

    assert touched([(0, 104)]) == [b"sX", b"sY"]
    assert touched([(1, 8)]) == [b"sX", b"sY"]
    assert touched([(0, 115)]) == []
    keep(index, prog, 110, range(0))  # 100-109 published: dropped, with their ids
    assert touched([(0, 112)]) == []
    index.write(lambda t: prog.keep_verdicts(t, {1: 9}, []))
    rest = index.read(lambda t: [k for k, _ in t.meta_entries(b"touched/")])
    assert rest == []
