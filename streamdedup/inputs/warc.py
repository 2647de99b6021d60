"""WARC archives -> documents, in record order, with what each record was.

fastwarc (the native WARC reader of the resiliparse project) parses the archive, plain
or compressed, and decodes each HTTP body (chunked transfer, gzip/deflate/brotli
content encodings); this module decides what each record becomes:

- a `response` record with an HTML payload (`text/html`, `application/xhtml+xml`):
  a `Document` whose id is its `WARC-Target-URI` (or `WARC-Record-ID`, `--warc-id`)
  and whose text is the page's extracted text (`inputs.html`);
- any other record (`warcinfo`, `request`, `metadata`, a PDF or image response):
  `Skipped`, counted and listed on request, never a verdict;
- a page that cannot become text, or is over the size limit: `Rejected` (an error
  record in the output, in its place);
- a damaged archive (bad headers, a gzip member cut short): one `Rejected` with
  `corrupt_warc`, after which reading stops -- the records before it keep their
  verdicts.

fastwarc stops *silently* at a record cut short at the end of a file.  To tell such
an archive from a complete one, the reader appends a known end-of-archive record
(`_SENTINEL`, gzipped when the archive is) to the stream it parses: a complete
archive yields it last; a cut one swallows or breaks it.
"""

from __future__ import annotations

import contextlib
import gzip
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Literal

from streamdedup.config import MAX_DOC_BYTES
from streamdedup.inputs.decode import check_id
from streamdedup.inputs.html import Extract, page_text
from streamdedup.models import CORRUPT_WARC, MISSING_ID, TOO_LARGE, Document, Rejected

if TYPE_CHECKING:  # fastwarc is imported where it reads (JSON input does without)
    from fastwarc.warc import WarcRecord

WarcId = Literal["uri", "record-id"]
WARC_ID_MODES: tuple[WarcId, ...] = ("uri", "record-id")
HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})

NOT_RESPONSE = "not_response"
NOT_HTML = "not_html"

_SENTINEL_ID = "<urn:uuid:00000000-5d3d-4e0d-8000-656e642d6f66>"
_SENTINEL = (
    "WARC/1.1\r\n"
    "WARC-Type: metadata\r\n"
    f"WARC-Record-ID: {_SENTINEL_ID}\r\n"
    "WARC-Date: 2026-01-01T00:00:00Z\r\n"
    "Content-Type: text/plain\r\n"
    "Content-Length: 3\r\n"
    "\r\n"
    "end\r\n\r\n"
).encode()
_GZIP_MAGIC = b"\x1f\x8b"


@dataclass(frozen=True, slots=True)
class WarcRef:
    """Where a document came from: the fields every verdict of a WARC input carries."""

    url: str | None
    record_id: str | None

    def fields(self) -> dict[str, str | None]:
        return {"url": self.url, "warc_record_id": self.record_id}


@dataclass(frozen=True, slots=True)
class Skipped:
    """A record that is not a page to check (not a response, or not HTML)."""

    reason: str
    message: str
    ref: WarcRef


@dataclass(frozen=True, slots=True)
class Page:
    """An HTML response's body, not yet extracted (`read_pages`): extraction, the
    costly part, can then run elsewhere (`engine.pages`, `dedup --workers`)."""

    id: str | int
    payload: bytes
    charset: str | None


Item = tuple[Document | Rejected | Skipped, WarcRef]
PageItem = tuple[Page | Rejected | Skipped, WarcRef]


def page_document(page: Page, extract: Extract = "main") -> Document | Rejected:
    """A page's document: its extracted text under its id, or why not."""
    text = page_text(page.payload, extract, page.charset)
    if isinstance(text, Rejected):
        return Rejected(text.reason, text.message, page.id)
    return Document(page.id, text)


class _WithSentinel:
    """The archive's bytes followed by the end-of-archive record (see the module
    docstring); fastwarc reads any object with `read` (and `tell`).  `tail_at` is
    where the end record starts: only a record parsed from there is the end record
    (a header cut short can run on into the end record's lines and borrow its id)."""

    def __init__(self, stream: IO[bytes]) -> None:
        self.stream = stream
        self.pending = stream.read(2)  # tells gzip from plain
        compressed = self.pending == _GZIP_MAGIC
        self.tail = gzip.compress(_SENTINEL, mtime=0) if compressed else _SENTINEL
        self.tail_at: int | None = None
        self.position = 0

    def read(self, size: int = -1) -> bytes:
        """Up to `size` bytes (never more: fastwarc's buffers are that long)."""
        size = size if size and size > 0 else 1 << 16
        out, self.pending = self.pending[:size], self.pending[size:]
        if len(out) < size and self.tail_at is None:
            more = self.stream.read(size - len(out))
            if more:
                out += more
            else:  # the archive's end: the end record follows
                self.tail_at = self.position + len(out)
                take = size - len(out)
                out, self.pending = out + self.tail[:take], self.tail[take:]
        self.position += len(out)
        return out

    def tell(self) -> int:
        return self.position

    def seek(self, offset: int, whence: int = 0) -> int:
        """Not seekable (fastwarc only asks when it is given a seekable stream)."""
        raise OSError("the archive stream is read front to back and cannot seek")

    def close(self) -> None:
        """The caller owns the archive's stream and closes it."""


def read_warc(
    stream: IO[bytes],
    *,
    id_from: WarcId = "uri",
    extract: Extract = "main",
    max_bytes: int = MAX_DOC_BYTES,
) -> Iterator[Item]:
    """Every record of the archive in order, as a document, a skip or a reject: the
    pages of `read_pages` extracted here, one at a time."""
    for item, ref in read_pages(stream, id_from=id_from, max_bytes=max_bytes):
        yield (page_document(item, extract) if isinstance(item, Page) else item), ref


def read_pages(
    stream: IO[bytes],
    *,
    id_from: WarcId = "uri",
    max_bytes: int = MAX_DOC_BYTES,
) -> Iterator[PageItem]:
    """Every record of the archive in order, as an HTML page, a skip or a reject.

    Each record is handed out only once the next one (or the end-of-archive record)
    has been parsed.  When the archive turns out to be damaged -- a header fastwarc
    refuses, or the end record never reached (cut short) -- the last record before
    the damage is not trusted: a record cut short runs into the end record or into
    whatever follows, and fastwarc returns it with the wrong bytes, which would index
    half a page.  That record becomes the `corrupt_warc` error record (with its id
    and URL, so it is not lost silently); every record before it keeps its verdict."""
    from fastwarc.warc import ArchiveIterator, WarcRecordType

    count = 0
    held: tuple[PageItem, int] | None = None
    source = _WithSentinel(stream)
    records = ArchiveIterator(
        source, record_types=WarcRecordType.any_type, parse_http=True, auto_decode="all"
    )
    damage = "it ends in the middle of a record (cut short)"
    try:
        for record in records:
            if record.record_id == _SENTINEL_ID and record.stream_pos == source.tail_at:
                if held is not None:
                    yield held[0]
                return
            if held is not None:
                yield held[0]
            count += 1
            ref = WarcRef(record.headers.get("WARC-Target-URI"), record.record_id)
            held = (_item(record, ref, id_from, max_bytes), ref), record.stream_pos
    except OSError as exc:  # fastwarc: bad headers, a broken gzip member
        damage = f"{exc}"
    except BaseException as exc:
        # fastwarc is Rust: a bug it hits on hostile input is a pyo3 PanicException,
        # a BaseException whose class cannot be imported; it is damage like any other
        if type(exc).__name__ != "PanicException":
            raise
        damage = f"the WARC reader failed on it ({exc})"
    if held is None:
        yield _corrupt(f"no readable record: {damage}"), WarcRef(None, None)
        return
    (item, ref), offset = held
    doc_id = item.id if isinstance(item, Page | Rejected) else None
    where = f"record {count} (at byte {offset:,}"
    where += f", {ref.url})" if ref.url else ")"
    yield _corrupt(f"{damage}; {where} is next to the damage and was not checked", doc_id), ref


def _corrupt(what: str, doc_id: str | int | None = None) -> Rejected:
    return Rejected(
        CORRUPT_WARC,
        f"WARC archive is damaged or cut short: {what}; the rest of the archive is unread",
        doc_id,
    )


def html_pages(stream: IO[bytes]) -> Iterator[tuple[WarcRef, bytes]]:
    """The raw HTML payloads of an archive's response records, in order, with where
    each came from: what `streamdedup produce` sends as HTML messages (a worker
    extracts the text).  Other records are passed over; reading stops quietly at a
    damaged record -- produce is for trying a worker on crawl data, `dedup` is the
    reader that reports damage."""
    from fastwarc.warc import ArchiveIterator, WarcRecordType

    records = ArchiveIterator(
        _WithSentinel(stream),
        record_types=WarcRecordType.response,
        parse_http=True,
        auto_decode="all",
    )
    with contextlib.suppress(OSError):
        for record in records:
            ctype = (record.http_content_type or "").lower() if record.is_http else ""
            if ctype in HTML_TYPES:
                ref = WarcRef(record.headers.get("WARC-Target-URI"), record.record_id)
                yield ref, record.reader.read()


def _item(
    record: WarcRecord, ref: WarcRef, id_from: WarcId, max_bytes: int
) -> Page | Rejected | Skipped:
    """What one record becomes (see the module docstring)."""
    from fastwarc.warc import WarcRecordType

    if record.record_type != WarcRecordType.response:
        kind = record.headers.get("WARC-Type") or "unknown"
        return Skipped(NOT_RESPONSE, f"a {kind} record, not a response", ref)
    ctype = (record.http_content_type or "").lower() if record.is_http else ""
    if ctype not in HTML_TYPES:
        what = f"a {ctype} payload" if ctype else "no HTTP Content-Type"
        return Skipped(NOT_HTML, f"{what}, not HTML", ref)
    doc_id = check_id(ref.url if id_from == "uri" else ref.record_id, _ID_HEADER[id_from])
    if isinstance(doc_id, Rejected):
        if ref.url is None and id_from == "uri":
            return Rejected(MISSING_ID, "response record has no WARC-Target-URI")
        return doc_id
    if record.content_length > max_bytes:
        return Rejected(
            TOO_LARGE,
            f"record is {record.content_length:,} bytes, over the limit of {max_bytes:,}",
            doc_id,
        )
    # Bodies are decoded as they are read (`auto_decode`: chunked transfer, gzip,
    # deflate or brotli content encodings, as wget and other crawlers store them), so
    # the limit is checked again on the decoded bytes: a small compressed body can
    # expand far beyond it (a "zip bomb"), and no more than the limit is ever read.
    payload = record.reader.read(max_bytes + 1)
    if len(payload) > max_bytes:
        return Rejected(
            TOO_LARGE, f"record's decoded body is over the limit of {max_bytes:,} bytes", doc_id
        )
    return Page(doc_id, payload, record.http_charset)


_ID_HEADER = {"uri": "WARC-Target-URI", "record-id": "WARC-Record-ID"}
