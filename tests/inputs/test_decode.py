import json

import numpy as np
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamdedup.config import Fields
from streamdedup.inputs.decode import (
    MAX_ID_CHARS,
    decode_json,
    decode_json_lines,
    decode_message,
    json_kind,
)
from streamdedup.models import (
    BAD_ID,
    BAD_TEXT,
    INVALID_UTF8,
    MALFORMED,
    MISSING_ID,
    MISSING_TEXT,
    NOT_AN_OBJECT,
    TOO_LARGE,
    Document,
    Rejected,
)

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


# -- hostile input: none of it may raise, and no Document may carry an id that cannot
# be stored (msgpack), keyed or written out (orjson)

MALFORMED_MSGPACK = "malformed_msgpack"


def _usable(doc: Document) -> None:
    import msgpack

    msgpack.packb(doc.id)
    orjson.dumps({"id": doc.id})


surrogates = st.integers(0xD800, 0xDFFF).map(lambda c: f"\\u{c:04x}")
escaped_text = st.lists(
    st.one_of(surrogates, st.sampled_from(["a", " ", "b", "\\u00e9", "\\n"])), max_size=6
).map("".join)


@given(escaped_text, escaped_text)
def test_escaped_surrogates_never_reach_an_id(doc_id: str, text: str) -> None:
    raw = f'{{"id": "{doc_id}", "text": "{text}"}}'.encode()
    out = decode_json(raw, F)
    assert isinstance(out, Document | Rejected)
    if isinstance(out, Document):
        _usable(out)
        assert out.text == json.loads(raw)["text"]  # texts keep their surrogates
    else:
        assert out.reason == BAD_ID and out.message


def test_lone_surrogate_id_is_a_bad_id() -> None:
    out = decode_json(b'{"id": "\\ud800", "text": "x"}', F)
    assert out == Rejected(BAD_ID, "field 'id' holds a lone surrogate (\\ud800): not valid text")
    # a later error keeps the id it found: it must not be such an id either
    out = decode_json(b'{"id": "a\\udfff", "text": 3}', F)
    assert isinstance(out, Rejected) and out.reason == BAD_ID and out.id is None


def test_an_id_too_long_for_a_verdict_message_is_a_bad_id() -> None:
    """A verdict carries its id up to three times and must fit one Kafka request: an
    id of a megabyte would fail every transaction of its batch, so it is refused."""
    longest = "u" * MAX_ID_CHARS
    assert decode_json(orjson.dumps({"id": longest, "text": "x"}), F) == Document(longest, "x")
    for fmt in ("json", "raw"):
        value = orjson.dumps({"id": longest + "u", "text": "x"}) if fmt == "json" else b"x"
        key = (longest + "u").encode()
        out = decode_message(value, key, fmt, F)
        assert isinstance(out, Rejected) and out.reason == BAD_ID, out
        assert "16,385 characters long, over the limit of 16,384" in out.message


@given(st.integers(1, 5000), st.sampled_from(["[", '{"a":', '{"id": 1, "text": "x", "n": [']))
def test_deep_nesting_is_malformed_not_a_crash(depth: int, opener: str) -> None:
    out = decode_json((opener * depth).encode() + b"\\ud800", F)
    assert isinstance(out, Rejected) and out.reason == MALFORMED


def test_three_thousand_levels() -> None:
    for raw in (b"[" * 3000 + b"]" * 3000, b'{"id": "\\ud800", "x": ' + b"[" * 3000):
        out = decode_json(raw, F)
        assert out == Rejected(MALFORMED, "malformed JSON: arrays or objects nested too deeply")


def test_integer_ids_beyond_64_bits_say_so() -> None:
    for big in (2**64, 123456789012345678901234567890, -(2**70)):
        out = decode_json(b'{"id": %d, "text": "x"}' % big, F)
        assert out == Rejected(BAD_ID, f"integer id {big} does not fit in 64 bits")
    out = decode_json(b'{"id": 1e5, "text": "x"}', F)  # a float is still a float
    assert isinstance(out, Rejected) and "is a number with a fraction" in out.message
    out = decode_json(b'{"id": ' + b"1" * 5000 + b', "text": "x"}', F)
    assert isinstance(out, Rejected) and out.reason == MALFORMED and "digits" in out.message


def test_malformed_json_messages_read_well() -> None:
    out = decode_json(b'{"id": "a\x01", "text": "x"}', F)
    assert out == Rejected(MALFORMED, "malformed JSON: Invalid control character at column 10")
    out = decode_json(b'{"id": "a', F)
    assert out == Rejected(MALFORMED, "malformed JSON: Unterminated string starting at column 8")


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (b"\x91" * 3000, MALFORMED_MSGPACK),  # nested too deeply (StackError)
        (b"\xc1", MALFORMED_MSGPACK),  # reserved byte (FormatError)
        (b"\x81\x80\x00", MALFORMED_MSGPACK),  # a map as a map key (TypeError)
        (b"\x81\x91\x01\x01", MALFORMED_MSGPACK),  # an array as a map key
        (b"\x01\x02", MALFORMED_MSGPACK),  # extra data
        (b"\xd9", MALFORMED_MSGPACK),  # truncated
        (b"\xa1\xff", INVALID_UTF8),
    ],
)
def test_malformed_msgpack_says_why(value: bytes, reason: str) -> None:
    out = decode_message(value, None, "msgpack", F)
    assert isinstance(out, Rejected) and out.reason == reason
    assert out.message.split(": ", 1)[1].strip()  # a real message after the prefix


def test_deep_nesting_in_kafka_messages() -> None:
    json_deep = b'{"id": "\\ud800", "x": ' + b"[" * 3000
    out = decode_message(json_deep, None, "json", F)
    assert isinstance(out, Rejected) and out.reason == MALFORMED


def test_lone_surrogates_in_every_message_format() -> None:
    import msgpack

    out = decode_message(b'{"id": "\\udc00", "text": "x"}', None, "json", F)
    assert isinstance(out, Rejected) and out.reason == BAD_ID
    # msgpack and raw decode strictly: the surrogate's UTF-8 form is invalid there
    packed = msgpack.packb({"id": "\ud800", "text": "x"}, unicode_errors="surrogatepass")
    out = decode_message(packed, None, "msgpack", F)
    assert isinstance(out, Rejected) and out.reason == INVALID_UTF8
    out = decode_message(b"text", "\ud800".encode("utf-8", "surrogatepass"), "raw", F)
    assert isinstance(out, Rejected) and out.reason == INVALID_UTF8


@given(st.binary(max_size=300), st.one_of(st.none(), st.binary(max_size=20)))
def test_arbitrary_messages_never_raise(value: bytes, key: bytes | None) -> None:
    for fmt in ("json", "msgpack", "raw"):
        out = decode_message(value, key, fmt, F)
        assert isinstance(out, Document | Rejected)
        if isinstance(out, Document):
            _usable(out)
        else:
            assert out.message


msgpack_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats()
    | st.text()
    | st.binary(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3)
        # tuples are packed as arrays: an array as a map key, which Python cannot hash
        | st.dictionaries(
            st.one_of(
                st.text(max_size=3), st.integers(-(2**63), 2**63 - 1), st.tuples(st.booleans())
            ),
            inner,
            max_size=3,
        )
    ),
    max_leaves=8,
)


@given(st.dictionaries(st.sampled_from(["id", "text", "x"]), msgpack_values))
def test_msgpack_maps_decode_or_say_why(obj: dict[str, object]) -> None:
    import msgpack

    out = decode_message(msgpack.packb(obj), None, "msgpack", F)
    if isinstance(out, Document):
        assert out.text == obj["text"] and out.id == obj["id"]
    else:
        reasons = {MISSING_ID, BAD_ID, MISSING_TEXT, BAD_TEXT, MALFORMED_MSGPACK}
        assert out.reason in reasons and out.message


edge_ids = st.one_of(
    json_values,
    st.sampled_from(
        [2**63 - 1, -(2**63), 2**63, -(2**63) - 1, "", "x" * MAX_ID_CHARS, "x" * (MAX_ID_CHARS + 1)]
    ),
)
lines = st.one_of(
    st.binary(max_size=60),
    st.builds(
        lambda i, t, extra: json.dumps({"id": i, "text": t, **extra}).encode(),
        edge_ids,
        json_values,
        st.dictionaries(st.sampled_from(["x", "url", "body"]), json_values, max_size=2),
    ),
    st.builds(lambda i, t: f'{{"id": "{i}", "text": "{t}"}}'.encode(), escaped_text, escaped_text),
    st.builds(lambda i: b'{"id": %d, "text": "x"}' % i, st.integers(-(2**70), 2**70)),
)


@given(
    st.lists(lines, max_size=8),
    st.sampled_from([Fields(), Fields(max_bytes=40), Fields(id_field="url", text_field="body")]),
)
def test_a_batch_of_lines_decodes_as_each_line_alone(raw: list[bytes], fields: Fields) -> None:
    """`decode_json_lines` (the file mode's batch path, with the common case inline)
    gives what `decode_json` gives line by line, verdict-worthy or rejected."""
    assert decode_json_lines(raw, fields) == [decode_json(r, fields) for r in raw]


def test_messages_name_kinds_as_json_does() -> None:
    """Issue 35 item 15: the messages said Python's type names with a fixed article
    ("is a int", "is a NoneType"); they name JSON's kinds, each with its article."""
    cases = {
        b'{"id": null, "text": "x"}': "field 'id' is null, not a string or integer",
        b'{"id": true, "text": "x"}': "field 'id' is a boolean, not a string or integer",
        b'{"id": [1], "text": "x"}': "field 'id' is an array, not a string or integer",
        b'{"id": 1, "text": 5}': "field 'text' is an integer, not a string",
        b'{"id": 1, "text": {}}': "field 'text' is an object, not a string",
        b'{"id": 1, "text": null}': "field 'text' is null, not a string",
        b"[1, 2]": "JSON value is an array, not an object",
        b"7": "JSON value is an integer, not an object",
        b"null": "JSON value is null, not an object",
    }
    for raw, message in cases.items():
        out = decode_json(raw, F)
        assert isinstance(out, Rejected) and out.message == message, (raw, out)
    assert json_kind(b"\x00") == "binary data" and json_kind({1}) == "a set"
    assert json_kind(1.5) == "a number with a fraction or exponent"


# ---------------------------------------------------------------- bits items (hamming)

BITS = Fields(item="bits", bits=64)


@given(st.integers(0, 2**64 - 1), st.booleans(), st.sampled_from(["json", "msgpack"]))
def test_a_bit_string_decodes_to_its_bytes(value: int, upper: bool, fmt: str) -> None:
    """Hex digits (either case) in JSON and msgpack, or a bin of N/8 bytes in
    msgpack: the same N/8 bytes, most significant bit first, and no text."""
    import msgpack

    digits = f"{value:016x}"
    digits = digits.upper() if upper else digits
    want = value.to_bytes(8, "big")
    for item in [digits, want] if fmt == "msgpack" else [digits]:
        obj = {"id": "d", "bits": item}
        raw = msgpack.packb(obj) if fmt == "msgpack" else orjson.dumps(obj)
        got = decode_message(raw, None, fmt, BITS)
        assert got == Document("d", "", None, want)


@pytest.mark.parametrize(
    ("item", "reason"),
    [
        ("00ff", "bad_item_length"),
        ("0" * 17, "bad_item_length"),
        ("0x00000000000000", "bad_item_value"),
        ("00 0000000000000", "bad_item_value"),
        ("g000000000000000", "bad_item_value"),
        (5, "bad_item_type"),
        (None, "bad_item_type"),
        ([0, 1], "bad_item_type"),
    ],
)
def test_each_kind_of_bad_bit_string(item: object, reason: str) -> None:
    got = decode_json(orjson.dumps({"id": 7, "bits": item}), BITS)
    assert isinstance(got, Rejected) and got.reason == reason and got.id == 7, got
    assert decode_json(orjson.dumps({"id": 7}), BITS) == Rejected(
        "missing_item", "no 'bits' field (the item: bits)", 7
    )
    import msgpack

    short = msgpack.packb({"id": 7, "bits": b"\x00" * 7})
    assert decode_message(short, None, "msgpack", BITS).reason == "bad_item_length"  # type: ignore[union-attr]


bit_lines = st.one_of(
    lines,
    st.builds(
        lambda i, b: json.dumps({"id": i, "text": b}).encode(),
        edge_ids,
        st.one_of(
            st.text("0123456789abcdefABCDEF ", max_size=3), st.binary(max_size=2).map(bytes.hex)
        ),
    ),
)


@given(st.lists(bit_lines, max_size=8))
def test_a_batch_of_bit_lines_decodes_as_each_line_alone(raw: list[bytes]) -> None:
    """The batch path of an index of 8-bit strings (its common case inline) gives what
    `decode_json` gives line by line."""
    fields = Fields(item="bits", bits=8, item_field="text")
    assert decode_json_lines(raw, fields) == [decode_json(r, fields) for r in raw]


VECTORS = Fields(item="vector", dim=4)
COSINE = Fields(item="vector", dim=4, nonzero=True)
f32 = st.floats(width=32, allow_nan=False, allow_infinity=False)


@given(st.lists(f32, min_size=4, max_size=4), st.sampled_from(["json", "msgpack", "bin"]))
def test_a_vector_decodes_to_its_float32_bytes(values: list[float], fmt: str) -> None:
    """A JSON or msgpack array of D numbers, or a msgpack bin of D little-endian
    float32: the same 4 D bytes, each value exactly its float32, and no text."""
    import msgpack

    want = np.array(values, dtype="<f4").tobytes()
    item: object = want if fmt == "bin" else values
    obj = {"id": "d", "vector": item}
    raw = orjson.dumps(obj) if fmt == "json" else msgpack.packb(obj)
    got = decode_message(raw, None, "json" if fmt == "json" else "msgpack", VECTORS)
    assert got == Document("d", "", None, want)


@pytest.mark.parametrize(
    ("item", "fields", "reason"),
    [
        ([1, 2, 3], VECTORS, "bad_item_length"),
        ([1, 2, 3, 4, 5], VECTORS, "bad_item_length"),
        ("1 2 3 4", VECTORS, "bad_item_type"),
        ({"x": 1}, VECTORS, "bad_item_type"),
        (None, VECTORS, "bad_item_type"),
        ([1, 2, 3, "4"], VECTORS, "bad_item_value"),
        ([1, 2, 3, None], VECTORS, "bad_item_value"),
        ([1, 2, 3, True], VECTORS, "bad_item_value"),
        ([1, 2, 3, [4]], VECTORS, "bad_item_value"),
        ([1, 2, 3, 1e39], VECTORS, "item_not_finite"),
        ([1, 2, 3, -(10**400)], VECTORS, "item_not_finite"),
        ([0, 0, 0, 0], COSINE, "zero_vector"),
        ([0.0, -0.0, 0, 0], COSINE, "zero_vector"),
    ],
)
def test_each_kind_of_bad_vector(item: object, fields: Fields, reason: str) -> None:
    raw = json.dumps({"id": 7, "vector": item}).encode()
    got = decode_json(raw, fields)
    assert isinstance(got, Rejected) and got.reason == reason and got.id == 7, got
    assert decode_json(b'{"id": 7, "vector": [0, 0, 0, 0]}', VECTORS).item == bytes(16)  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (np.array([1, 2, 3], dtype="<f4").tobytes(), "bad_item_length"),
        (np.array([1, 2, 3, np.nan], dtype="<f4").tobytes(), "item_not_finite"),
        (np.array([1, 2, 3, np.inf], dtype="<f4").tobytes(), "item_not_finite"),
        ([1.0, 2.0, float("nan"), 4.0], "item_not_finite"),
        ([1.0, 2.0, float("-inf"), 4.0], "item_not_finite"),
    ],
)
def test_each_kind_of_bad_vector_in_msgpack(raw: object, reason: str) -> None:
    import msgpack

    got = decode_message(msgpack.packb({"id": 7, "vector": raw}), None, "msgpack", VECTORS)
    assert isinstance(got, Rejected) and got.reason == reason, got


SETS = Fields(item="set")


int64s = st.integers(-(2**63), 2**63 - 1)


@given(
    st.one_of(st.lists(st.text(max_size=5), max_size=10), st.lists(int64s, max_size=10)),
    st.sampled_from(["json", "msgpack"]),
)
def test_a_set_decodes_to_its_sorted_distinct_elements(values: list[object], fmt: str) -> None:
    """A JSON or msgpack array of strings or of integers: the msgpack array of its
    distinct elements' tagged bytes, sorted, whatever the order and repeats sent."""
    import msgpack

    obj = {"id": "d", "set": values + values[:2]}
    raw = orjson.dumps(obj) if fmt == "json" else msgpack.packb(obj)
    tagged = {
        b"s" + v.encode("utf-8", "surrogatepass") if isinstance(v, str) else b"i" + str(v).encode()
        for v in values
    }
    got = decode_message(raw, None, fmt, SETS)
    assert got == Document("d", "", None, msgpack.packb(sorted(tagged)))


@pytest.mark.parametrize(
    ("item", "reason"),
    [
        (["a", 1], "mixed_set"),
        ([1.5], "bad_item_value"),
        ([None], "bad_item_value"),
        ([True], "bad_item_value"),
        ([["a"]], "bad_item_value"),
        ("a b", "bad_item_type"),
        ({"a": 1}, "bad_item_type"),
    ],
)
def test_each_kind_of_bad_set(item: object, reason: str) -> None:
    got = decode_json(json.dumps({"id": 7, "set": item}).encode(), SETS)
    assert isinstance(got, Rejected) and got.reason == reason and got.id == 7, got
