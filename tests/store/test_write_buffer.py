"""`Tables` buffers a batch's document entries and writes each table's at once; the
buffer must be invisible: every read answers as if each write had gone to LMDB at
once, and the tables end up holding the same entries.  Checked on real LMDB
environments on disk, against the same operations with the buffer written out after
every one of them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from streamdedup.models import Record
from streamdedup.store.index import Index
from streamdedup.store.keys import docno_key, id_key
from streamdedup.store.rows import TEXT_CHUNK, text_chunks, texts_rows
from streamdedup.store.tables import DATA_TABLES, Packed, Tables

CONTENTS = [bytes([c]) * 16 for c in range(4)]  # few contents: owners and copies


def _record(docno: int, content: int, timestamp: int | None) -> Record:
    return Record(
        f"d{docno}", 0, None, f"d{docno}", None, False, CONTENTS[content], timestamp, None, 3
    )


# An operation: ("put", docno-rank, id, content, timestamp, indexed),
# ("remove", which live document), ("read", which docno), ("prefetch",),
# ("owner", content, which live document)
operations = st.lists(
    st.one_of(
        st.tuples(
            st.just("put"),
            st.integers(0, 40),
            st.integers(0, 12),
            st.integers(0, len(CONTENTS) - 1),
            st.one_of(st.none(), st.integers(1, 50)),
            st.booleans(),
        ),
        st.tuples(st.just("remove"), st.integers(0, 1000)),
        st.tuples(st.just("read"), st.integers(0, 45)),
        st.tuples(st.just("prefetch")),
        st.tuples(st.just("owner"), st.integers(0, len(CONTENTS) - 1), st.integers(0, 1000)),
    ),
    max_size=60,
)


def _reads(t: Tables, docno: int, key: bytes, content: bytes) -> list[Any]:
    return [
        t.record(docno),
        t.signature(docno),
        t.text(docno),
        t.docno_for_id(key),
        t.docno_for_content(content),
        t.first_copy(content),
        t.content_docnos(content, -1, 10),
    ]


def _run(t: Tables, ops: list[tuple[Any, ...]], settle: bool) -> list[Any]:
    """The operations on `t`, what every read answered; `settle`: the buffer written
    out after each operation (the unbuffered behaviour)."""
    seen: list[Any] = []
    live: dict[bytes, int] = {}  # id key -> docno
    used: set[int] = set()
    for op in ops:
        if op[0] == "put":
            _, docno, ident, content, ts, indexed = op
            key = id_key(f"id{ident}")
            if docno in used or key in live:
                continue
            used.add(docno)
            live[key] = docno
            text = bytes([docno]) * (1500 if docno % 3 == 0 else 20)  # two chunks or one
            owns = t.put_document(
                docno,
                key,
                _record(docno, content, ts),
                signature=bytes([docno, 1]) * 4 if indexed else None,
                bucket_keys=[],
                register_content=True,
                text=text if indexed else None,
            )
            seen.append(owns)
        elif op[0] == "remove" and live:
            key = sorted(live)[op[1] % len(live)]
            t.remove_document(live.pop(key), key, [])
        elif op[0] == "read":
            for content in CONTENTS:
                seen.append(_reads(t, op[1], id_key(f"id{op[1] % 13}"), content))
        elif op[0] == "prefetch":
            t.prefetch([*live, id_key("nobody")], CONTENTS)
        elif op[0] == "owner" and live:
            docno = sorted(live.values())[op[2] % len(live)]
            t.set_content_owner(CONTENTS[op[1]], docno)
        if settle:
            t._flush()
    seen.append({name: list(t.items(name)) for name in DATA_TABLES if name != "postings"})
    seen.append([t.count(name) for name in DATA_TABLES])
    return seen


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(operations)
def test_buffered_writes_read_and_land_as_direct_ones(tmp_path: Path, ops: list[Any]) -> None:
    results = []
    for settle in (False, True):
        path = tmp_path / f"i{len(list(tmp_path.iterdir()))}"
        index = Index(path)
        try:
            results.append(index.write(lambda t, s=settle: _run(t, ops, s)))
            # and what was committed reads the same from a new transaction
            results[-1].append(index.read(lambda t: [t.record(d) for d in range(45)]))
        finally:
            index.close()
    assert results[0] == results[1]


def test_out_of_order_documents_are_stored_too(tmp_path: Path) -> None:
    """A restore (or a copy moved out of a sealed segment) writes older document
    numbers after newer ones: the append-only fast path must fall back, not drop
    them."""
    index = Index(tmp_path / "i")
    order = [5, 9, 2, 7, 0]
    try:

        def put(t: Tables) -> None:
            for d in order:
                t.put_document(d, id_key(d), _record(d, d % 4, 10 + d), b"s" * 8, [], True, b"t")

        index.write(put)
        got = index.read(lambda t: [(d, t.record(d), t.signature(d), t.text(d)) for d in order])
    finally:
        index.close()
    assert [(d, r.doc_id if r else None, s, x) for d, r, s, x in got] == [
        (d, f"d{d}", b"s" * 8, b"t") for d in order
    ]


# A batch of documents: (plain?, text size, timestamp), numbered in order; the plain
# ones are stored together at the end (`put_plain`), the others one by one in order.
batches = st.lists(
    st.tuples(
        st.booleans(),
        st.sampled_from([0, 20, 999, 1000, 2500]),
        st.one_of(st.none(), st.integers(1, 50)),
    ),
    min_size=1,
    max_size=30,
)


def _store(t: Tables, docs: list[tuple[bool, int, int | None]], bulk: bool, batch: bool) -> None:
    """Store `docs` (docno = position; each its own content, so each owns it),
    with two band keys each; `bulk`: the plain ones by `put_plain` after the rest;
    `batch`: inside `batch_postings` (as the engine does) or not."""
    keys = [id_key(f"id{d}") for d in range(len(docs))]
    records = [
        Record(f"d{d}", 0, None, f"d{d}", None, False, bytes([d]) * 16, ts, None, 3)
        for d, (_, _, ts) in enumerate(docs)
    ]
    sigs = [bytes([d, 2]) * 4 for d in range(len(docs))]
    texts = [bytes([d]) * size for d, (_, size, _) in enumerate(docs)]
    rows = [(1000 + d).to_bytes(8, "big") + (5000 + d).to_bytes(8, "big") for d in range(len(docs))]
    t.prefetch(keys, [r.content_hash for r in records])
    if batch:
        t.batch_postings(rows, 100)
    plain = [d for d, (p, _, _) in enumerate(docs) if p and bulk]
    for d in range(len(docs)):
        if d not in plain:
            bks = [rows[d][:8], rows[d][8:]]
            assert t.put_document(d, keys[d], records[d], sigs[d], bks, True, texts[d], rows[d])
    t.put_plain(
        plain,
        [keys[d] for d in plain],
        Packed.of([records[d] for d in plain]),
        [sigs[d] for d in plain],
        [rows[d] for d in plain],
        [texts[d] for d in plain],
    )
    # read back from the buffer (the plain ones kept packed) as they were given
    assert [t.record(d) for d in range(len(docs))] == records
    if batch:
        t.flush_postings()


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(batches, st.booleans())
def test_documents_stored_in_bulk_land_as_stored_one_by_one(
    tmp_path: Path, docs: list[tuple[bool, int, int | None]], batch: bool
) -> None:
    """`put_plain` writes the entries `put_document` writes, whichever documents of
    the batch it takes, also when they interleave with those stored one by one."""
    results = []
    for bulk in (True, False):
        index = Index(tmp_path / f"i{len(list(tmp_path.iterdir()))}")
        try:
            index.write(lambda t, b=bulk: _store(t, docs, b, batch))

            def read(t: Tables) -> list[Any]:
                tables = [list(t.items(name)) for name in DATA_TABLES if name != "postings"]
                return [*tables, t.postings.live(), [t.count(n) for n in DATA_TABLES]]

            results.append(index.read(read))
        finally:
            index.close()
    assert results[0] == results[1]
    assert len(results[0][DATA_TABLES.index("texts")]) >= len(docs)


@given(st.integers(0, 2**40 - 1), st.integers(0, 5 * TEXT_CHUNK + 1))
@example(7, 0)
@example(7, TEXT_CHUNK - 1)
@example(7, TEXT_CHUNK)  # one full chunk, no empty one after it
@example(7, TEXT_CHUNK + 1)
@example(7, 2 * TEXT_CHUNK)
@example(7, 2 * TEXT_CHUNK + 1)
def test_a_text_is_cut_into_numbered_chunks_that_join_back(docno: int, size: int) -> None:
    """The `texts` layout, whatever shortcut builds it (one chunk, two, many): chunks
    of TEXT_CHUNK bytes, the last shorter (a text shorter than one: one chunk), keyed
    by docno and chunk number in order -- `_chunked` reads them back by stopping at
    the first short chunk."""
    text = bytes(i % 251 for i in range(size))
    chunks = text_chunks(docno, text)
    count = max(1, -(-size // TEXT_CHUNK))
    assert [k for k, _ in chunks] == [docno_key(docno) + n.to_bytes(2, "big") for n in range(count)]
    assert b"".join(c for _, c in chunks) == text
    assert all(len(c) == TEXT_CHUNK for _, c in chunks[:-1])


@given(st.lists(st.tuples(st.integers(0, 2**40 - 1), st.integers(0, 3 * TEXT_CHUNK)), max_size=6))
@example([(7, TEXT_CHUNK), (8, 0)])  # every text one chunk: the keys made at once
@example([(7, TEXT_CHUNK), (8, TEXT_CHUNK + 1)])
def test_many_texts_are_cut_as_each_one_is(docs: list[tuple[int, int]]) -> None:
    """The rows a bulk store buffers for many texts (`texts_rows`, which makes the
    keys of one-chunk texts in one pass) are each text's `text_chunks`, in order."""
    texts = [bytes([d % 251]) * size for d, size in docs]
    rows = list(texts_rows([docno_key(d) for d, _ in docs], texts))
    assert rows == [row for (d, _), t in zip(docs, texts, strict=True) for row in text_chunks(d, t)]
