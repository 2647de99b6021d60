"""WARC archives -> documents (`inputs.warc`), on archives of real pages written by
warcio: record order, ids, skips, and damage -- every cut of an archive, bad headers,
a page over the size limit, arbitrary bytes -- never raising, never giving a verdict
on half a page, and keeping every record before the damage."""

from __future__ import annotations

import gzip
import io
import zlib
from pathlib import Path
from typing import Any

import pytest
from fastwarc.warc import ArchiveIterator
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamdedup.inputs import is_warc
from streamdedup.inputs.html import page_text
from streamdedup.inputs.warc import NOT_HTML, NOT_RESPONSE, Skipped, html_pages, read_warc
from streamdedup.models import BINARY_CONTENT, CORRUPT_WARC, TOO_LARGE, Document, Rejected
from tests.support.pages import Rec, page, write_warc

PAGES = ["nodejs-punycode", "valgrind-faq", "nodejs-synopsis", "valgrind-quick-start"]


def real_records() -> list[Rec]:
    return [Rec(f"https://example.org/{name}", page(name)) for name in PAGES]


def items(data: bytes, **kw: object) -> list[Document | Rejected | Skipped]:
    return [item for item, _ in read_warc(io.BytesIO(data), **kw)]  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["crawl.warc", "crawl.warc.gz"])
def test_response_records_in_order_with_their_extracted_text(tmp_path: Path, name: str) -> None:
    path = write_warc(tmp_path / name, real_records())
    got = list(read_warc(path.open("rb")))
    skipped = [i for i, _ in got if isinstance(i, Skipped)]
    docs = [(i, ref) for i, ref in got if isinstance(i, Document)]
    assert [s.reason for s in skipped] == [NOT_RESPONSE]  # the warcinfo record
    assert [d.id for d, _ in docs] == [f"https://example.org/{n}" for n in PAGES]
    assert [d.text for d, _ in docs] == [page_text(page(n)) for n in PAGES]
    assert all(
        ref.url == d.id and (ref.record_id or "").startswith("<urn:uuid:") for d, ref in docs
    )
    assert len(got) == len(PAGES) + 1


def test_ids_from_record_ids(tmp_path: Path) -> None:
    path = write_warc(tmp_path / "a.warc.gz", real_records())
    docs = [
        (i, r)
        for i, r in read_warc(path.open("rb"), id_from="record-id")
        if isinstance(i, Document)
    ]
    assert [d.id for d, _ in docs] == [r.record_id for _, r in docs]
    assert len({d.id for d, _ in docs}) == len(PAGES)


def test_non_html_and_non_response_records_are_skipped(tmp_path: Path) -> None:
    records = [
        Rec("https://example.org/a", page("valgrind-faq")),
        Rec("https://example.org/a", b"", kind="request"),
        Rec("https://example.org/doc.pdf", b"%PDF-1.7 ...", "application/pdf"),
        Rec("https://example.org/untyped", page("valgrind-faq"), content_type=""),
        Rec("https://example.org/meta", b"fetch info", kind="metadata"),
        Rec("https://example.org/x", page("nodejs-synopsis"), "application/xhtml+xml"),
    ]
    got = items(write_warc(tmp_path / "a.warc", records).read_bytes())
    kinds = [(type(i).__name__, getattr(i, "reason", None)) for i in got]
    assert kinds == [
        ("Skipped", NOT_RESPONSE),  # warcinfo
        ("Document", None),
        ("Skipped", NOT_RESPONSE),  # request
        ("Skipped", NOT_HTML),
        ("Skipped", NOT_HTML),  # no Content-Type: not guessed
        ("Skipped", NOT_RESPONSE),  # metadata
        ("Document", None),
    ]
    pdf = got[3]
    assert isinstance(pdf, Skipped) and "application/pdf" in pdf.message
    assert pdf.ref.url == "https://example.org/doc.pdf"


def test_a_binary_page_is_an_error_with_its_id_and_the_next_page_goes_on(tmp_path: Path) -> None:
    records = [
        Rec("https://example.org/img", gzip.compress(page("valgrind-faq"))),
        Rec("https://example.org/ok", page("valgrind-faq")),
    ]
    got = [i for i in items(write_warc(tmp_path / "a.warc.gz", records).read_bytes())]
    assert isinstance(got[1], Rejected) and got[1].reason == BINARY_CONTENT
    assert got[1].id == "https://example.org/img"
    assert isinstance(got[2], Document) and got[2].id == "https://example.org/ok"


def test_a_50_mb_page_is_rejected_without_being_read(tmp_path: Path) -> None:
    big = page("nodejs-punycode") * (50_000_000 // len(page("nodejs-punycode")) + 1)
    records = [
        Rec("https://example.org/big", big),
        Rec("https://example.org/ok", page("valgrind-faq")),
    ]
    path = write_warc(tmp_path / "big.warc", records)
    got = [i for i, _ in read_warc(path.open("rb"))]
    assert isinstance(got[1], Rejected) and got[1].reason == TOO_LARGE
    assert got[1].id == "https://example.org/big" and "over the limit" in got[1].message
    assert isinstance(got[2], Document) and got[2].id == "https://example.org/ok"


def _deflate(data: bytes) -> bytes:
    return zlib.compress(data)


def _chunked(data: bytes) -> bytes:
    cut = len(data) // 2
    parts = (data[:cut], data[cut:])
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"


@pytest.mark.parametrize(
    ("encode", "header"),
    [
        (gzip.compress, ("Content-Encoding", "gzip")),
        (_deflate, ("Content-Encoding", "deflate")),
        (_chunked, ("Transfer-Encoding", "chunked")),
    ],
    ids=["gzip", "deflate", "chunked"],
)
def test_encoded_bodies_are_decoded_as_crawlers_store_them(
    tmp_path: Path, encode: Any, header: tuple[str, str]
) -> None:
    """wget and other crawlers keep the body as the server sent it."""
    body = page("nodejs-synopsis")
    records = [Rec("https://e/enc", encode(body), http_headers=(header,))]
    got = [i for i in items(write_warc(tmp_path / "a.warc", records).read_bytes())][1:]
    assert isinstance(got[0], Document) and got[0].text == page_text(body)
    pages = list(html_pages(write_warc(tmp_path / "b.warc", records).open("rb")))
    assert pages[0][1] == body  # produce sends the page's HTML, decoded


def test_a_compression_bomb_is_too_large_once_decoded(tmp_path: Path) -> None:
    bomb = gzip.compress(b"<p>" + b"a " * 5_000_000 + b"</p>")  # 10 MB in about 10 KB
    records = [Rec("https://e/bomb", bomb, http_headers=(("Content-Encoding", "gzip"),))]
    data = write_warc(tmp_path / "a.warc", records).read_bytes()
    (got,) = [i for i in items(data, max_bytes=1_000_000) if not isinstance(i, Skipped)]
    assert isinstance(got, Rejected) and got.reason == TOO_LARGE and "decoded" in got.message


def record_starts(data: bytes) -> list[int]:
    """Where each record (or gzip member) of a complete archive starts, and its end."""
    return [r.stream_pos for r in ArchiveIterator(io.BytesIO(data))] + [len(data)]


@pytest.mark.parametrize("name", ["a.warc", "a.warc.gz"])
def test_every_cut_of_an_archive_keeps_the_records_before_it(tmp_path: Path, name: str) -> None:
    """Cut the archive at (many) points: what is read is always a prefix of the whole
    archive's documents, with the same texts; a cut anywhere but between records
    ends in one `corrupt_warc` error record; nothing raises."""
    small = [
        Rec(f"https://example.org/{n}", page(n))
        for n in ("valgrind-faq", "valgrind-dist.readme-s390", "valgrind-faq")
    ]
    data = write_warc(tmp_path / name, small).read_bytes()
    full = [i for i in items(data) if isinstance(i, Document)]
    starts = record_starts(data)
    step = max(1, len(data) // 400)
    for cut in [*range(0, len(data), step), *[s - 1 for s in starts[1:]], *starts]:
        got = items(data[:cut])
        docs = [i for i in got if isinstance(i, Document)]
        # never half a page: what is read is the whole archive's first documents
        assert [(d.id, d.text) for d in docs] == [(d.id, d.text) for d in full[: len(docs)]]
        errors = [i for i in got if isinstance(i, Rejected)]
        assert all(e.reason == CORRUPT_WARC for e in errors) and len(errors) <= 1
        if errors:
            assert got[-1] is errors[0]
        # never lost silently: every record wholly before the cut is read, or reported
        complete = sum(1 for end in starts[2:] if end <= cut)
        assert len(docs) >= complete or errors
        # a cut inside a record (not in the few bytes that end one) is reported
        if min(abs(cut - s) for s in starts) > 8:
            assert errors, f"cut at {cut} of {len(data)} not reported"


def test_a_bad_header_in_the_middle_stops_with_an_error_after_the_records_before(
    tmp_path: Path,
) -> None:
    data = write_warc(tmp_path / "a.warc", real_records()).read_bytes()
    starts = record_starts(data)
    broken = data[: starts[3]] + b"GARBAGE\r\n\r\n" + data[starts[3] :]
    got = items(broken)
    docs = [i for i in got if isinstance(i, Document)]
    assert [d.id for d in docs] == [f"https://example.org/{PAGES[0]}"]  # record 2: next to it
    assert isinstance(got[-1], Rejected) and got[-1].reason == CORRUPT_WARC
    assert got[-1].id == f"https://example.org/{PAGES[1]}"
    assert "was not checked" in got[-1].message


def test_not_an_archive_at_all(tmp_path: Path) -> None:
    got = items(page("valgrind-faq"))
    assert len(got) == 1 and isinstance(got[0], Rejected) and got[0].reason == CORRUPT_WARC


def test_html_pages_for_produce(tmp_path: Path) -> None:
    records = [*real_records(), Rec("https://example.org/doc.pdf", b"%PDF", "application/pdf")]
    path = write_warc(tmp_path / "a.warc.gz", records)
    got = list(html_pages(path.open("rb")))
    assert [(r.url, body) for r, body in got] == [
        (f"https://example.org/{n}", page(n)) for n in PAGES
    ]


def test_is_warc_by_name() -> None:
    assert is_warc("a.warc") and is_warc("x/CRAWL.WARC.GZ") and not is_warc("a.jsonl")
    assert not is_warc("a.warc.zst")


@pytest.fixture(scope="module")
def archive(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    recs = [Rec(f"https://e/{n}", page(n)) for n in ("valgrind-faq", "valgrind-dist.readme-s390")]
    return write_warc(tmp_path_factory.mktemp("w") / "a.warc.gz", recs).read_bytes()


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=4000))
def test_arbitrary_bytes_never_raise(data: bytes) -> None:
    for item in items(data):
        assert isinstance(item, Document | Rejected | Skipped)


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.data())
def test_damaged_archives_never_raise(archive: bytes, data: st.DataObject) -> None:
    """Flip, drop or insert bytes anywhere in a real gzipped archive."""
    buf = bytearray(archive)
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(buf) - 1))
        op = data.draw(st.sampled_from(["flip", "drop", "insert"]))
        if op == "flip":
            buf[at] ^= data.draw(st.integers(1, 255))
        elif op == "drop":
            del buf[at : at + data.draw(st.integers(1, 64))]
        else:
            buf[at:at] = data.draw(st.binary(min_size=1, max_size=32))
    got = items(bytes(buf))
    assert all(isinstance(i, Document | Rejected | Skipped) for i in got)
    assert sum(isinstance(i, Rejected) and i.reason == CORRUPT_WARC for i in got) <= 1
