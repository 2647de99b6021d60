"""WARC archives -> documents, in record order, with what each record was.

fastwarc (the native WARC reader of the resiliparse project) parses the archive, plain
or compressed, and its streaming readers decode each HTTP body (chunked transfer,
gzip/deflate/brotli content encodings, `_decoded`); this module decides what each
record becomes:

- a `response` record with an HTML payload (`text/html`, `application/xhtml+xml`)
  and a 2xx status (any status with `statuses="any"`): a `Document` whose id is its
  `WARC-Target-URI` (or `WARC-Record-ID`, `--warc-id`) and whose text is the page's
  extracted text (`inputs.html`);
- any other record (`warcinfo`, `request`, `metadata`, a PDF or image response, a
  404 page): `Skipped`, counted and listed on request, never a verdict;
- a page that cannot become text, is over the size limit (as stored or decoded), or
  repeats a record id read before in the run (`--warc-id record-id`): `Rejected` (an
  error record in the output, in its place);
- a damaged archive (bad headers, a gzip member cut short): one `Rejected` with
  `corrupt_warc`, after which reading stops -- the records before it keep their
  verdicts (see `read_pages` for the one next to the damage).

fastwarc stops *silently* at a record cut short at the end of a file.  To tell such
an archive from a complete one, the reader appends a known end-of-archive record
(`_SENTINEL`, gzipped when the archive is) to the stream it parses: a complete
archive yields it last; a cut one swallows or breaks it.
"""

from __future__ import annotations

import gzip
import hashlib
import io
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any, Literal

from streamdedup.config import MAX_DOC_BYTES
from streamdedup.inputs.decode import check_id
from streamdedup.inputs.html import Extract, page_text
from streamdedup.models import (
    CORRUPT_WARC,
    DUPLICATE_RECORD_ID,
    MISSING_ID,
    TOO_LARGE,
    UNDECODABLE,
    Document,
    Rejected,
)

if TYPE_CHECKING:  # fastwarc is imported where it reads (JSON input does without)
    from fastwarc.warc import WarcRecord

WarcId = Literal["uri", "record-id"]
WARC_ID_MODES: tuple[WarcId, ...] = ("uri", "record-id")
HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})

HttpStatuses = Literal["2xx", "any"]
HTTP_STATUS_MODES: tuple[HttpStatuses, ...] = ("2xx", "any")

# why a record is skipped (`Skipped.reason`, counted in the summary)
NOT_RESPONSE = "not_response"
NOT_HTML = "not_html"
NOT_2XX = "not_2xx"

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
    costly part, can then run elsewhere (`filemode.pages`, `dedup --workers`)."""

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
    statuses: HttpStatuses = "2xx",
    seen: set[bytes] | None = None,
) -> Iterator[Item]:
    """Every record of the archive in order, as a document, a skip or a reject: the
    pages of `read_pages` extracted here, one at a time."""
    pages = read_pages(stream, id_from=id_from, max_bytes=max_bytes, statuses=statuses, seen=seen)
    for item, ref in pages:
        yield (page_document(item, extract) if isinstance(item, Page) else item), ref


def read_pages(
    stream: IO[bytes],
    *,
    id_from: WarcId = "uri",
    max_bytes: int = MAX_DOC_BYTES,
    statuses: HttpStatuses = "2xx",
    seen: set[bytes] | None = None,
) -> Iterator[PageItem]:
    """Every record of the archive in order, as an HTML page, a skip or a reject.

    Each record is handed out only once the next one (or the end-of-archive record)
    has been parsed.  When the archive turns out to be damaged -- a header fastwarc
    refuses, or the end record never reached (cut short) -- the last record before
    the damage may have been read with the wrong bytes: a record cut short runs into
    the end record or into whatever follows, which would index half a page.  It keeps
    its verdict when its bytes are provably its own -- its body matches the record's
    `WARC-Payload-Digest`, or nothing of it was read (a skip, a reject decided by its
    headers) -- and the damage then gets an error record `corrupt_warc` of its own,
    with no id.  Otherwise that page becomes the `corrupt_warc` error record, under
    its id (so it is not lost silently).  Every record before it keeps its verdict.

    `statuses`: "2xx" checks only successful responses (a 404 page is the server's
    error page, not the page at that URL), "any" every response.  `seen` (with
    `id_from` "record-id"): digests of the record ids read so far in this run,
    shared by the archives of one run; a repeat is a `duplicate_record_id` error
    record instead of replacing the earlier page in the index."""
    from fastwarc.warc import ArchiveIterator, WarcRecordType

    if seen is None:
        seen = set()
    count = 0
    held: tuple[PageItem, int, bool] | None = None
    source = _WithSentinel(stream)
    # Bodies are read raw (`auto_decode="none"`) and decoded here (`_decoded`):
    # fastwarc, decoding a record's body itself, fails on the next record's header
    # ("Invalid WARC header") once the body decodes to 64 MB or more, read or
    # skipped -- a small gzip bomb lost the whole rest of the archive.  Raw, a record
    # is skipped by its Content-Length, whatever it holds.
    records = ArchiveIterator(
        source, record_types=WarcRecordType.any_type, parse_http=True, auto_decode="none"
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
            item, intact = _item(record, ref, id_from, max_bytes, statuses, seen)
            held = (item, ref), record.stream_pos, intact
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
    (item, ref), offset, intact = held
    where = f"record {count} (at byte {offset:,}"
    where += f", {ref.url})" if ref.url else ")"
    if intact:
        yield item, ref
        yield _corrupt(f"{damage}, after {where}"), WarcRef(None, None)
        return
    doc_id = item.id if isinstance(item, Page | Rejected) else None
    yield _corrupt(f"{damage}; {where} is next to the damage and was not checked", doc_id), ref


def _corrupt(what: str, doc_id: str | int | None = None) -> Rejected:
    """The error record of a damaged archive: `doc_id` is the page the damage cost
    (read but not trusted), None when it cost none."""
    return Rejected(
        CORRUPT_WARC,
        f"WARC archive is damaged or cut short: {what}; the rest of the archive is unread",
        doc_id,
    )


def html_pages(
    stream: IO[bytes], *, max_bytes: int = MAX_DOC_BYTES, statuses: HttpStatuses = "2xx"
) -> Iterator[tuple[WarcRef, bytes | Rejected]]:
    """The HTML payloads of an archive's response records, in order, with where each
    came from, or why a page cannot be sent (over `max_bytes`, decoded or not; no
    URI; a damaged archive, last): what `streamdedup produce` sends as HTML messages (a
    worker extracts the text).  Other records are passed over.  The same reader as
    `dedup`'s, so a compression bomb costs at most `max_bytes` here too."""
    for item, ref in read_pages(stream, max_bytes=max_bytes, statuses=statuses):
        if isinstance(item, Page):
            yield ref, item.payload
        elif isinstance(item, Rejected):
            yield ref, item


def _item(
    record: WarcRecord,
    ref: WarcRef,
    id_from: WarcId,
    max_bytes: int,
    statuses: HttpStatuses,
    seen: set[bytes],
) -> tuple[Page | Rejected | Skipped, bool]:
    """What one record becomes (see the module docstring), and whether that holds
    whatever followed the record: true when it was decided from the record's headers
    alone, or from a body that matches the record's payload digest."""
    from fastwarc.warc import WarcRecordType

    if record.record_type != WarcRecordType.response:
        kind = record.headers.get("WARC-Type") or "unknown"
        return Skipped(NOT_RESPONSE, f"a {kind} record, not a response", ref), True
    ctype = (record.http_content_type or "").lower() if record.is_http else ""
    if ctype not in HTML_TYPES:
        what = f"a {ctype} payload" if ctype else "no HTTP Content-Type"
        return Skipped(NOT_HTML, f"{what}, not HTML", ref), True
    status = record.http_headers.status_code
    if statuses == "2xx" and not (status is not None and 200 <= status < 300):
        what = f"HTTP status {status}" if status is not None else "no HTTP status"
        return Skipped(NOT_2XX, f"{what}, not a successful response (2xx)", ref), True
    doc_id = check_id(ref.url if id_from == "uri" else ref.record_id, _ID_HEADER[id_from])
    if isinstance(doc_id, Rejected):
        if ref.url is None and id_from == "uri":
            return Rejected(MISSING_ID, "response record has no WARC-Target-URI"), True
        return doc_id, True
    if id_from == "record-id":
        key = hashlib.blake2b(str(doc_id).encode(), digest_size=16).digest()
        if key in seen:
            return Rejected(
                DUPLICATE_RECORD_ID,
                f"WARC-Record-ID {doc_id} was read before in this run: a record id names "
                "one record, and a repeat would replace the earlier page in the index; "
                "not checked",
                doc_id,
            ), True
        seen.add(key)
    if record.content_length > max_bytes:
        return Rejected(
            TOO_LARGE,
            f"record is {record.content_length:,} bytes, over the limit of {max_bytes:,}",
            doc_id,
        ), True
    digest = record.headers.get("WARC-Payload-Digest")
    intact = bool(digest) and record.verify_payload_digest(consume=False)
    body = record.reader.read()  # no more than the record's length (checked above)
    try:
        payload = _decoded(record, body, max_bytes)
    except OSError as exc:  # a body its encoding does not describe, an unknown encoding
        return Rejected(UNDECODABLE, f"page body cannot be decoded: {exc}", doc_id), intact
    if len(payload) > max_bytes:
        return Rejected(
            TOO_LARGE, f"record's decoded body is over the limit of {max_bytes:,} bytes", doc_id
        ), intact
    return Page(doc_id, payload, record.http_charset), intact


def _decoded(record: WarcRecord, body: bytes, max_bytes: int) -> bytes:
    """The body with its transfer and content encodings undone (chunked, gzip,
    deflate, brotli: wget and other crawlers store the body as the server sent it),
    no more than `max_bytes + 1` bytes of it -- a small compressed body can expand far
    beyond the limit (a "zip bomb"), and no more than that is ever decoded.  fastwarc's
    streaming readers decode, stacked in the reverse of the order the server applied
    the encodings (content codings, then transfer codings); `OSError` when they
    cannot, or an encoding is unknown.  (Not fastwarc's `auto_decode`: on the
    archive's record it loses the archive past 64 MB, see `read_pages`, and on a
    record built from the body it decodes the whole body at once.)"""
    from fastwarc.stream_io import BrotliReader, ChunkedReader, GzipReader

    headers = record.http_headers
    codings = [
        coding.strip().lower()
        for name in ("Content-Encoding", "Transfer-Encoding")
        for value in headers.get_multiple(name)
        for coding in value.split(",")
    ]
    codings = [c for c in codings if c not in ("", "identity")]
    if not codings:
        return body
    reader: Any = io.BytesIO(body)
    for coding in reversed(codings):
        if coding == "chunked":
            reader = ChunkedReader(reader)
        elif coding in ("gzip", "x-gzip"):
            reader = GzipReader(reader)
        elif coding == "deflate":
            reader = GzipReader(reader, zlib=True)
        elif coding == "br":
            reader = BrotliReader(reader)
        else:
            raise OSError(f"unsupported HTTP encoding {coding!r}")
    parts: list[bytes] = []
    left = max_bytes + 1
    while left > 0 and (part := reader.read(left)):
        parts.append(part)
        left -= len(part)
    return b"".join(parts)


_ID_HEADER = {"uri": "WARC-Target-URI", "record-id": "WARC-Record-ID"}
