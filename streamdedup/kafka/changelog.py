"""The index as a log-compacted Kafka topic, so a worker can lose its disk.

Every change a batch makes to the index -- a document stored, replaced or forgotten
(by a changed re-send or by the time window) -- goes to the changelog topic inside the
same Kafka transaction as the batch's verdicts and consumer offsets, keyed by the
document id.  Compaction keeps the latest state of each document.  A worker that
starts with an empty index reads the changelog to its end and rebuilds the index
from it (same document numbers, so the same postings order), takes the consumer
group's committed offsets as the index's position, and goes on from there.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgpack

from streamdedup.config import EngineOptions, IndexParams
from streamdedup.engine.clock import StreamClock
from streamdedup.errors import IndexOpenError
from streamdedup.models import Change, Record, Verdict
from streamdedup.store.buckets import rebuild_postings
from streamdedup.store.index import Index
from streamdedup.store.keys import MetaKey
from streamdedup.store.tables import Tables

log = logging.getLogger("streamdedup.kafka.changelog")

PARAMS_KEY = b"\x00params"  # document keys start with i, s or h (keys.id_key)


def encode_changes(changes: list[Change]) -> list[tuple[bytes, bytes | None]]:
    out: list[tuple[bytes, bytes | None]] = []
    for c in changes:
        if c.record is None:
            out.append((c.key, None))  # a tombstone: compaction drops the document
        else:
            value = [
                c.docno,
                c.record.pack(),
                c.signature,
                None,  # was the fingerprint set (index format 6); the slot keeps the layout
                c.owns_content,
                c.text,
            ]
            out.append((c.key, msgpack.packb(value)))
    return out


def current_changes(t: Tables, keys: list[bytes]) -> list[Change]:
    """The index's present state of these documents, as changes.

    A batch whose index transaction committed but whose Kafka transaction did not (a
    crash or a broker failure between the two) is published again from the stored
    verdicts, and its original changelog records went with the aborted transaction:
    re-sending the present state of the documents it changed restores the changelog --
    its own, and the others it touched (`Deduplicator.changed_others`, kept with its verdicts:
    copies promoted to content owner, documents the time window forgot), a forgotten
    one as a tombstone."""
    out: list[Change] = []
    for key in dict.fromkeys(keys):
        docno = t.docno_for_id(key)
        record = None if docno is None else t.record(docno)
        if docno is None or record is None:
            out.append(Change(key, -1 if docno is None else docno, None, None, False))
            continue
        signature = t.signature(docno)
        text = t.text(docno) if signature is not None else None
        owns = t.docno_for_content(record.content_hash) == docno
        out.append(Change(key, docno, record, signature, owns, text or None))
    return out


def params_record(params: IndexParams) -> tuple[bytes, bytes]:
    return PARAMS_KEY, msgpack.packb(params.to_record())


def index_is_empty(index: Index) -> bool:
    return bool(index.read(lambda t: t.meta(MetaKey.NEXT_DOCNO) is None and t.count("ids") == 0))


@dataclass
class RestoreStats:
    records: int = 0
    documents: int = 0
    seconds: float = 0.0


class Restorer:
    """Rebuilds an empty index from changelog records: `add` them in log order (the
    last state of each id wins), a write transaction per call, then `finish`."""

    def __init__(self, index: Index) -> None:
        self.index = index
        self.params: IndexParams | None = None
        self.max_docno = -1
        self.stats = RestoreStats()

    def add(self, batch: list[tuple[bytes, bytes | None]]) -> None:
        self.index.write(lambda t: self._apply(t, batch))
        self.stats.records += len(batch)

    def _apply(self, t: Tables, batch: list[tuple[bytes, bytes | None]]) -> None:
        for key, value in batch:
            if key == PARAMS_KEY:
                if value is not None:
                    self.params = IndexParams.from_record(msgpack.unpackb(value))
                    t.set_meta(MetaKey.PARAMS, self.params.to_record())
                continue
            old = t.docno_for_id(key)
            if old is not None:  # postings come last (`rebuild_postings`): none to remove yet
                t.remove_document(old, key, [])
            if value is None:
                continue
            docno, packed, sig, _unused, _owns, *rest = msgpack.unpackb(value)
            text = rest[0] if rest else None
            record = Record.unpack(packed)
            # Content owners and copies are set from the whole restored state at
            # the end (`_finish`): records of different ids come in any order
            # across partitions, a promotion's possibly before its owner's removal.
            t.put_document(
                docno,
                key,
                record,
                signature=sig,
                bucket_keys=[],
                register_content=False,
                text=text,
            )
            self.max_docno = max(self.max_docno, docno)

    def finish(
        self,
        committed: dict[int, int],
        ns: str,
        source: str = "the changelog",
        progress: Callable[[], None] | None = None,
        clock_window: int = EngineOptions.clock_window,
    ) -> RestoreStats:
        """Once every record is added: fill the band buckets, recompute what the engine
        keeps in `meta` (stream time by the rule of the engine that goes on, with its
        `clock_window`), and record `committed` (the consumer group's offsets) as the
        position of consumer `ns` ("group/topic").  `source` names the changelog in
        errors."""
        if self.params is None:
            if self.max_docno >= 0:
                raise IndexOpenError(f"changelog {source} holds no index parameters")
        else:
            rebuild_postings(self.index, self.params, progress)
        self.stats.documents = self.index.write(
            lambda t: _finish(t, self.max_docno, committed, ns, clock_window)
        )
        return self.stats


def _finish(t: Tables, max_docno: int, offsets: dict[int, int], ns: str, clock_window: int) -> int:
    """Recompute what the engine keeps in `meta` from the restored documents, and
    which document owns each content: the one indexed (with a signature), else the
    oldest; the others are its copies."""
    counts: dict[str, int] = {}
    # stream time from the stored timestamps in document order, as the engine moved it
    # (engine/clock.py); documents already expired or replaced are not in it
    stream = StreamClock(window=clock_window)
    n = 0
    t.clear_content()
    unindexed: list[tuple[bytes, int]] = []
    for docno, rec in t.records():
        if rec.shingles > 0:
            if t.signature(docno) is not None:
                t.register_content(rec.content_hash, docno, copy=False)
            else:
                unindexed.append((rec.content_hash, docno))
        v = Verdict.from_record(rec)
        for kind in v.kinds():
            counts[kind] = counts.get(kind, 0) + 1
        if rec.timestamp_ms is not None:
            stream.advance(rec.timestamp_ms)
        n += 1
    for content, docno in unindexed:
        t.register_content(content, docno)
    t.set_meta(MetaKey.NEXT_DOCNO, max_docno + 1)
    t.set_meta(MetaKey.COUNTS, counts)
    t.set_meta(MetaKey.CLOCK, stream.clock)
    t.set_meta(MetaKey.RECENT, list(stream.recent))
    for prefix in (MetaKey.APPLIED, MetaKey.PUBLISHED):
        t.set_meta(prefix + ns, {str(p): o for p, o in offsets.items()})
    return n


def restore(
    index: Index,
    consumer: Any,
    changelog_topic: str,
    committed: dict[int, int],
    ns: str,
    progress: Callable[[int, int], None] | None = None,
    batch_size: int = 5000,
    clock_window: int = EngineOptions.clock_window,
) -> RestoreStats:
    """Rebuild `index` (empty) from the changelog topic read to its current end.

    `committed` are the group's committed input offsets, read *before* the changelog,
    so the restored state is at least as new as the position it records."""
    from kafka import TopicPartition

    started = time.monotonic()
    parts = sorted(consumer.partitions_for_topic(changelog_topic) or [])
    tps = [TopicPartition(changelog_topic, p) for p in parts]
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)
    ends = true_end_offsets(consumer, tps)
    for tp in tps:
        consumer.seek_to_beginning(tp)
    total = sum(ends.values())
    r = Restorer(index)
    stats = r.stats
    pending: list[tuple[bytes, bytes | None]] = []
    idle = 0
    while any(consumer.position(tp) < ends[tp] for tp in tps) and idle < 20:
        polled = consumer.poll(timeout_ms=500)
        idle = 0 if polled else idle + 1
        for tp in sorted(polled, key=lambda tp: tp.partition):
            for m in polled[tp]:
                if m.offset < ends[tp]:
                    pending.append((bytes(m.key), None if m.value is None else bytes(m.value)))
        if len(pending) >= batch_size:
            r.add(list(pending))
            pending.clear()
            if progress is not None:
                progress(stats.records, total)
    r.add(list(pending))
    pending.clear()
    r.finish(
        committed,
        ns,
        source=changelog_topic,
        progress=None if progress is None else lambda: progress(stats.records, total),
        clock_window=clock_window,
    )
    stats.seconds = time.monotonic() - started
    consumer.unsubscribe()
    return stats


def true_end_offsets(consumer: Any, tps: list[Any]) -> dict[Any, int]:
    """End offsets, checked by reading the last batch: a broker may report the end
    of a multi-record batch as its first offset + 1 (Tansu does), so the offset of
    the last record actually fetched from there counts too."""
    reported = consumer.end_offsets(tps)
    ends = dict(reported)
    for tp in tps:
        if reported[tp] > 0:
            consumer.seek(tp, reported[tp] - 1)
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline:
        polled = consumer.poll(timeout_ms=300)
        if not polled:
            break
        for tp, msgs in polled.items():
            ends[tp] = max(ends[tp], msgs[-1].offset + 1)
    return ends
