"""The rows of the document tables, spelled once: the (key, value) pairs a stored
document leaves in `ids`, `docs`, `sigs`, `texts`, `content`, `copies` and
`expiry` (the layout table in tables.py).  The engine's write path
(`Tables.put_document`, `put_plain`) and a sealed segment built from sorted runs
(backfill/segment.py) both build their rows here, so that the two cannot drift
apart; `Tables` stays the one that writes them, and keys.py the one that spells
the keys."""

from __future__ import annotations

import itertools
import operator
from collections.abc import Iterable, Iterator

from streamdedup.models import Record
from streamdedup.store.keys import docno_key, expiry_key

Row = tuple[bytes, bytes]  # (key, value) of one table
TEXT_CHUNK = 1000  # small values pack 4 KiB pages well and never overflow
_FIRST_CHUNK = b"\x00\x00"  # chunk number 0, as `chunks_of` numbers them


def id_row(key: bytes, dk: bytes) -> Row:
    """`ids`: a document's encoded id -> its docno key `dk`."""
    return key, dk


def doc_row(dk: bytes, record: Record) -> Row:
    """`docs`: docno key -> the packed record of its verdict."""
    return dk, record.pack()


def sig_row(dk: bytes, signature: bytes) -> Row:
    """`sigs`: docno key -> signature (K little-endian uint16)."""
    return dk, signature


def content_row(content_hash: bytes, dk: bytes) -> Row:
    """`content`: a content hash -> the docno key of the document owning it."""
    return content_hash, dk


def copy_row(content_hash: bytes, dk: bytes) -> Row:
    """`copies`: content hash + docno key of another live document with it, empty."""
    return content_hash + dk, b""


def expiry_row(timestamp_ms: int, docno: int) -> Row:
    """`expiry`: timestamp + docno, empty (documents in time order, for --ttl)."""
    return expiry_key(timestamp_ms, docno), b""


def text_chunks(docno: int, text: bytes) -> list[Row]:
    """A stored text's `texts` rows: (docno + chunk number, at most TEXT_CHUNK bytes),
    in key order.  The one layout of the table, for the engine's inserts and a
    segment built from sorted runs alike."""
    return chunks_of(docno_key(docno), text)


def chunks_of(dk: bytes, text: bytes) -> list[Row]:
    """`text_chunks` of the document whose docno key is `dk`.  Most texts are one or
    two chunks (a compressed crawl page: 1-2 KB), spelled out: half the time of the
    general loop below (0.47 against 0.98 us), once per stored document."""
    n = len(text)
    if n <= TEXT_CHUNK:
        return [(dk + _FIRST_CHUNK, text)]
    if n <= 2 * TEXT_CHUNK:
        return [(dk + b"\x00\x00", text[:TEXT_CHUNK]), (dk + b"\x00\x01", text[TEXT_CHUNK:])]
    return [
        (dk + (i // TEXT_CHUNK).to_bytes(2, "big"), text[i : i + TEXT_CHUNK])
        for i in range(0, n, TEXT_CHUNK)
    ]


def texts_rows(dks: list[bytes], texts: list[bytes]) -> Iterable[Row]:
    """The `texts` rows of many documents (`dks`: their docno keys), in order: each
    one's `chunks_of`.  When every text is one chunk (short documents), their keys
    are made in one C pass instead of a call each (half the time)."""
    if texts and max(map(len, texts)) <= TEXT_CHUNK:
        return zip(map(operator.add, dks, itertools.repeat(_FIRST_CHUNK)), texts, strict=True)
    each = itertools.starmap(chunks_of, zip(dks, texts, strict=True))
    return itertools.chain.from_iterable(each)


def sig_rows(dks: list[bytes], signatures: list[bytes]) -> Iterable[Row]:
    """`sig_row` of many documents, in order (one zip, no call per document)."""
    return zip(dks, signatures, strict=True)


def content_rows(content_hashes: list[bytes], dks: list[bytes]) -> Iterable[Row]:
    """`content_row` of many owners, in order."""
    return zip(content_hashes, dks, strict=True)


def document_rows(
    docno: int,
    key: bytes,
    record: Record,
    signature: bytes | None,
    text: bytes | None,
    owner: bool | None,
) -> Iterator[tuple[str, Row]]:
    """Every (table, row) one live document leaves, as `Tables.put_document` (and
    `Tables.adopt`, for a copy that took its owner's place) leaves them.  `owner`:
    whether it owns its content (then its signature, text and content entry are
    stored; else it is listed among the content's copies); None for a document
    without shingles (no content: a record and an id only).  Its postings are not
    rows of one document: postings.py packs them per key partition."""
    dk = docno_key(docno)
    yield "docs", doc_row(dk, record)
    yield "ids", id_row(key, dk)
    if record.timestamp_ms is not None:
        yield "expiry", expiry_row(record.timestamp_ms, docno)
    if owner is None:
        return
    if not owner:
        yield "copies", copy_row(record.content_hash, dk)
        return
    yield "content", content_row(record.content_hash, dk)
    if signature is not None:
        yield "sigs", sig_row(dk, signature)
    if text is not None:
        for row in chunks_of(dk, text):
            yield "texts", row
