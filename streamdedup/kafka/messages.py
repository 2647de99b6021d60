"""What the worker puts on the wire, and nothing else: the `Outgoing` row one input
message turns into (a verdict, a dead letter, or nothing), a verdict's payload (JSON
or msgpack, with its source topic/partition/offset), a dead letter's headers, and
the cut that keeps a dead letter inside one produce request.  These are the message
formats consumers of the verdict and dead-letter topics rely on; keeping them in one
small module, apart from the loop and the producer, makes a format change one place
to look at and one module's tests to read.
"""

from __future__ import annotations

from typing import NamedTuple

import msgpack
import orjson

from streamdedup.models import TOO_LARGE_TO_KEEP, Rejected, Verdict, output_record

Headers = tuple[tuple[str, bytes], ...] | list[tuple[str, bytes]]


class Outgoing(NamedTuple):
    """What one input message produces: a verdict, a dead letter, or (`item` None)
    nothing, when its verdict went out before the index was restored from a backup.
    `key`, `value` and `headers` are the message's, as it came (a dead letter's, and
    a unique document's on the keep topic).  (A tuple: one is built per message, at
    half a frozen dataclass's cost.)"""

    partition: int
    offset: int
    key: bytes | None
    value: bytes
    item: Verdict | Rejected | None
    headers: Headers = ()


def fits(key: bytes | None, value: bytes | None, headers: Headers, limit: int) -> bool:
    """Whether a record goes in one produce request of at most `limit` bytes."""
    from kafka.record.default_records import DefaultRecordBatchBuilder

    size: int = DefaultRecordBatchBuilder.estimate_size_in_bytes(key, value, list(headers))
    return size + RECORD_MARGIN <= limit


def too_large_to_keep(o: Outgoing, limit: int) -> Rejected:
    """Why a unique document's message went to the dead letters, not the keep topic:
    with the producer's headroom it is over `max_request_size`."""
    assert isinstance(o.item, Verdict)
    return Rejected(
        TOO_LARGE_TO_KEEP,
        f"the message ({len(o.value):,} bytes) is unique but too large to publish again "
        f"under the producer's max_request_size ({limit:,}): raise it with "
        "--producer-option max_request_size=N",
        o.item.id,
    )


def verdict_payload(v: Verdict, topic: str, partition: int, offset: int, fmt: str) -> bytes:
    record = output_record(v, source={"topic": topic, "partition": partition, "offset": offset})
    if fmt == "msgpack":
        return msgpack.packb(record)  # type: ignore[no-any-return]
    return orjson.dumps(record)


def dead_letter_headers(
    r: Rejected, topic: str, partition: int, offset: int
) -> list[tuple[str, bytes]]:
    return [
        ("streamdedup.reason", r.reason.encode()),
        ("streamdedup.message", r.message.encode("utf-8", "replace")),
        ("streamdedup.source.topic", topic.encode()),
        ("streamdedup.source.partition", str(partition).encode()),
        ("streamdedup.source.offset", str(offset).encode()),
    ]


# Room left under the producer's max_request_size for what a record costs beyond its
# key, value and headers (the record batch header is 61 bytes; varints, request framing).
RECORD_MARGIN = 1024
# A dead letter's key longer than this is cut too (the id of a hostile message).
DEAD_LETTER_MAX_KEY = 1024


def fit_dead_letter(
    key: bytes | None, value: bytes | None, headers: list[tuple[str, bytes]], max_bytes: int
) -> tuple[bytes | None, bytes | None, list[tuple[str, bytes]]]:
    """A dead letter that fits in one produce request of at most `max_bytes`: the
    message as it came, or, when it would not fit, its key and value cut short and
    headers saying so (`streamdedup.truncated: true`, `streamdedup.original_size`: the
    value's length in bytes, `streamdedup.original_key_size` when the key was cut).
    A record over the producer's limit fails its whole transaction, every time the
    batch is redelivered: one oversized message would stop the worker for good."""
    from kafka.record.default_records import DefaultRecordBatchBuilder

    if fits(key, value, headers, max_bytes):
        return key, value, headers
    headers = [
        *headers,
        ("streamdedup.truncated", b"true"),
        ("streamdedup.original_size", str(len(value or b"")).encode()),
    ]
    if key is not None and len(key) > DEAD_LETTER_MAX_KEY:
        headers.append(("streamdedup.original_key_size", str(len(key)).encode()))
        key = key[:DEAD_LETTER_MAX_KEY]
    rest = DefaultRecordBatchBuilder.estimate_size_in_bytes(key, b"", headers)
    room = max(0, max_bytes - RECORD_MARGIN - rest - 8)  # 8: the value's length varint
    return key, (value or b"")[:room], headers
