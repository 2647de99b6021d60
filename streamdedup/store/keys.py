"""How the index spells its keys: document numbers, document ids, expiry entries,
tombstones and band keys as LMDB keys, and the names of the entries in the `meta` table.  Pure
encodings (no LMDB), shared by the tables and by the layers above that pass keys
around (the engine, the changelog)."""

from __future__ import annotations

import hashlib
from typing import Final

import numpy as np
import numpy.typing as npt

from streamdedup.models import DocId

DOCNO_BYTES = 5
SEGMENT_BYTES = 2  # a sealed segment's number, in a tombstone's key
_MAX_ID_KEY = 400  # LMDB keys are limited to 511 bytes


class MetaKey:
    """The names of the entries in `meta` (each value msgpack).  Whole names, and the
    prefixes of the per-consumer entries (followed by NS, "group/topic")."""

    # the engine's
    PARAMS: Final = "params"  # the index parameters (`IndexParams.to_record`)
    NEXT_DOCNO: Final = "next_docno"  # the number the next document gets
    COUNTS: Final = "counts"  # verdict tallies of the documents indexed
    CLOCK: Final = "clock"  # stream time (ms): see engine/clock.py
    RECENT: Final = "recent"  # the last trusted timestamps, oldest first (engine/clock.py)
    CAPS: Final = "caps"  # documents whose search a cap cut short: {"bucket": n, "exact": n}
    CHANGELOG: Final = "changelog"  # the changelog the index is mirrored to, if any
    # the store's (store.segment)
    SEGMENTS: Final = "segments"  # the registry: one entry per sealed segment, in order
    SEALED: Final = "sealed"  # the number of the last segment sealed (numbers never repeat)
    # the engine's, per sealed segment: the writer's last answer (when, round trip and
    # time waited, ms), for `stats`
    SEGMENT_ANSWERS: Final = "segment-answers"
    # the worker's
    BINDING: Final = "binding"  # the consumer group and input topic the index serves
    IDENTITY: Final = "identity"  # the index's id and when it was bound to its group
    APPLIED: Final = "applied/"  # + NS: per partition, the next offset applied
    PUBLISHED: Final = "published/"  # + NS: per partition, the next offset published
    VERDICTS: Final = "verdicts/"  # + NS/P/LAST: a stored batch's verdicts
    TOUCHED: Final = "touched/"  # + NS/P/LAST: the ids that batch changed beyond its own
    TOPIC_ID: Final = "topic-id/"  # + NS: the input topic's id, as first seen
    # replay's
    REPLAY_RUN: Final = "replay-run/"  # + NS: the mode and output of a replay
    REPLAY_FILE: Final = "replay-file/"  # + NS: the bytes of verdicts in its output file


def docno_key(docno: int) -> bytes:
    return docno.to_bytes(DOCNO_BYTES, "big")


def docno_keys(docnos: npt.NDArray[np.int64]) -> bytes:
    """`docno_key` of many document numbers, joined (DOCNO_BYTES each)."""
    wide = np.ascontiguousarray(docnos, dtype=">u8").view(np.uint8).reshape(-1, 8)
    return wide[:, 8 - DOCNO_BYTES :].tobytes()


def docno_of(key: bytes | memoryview) -> int:
    return int.from_bytes(key, "big")


def expiry_key(timestamp_ms: int, docno: int) -> bytes:
    return max(timestamp_ms, 0).to_bytes(8, "big") + docno_key(docno)


def tomb_key(number: int, docno: int) -> bytes:
    """A tombstone: `docno` masked in sealed segment `number` (grouped by segment,
    docnos in order within one)."""
    return number.to_bytes(SEGMENT_BYTES, "big") + docno_key(docno)


def tomb_of(key: bytes) -> tuple[int, int]:
    """(segment number, docno) of a tombstone key."""
    return int.from_bytes(key[:SEGMENT_BYTES], "big"), docno_of(key[SEGMENT_BYTES:])


def id_key(doc_id: DocId) -> bytes:
    """Ids keep their type (1 and "1" differ); very long ids are hashed to fit a key."""
    raw = (
        (b"i%d" % doc_id)
        if isinstance(doc_id, int)
        else b"s" + doc_id.encode("utf-8", "surrogatepass")
    )
    if len(raw) > _MAX_ID_KEY:
        return b"h" + hashlib.blake2b(raw, digest_size=32).digest()
    return raw


def chunks(raw: bytes, width: int) -> list[bytes]:
    """`raw` cut into `width`-byte pieces (by numpy: several times faster than slicing)."""
    out: list[bytes] = np.frombuffer(raw, dtype=f"V{width}").tolist()
    return out


def native_keys(raw: bytes) -> npt.NDArray[np.uint64]:
    """Band keys stored big-endian, as native integers (numpy sorts those several
    times faster than a byte-swapped dtype)."""
    return np.frombuffer(raw, dtype=">u8").astype(np.uint64)


def raw_keys(keys: npt.NDArray[np.uint64]) -> list[bytes]:
    """uint64 band keys as the 8-byte big-endian keys the engine passes around."""
    return chunks(keys.astype(">u8").tobytes(), 8)
