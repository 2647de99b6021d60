"""What the writer asks a sealed segment, and how a segment answers (`Probe`,
`Answer`, `answer_probe`): one message each way per batch, the same whether the
segment is a directory on this host (`LocalReader`) or served by `segment-server`
processes over Kafka (kafka/segment_service/ carries the packed bytes).

A sealed segment never changes, so it can answer everything about a batch before the
batch is decided: which of the batch's ids and contents it holds, the newest postings
of the batch's band keys, the records and signatures of those documents, and the
stored texts (compressed: they are the exact shingle sets, about 1.4 KB a page) of
every candidate whose signature estimate is near the threshold for some batch
document, so the writer verifies exactly as it does against its own documents.  What
changes as the batch is decided -- documents replaced or expired after sealing
(tombstones), this batch's own documents -- stays with the writer, which merges the
answers with its open segment (asking.py, view.py).

Why candidates' texts come back rather than the probe carrying the batch's texts to be
measured by the segment (the first design): on a crawl-like stream most documents have
no near candidate, so the batch's texts were three quarters of every probe (2.8 of
3.65 MB for 2,000 pages, sent once per segment) and each segment shingled again what
the writer had already shingled; the near candidates' texts are a few hundred KB.

When the writer needs more than the first answer gave (a bucket whose newest
postings were tombstoned, a replaced document's copies, the expiry order), it sends
a follow-up probe with only those questions; such follow-ups are rare."""

from __future__ import annotations

import itertools
import os
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import msgpack
import numpy as np
import numpy.typing as npt

from streamdedup.config import IndexParams
from streamdedup.errors import SegmentError
from streamdedup.sketch.signature import estimate_jaccard
from streamdedup.store.buckets import newest_postings
from streamdedup.store.segment.reading import SealedSegment
from streamdedup.store.segment.registry import SegmentEntry
from streamdedup.store.tables import Tables

U64 = npt.NDArray[np.uint64]
COPIES_PER_ANSWER = 8  # docnos of one content per answer (more on request)


@dataclass
class Probe:
    """Questions for one sealed segment.  Probe documents (`sigs`, `doc_keys`,
    `texts`) are those of the batch that look for near duplicates, in batch order."""

    request: str
    segment: str
    threshold: float = 1.0
    margin: float = 0.0
    exact: bool = True  # the writer verifies exactly: send near candidates' texts
    depth: int = 0  # newest postings wanted per band key
    # band keys asked about besides the probe documents' own (`doc_keys`, which the
    # segment reads from there: not sent twice)
    keys: U64 = field(default_factory=lambda: np.empty(0, np.uint64))
    doc_keys: U64 = field(default_factory=lambda: np.empty((0, 0), np.uint64))
    sigs: npt.NDArray[np.uint16] = field(default_factory=lambda: np.empty((0, 0), np.uint16))
    ids: list[bytes] = field(default_factory=list)
    contents: list[bytes] = field(default_factory=list)
    after: int = -1  # contents: only documents numbered above this
    docnos: list[int] = field(default_factory=list)  # records and signatures wanted
    text_docnos: list[int] = field(default_factory=list)  # stored texts wanted
    expiry_after: bytes | None = None  # the expiry order from after this key
    expiry_count: int = 0
    newest_at_most: int | None = None  # the newest timestamp at most this
    _body: bytes | None = field(default=None, repr=False, compare=False)

    def pack(self) -> bytes:
        """[request, segment, body]: the body is packed once and kept, so one probe
        sent to several segments (only `request` and `segment` differ) is packed once;
        change no other field after packing."""
        if self._body is None:
            self._body = self._pack_body()
        return bytes(msgpack.packb([self.request, self.segment, self._body]))

    def _pack_body(self) -> bytes:
        return bytes(
            msgpack.packb(
                {
                    "t": self.threshold,
                    "m": self.margin,
                    "v": self.exact,
                    "d": self.depth,
                    "k": _arr(self.keys),
                    "dk": _arr(self.doc_keys),
                    "ds": list(self.doc_keys.shape),
                    "g": _arr(self.sigs.astype("<u2")),
                    "gs": list(self.sigs.shape),
                    "i": self.ids,
                    "c": self.contents,
                    "a": self.after,
                    "n": self.docnos,
                    "tn": self.text_docnos,
                    "ea": self.expiry_after,
                    "ec": self.expiry_count,
                    "nm": self.newest_at_most,
                }
            )
        )

    @classmethod
    def unpack(cls, raw: bytes) -> Probe:
        try:
            request, segment, body = msgpack.unpackb(raw)
            m = msgpack.unpackb(body)
            return cls(
                request=request,
                segment=segment,
                threshold=m["t"],
                margin=m["m"],
                exact=bool(m["v"]),
                depth=m["d"],
                keys=np.frombuffer(m["k"], "<u8").astype(np.uint64),
                doc_keys=np.frombuffer(m["dk"], "<u8").astype(np.uint64).reshape(m["ds"]),
                sigs=np.frombuffer(m["g"], "<u2").astype(np.uint16).reshape(m["gs"]),
                ids=m["i"],
                contents=m["c"],
                after=m["a"],
                docnos=m["n"],
                text_docnos=m["tn"],
                expiry_after=m["ea"],
                expiry_count=m["ec"],
                newest_at_most=m["nm"],
            )
        except (ValueError, KeyError, TypeError, msgpack.UnpackException) as exc:
            raise SegmentError(f"not a segment probe ({exc})") from exc


@dataclass
class Answer:
    """A sealed segment's answer to one probe.  Documents are the segment's own live
    ones (tombstones are the writer's to apply)."""

    request: str
    segment: str
    buckets: dict[int, list[int]] = field(default_factory=dict)  # newest first
    cut: set[int] = field(default_factory=set)  # buckets holding more than returned
    records: dict[int, bytes] = field(default_factory=dict)  # docno -> packed Record
    sigs: dict[int, bytes] = field(default_factory=dict)  # docno -> signature
    ids: dict[bytes, int] = field(default_factory=dict)
    contents: dict[bytes, list[int]] = field(default_factory=dict)  # ascending
    more_copies: set[bytes] = field(default_factory=set)
    texts: dict[int, bytes] = field(default_factory=dict)  # docno -> compressed text
    expiry: list[tuple[int, int]] = field(default_factory=list)  # (timestamp, docno)
    more_expiry: bool = False
    newest: int = 0

    def pack(self) -> bytes:
        body = bytes(
            msgpack.packb(
                {
                    "b": [[k, v] for k, v in self.buckets.items()],
                    "u": list(self.cut),
                    "rc": [[k, v] for k, v in self.records.items()],
                    "g": [[k, v] for k, v in self.sigs.items()],
                    "i": [[k, v] for k, v in self.ids.items()],
                    "c": [[k, v] for k, v in self.contents.items()],
                    "mc": list(self.more_copies),
                    "x": [[k, v] for k, v in self.texts.items()],
                    "ex": [list(e) for e in self.expiry],
                    "me": self.more_expiry,
                    "n": self.newest,
                }
            )
        )
        return bytes(msgpack.packb([self.request, self.segment, body]))

    @classmethod
    def unpack(cls, raw: bytes) -> Answer:
        try:
            request, segment, body = msgpack.unpackb(raw)
            m = msgpack.unpackb(body)
            return cls(
                request=request,
                segment=segment,
                buckets={int(k): v for k, v in m["b"]},
                cut=set(m["u"]),
                records={int(k): v for k, v in m["rc"]},
                sigs={int(k): v for k, v in m["g"]},
                ids={k: int(v) for k, v in m["i"]},
                contents={k: v for k, v in m["c"]},
                more_copies=set(m["mc"]),
                texts={int(k): v for k, v in m["x"]},
                expiry=[(int(a), int(b)) for a, b in m["ex"]],
                more_expiry=bool(m["me"]),
                newest=int(m["n"]),
            )
        except (ValueError, KeyError, TypeError, msgpack.UnpackException) as exc:
            raise SegmentError(f"not a segment answer ({exc})") from exc

    def merge(self, other: Answer) -> None:
        """Take in a follow-up's answer (a follow-up never contradicts: the segment
        does not change)."""
        self.buckets.update(other.buckets)
        self.cut -= set(other.buckets)
        self.cut |= other.cut
        self.records.update(other.records)
        self.sigs.update(other.sigs)
        self.ids.update(other.ids)
        for c, docnos in other.contents.items():
            have = self.contents.get(c, [])
            self.contents[c] = sorted(set(have) | set(docnos))
        self.more_copies -= set(other.contents)
        self.more_copies |= other.more_copies
        self.texts.update(other.texts)


def distinct(keys: U64) -> U64:
    """The distinct band keys, sorted: `np.unique` by sorting, which on a batch's
    keys (36,000 of them for 2,000 pages) takes a quarter of the time of numpy 2's
    hashing `np.unique`."""
    k = np.sort(keys, axis=None)
    if len(k) < 2:
        return k
    return k[np.concatenate(([True], k[1:] != k[:-1]))]


def _arr(a: npt.NDArray[Any]) -> bytes:
    return bytes(np.ascontiguousarray(a).astype(a.dtype.newbyteorder("<")).tobytes())


def request_of(payload: bytes) -> tuple[str, str]:
    """A packed probe's or answer's request id and segment id (for the transport):
    the first two of its three parts (the body stays packed)."""
    try:
        request, segment, _ = msgpack.unpackb(payload)
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise SegmentError(f"not a segment probe or answer ({exc})") from exc
    return str(request), str(segment)


# ---------------------------------------------------------------- the segment side


def check_params(segment: SealedSegment, params: IndexParams) -> None:
    """Refuse a segment built with other index parameters than the index's."""
    theirs = dict(segment.manifest.params)
    mine = params.to_record()
    differ = sorted(k for k in set(theirs) | set(mine) if theirs.get(k) != mine.get(k))
    if differ:
        shown = ", ".join(
            "hash_key: another index's (the segment was sealed from or built for another index)"
            if k == "hash_key"
            else f"{k}: segment {theirs.get(k)!r}, index {mine.get(k)!r}"
            for k in differ
        )
        raise SegmentError(
            f"the sealed segment at {segment.path} was built with other index parameters "
            f"({shown}); it cannot answer for this index"
        )


class Answerer:
    """Answers probes for one open sealed segment (local readers and segment-server)."""

    def __init__(self, segment: SealedSegment) -> None:
        self.segment = segment
        self.params = IndexParams.from_record(dict(segment.manifest.params))

    def __call__(self, probe: Probe) -> Answer:
        return self.segment.index.read(lambda t: self._answer(t, probe))

    def answer_bytes(self, payload: bytes) -> bytes:
        return self(Probe.unpack(payload)).pack()

    def _answer(self, t: Tables, probe: Probe) -> Answer:
        out = Answer(probe.request, probe.segment)
        wanted: set[int] = set(probe.docnos)
        for key in probe.ids:
            d = t.docno_for_id(key)
            if d is not None:
                out.ids[key] = d
                wanted.add(d)
        for c in probe.contents:
            docnos = t.content_docnos(c, probe.after, COPIES_PER_ANSWER + 1)
            if len(docnos) > COPIES_PER_ANSWER:
                out.more_copies.add(c)
                docnos = docnos[:COPIES_PER_ANSWER]
            if docnos:
                out.contents[c] = docnos
                wanted.update(docnos)
        keys = distinct(np.concatenate([probe.keys, probe.doc_keys.ravel()]).astype(np.uint64))
        if len(keys) and probe.depth > 0:
            found = newest_postings(t, keys, probe.depth + 1)
            for k, docnos in found.items():
                if len(docnos) > probe.depth:
                    out.cut.add(k)
                    docnos = docnos[: probe.depth]
                out.buckets[k] = docnos
                wanted.update(docnos)
        if probe.expiry_count:  # the entries' records too: the writer may forget them
            out.expiry, out.more_expiry = t.expiry_entries(probe.expiry_after, probe.expiry_count)
            wanted.update(d for _, d in out.expiry)
        for d in wanted:
            rec = t.record_bytes(d)
            if rec is None:
                continue
            out.records[d] = rec
            sig = t.signature(d)
            if sig is not None:
                out.sigs[d] = sig
        for d in [*self._near(probe, out), *probe.text_docnos]:
            if d not in out.texts:
                out.texts[d] = t.text(d)
        if probe.newest_at_most is not None:
            out.newest = t.newest_timestamp(probe.newest_at_most)
        return out

    def _near(self, probe: Probe, out: Answer) -> list[int]:
        """The candidates (of the postings answered) whose signature estimate is within
        the margin of the threshold for some probe document: the only ones the writer
        may verify exactly, so the ones whose texts it will want."""
        if not probe.exact or not out.buckets or not len(probe.doc_keys):
            return []
        bar = probe.threshold - probe.margin
        held = np.fromiter(out.buckets, dtype=np.uint64, count=len(out.buckets))
        hit = np.isin(probe.doc_keys, held).any(axis=1)  # most documents: no candidate
        near: set[int] = set()
        for j in np.flatnonzero(hit).tolist():
            cands = sorted(
                set(
                    itertools.chain.from_iterable(
                        out.buckets.get(k, ()) for k in probe.doc_keys[j].tolist()
                    )
                )
            )
            cands = [d for d in cands if d in out.sigs and d not in near]
            if not cands:
                continue
            others = np.frombuffer(b"".join(out.sigs[d] for d in cands), dtype="<u2")
            est = estimate_jaccard(probe.sigs[j], others.reshape(len(cands), -1))
            near.update(d for d, e in zip(cands, est.tolist(), strict=True) if e >= bar)
        return sorted(near)


# ---------------------------------------------------------------- the writer side


class SegmentReader(Protocol):
    """How the writer reaches one sealed segment: `submit` sends a packed probe now
    and returns a waiter for the packed answer."""

    entry: SegmentEntry

    def submit(self, request: str, payload: bytes) -> Callable[[], bytes]: ...

    def close(self) -> None: ...


class LocalReader:
    """A sealed segment on a path of this host, opened read-only and asked directly."""

    def __init__(self, entry: SegmentEntry, params: IndexParams) -> None:
        self.entry = entry
        if not os.path.lexists(entry.path):
            raise SegmentError(
                f"sealed segment {entry.number} of the index is missing: {entry.path} does "
                "not exist. Moved? `streamdedup repoint --index INDEX NEW_PLACE` registers it "
                "where it is now (segments inside the index directory move with it)"
            )
        self.segment = SealedSegment.open(entry.path)
        try:
            if self.segment.manifest.id != entry.id:
                raise SegmentError(
                    f"the segment at {entry.path} is {self.segment.manifest.id}, but the index "
                    f"registered segment {entry.number} as {entry.id}: was it replaced?"
                )
            check_params(self.segment, params)
        except BaseException:
            self.segment.close()
            raise
        self._answer = Answerer(self.segment)

    def submit(self, request: str, payload: bytes) -> Callable[[], bytes]:
        out = self._answer.answer_bytes(payload)
        return lambda: out

    def ask(self, probe: Probe) -> Answer:
        """Without packing (what `submit` does, for a caller in this process)."""
        return self._answer(probe)

    def close(self) -> None:
        self.segment.close()


Waiting = tuple[int, float, Callable[[], "bytes | Answer"]]  # segment, when sent, waiter


def answered(answer: Answer) -> Callable[[], bytes | Answer]:
    """A waiter for an answer already there (a local reader answers at once)."""
    return lambda: answer


def new_request() -> str:
    return f"{os.getpid():x}-{uuid.uuid4().hex[:16]}"


__all__ = [
    "Answer",
    "Answerer",
    "LocalReader",
    "Probe",
    "SegmentReader",
    "check_params",
    "distinct",
    "new_request",
    "request_of",
]
