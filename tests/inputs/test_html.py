"""HTML pages -> text (`inputs.html`), on real pages (tests/data/html) and on arbitrary
bytes: main-content extraction keeps the article and drops the template, charsets are
found and decoded, binary bodies are rejected, nothing raises."""

from __future__ import annotations

import gzip
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamdedup.config import Fields, ShingleSpec
from streamdedup.inputs.decode import decode_json, decode_message
from streamdedup.inputs.html import MAX_MAIN_DEPTH, decode_page, extract_text, page_text
from streamdedup.models import (
    BINARY_CONTENT,
    INVALID_UTF8,
    MISSING_ID,
    TOO_DEEP,
    TOO_LARGE,
    Document,
    Rejected,
)
from streamdedup.sketch.shingle import reference_shingles
from tests.support.pages import NODE_ARTICLES, page, short_items, syndicated

SPEC = ShingleSpec()


def jaccard(a: bytes, b: bytes, extract: str) -> float:
    ta, tb = page_text(a, extract), page_text(b, extract)  # type: ignore[arg-type]
    assert isinstance(ta, str) and isinstance(tb, str)
    sa, sb = reference_shingles(ta, SPEC), reference_shingles(tb, SPEC)
    return len(sa & sb) / len(sa | sb)


@pytest.mark.parametrize("name", NODE_ARTICLES)
def test_the_same_article_under_two_templates_is_alike_in_its_main_content(name: str) -> None:
    original, copy = syndicated(name)
    main, everything = jaccard(original, copy, "main"), jaccard(original, copy, "all")
    assert main >= 0.8, main  # a near-duplicate at the default threshold
    assert everything < 0.8, everything  # the Node.js sidebar and TOC are not in the copy
    assert main > everything


def test_two_articles_in_one_template_differ_in_main_content_but_not_in_all_text() -> None:
    first, second = short_items()
    assert jaccard(first, second, "main") < 0.1
    assert jaccard(first, second, "all") >= 0.8  # the template outweighs the articles


def test_main_content_drops_the_navigation() -> None:
    html = page("nodejs-punycode")
    main, everything = page_text(html, "main"), page_text(html, "all")
    assert isinstance(main, str) and isinstance(everything, str)
    assert "Skip to content" in everything and "Skip to content" not in main
    assert "Asynchronous context tracking" in everything  # a sidebar link
    assert "Asynchronous context tracking" not in main
    assert "The punycode module is a bundled version of the Punycode.js module" in main


@pytest.mark.parametrize("encoding", ["windows-1252", "iso-8859-2", "shift_jis", "utf-16"])
@pytest.mark.parametrize("declared", ["meta", "http", "none"])
def test_a_page_in_another_charset_gives_the_same_text(encoding: str, declared: str) -> None:
    text = "Ärger über Öl: café, naïve, Ångström. Žluťoučký kůň. 日本語のテキスト。"
    text = "".join(c for c in text if _encodable(c, encoding))
    meta = f'<meta charset="{encoding}">' if declared == "meta" else ""
    body = f"<title>t</title></head><body><p>{text * 20}</p></body></html>"
    data = f"<html><head>{meta}{body}".encode(encoding)
    expected = page_text(f"<html><head>{body}".encode(), "all")
    got = page_text(data, "all", encoding if declared == "http" else None)
    if declared == "none" and encoding in ("iso-8859-2", "windows-1252"):
        # without a declaration the single-byte charsets are a guess (uchardet):
        # the ASCII letters and the structure come through whatever the guess
        assert isinstance(got, str) and "ber" in got and "ngstr" in got
        return
    assert got == expected


def _encodable(c: str, encoding: str) -> bool:
    try:
        c.encode(encoding)
    except UnicodeEncodeError:
        return False
    return True


def test_the_http_charset_wins_over_a_wrong_meta_tag() -> None:
    html = '<meta charset="utf-8"><p>' + "Ärger über Öl " * 30 + "</p>"
    got = page_text(html.encode("windows-1252"), "all", "windows-1252")
    assert isinstance(got, str) and "Ärger über Öl" in got


def test_an_unknown_declared_charset_falls_back_to_detection() -> None:
    html = "<p>" + "plain words here " * 30 + "</p>"
    got = page_text(html.encode(), "all", "x-no-such-charset")
    assert isinstance(got, str) and "plain words here" in got


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b"\x89PNG\r\n\x1a\n" + zlib.compress(bytes(range(256)) * 100), id="png"),
        pytest.param(gzip.compress(page("nodejs-punycode")), id="gzip"),
        pytest.param(zlib.compress(page("valgrind-faq")), id="deflate"),
        pytest.param(b"%PDF-1.7\n" + bytes(range(256)) * 40, id="pdf"),
    ],
)
def test_binary_bodies_labelled_html_are_rejected(body: bytes) -> None:
    got = page_text(body)
    assert isinstance(got, Rejected) and got.reason == BINARY_CONTENT
    assert "binary" in got.message


def test_broken_and_truncated_html_still_gives_its_text() -> None:
    html = page("nodejs-string_decoder")
    cut = page_text(html[: len(html) // 2], "all")
    assert isinstance(cut, str) and "String decoder" in cut
    broken = b"<html><body><div><p>unclosed <b>tags <i>everywhere</div></table></p>" * 10
    got = page_text(broken, "all")
    assert isinstance(got, str) and "unclosed tags everywhere" in got


def test_an_empty_page_is_empty_text_not_an_error() -> None:
    assert page_text(b"") == ""
    assert page_text(b"<html><head><script>var x = 1;</script></head><body></body></html>") == ""


def test_json_text_format_html_extracts_the_text_field() -> None:
    import orjson

    raw = orjson.dumps({"id": "p", "text": page("nodejs-punycode").decode()})
    doc = decode_json(raw, Fields(text_format="html"))
    assert isinstance(doc, Document)
    assert doc.text == page_text(page("nodejs-punycode"), "main")
    plain = decode_json(raw, Fields())
    assert isinstance(plain, Document) and plain.text.startswith("<!DOCTYPE html>")


def test_html_message_id_from_key_or_header() -> None:
    html = page("valgrind-faq")
    doc = decode_message(html, b"https://valgrind.org/faq", "html", Fields())
    assert isinstance(doc, Document) and doc.id == "https://valgrind.org/faq"
    assert doc.text == page_text(html)
    f = Fields(id_header="url")
    doc = decode_message(html, b"host", "html", f, 5, [("url", b"https://a/b")])
    assert isinstance(doc, Document) and doc.id == "https://a/b" and doc.timestamp_ms == 5
    missing = decode_message(html, b"host", "html", f, None, [("other", b"x")])
    assert isinstance(missing, Rejected) and missing.reason == MISSING_ID
    assert "header 'url'" in missing.message
    no_key = decode_message(html, None, "html", Fields())
    assert isinstance(no_key, Rejected) and no_key.reason == MISSING_ID
    bad_key = decode_message(html, b"\xff\xfe", "html", Fields())
    assert isinstance(bad_key, Rejected) and bad_key.reason == INVALID_UTF8


def test_an_html_message_over_the_size_limit_is_rejected() -> None:
    big = page("nodejs-punycode")
    got = decode_message(big, b"k", "html", Fields(max_bytes=len(big) - 1))
    assert isinstance(got, Rejected) and got.reason == TOO_LARGE


def test_a_binary_message_is_rejected_with_its_id() -> None:
    got = decode_message(gzip.compress(page("valgrind-faq")), b"u", "html", Fields())
    assert isinstance(got, Rejected) and got.reason == BINARY_CONTENT and got.id == "u"


def _nested(depth: int, tag: str = "div") -> str:
    return "<html><body>" + f"<{tag}>" * depth + "<p>deep words here</p>" + f"</{tag}>" * depth


def test_main_content_of_a_page_nested_past_the_limit_is_refused_before_extraction() -> None:
    """Main-content extraction is quadratic in the nesting depth (36,000 nested divs
    took 30 s): past MAX_MAIN_DEPTH levels a page is `too_deep` instead, at once."""
    # html and body are levels 1 and 2: the <p> sits at depth + 3
    assert extract_text(_nested(MAX_MAIN_DEPTH - 3)) == "deep words here"
    for depth in (MAX_MAIN_DEPTH - 2, 40_000):
        got = extract_text(_nested(depth))
        assert isinstance(got, Rejected) and got.reason == TOO_DEEP
        assert f"more than {MAX_MAIN_DEPTH}" in got.message
    assert isinstance(extract_text(_nested(2_000, "span")), Rejected)
    # all text costs time in proportion to the page: it reads it
    assert extract_text(_nested(40_000), "all") == "deep words here"


def test_a_page_nested_too_deep_is_an_error_in_every_input_path() -> None:
    """The worker (an HTML message: a dead letter with its reason) and file mode
    (JSON holding HTML) refuse it alike, with the page's id."""
    html = _nested(20_000)
    got = decode_message(html.encode(), b"https://e/deep", "html", Fields())
    assert isinstance(got, Rejected) and got.reason == TOO_DEEP and got.id == "https://e/deep"
    import orjson

    raw = orjson.dumps({"id": "deep", "text": html})
    got = decode_json(raw, Fields(text_format="html"))
    assert isinstance(got, Rejected) and got.reason == TOO_DEEP and got.id == "deep"
    all_text = decode_json(raw, Fields(text_format="html", extract="all"))
    assert isinstance(all_text, Document) and all_text.text == "deep words here"


# ------------------------------------------------------------------ arbitrary bytes

PAGEISH = st.one_of(
    st.binary(max_size=3000),
    st.text(max_size=1500).map(lambda t: f"<html><body><p>{t}</p></body></html>".encode()),
    st.builds(
        lambda head, cut, junk: page("valgrind-faq")[:cut] + junk + head,
        st.binary(max_size=64),
        st.integers(0, 2845),
        st.binary(max_size=64),
    ),
)


@settings(max_examples=300, deadline=None)
@given(PAGEISH, st.sampled_from(["main", "all"]), st.one_of(st.none(), st.text(max_size=20)))
def test_page_text_never_raises(data: bytes, extract: str, declared: str | None) -> None:
    got = page_text(data, extract, declared)  # type: ignore[arg-type]
    assert isinstance(got, str | Rejected)
    if isinstance(got, str):
        got.encode("utf-8")  # real text: no lone surrogates that could not be stored


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(st.none(), PAGEISH),
    st.one_of(st.none(), st.binary(max_size=40)),
    st.lists(st.tuples(st.sampled_from(["url", "x"]), st.binary(max_size=20)), max_size=3),
    st.sampled_from([None, "url"]),
)
def test_decode_message_html_never_raises(
    value: bytes | None, key: bytes | None, headers: list[tuple[str, bytes]], id_header: str | None
) -> None:
    got = decode_message(value, key, "html", Fields(id_header=id_header), None, headers)
    assert isinstance(got, Document | Rejected)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=2000))
def test_extract_text_never_raises_on_any_markup(html: str) -> None:
    assert isinstance(extract_text(html, "main"), str | Rejected)
    assert isinstance(decode_page(html.encode("utf-8", "surrogatepass")), str | Rejected)


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.binary(max_size=500), st.text(max_size=300).map(str.encode)))
def test_decode_json_with_html_text_never_raises(raw: bytes) -> None:
    import orjson

    for line in (raw, orjson.dumps({"id": 1, "text": raw.decode("utf-8", "replace")})):
        got = decode_json(line, Fields(text_format="html"))
        assert isinstance(got, Document | Rejected)
