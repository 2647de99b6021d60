"""The records that travel between the layers: a `Document` in, a `Verdict` out, a
`Rejected` input with its reason code, the `Record` the index keeps per document, and
the `Change` the changelog carries.  Plain data, no behaviour beyond (de)serialising,
so that every layer can name them without importing another layer."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgpack

DocId = str | int

# A stored verdict, as the `docs` table keeps it.
UNIQUE, DUPLICATE = 0, 1

# What the index and the summaries count (see `Verdict.kinds`).
TALLIES = ("unique", "duplicate", "exact", "empty")

_PACKERS = threading.local()

# Document and Verdict are plain slotted records, not frozen ones: one of each is
# built per document, and a frozen dataclass costs a microsecond more to build.


@dataclass(slots=True)
class Document:
    """An input record: its id, its text, and (an index of another item kind than
    text: `IndexParams.item`) its item in canonical bytes, the text then empty --
    `bits`: the N/8 bytes of the bit string, most significant bit first."""

    id: DocId
    text: str
    timestamp_ms: int | None = None
    item: bytes | None = None


@dataclass(slots=True)
class Verdict:
    id: DocId
    verdict: str
    duplicate_of: DocId | None
    cluster: DocId
    similarity: float | None
    exact: bool
    reason: str | None = None

    @property
    def is_duplicate(self) -> bool:
        return self.verdict == "duplicate"

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "verdict": self.verdict,
            "duplicate_of": self.duplicate_of,
            "cluster": self.cluster,
            "similarity": self.similarity,
            "exact": self.exact,
        }
        if self.reason is not None:
            out["reason"] = self.reason
        return out

    def kinds(self) -> tuple[str, ...]:
        """The tallies this verdict counts toward (`TALLIES`): its verdict, and "exact"
        or "empty" when they apply.  The one definition behind the index's stored
        counts, a changelog restore's recount, `stats --check` and the run summaries."""
        if self.verdict == "duplicate":
            return ("duplicate", "exact") if self.exact else ("duplicate",)
        return ("unique", "empty") if self.reason == "empty" else ("unique",)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Verdict:
        """The inverse of `to_dict` (extra keys such as `source` are ignored)."""
        return cls(
            d["id"],
            d["verdict"],
            d["duplicate_of"],
            d["cluster"],
            d["similarity"],
            d["exact"],
            d.get("reason"),
        )

    @classmethod
    def from_record(cls, rec: Record) -> Verdict:
        return cls(
            id=rec.doc_id,
            verdict="duplicate" if rec.verdict == DUPLICATE else "unique",
            duplicate_of=rec.duplicate_of,
            cluster=rec.cluster,
            similarity=rec.similarity,
            exact=rec.exact,
            reason=rec.reason,
        )


@dataclass(slots=True)
class DistanceVerdict(Verdict):
    """The verdict of a family with a distance (Hamming): `distance` besides
    `similarity`, both null where there is no match (DESIGN.md "Items and similarity
    families").  Its own class so that a Jaccard verdict keeps its record as always."""

    distance: float | None = None

    def to_dict(self) -> dict[str, Any]:
        out = Verdict.to_dict(self)
        out["distance"] = self.distance
        return out


def _packer() -> msgpack.Packer:
    """A Packer kept per thread: `msgpack.packb` makes one per call, which was two
    thirds of its 1.7 us (one record is packed per document)."""
    packer = getattr(_PACKERS, "packer", None)
    if packer is None:
        packer = _PACKERS.packer = msgpack.Packer()
    return packer


def _stored(v: Verdict, content_hash: bytes, timestamp_ms: int | None, shingles: int) -> list[Any]:
    """The fields of the `Record` of a document with verdict `v`, in their order (that
    of its packed form too)."""
    return [
        v.id,
        DUPLICATE if v.verdict == "duplicate" else UNIQUE,
        v.duplicate_of,
        v.cluster,
        v.similarity,
        v.exact,
        content_hash,
        timestamp_ms,
        v.reason,
        shingles,
    ]


@dataclass(slots=True)
class Record:
    """What the index remembers about one document (besides its postings).  Not
    frozen: a frozen dataclass costs 2 us more to build, and one is built per document."""

    doc_id: DocId
    verdict: int
    duplicate_of: DocId | None
    cluster: DocId
    similarity: float | None
    exact: bool
    content_hash: bytes
    timestamp_ms: int | None
    reason: str | None
    shingles: int

    @classmethod
    def of(cls, v: Verdict, content_hash: bytes, timestamp_ms: int | None, shingles: int) -> Record:
        """What the index stores of a document given its verdict (the engine's
        inserts and a segment built by the backfill: one definition, `_stored`).
        Positional arguments, in the order of the fields: keywords cost a third
        more, and one record is built per document."""
        return cls(*_stored(v, content_hash, timestamp_ms, shingles))

    def pack(self) -> bytes:
        return _packer().pack(self._fields())  # type: ignore[no-any-return]

    def _fields(self) -> list[Any]:
        return [
            self.doc_id,
            self.verdict,
            self.duplicate_of,
            self.cluster,
            self.similarity,
            self.exact,
            self.content_hash,
            self.timestamp_ms,
            self.reason,
            self.shingles,
        ]

    @staticmethod
    def pack_many(records: list[Record]) -> list[bytes]:
        """`pack` of each record (one packer looked up for all)."""
        pack = _packer().pack
        return [pack(r._fields()) for r in records]

    @staticmethod
    def pack_verdicts(
        verdicts: Sequence[Verdict],
        content_hashes: Sequence[bytes],
        timestamps: Sequence[int | None],
        shingles: Sequence[int],
    ) -> list[bytes]:
        """`Record.of(v, ...).pack()` of each verdict and its document's data, without
        the `Record`s: the engine stores most of a stream's documents in bulk, where
        nothing reads their records as objects, and building one took as long as
        packing it."""
        if not len(verdicts) == len(content_hashes) == len(timestamps) == len(shingles):
            raise ValueError("the data of each verdict's document")
        fields = map(_stored, verdicts, content_hashes, timestamps, shingles)
        return list(map(_packer().pack, fields))

    @classmethod
    def unpack(cls, raw: bytes) -> Record:
        f = msgpack.unpackb(raw)
        return cls(f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7], f[8], f[9])


@dataclass(slots=True)
class Change:
    """One change to the index, as the changelog carries it: a document stored
    (`record` set) or forgotten (`record` None).  A copy promoted to owner of its
    content (`Deduplicator._forget`) is stored again, with the owner's data."""

    key: bytes
    docno: int
    record: Record | None
    signature: bytes | None
    owns_content: bool
    text: bytes | None = None  # compressed normalised text (exact verification)


# Reason codes (stable: they appear in error records and dead-letter headers).
TOO_LARGE = "too_large"
INVALID_UTF8 = "invalid_utf8"
MALFORMED = "malformed_json"
MALFORMED_MSGPACK = "malformed_msgpack"
NOT_AN_OBJECT = "not_an_object"
MISSING_ID = "missing_id"
BAD_ID = "bad_id"
MISSING_TEXT = "missing_text"
BAD_TEXT = "bad_text"
# crawler inputs (`inputs.html`, `inputs.warc`)
BINARY_CONTENT = "binary_content"  # a page body that is not text (an image labelled HTML)
UNDECODABLE = "undecodable_text"  # no charset turns the page's bytes into text
MALFORMED_HTML = "malformed_html"  # the HTML parser gave up on the page
CORRUPT_WARC = "corrupt_warc"  # a WARC archive cut short or damaged: the rest is unread
TOO_DEEP = "too_deep"  # HTML nested too deeply for main-content extraction (`inputs.html`)
DUPLICATE_RECORD_ID = "duplicate_record_id"  # a WARC-Record-ID read before in the same run
# items other than text (DESIGN.md "Items and similarity families")
MISSING_ITEM = "missing_item"  # no item field
BAD_ITEM_TYPE = "bad_item_type"  # the field holds the wrong kind of value
BAD_ITEM_LENGTH = "bad_item_length"  # another length than --bits or --dim
BAD_ITEM_VALUE = "bad_item_value"  # not hexadecimal; a vector holding a non-number
ITEM_NOT_FINITE = "item_not_finite"  # a vector holding NaN, an infinity, or beyond float32
ZERO_VECTOR = "zero_vector"  # a cosine index's vector of zeros (no direction)
MIXED_SET = "mixed_set"  # a set holding both strings and integers
# The worker's --keep-topic: a unique document's message too large to publish again
TOO_LARGE_TO_KEEP = "too_large_to_keep"


@dataclass(frozen=True)
class Rejected:
    """An input that could not become a document: a reason code (above) and a message."""

    reason: str
    message: str
    id: str | int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "verdict": "error", "error": self.reason, "message": self.message}


def output_record(item: Verdict | Rejected, **where: Any) -> dict[str, Any]:
    """The one output record of an input, a verdict or an error record, followed by
    where the input came from (`line=` in a file, `source=` on Kafka).  Every verdict
    file, topic and replay output is written from this."""
    record = item.to_dict()
    if where:  # (a file's verdicts have none: no second dict for each)
        record.update(where)
    return record
