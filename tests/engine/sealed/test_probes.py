"""Probes and answers survive packing (what crosses Kafka to a segment server), and
bytes that are not one are refused with a SegmentError, never a crash."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamdedup.engine.sealed.probes import Answer, Probe, request_of
from streamdedup.errors import SegmentError

docnos = st.integers(0, 2**40 - 1)
keys = st.integers(0, 2**64 - 1)
blobs = st.binary(max_size=40)


@given(
    request=st.text(max_size=20),
    depth=st.integers(0, 10_000),
    bucket_keys=st.lists(keys, max_size=30, unique=True),
    docs=st.integers(0, 6),
    ids=st.lists(blobs, max_size=5),
    wanted=st.lists(docnos, max_size=5),
    exact=st.booleans(),
    after=st.one_of(st.none(), st.binary(min_size=13, max_size=13)),
)
def test_a_probe_round_trips(
    request: str,
    depth: int,
    bucket_keys: list[int],
    docs: int,
    ids: list[bytes],
    wanted: list[int],
    exact: bool,
    after: bytes | None,
) -> None:
    rng = np.random.default_rng(docs)
    probe = Probe(
        request=request,
        segment="s" * 32,
        threshold=0.8,
        margin=0.15,
        exact=exact,
        depth=depth,
        keys=np.array(sorted(bucket_keys), dtype=np.uint64),
        doc_keys=rng.integers(0, 2**63, size=(docs, 4), dtype=np.uint64),
        sigs=rng.integers(0, 2**16, size=(docs, 8), dtype=np.uint16),
        ids=ids,
        contents=ids[::-1],
        after=7,
        docnos=wanted,
        text_docnos=wanted[:2],
        expiry_after=after,
        expiry_count=3,
        newest_at_most=None if after is None else 5,
    )
    packed = probe.pack()
    assert request_of(packed) == (request, "s" * 32)
    back = Probe.unpack(packed)
    for name in ("request", "segment", "depth", "exact", "ids", "contents", "docnos"):
        assert getattr(back, name) == getattr(probe, name), name
    assert (back.expiry_after, back.newest_at_most) == (after, probe.newest_at_most)
    assert np.array_equal(back.keys, probe.keys) and np.array_equal(back.sigs, probe.sigs)
    assert np.array_equal(back.doc_keys, probe.doc_keys)
    probe.request, probe.segment = "other", "t" * 32  # one body, sent to another segment
    assert Probe.unpack(probe.pack()).request == "other"


@given(
    buckets=st.dictionaries(keys, st.lists(docnos, max_size=5), max_size=10),
    records=st.dictionaries(docnos, blobs, max_size=10),
    expiry=st.lists(st.tuples(st.integers(0, 2**62), docnos), max_size=5),
)
def test_an_answer_round_trips(
    buckets: dict[int, list[int]],
    records: dict[int, bytes],
    expiry: list[tuple[int, int]],
) -> None:
    answer = Answer(
        "r1",
        "s1",
        buckets=buckets,
        cut=set(list(buckets)[:2]),
        records=records,
        sigs=dict(records),
        ids={b"i" + str(d).encode(): d for d in records},
        contents={b"c": sorted(records)},
        more_copies={b"c"} if records else set(),
        texts=dict(records),
        expiry=expiry,
        more_expiry=bool(expiry),
        newest=3,
    )
    assert Answer.unpack(answer.pack()) == answer


@given(st.binary(max_size=200))
def test_bytes_that_are_no_message_are_refused(raw: bytes) -> None:
    for unpack in (Probe.unpack, Answer.unpack):
        with contextlib.suppress(SegmentError):
            unpack(raw)
    with pytest.raises(SegmentError):
        Probe.unpack(b"\x93\xa1r\xa1s\xc4\x01\xc1")  # a body that is not msgpack
