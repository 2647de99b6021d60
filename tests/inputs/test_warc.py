"""WARC archives -> documents (`inputs.warc`), on archives of real pages written by
warcio: record order, ids, skips, and damage -- every cut of an archive, bad headers,
a page over the size limit, arbitrary bytes -- never raising, never giving a verdict
on half a page, and keeping every record before the damage."""

from __future__ import annotations

import gzip
import io
import re
import subprocess
import sys
import zlib
from pathlib import Path
from typing import Any

import pytest
from fastwarc.warc import ArchiveIterator
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamdedup.inputs import is_warc, sniff_warc
from streamdedup.inputs.html import page_text
from streamdedup.inputs.warc import (
    NOT_2XX,
    NOT_HTML,
    NOT_RESPONSE,
    Skipped,
    html_pages,
    read_warc,
)
from streamdedup.models import (
    BINARY_CONTENT,
    CORRUPT_WARC,
    DUPLICATE_RECORD_ID,
    TOO_DEEP,
    TOO_LARGE,
    Document,
    Rejected,
)
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
    """The record just before the garbage is whole (its payload digest says so): it
    keeps its verdict, and the damage gets an error record of its own, with no id."""
    data = write_warc(tmp_path / "a.warc", real_records()).read_bytes()
    starts = record_starts(data)
    broken = data[: starts[3]] + b"GARBAGE\r\n\r\n" + data[starts[3] :]
    got = items(broken)
    docs = [i for i in got if isinstance(i, Document)]
    assert [d.id for d in docs] == [f"https://example.org/{p}" for p in PAGES[:2]]
    assert docs[1].text == page_text(page(PAGES[1]))
    assert isinstance(got[-1], Rejected) and got[-1].reason == CORRUPT_WARC
    assert got[-1].id is None and "after record 3" in got[-1].message
    assert "was not checked" not in got[-1].message


def _without_digests(data: bytes) -> bytes:
    """A plain archive's records without their digests (header lines only: the
    records' Content-Lengths stay right)."""
    return re.sub(rb"WARC-(Payload|Block)-Digest: [^\r]*\r\n", b"", data)


def test_a_record_before_damage_that_cannot_be_proved_whole_is_the_error_record(
    tmp_path: Path,
) -> None:
    """Without a digest nothing tells a record followed by garbage from one cut short
    that ran into it: the page is not checked, and the error record carries its id."""
    data = _without_digests(write_warc(tmp_path / "a.warc", real_records()).read_bytes())
    starts = record_starts(data)
    got = items(data[: starts[3]] + b"GARBAGE\r\n\r\n" + data[starts[3] :])
    assert [i.id for i in got if isinstance(i, Document)] == [f"https://example.org/{PAGES[0]}"]
    assert isinstance(got[-1], Rejected) and got[-1].reason == CORRUPT_WARC
    assert got[-1].id == f"https://example.org/{PAGES[1]}"
    assert "record 3" in got[-1].message and "was not checked" in got[-1].message


def test_the_error_record_of_damage_after_a_skipped_record_has_no_id(tmp_path: Path) -> None:
    """A skipped record next to the damage is still skipped (its headers decided it);
    the error record's id is null whenever the damage cost no page."""
    records = [Rec("https://e/ok", page("valgrind-faq")), Rec("https://e/x.pdf", b"%PDF", "a/pdf")]
    data = write_warc(tmp_path / "a.warc", records).read_bytes() + b"GARBAGE\r\n\r\n"
    got = items(data)
    assert [type(i).__name__ for i in got] == ["Skipped", "Document", "Skipped", "Rejected"]
    error = got[-1]
    assert isinstance(error, Rejected) and error.reason == CORRUPT_WARC and error.id is None


def _bomb(decoded_mb: int, wbits: int) -> bytes:
    """A page compressed (gzip: wbits 31, zlib deflate: 15) from `decoded_mb` MB of
    markup to about a thousandth of that, without holding the markup."""
    squeeze = zlib.compressobj(6, zlib.DEFLATED, wbits)
    block = b"<p>" + b"a " * (1 << 19)
    parts = [squeeze.compress(b"<html><body>")]
    parts += [squeeze.compress(block) for _ in range(decoded_mb)]
    return b"".join([*parts, squeeze.flush()])


@pytest.mark.parametrize("name", ["a.warc", "a.warc.gz"])
@pytest.mark.parametrize(("encoding", "wbits"), [("gzip", 31), ("deflate", 15)])
def test_a_compression_bomb_past_64_mb_is_one_too_large_page_and_the_archive_goes_on(
    tmp_path: Path, name: str, encoding: str, wbits: int
) -> None:
    """fastwarc, decoding a body itself, gave up on the next record's header once a
    body decoded to 64 MB or more: the rest of the archive was lost."""
    records = [
        Rec("https://e/before", page("valgrind-faq")),
        Rec("https://e/bomb", _bomb(80, wbits), http_headers=(("Content-Encoding", encoding),)),
        Rec("https://e/after", page("nodejs-synopsis")),
    ]
    path = write_warc(tmp_path / name, records)
    got = [i for i, _ in read_warc(path.open("rb")) if not isinstance(i, Skipped)]
    assert [type(i).__name__ for i in got] == ["Document", "Rejected", "Document"]
    bomb = got[1]
    assert isinstance(bomb, Rejected) and bomb.reason == TOO_LARGE and bomb.id == "https://e/bomb"
    assert "decoded" in bomb.message
    assert got[2].id == "https://e/after"  # type: ignore[union-attr]
    sent = list(html_pages(path.open("rb")))  # what produce sends: the same reader
    assert [type(p).__name__ for _, p in sent] == ["bytes", "Rejected", "bytes"]


# The peak of this process's own memory (VmHWM): getrusage's ru_maxrss keeps, across
# fork and exec, the peak of the (xdist worker) process that started it.
_PEAK = """
import re, sys
from streamdedup.inputs.warc import read_warc
got = [type(i).__name__ for i, _ in read_warc(open(sys.argv[1], "rb"), max_bytes=1_000_000)]
hwm = re.search(r"VmHWM:\\s+(\\d+) kB", open("/proc/self/status").read())
print(got.count("Document"), int(hwm.group(1)) // 1024)
"""


def test_a_compression_bomb_is_read_in_bounded_memory(tmp_path: Path) -> None:
    """A body decoding to 300 MB costs no more memory than the limit (1 MB here)."""
    records = [
        Rec("https://e/bomb", _bomb(300, 31), http_headers=(("Content-Encoding", "gzip"),)),
        Rec("https://e/after", page("nodejs-synopsis")),
    ]
    path = write_warc(tmp_path / "a.warc.gz", records)
    out = subprocess.run(
        [sys.executable, "-c", _PEAK, str(path)], capture_output=True, check=True
    ).stdout.split()
    assert int(out[0]) == 1
    assert int(out[1]) < 200, f"peak RSS {int(out[1])} MB"


def test_non_2xx_responses_are_skipped_unless_asked(tmp_path: Path) -> None:
    """A 404 page is the site's error page, not the page at that URL: by default only
    successful responses are pages; `statuses="any"` takes every response."""
    records = [
        Rec("https://e/ok", page("valgrind-faq")),
        Rec("https://e/gone", page("nodejs-synopsis"), status="404 Not Found"),
        Rec("https://e/moved", b"<p>moved</p>", status="301 Moved Permanently"),
        Rec("https://e/made", page("nodejs-punycode"), status="201 Created"),
    ]
    data = write_warc(tmp_path / "a.warc", records).read_bytes()
    got = items(data)[1:]
    assert [(type(i).__name__, getattr(i, "reason", None)) for i in got] == [
        ("Document", None),
        ("Skipped", NOT_2XX),
        ("Skipped", NOT_2XX),
        ("Document", None),
    ]
    assert isinstance(got[1], Skipped) and "404" in got[1].message
    every = items(data, statuses="any")[1:]
    assert [i.id for i in every if isinstance(i, Document)] == [r.uri for r in records]
    assert [ref.url for ref, _ in html_pages(io.BytesIO(data))] == [
        "https://e/ok",
        "https://e/made",
    ]


def test_a_repeated_record_id_is_an_error_record_under_record_ids(tmp_path: Path) -> None:
    """A WARC-Record-ID names one record; a repeat (in this archive or an earlier one
    of the same run: `seen`) would replace the earlier page in the index."""
    rid = "<urn:uuid:11111111-2222-4333-8444-555555555555>"
    first = write_warc(
        tmp_path / "a.warc",
        [
            Rec("https://e/a", page("valgrind-faq"), record_id=rid),
            Rec("https://e/b", page("nodejs-synopsis"), record_id=rid),
        ],
    )
    second = write_warc(
        tmp_path / "b.warc.gz", [Rec("https://e/c", page("nodejs-punycode"), record_id=rid)]
    )
    seen: set[bytes] = set()
    got = items(first.read_bytes(), id_from="record-id", seen=seen)[1:]
    got += items(second.read_bytes(), id_from="record-id", seen=seen)[1:]
    assert isinstance(got[0], Document) and got[0].id == rid
    assert [getattr(i, "reason", None) for i in got[1:]] == [DUPLICATE_RECORD_ID] * 2
    assert all(isinstance(i, Rejected) and i.id == rid for i in got[1:])
    # by URI, a repeated record id is nobody's business
    assert all(isinstance(i, Document) for i in items(first.read_bytes())[1:])


def test_a_page_nested_too_deep_is_an_error_record_and_the_next_goes_on(tmp_path: Path) -> None:
    deep = b"<html><body>" + b"<div>" * 20_000 + b"<p>deep</p>" + b"</div>" * 20_000
    records = [Rec("https://e/deep", deep), Rec("https://e/ok", page("valgrind-faq"))]
    got = items(write_warc(tmp_path / "a.warc", records).read_bytes())[1:]
    assert isinstance(got[0], Rejected) and got[0].reason == TOO_DEEP
    assert got[0].id == "https://e/deep"
    assert isinstance(got[1], Document)


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


@pytest.mark.parametrize(
    ("data", "warc"),
    [
        (b"WARC/1.1\r\nWARC-Type: warcinfo\r\n", True),
        (b"WARC/1.0\r\n", True),
        (gzip.compress(b"WARC/1.1\r\n", mtime=0), True),
        (b'{"id": 1, "text": "WARC/1.1"}\n', False),
        (b"WARC", False),
        (b"", False),
    ],
)
@pytest.mark.parametrize("buffer", [2, 8192])  # a pipe that has 2 bytes at hand, or more
def test_a_warc_archive_is_told_by_its_first_bytes(data: bytes, warc: bool, buffer: int) -> None:
    """stdin has no name: the first bytes tell, and every byte is still read after."""
    told, stream = sniff_warc(io.BufferedReader(io.BytesIO(data), buffer_size=buffer))
    assert told is warc
    assert stream.read() == data


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
