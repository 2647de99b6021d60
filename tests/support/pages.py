"""Real HTML pages (tests/data/html, see its README) and WARC archives built from them.

Two site templates: the Node.js API docs (a large navigation sidebar and table of
contents around each article) and Valgrind's DocBook pages (a small previous/next
bar).  From them:

- `syndicated(name)`: a Node.js article as the Node.js site serves it, and the same
  article moved into the Valgrind template (a syndicated copy);
- `short_items()`: two different short articles (paragraphs of the Valgrind docs)
  put into the Node.js template in place of its article -- the template outweighs
  them, as on a site of short news items or product pages.

`write_warc` writes archives with warcio (a writer, in the `test` extra; streamdedup
reads with fastwarc), with whatever records a test needs.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass
from pathlib import Path

from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

DATA = Path(__file__).resolve().parent.parent / "data" / "html"
NODE_ARTICLES = ("punycode", "string_decoder", "querystring", "synopsis")

_NODE_START = '<div role="main" id="apicontent">'
_NODE_END = "<!-- API END -->"
_VALGRIND_START = '<div class="article">'
_VALGRIND_FOOTER = '<div>\n<br><table class="nav"'


def page(name: str) -> bytes:
    return (DATA / f"{name}.html").read_bytes()


def node_article(name: str) -> str:
    """The article of a Node.js API page: the HTML between its template's parts."""
    html = page(f"nodejs-{name}").decode()
    start = html.index(_NODE_START) + len(_NODE_START)
    return html[start : html.index(_NODE_END)]


def in_node_template(article: str, template: str = "punycode") -> bytes:
    """`article` in place of a Node.js page's own (navigation, TOC, header kept)."""
    html = page(f"nodejs-{template}").decode()
    start = html.index(_NODE_START) + len(_NODE_START)
    return (html[:start] + article + html[html.index(_NODE_END) :]).encode()


def in_valgrind_template(article: str) -> bytes:
    """`article` in place of the Valgrind quick-start guide's (header and footer bars
    kept)."""
    html = page("valgrind-quick-start").decode()
    start = html.index(_VALGRIND_START) + len(_VALGRIND_START)
    return (html[:start] + article + "</div>\n" + html[html.index(_VALGRIND_FOOTER) :]).encode()


def syndicated(name: str = "punycode") -> tuple[bytes, bytes]:
    """The same article under the Node.js template and under the Valgrind one."""
    return page(f"nodejs-{name}"), in_valgrind_template(node_article(name))


def valgrind_paragraphs(low: int = 100, high: int = 200) -> list[str]:
    """The real paragraphs (`<p>...</p>`) of the Valgrind pages of `low` to `high`
    characters of HTML, in page order."""
    found: list[str] = []
    for name in ("quick-start", "faq", "dist.readme-s390"):
        html = page(f"valgrind-{name}").decode()
        found += re.findall(r"<p>.*?</p>", html, flags=re.S)
    return [p for p in found if low <= len(p) <= high]


def short_items() -> tuple[bytes, bytes]:
    """Two different short articles (one real paragraph each) in the Node.js template."""
    first, second = valgrind_paragraphs()[:2]
    return in_node_template(f"<h2>News</h2>{first}"), in_node_template(f"<h2>News</h2>{second}")


@dataclass(frozen=True)
class Rec:
    """One WARC record to write: a response by default, with an HTTP Content-Type."""

    uri: str
    payload: bytes
    content_type: str = "text/html; charset=utf-8"
    kind: str = "response"
    http_headers: tuple[tuple[str, str], ...] = ()  # more HTTP headers (Content-Encoding)
    status: str = "200 OK"  # of a response
    record_id: str | None = None  # WARC-Record-ID (default: a new one)


def write_warc(path: Path, records: list[Rec], *, gz: bool | None = None) -> Path:
    """An archive holding `records` in order (gzipped per record when `gz`, by default
    when the name ends in .gz), led by a warcinfo record as crawlers write it."""
    gz = path.name.endswith(".gz") if gz is None else gz
    with path.open("wb") as out:
        writer = WARCWriter(out, gzip=gz)
        writer.write_record(writer.create_warcinfo_record(path.name, {"software": "tests"}))
        for r in records:
            http = None
            if r.kind in ("response", "request"):
                status = r.status if r.kind == "response" else "GET / HTTP/1.1"
                http = StatusAndHeaders(
                    status,
                    [
                        *([("Content-Type", r.content_type)] if r.content_type else []),
                        *r.http_headers,
                    ],
                    protocol="HTTP/1.1",
                    is_http_request=r.kind == "request",
                )
            record = writer.create_warc_record(
                r.uri, r.kind, payload=io.BytesIO(r.payload), http_headers=http
            )
            if r.record_id is not None:
                record.rec_headers.replace_header("WARC-Record-ID", r.record_id)
            writer.write_record(record)
    return path
