"""The records every layer names: the tallies a verdict counts toward and the one
output record builder."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from streamdedup.models import (
    DUPLICATE,
    TALLIES,
    UNIQUE,
    Record,
    Rejected,
    Verdict,
    output_record,
)

verdicts = st.builds(
    Verdict,
    id=st.one_of(st.text(min_size=1), st.integers()),
    verdict=st.sampled_from(["unique", "duplicate"]),
    duplicate_of=st.none() | st.text(min_size=1),
    cluster=st.text(min_size=1),
    similarity=st.none() | st.floats(0, 1),
    exact=st.booleans(),
    reason=st.none() | st.just("empty"),
)


@given(verdicts)
def test_a_verdict_counts_toward_its_verdict_and_its_marks(v: Verdict) -> None:
    kinds = v.kinds()
    assert set(kinds) <= set(TALLIES)
    assert kinds[0] == v.verdict
    assert ("exact" in kinds) == (v.is_duplicate and v.exact)
    assert ("empty" in kinds) == (not v.is_duplicate and v.reason == "empty")


@given(verdicts)
def test_output_record_is_the_verdict_then_where_it_came_from(v: Verdict) -> None:
    source = {"topic": "t", "partition": 1, "offset": 7}
    record = output_record(v, source=source)
    assert list(record)[-1] == "source" and record["source"] == source
    assert Verdict.from_dict(record) == v


def test_error_record_names_the_reason_and_the_line() -> None:
    record = output_record(Rejected("bad_id", "field 'id' is an empty string", None), line=3)
    assert record == {
        "id": None,
        "verdict": "error",
        "error": "bad_id",
        "message": "field 'id' is an empty string",
        "line": 3,
    }


# ids msgpack can carry (the input decoder refuses others: `bad_id`)
packable = verdicts.filter(lambda v: not isinstance(v.id, int) or -(2**63) <= v.id < 2**64)


@given(
    packable,
    st.binary(min_size=16, max_size=16),
    st.none() | st.integers(0, 2**62),
    st.integers(0, 10**6),
)
def test_a_record_keeps_its_verdict_field_for_field(
    v: Verdict, content: bytes, timestamp: int | None, shingles: int
) -> None:
    """`Record.of` passes its fields by position (one is built per document): each
    lands in the field of its name, and a packed record reads back as itself."""
    rec = Record.of(v, content, timestamp, shingles)
    assert Verdict.from_record(rec) == v
    assert (rec.content_hash, rec.timestamp_ms, rec.shingles) == (content, timestamp, shingles)
    assert rec.verdict == (DUPLICATE if v.is_duplicate else UNIQUE)
    assert Record.unpack(rec.pack()) == rec


@given(
    st.lists(
        st.tuples(
            packable,
            st.binary(min_size=16, max_size=16),
            st.none() | st.integers(0, 2**62),
            st.integers(0, 10**6),
        ),
        max_size=5,
    )
)
def test_verdicts_pack_as_their_records_do(
    docs: list[tuple[Verdict, bytes, int | None, int]],
) -> None:
    """`Record.pack_verdicts` (the bulk store, without `Record` objects) gives the
    bytes of `Record.of(...).pack()`, document for document."""
    verdicts, contents, stamps, shingles = ([d[k] for d in docs] for k in range(4))
    packed = Record.pack_verdicts(verdicts, contents, stamps, shingles)
    assert packed == [Record.of(*d).pack() for d in docs]
