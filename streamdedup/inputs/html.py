"""A fetched page's bytes -> the text that is shingled, or why not.

Crawlers hand us HTML, not text.  resiliparse does the work in native code (the
lexbor HTML parser and uchardet, bound in Rust; chosen over trafilatura by
measurement: see the README's dependency notes): `resiliparse.parse.encoding` finds
the charset (the HTTP header's, else the page's `<meta charset>`, else uchardet's
guess) and decodes, and
`resiliparse.extract.html2text` turns the DOM into text -- with `main_content=True`
(`--extract main`) it drops navigation, headers, footers, sidebars and cookie banners,
so that the same article under two site templates shingles alike and two articles
under one template do not.

Nothing here raises on bad input: a body that is binary (an image or a compressed
stream served as text/html) becomes a `Rejected` with `binary_content`; a page whose
bytes no charset decodes to text becomes `undecodable_text`.  An empty extract is a
`Document` with empty text: the engine gives it the `unique` verdict with the reason
`empty` (the shingling contract), since an empty page is not bad input.

Main-content extraction costs time in proportion to the number of elements times
their depth (it weighs each element against its ancestors): 10,000 nested `<div>`s
took 2-5 s, 36,000 took 30 s, where `all` takes milliseconds.  A page nested deeper
than `MAX_MAIN_DEPTH` is therefore refused with `too_deep` under `--extract main`,
before extraction starts (the depth is found by lexbor's selector engine, in native
code, in well under a millisecond): one hostile page must not stall a worker past
its poll interval.
"""

from __future__ import annotations

import re
from typing import Literal

from streamdedup.models import BINARY_CONTENT, MALFORMED_HTML, TOO_DEEP, UNDECODABLE, Rejected

Extract = Literal["main", "all"]
EXTRACT_MODES: tuple[Extract, ...] = ("main", "all")

# How much of a page the binary check and the charset detector look at: the start
# of a file tells an image, a gzip stream or a PDF from markup, and reading a fixed
# sample keeps the check's cost flat for large pages.
SAMPLE_BYTES = 8192
# Share of a decoded sample that may be replacement or control characters before
# the page counts as binary.  Real pages have next to none; mis-decoded text (one
# wrong byte per accented letter) stays far below; compressed or image bytes come
# out at 30-60%.
MAX_GARBAGE = 0.10
_GARBAGE = re.compile("[\x00-\x08\x0b\x0e-\x1f\x7f\ufffd]")
# Deepest element nesting that main-content extraction is run on.  Real pages stay
# far below (a typical page nests 10-40 levels; Lighthouse calls more than 32
# excessive; Chrome's parser stops nesting at 512); at this depth a 550 KB page
# costs under a second, about three times a flat page of that size, where 2,500
# levels cost 8 s and 36,000 levels 30 s.
MAX_MAIN_DEPTH = 256
# matches an element with MAX_MAIN_DEPTH element ancestors (`*>*>...>*`)
_TOO_DEEP = ">".join(["*"] * (MAX_MAIN_DEPTH + 1))


# resiliparse is imported where it is used: only HTML input needs it, and every
# `dedup` run imports this module (a few ms of a one-second run of short documents).


def charset(data: bytes, declared: str | None = None) -> str:
    """The page's encoding (a WHATWG name): the declared one (the HTTP header's
    charset) if it names a known encoding, else the `<meta charset>` within the first
    1 KB, else uchardet's guess (UTF-8 when it has none)."""
    from resiliparse.parse.encoding import detect_encoding, map_encoding_to_html5

    if declared:
        known = map_encoding_to_html5(declared.strip().strip("\"'"), fallback_utf8=False)
        if known:
            return known
    return detect_encoding(data, max_len=SAMPLE_BYTES * 8, from_html_meta=True) or "utf-8"


def decode_page(data: bytes, declared: str | None = None) -> str | Rejected:
    """The page's bytes as text, or why not (binary body, undecodable bytes)."""
    from resiliparse.parse.encoding import bytes_to_str

    # no text encoding a crawler meets (UTF-16 pages excepted, which carry a BOM)
    # puts NUL bytes in markup: an image, an archive or a PDF labelled text/html
    if b"\x00" in data[:SAMPLE_BYTES] and not data.startswith((b"\xff\xfe", b"\xfe\xff")):
        return Rejected(BINARY_CONTENT, "page body is binary (NUL bytes), not HTML")
    encoding = charset(data, declared)
    try:
        text = bytes_to_str(data, encoding, errors="replace")
    except (LookupError, UnicodeError, TypeError) as exc:
        return Rejected(UNDECODABLE, f"page cannot be decoded as {encoding}: {exc}")
    sample = text[:SAMPLE_BYTES]
    garbage = len(_GARBAGE.findall(sample))
    if sample and garbage > MAX_GARBAGE * len(sample):
        share = garbage / len(sample)
        return Rejected(
            BINARY_CONTENT,
            f"page body is binary, not HTML: {share:.0%} of its first characters are "
            f"control or undecodable bytes (as {encoding})",
        )
    return text


def extract_text(html: str, extract: Extract = "main") -> str | Rejected:
    """The text of a page that is shingled: its main content, or all visible text.

    Paragraph breaks are kept (`preserve_formatting`) so that words of adjacent blocks
    are not glued into one token; list bullets and alt texts are dropped, since they
    are decoration, not content, and would add template shingles to every page.  The
    page is parsed once, for the depth check and the extraction alike."""
    from resiliparse.extract.html2text import extract_plain_text
    from resiliparse.parse.html import HTMLTree

    try:
        tree = HTMLTree.parse(html)
        document = tree.document
        main = extract == "main"
        if main and document is not None and document.query_selector(_TOO_DEEP) is not None:
            return Rejected(
                TOO_DEEP,
                f"HTML nested more than {MAX_MAIN_DEPTH} elements deep: main-content "
                "extraction would take time growing with the depth (--extract all reads "
                "such pages)",
            )
        return extract_plain_text(
            tree,
            preserve_formatting=True,
            main_content=main,
            list_bullets=False,
            alt_texts=False,
        )
    except Exception as exc:  # resiliparse's HTMLParserException has no stable import path
        return Rejected(MALFORMED_HTML, f"HTML cannot be parsed: {exc}")


def page_text(
    data: bytes, extract: Extract = "main", declared: str | None = None
) -> str | Rejected:
    """Bytes of a fetched page -> the text to shingle (`decode_page`, `extract_text`)."""
    text = decode_page(data, declared)
    if isinstance(text, Rejected):
        return text
    return extract_text(text, extract)
