"""Raw input records -> `Document`s, or a precise reason why not.

Used for JSON Lines files and for Kafka message values alike.  Nothing here raises on
bad input: a record that cannot become a document becomes a `Rejected` with a short
machine-readable reason and a human message, and processing goes on.
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any

import msgpack
import orjson

from streamdedup.config import Fields
from streamdedup.inputs.html import extract_text, page_text
from streamdedup.inputs.items import bits_item, json_kind, set_item, vector_item
from streamdedup.models import (
    BAD_ID,
    BAD_TEXT,
    INVALID_UTF8,
    MALFORMED,
    MALFORMED_MSGPACK,
    MISSING_ID,
    MISSING_ITEM,
    MISSING_TEXT,
    NOT_AN_OBJECT,
    TOO_LARGE,
    Document,
    Rejected,
)

_INT64 = 1 << 63
_SURROGATE = re.compile("[\ud800-\udfff]")


def decode_json(raw: bytes, fields: Fields, timestamp_ms: int | None = None) -> Document | Rejected:
    """One JSON object with an id (string or integer) and a text (string)."""
    if len(raw) > fields.max_bytes:
        return Rejected(
            TOO_LARGE, f"record is {len(raw)} bytes, over the limit of {fields.max_bytes}"
        )
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        obj = _slow_json(raw)
        if isinstance(obj, Rejected):
            return obj
    else:
        if isinstance(obj, dict) and isinstance(obj.get(fields.id_field), float):
            # orjson reads integers beyond 64 bits as floats: let the stdlib parser
            # tell `1e5` (a float id) from `123456789012345678901` (too big an integer)
            exact = _slow_json(raw)
            if isinstance(exact, dict):
                obj = exact
    doc = from_mapping(obj, fields, "JSON", timestamp_ms)
    if fields.text_format == "html" and isinstance(doc, Document):
        return _extracted(doc, extract_text(doc.text, fields.extract))
    return doc


def decode_json_lines(lines: list[bytes], fields: Fields) -> list[Document | Rejected]:
    """`decode_json` of each line, the common case inline: an object whose id is a
    non-empty string or a 64-bit integer and whose text is a string, within the size
    limit.  Everything else takes `decode_json` itself, for its reason.  (orjson
    refuses lone surrogates, so an id it returns needs no surrogate check.)  One
    function call a line instead of four: a third of the preparing of a one-line
    document was `decode_json`'s checks."""
    if fields.item == "bits" and fields.text_format == "text":
        return _bit_lines(lines, fields)
    if fields.text_format == "html" or fields.item != "text":
        return [decode_json(raw, fields) for raw in lines]
    id_field, text_field, limit = fields.id_field, fields.text_field, fields.max_bytes
    loads, error = orjson.loads, orjson.JSONDecodeError
    out: list[Document | Rejected] = []
    for raw in lines:
        if len(raw) <= limit:
            try:
                obj = loads(raw)
            except error:
                obj = None
            if type(obj) is dict:
                doc_id, text = obj.get(id_field), obj.get(text_field)
                if type(text) is str and (
                    (type(doc_id) is str and 0 < len(doc_id) <= MAX_ID_CHARS)
                    or (type(doc_id) is int and -_INT64 <= doc_id < _INT64)
                ):
                    out.append(Document(doc_id, text))
                    continue
        out.append(decode_json(raw, fields))
    return out


def _bit_lines(lines: list[bytes], fields: Fields) -> list[Document | Rejected]:
    """`decode_json_lines` for an index of bit strings: the common case (an id as
    above, the item as exactly N/4 hexadecimal digits) inline, the rest by
    `decode_json` for its reason."""
    id_field, name, limit = fields.id_field, fields.item_name, fields.max_bytes
    digits, width = fields.bits // 4, fields.bits // 8
    loads, error, fromhex = orjson.loads, orjson.JSONDecodeError, bytes.fromhex
    out: list[Document | Rejected] = []
    for raw in lines:
        if len(raw) <= limit:
            try:
                obj = loads(raw)
            except error:
                obj = None
            if type(obj) is dict:
                doc_id, item = obj.get(id_field), obj.get(name)
                if (
                    type(item) is str
                    and len(item) == digits
                    and (
                        (type(doc_id) is str and 0 < len(doc_id) <= MAX_ID_CHARS)
                        or (type(doc_id) is int and -_INT64 <= doc_id < _INT64)
                    )
                ):
                    try:
                        bits = fromhex(item)
                    except ValueError:
                        bits = b""
                    if len(bits) == width:
                        out.append(Document(doc_id, "", None, bits))
                        continue
        out.append(decode_json(raw, fields))
    return out


def _extracted(doc: Document, text: str | Rejected) -> Document | Rejected:
    """`doc` with its HTML replaced by the extracted text, or the reason it failed."""
    if isinstance(text, Rejected):
        return Rejected(text.reason, text.message, doc.id)
    doc.text = text
    return doc


def _slow_json(raw: bytes) -> Any:
    """The stdlib parser: tells bad UTF-8 from bad JSON, and accepts what orjson refuses
    but JSON allows (lone surrogate escapes, integers beyond 64 bits)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return Rejected(INVALID_UTF8, f"not valid UTF-8: {exc.reason} at byte {exc.start}")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        # some of the stdlib's messages end in "at" already ("Invalid control character at")
        where = "column" if exc.msg.endswith(" at") else "at column"
        return Rejected(MALFORMED, f"malformed JSON: {exc.msg} {where} {exc.colno}")
    except RecursionError:
        return Rejected(MALFORMED, "malformed JSON: arrays or objects nested too deeply")
    except ValueError:  # an integer of more digits than Python converts to an int
        limit = sys.get_int_max_str_digits()
        return Rejected(MALFORMED, f"malformed JSON: a number with more than {limit} digits")


# What a decoded JSON or msgpack value is, in the words of those formats: the
# messages read "field 'id' is null", not Python's "is a NoneType" / "is a int".
def from_mapping(
    obj: Any, fields: Fields, what: str, timestamp_ms: int | None = None
) -> Document | Rejected:
    """Validate a decoded JSON/msgpack value as a document."""
    if not isinstance(obj, dict):
        return Rejected(NOT_AN_OBJECT, f"{what} value is {json_kind(obj)}, not an object")
    if fields.id_field not in obj:
        return Rejected(MISSING_ID, f"no {fields.id_field!r} field")
    doc_id = obj[fields.id_field]
    checked = check_id(doc_id, fields.id_field)
    if isinstance(checked, Rejected):
        return checked
    if fields.item != "text":
        return _with_item(obj, fields, checked, timestamp_ms)
    if fields.text_field not in obj:
        return Rejected(MISSING_TEXT, f"no {fields.text_field!r} field", checked)
    text = obj[fields.text_field]
    if not isinstance(text, str):
        return Rejected(
            BAD_TEXT,
            f"field {fields.text_field!r} is {json_kind(text)}, not a string",
            checked,
        )
    return Document(checked, text, timestamp_ms)


def _with_item(
    obj: dict[Any, Any], fields: Fields, doc_id: str | int, timestamp_ms: int | None
) -> Document | Rejected:
    """A record of an index whose items are not texts: its item, checked and in
    canonical bytes (inputs/items.py)."""
    name = fields.item_name
    if name not in obj:
        return Rejected(MISSING_ITEM, f"no {name!r} field (the item: {fields.item})", doc_id)
    check = {"bits": bits_item, "vector": vector_item, "set": set_item}[fields.item]
    item = check(obj[name], fields, name)
    if isinstance(item, tuple):
        return Rejected(item[0], item[1], doc_id)
    return Document(doc_id, "", timestamp_ms, item)


# A verdict carries its id up to three times (id, duplicate_of, cluster) and must fit
# a Kafka request (1 MiB by default): a longer id would fail every transaction of its
# batch.  Crawlers' URLs stay far below (browsers and crawlers cap them at 2-8 KB).
MAX_ID_CHARS = 16_384


def check_id(doc_id: Any, name: str = "id") -> str | int | Rejected:
    if isinstance(doc_id, bool) or not isinstance(doc_id, str | int):
        return Rejected(BAD_ID, f"field {name!r} is {json_kind(doc_id)}, not a string or integer")
    if isinstance(doc_id, int) and not -_INT64 <= doc_id < _INT64:
        return Rejected(BAD_ID, f"integer id {doc_id} does not fit in 64 bits")
    if isinstance(doc_id, str) and not doc_id:
        return Rejected(BAD_ID, f"field {name!r} is an empty string")
    if isinstance(doc_id, str) and len(doc_id) > MAX_ID_CHARS:
        return Rejected(
            BAD_ID,
            f"field {name!r} is {len(doc_id):,} characters long, over the limit of "
            f"{MAX_ID_CHARS:,} for an id",
        )
    if isinstance(doc_id, str) and _SURROGATE.search(doc_id):
        # JSON lets `\ud800` through; such an id cannot be stored, keyed or written out
        return Rejected(
            BAD_ID,
            f"field {name!r} holds a lone surrogate (\\u{_surrogate(doc_id)}): not valid text",
        )
    return doc_id


def _surrogate(text: str) -> str:
    found = _SURROGATE.search(text)
    return f"{ord(found.group()):04x}" if found else ""


def _unpack(value: bytes) -> Any:
    """msgpack, or why not (several of its exceptions have no message of their own)."""
    try:
        return msgpack.unpackb(value, raw=False, strict_map_key=False)
    except UnicodeDecodeError as exc:
        return Rejected(INVALID_UTF8, f"msgpack string not valid UTF-8: {exc.reason}")
    except msgpack.StackError:
        return Rejected(MALFORMED_MSGPACK, "malformed msgpack: nested too deeply")
    except msgpack.ExtraData as exc:
        extra = len(exc.extra) if isinstance(exc.extra, bytes | bytearray) else "some"
        return Rejected(
            MALFORMED_MSGPACK, f"malformed msgpack: {extra} extra bytes after the value"
        )
    except msgpack.FormatError:
        return Rejected(MALFORMED_MSGPACK, "malformed msgpack: a reserved type byte (0xc1)")
    except TypeError:  # unhashable: a map or array used as a map key
        return Rejected(MALFORMED_MSGPACK, "malformed msgpack: a map or array as a map key")
    except ValueError as exc:
        return Rejected(MALFORMED_MSGPACK, f"malformed msgpack: {exc or 'cannot be decoded'}")


EMPTY_MESSAGE = "empty_message"
MESSAGE_FORMATS = ("json", "msgpack", "raw", "html")

Headers = list[tuple[str, bytes]] | None


def decode_message(
    value: bytes | None,
    key: bytes | None,
    fmt: str,
    fields: Fields,
    timestamp_ms: int | None = None,
    headers: Headers = None,
) -> Document | Rejected:
    """A Kafka message as a document (`fmt`: json, msgpack, raw or html; `headers`
    are read by html only, for `--id-header`)."""
    if value is None:
        return Rejected(EMPTY_MESSAGE, "message has no value (a tombstone)")
    if fmt == "json":
        return decode_json(value, fields, timestamp_ms)
    if len(value) > fields.max_bytes:
        return Rejected(
            TOO_LARGE, f"message is {len(value)} bytes, over the limit of {fields.max_bytes}"
        )
    if fmt == "msgpack":
        obj = _unpack(value)
        if isinstance(obj, Rejected):
            return obj
        return from_mapping(obj, fields, "msgpack", timestamp_ms)
    if fmt == "html":
        return _decode_html(value, key, fields, timestamp_ms, headers)
    if key is None:
        return Rejected(MISSING_ID, "raw message has no key (the key is the document id)")
    try:
        doc_id, text = key.decode("utf-8"), value.decode("utf-8")
    except UnicodeDecodeError as exc:
        return Rejected(INVALID_UTF8, f"not valid UTF-8: {exc.reason} at byte {exc.start}")
    checked = check_id(doc_id, "key")
    if isinstance(checked, Rejected):
        return checked
    return Document(checked, text, timestamp_ms)


def _decode_html(
    value: bytes, key: bytes | None, fields: Fields, timestamp_ms: int | None, headers: Headers
) -> Document | Rejected:
    """An HTML message: the value is the fetched page, the id its key or the header
    `fields.id_header` (a crawler often keys by host, for partitioning, and puts the
    URL in a header)."""
    where = "key"
    raw_id = key
    if fields.id_header is not None:
        where = f"header {fields.id_header!r}"
        raw_id = next((v for k, v in headers or () if k == fields.id_header), None)
    if raw_id is None:
        return Rejected(MISSING_ID, f"HTML message has no {where} (it holds the document id)")
    try:
        doc_id = raw_id.decode("utf-8")
    except UnicodeDecodeError as exc:
        return Rejected(INVALID_UTF8, f"{where} not valid UTF-8: {exc.reason} at byte {exc.start}")
    checked = check_id(doc_id, where)
    if isinstance(checked, Rejected):
        return checked
    text = page_text(value, fields.extract)
    if isinstance(text, Rejected):
        return Rejected(text.reason, text.message, checked)
    return Document(checked, text, timestamp_ms)
