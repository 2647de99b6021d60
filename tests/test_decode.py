import json

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamdedup.decode import (
    BAD_ID,
    BAD_TEXT,
    INVALID_UTF8,
    MALFORMED,
    MISSING_ID,
    MISSING_TEXT,
    NOT_AN_OBJECT,
    TOO_LARGE,
    Fields,
    Rejected,
    decode_json,
)
from streamdedup.engine import Document

F = Fields()


@given(st.binary(max_size=300))
def test_arbitrary_bytes_never_raise(raw: bytes) -> None:
    assert isinstance(decode_json(raw, F), Document | Rejected)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)


@given(st.dictionaries(st.sampled_from(["id", "text", "x"]), json_values))
def test_objects_decode_or_say_why(obj: dict[str, object]) -> None:
    out = decode_json(json.dumps(obj).encode(), F)
    if isinstance(out, Document):
        assert out.text == obj["text"] and out.id == obj["id"]
    else:
        assert out.reason in {MISSING_ID, BAD_ID, MISSING_TEXT, BAD_TEXT}
        assert out.message


@given(st.one_of(st.text(min_size=1), st.integers(-(2**63), 2**63 - 1)), st.text())
def test_valid_documents_round_trip(doc_id: str | int, text: str) -> None:
    raw = json.dumps({"id": doc_id, "text": text}).encode()
    assert decode_json(raw, F) == Document(doc_id, text)


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b'{"id": 1, "text": "abc"', MALFORMED),
        (b"", MALFORMED),
        (b'{"id": 1, "text": "caf\xe9"}', INVALID_UTF8),
        (b"[1, 2]", NOT_AN_OBJECT),
        (b'{"text": "x"}', MISSING_ID),
        (b'{"id": 1.5, "text": "x"}', BAD_ID),
        (b'{"id": true, "text": "x"}', BAD_ID),
        (b'{"id": "", "text": "x"}', BAD_ID),
        (b'{"id": 123456789012345678901234567890, "text": "x"}', BAD_ID),
        (b'{"id": "a"}', MISSING_TEXT),
        (b'{"id": "a", "text": null}', BAD_TEXT),
        (b'{"id": "a", "text": ["x"]}', BAD_TEXT),
    ],
)
def test_each_kind_of_bad_record(raw: bytes, reason: str) -> None:
    out = decode_json(raw, F)
    assert isinstance(out, Rejected) and out.reason == reason


def test_size_limit_is_checked_before_parsing() -> None:
    raw = orjson.dumps({"id": 1, "text": "x" * 2000})
    out = decode_json(raw, Fields(max_bytes=1000))
    assert isinstance(out, Rejected) and out.reason == TOO_LARGE and "1000" in out.message


def test_lone_surrogate_escapes_are_accepted() -> None:
    out = decode_json(b'{"id": "s", "text": "a \\ud800 b"}', F)
    assert out == Document("s", "a \ud800 b")


def test_custom_field_names_and_known_id_on_text_errors() -> None:
    fields = Fields(id_field="url", text_field="body")
    assert decode_json(b'{"url": "u", "body": "b"}', fields) == Document("u", "b")
    out = decode_json(b'{"url": "u", "body": 3}', fields)
    assert isinstance(out, Rejected) and out.id == "u"
