"""The decision: a prepared batch (prepare.py) checked against the store and inserted,
in order, inside one LMDB write transaction (`Deduplicator.apply`), so each document
sees every document before it, including earlier ones of its own batch, and no other
writer can interleave.  It owns the order of the checks, the time window (expiry and
the stream clock), content ownership as documents come and go, the verdict tallies
and the record of changes a changelog mirrors.

Decision order for one document: same id already indexed (same content: its stored
verdict; changed content: forget it and check again) -> no shingles (unique, reason
"empty") -> identical normalised content (duplicate, exact) -> LSH candidates,
verified by signature or by exact Jaccard (verify.py) -> unique.

Most documents of a stream need none of that order's subtleties: a new id, with a
new content and no candidates (unique), or an exact copy of a content held by a
document that stays (duplicate, exact).  Without sealed segments, `_classify` finds
them for the whole batch up front (set and numpy operations over
its ids, contents, quiet rows and read-ahead) and `_store_bulk` decides and stores
them together after the loop; the loop only numbers them in their place.  In a
batch of new ids (most batches of a stream), the documents that search for near
duplicates are decided in bulk too: no verdict changes what a later document of
such a batch finds, so the whole batch's searches are made at once
(engine/search.py).  Their verdicts, stored entries and changes are those the
one-by-one path would make (tests/engine/test_bulk.py compares the two on random
batches).
"""

from __future__ import annotations

import gc
import itertools
import math
import operator
import os
import time
from bisect import bisect_right
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from streamdedup.config import EngineOptions, IndexParams, ShingleSpec, Verify
from streamdedup.engine.clock import StreamClock
from streamdedup.engine.params import check_changelog, open_params, resolve_params
from streamdedup.engine.prepare import Prepared, Preparer, pick, stored_band_keys
from streamdedup.engine.sealed.asking import Sealed, Sent, Store
from streamdedup.engine.sealed.probes import LocalReader, SegmentReader
from streamdedup.engine.sealed.view import View
from streamdedup.engine.search import search_batch
from streamdedup.engine.verify import BatchMemory, best_exact, cap_stopped, exact_margin
from streamdedup.errors import ConfigError, ParameterMismatchError
from streamdedup.models import Change, DocId, Document, Record, Verdict
from streamdedup.sketch.shingle import Shingler
from streamdedup.sketch.signature import estimate_jaccard, rank_gathered
from streamdedup.store.index import Index
from streamdedup.store.keys import MetaKey, id_key
from streamdedup.store.segment.manifest import Manifest
from streamdedup.store.segment.registry import (
    SegmentEntry,
    attach,
    drop_segment,
    located_segments,
    next_number,
    remove_dropped,
    segments,
)
from streamdedup.store.segment.sealing import recover, seal
from streamdedup.store.tables import ABSENT, Packed, Tables

RemoteSegments = Callable[[SegmentEntry], SegmentReader]

# At most this many candidates, their signatures are read one by one (`_one_by_one`);
# more are gathered by the batch's signature matrix (BatchMemory.ranked).
_FEW = 8
# row j of a few candidates' signatures is candidate j's (`_best_match`)
_POSITIONS = np.arange(_FEW + 1, dtype=np.int32)
_DOCNO_OF_POSITION = np.arange(_FEW + 1, dtype=np.int64)


class _SegmentsChanged(Exception):
    """The index's sealed segments changed since they were opened (another process
    sealed): the batch is asked again of the new set."""


@dataclass
class Counters:
    """Work done since the engine was opened (for tests, benchmarks and metrics)."""

    documents: int = 0
    candidates: int = 0  # distinct candidate documents read from buckets
    most_candidates: int = 0  # the most any one document read
    exact_checks: int = 0
    # documents whose search a cap cut short: a bucket held more postings than
    # --max-bucket-candidates, or candidates near enough were left unchecked at
    # --max-exact-checks (a true near duplicate may have been missed)
    bucket_capped: int = 0
    exact_capped: int = 0
    replayed: int = 0  # ids seen before with the same content
    expired: int = 0  # forgotten by the time window
    clock_outliers: int = 0  # timestamps too far ahead of the wall clock (not trusted)
    # decided and stored in bulk (`_classify`): new ids, plain, exact copies or searched
    bulk: int = 0
    searched: int = 0  # of those, searched in one search of their batch (engine/search.py)

    def merge(self, other: Counters) -> None:
        self.documents += other.documents
        self.candidates += other.candidates
        self.most_candidates = max(self.most_candidates, other.most_candidates)
        self.exact_checks += other.exact_checks
        self.bucket_capped += other.bucket_capped
        self.exact_capped += other.exact_capped
        self.replayed += other.replayed
        self.expired += other.expired
        self.clock_outliers += other.clock_outliers
        self.bulk += other.bulk
        self.searched += other.searched


@dataclass
class _Expiry:
    """Per-batch state of the time window."""

    oldest: tuple[int, int] | None
    budget: int
    cutoff: int | None = None
    behind: bool = False


# the kinds of documents decided in bulk (`_classify`); SEARCH: searched for near
# duplicates with the whole batch's others (engine/search.py)
PLAIN, COPY, SEARCH = 1, 2, 3


class _Bulk:
    """The documents of a batch decided in bulk: their kinds by position (0: one by
    one), the content owner (duplicate_of, cluster) of each copy; and as the loop
    numbers them, their positions, document numbers, stored timestamps, and the
    places their changes take in the batch's list (`_store_bulk` fills them; a
    verdict's place is its position: every document has one)."""

    def __init__(self, n: int) -> None:
        self.kind = np.zeros(n, dtype=np.int8)
        self.kinds: list[int] = [0] * n
        self.of: dict[int, tuple[DocId, DocId]] = {}
        self.positions: list[int] = []
        self.docnos: list[int] = []
        self.timestamps: list[int | None] = []
        self.change_at: list[int] = []
        # a copy of a SEARCH document's content (position -> that document's
        # position): its `of` follows that document's verdict (`_store_bulk`)
        self.copy_of: dict[int, int] = {}

    def hold(
        self,
        start: int,
        stop: int,
        docno: int,
        stamps: list[int | None],
        out: list[Verdict],
        changes: list[Change],
    ) -> None:
        """Number the batch's documents at positions `start` .. `stop - 1`, decided in
        bulk, from `docno` on, and keep their places in `out` and `changes` (the
        loop's lists), which `_store_bulk` fills."""
        k = stop - start
        self.positions += range(start, stop)
        self.docnos += range(docno, docno + k)
        self.timestamps += stamps[start:stop]
        self.change_at += range(len(changes), len(changes) + k)
        out += [_LATER] * k
        changes += [_LATER_CHANGE] * k


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector paused for one batch's transaction (if it
    was running), and let run once after it.

    A batch allocates a few container objects per document (records, verdicts,
    changes, the buffered entries' tuples), nearly all of which live until the
    batch commits and none of which form cycles (they are freed by reference
    counting).  Every 700 allocations the collector still walks the young ones,
    and as they pile up, ever older generations: measured on 50,000 one-line
    documents, a fifth of the transaction's CPU time was such walks.  Nothing is
    lost by pausing: a cycle made meanwhile is collected after the batch."""
    if not gc.isenabled():  # paused by the caller (or another thread's batch)
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _reached(rec: Record, cutoff: int | None) -> bool:
    """Whether the time window may forget (or hide) a stored document during a batch
    whose last cutoff is `cutoff` (None: no window)."""
    return cutoff is not None and rec.timestamp_ms is not None and rec.timestamp_ms < cutoff


def _text(p: Prepared, i: int) -> bytes:
    assert p.texts is not None
    return p.texts[i]


# placeholders of the verdicts and changes of documents decided in bulk (`_store_bulk`)
_LATER = Verdict("", "unique", None, "", None, False)
_LATER_CHANGE = Change(b"", -1, None, None, False)

_T = TypeVar("_T")
_TEXT = operator.attrgetter("text")  # a document's text
_ID = operator.attrgetter("id")
_TIMESTAMP = operator.attrgetter("timestamp_ms")


def _chained(lists: Sequence[Iterable[_T]]) -> Iterator[_T]:
    """The items of the parts' lists, in batch order (for `np.fromiter`)."""
    return itertools.chain.from_iterable(lists)


def _first_positions(contents: list[bytes]) -> npt.NDArray[np.intp] | None:
    """Each document's first position in the batch with its content (None: every
    content is there once), from a dict built backwards (the first one written last)."""
    n = len(contents)
    if len(set(contents)) == n:
        return None
    first = dict(zip(reversed(contents), range(n - 1, -1, -1), strict=True))
    return np.fromiter(map(first.__getitem__, contents), dtype=np.intp, count=n)


def _joined(lists: Sequence[Sequence[_T]]) -> Sequence[_T]:
    """The parts' lists as one: the list itself for a batch of one part (file mode)."""
    return lists[0] if len(lists) == 1 else [x for seq in lists for x in seq]


@dataclass
class _Stored:
    """Documents of one kind stored in bulk (`_store_bulk`), kept for their changes:
    those are made from them if `changes` is read (`build`), not for every batch.
    `signatures` (and `texts`, with exact verification): indexed ones, which own
    their content; None: exact copies."""

    at: list[int]  # the places of their changes in the batch's list
    keys: list[bytes]
    docnos: list[int]
    verdicts: list[Verdict]
    contents: list[bytes]
    timestamps: list[int | None]
    shingles: list[int]
    signatures: list[bytes] | None = None
    texts: list[bytes] | None = None

    def build(self, changes: list[Change]) -> None:
        """Their changes, each in its place in `changes` (what `_insert` appends for
        a document stored one by one)."""
        records = [
            Record.of(v, c, ts, n)
            for v, c, ts, n in zip(
                self.verdicts, self.contents, self.timestamps, self.shingles, strict=True
            )
        ]
        if self.signatures is None:
            for j, key, docno, rec in zip(self.at, self.keys, self.docnos, records, strict=True):
                changes[j] = Change(key, docno, rec, None, False)
            return
        texts: Sequence[bytes | None] = self.texts or [None] * len(records)
        for j, key, docno, rec, sig, text in zip(
            self.at, self.keys, self.docnos, records, self.signatures, texts, strict=True
        ):
            changes[j] = Change(key, docno, rec, sig, True, text)


class Deduplicator:
    """Near-duplicate detection against everything indexed before, persisted in LMDB.

    >>> with Deduplicator("/tmp/idx", threshold=0.8) as dd:
    ...     dd.check("a", "the quick brown fox jumps over the lazy dog")
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        threshold: float | None = None,
        num_perm: int | None = None,
        shingle: str | ShingleSpec | None = None,
        bands: int | None = None,
        rows: int | None = None,
        verify: Verify | None = None,
        seed: int | None = None,
        options: EngineOptions | None = None,
        false_positive_weight: float = 0.02,
        false_negative_weight: float = 0.98,
        changelog: str | None = None,
        remote: RemoteSegments | None = None,
        base_segment: str | os.PathLike[str] | None = None,
    ) -> None:
        """`remote`: how to reach sealed segments registered as remote (the Kafka
        layer's `RemoteSegments.reader`); an index with remote segments needs it.

        `base_segment`: a sealed segment a NEW index starts from (`backfill
        --segment` writes one): the index takes its parameters (explicit ones must
        match them) and holds its documents as its local sealed segment 1
        (`store.segments.attach`).  Given again for the index that started from it,
        nothing changes; any other index holding documents is refused.

        `changelog`: the changelog topic this engine's changes go to.  An index a
        worker mirrors to a changelog (`--changelog-topic`) accepts documents only from
        an engine naming that topic -- whose caller publishes `changes` after every
        batch, as the worker does -- so that a restore from the changelog is never
        silently incomplete.  Reading such an index needs no name."""
        self.options = options or EngineOptions()
        if self.options.clock_window < 1:
            raise ConfigError("`clock_window` must be at least 1", params=("clock_window",))
        self.changelog = changelog
        self.index = Index(path, map_size=self.options.map_size, durability=self.options.durability)
        # the explicit detection options, checked against a base segment and the index
        asked: dict[str, Any] = {
            "threshold": threshold,
            "num_perm": num_perm,
            "shingle": shingle,
            "bands": bands,
            "rows": rows,
            "verify": verify,
            "seed": seed,
        }
        try:
            if base_segment is not None:
                self._start_from(base_segment, **asked)
            self.params = open_params(
                self.index,
                **asked,
                false_positive_weight=false_positive_weight,
                false_negative_weight=false_negative_weight,
            )
        except BaseException:
            self.index.close()
            raise
        self.preparer = Preparer(self.params)
        self._counts: dict[str, int] = {}
        k, t = self.params.num_perm, self.params.threshold
        self._margin = exact_margin(t, k)
        self.counters = Counters()
        self._batch = Counters()
        self._expiry = _Expiry(None, 0)
        # this batch's indexed documents, and its candidates' exact sets (verify.py)
        self._memory = BatchMemory(Shingler(self.params.shingle, self.params.hash_key))
        # The changes of the last applied batch, for a changelog (the worker reads them
        # after `apply`: `changes`); rebuilt on every run of the transaction.  Those of
        # the documents stored in bulk are made only if read (`_Stored`).
        self._changes: list[Change] = []
        self._unbuilt: list[_Stored] = []
        # Ids (index keys) of the documents the last applied batch changed beyond
        # storing its own: forgotten by the time window, or promoted to content owner
        # when their owner went.  A worker keeps them with the batch's verdicts, so a
        # redelivery of the batch re-sends their present state to the changelog too.
        # Empty for most batches.
        self.touched: list[bytes] = []
        # The last applied batch's clock outliers: (position in the batch, timestamp).
        self.outliers: list[tuple[int, int]] = []
        self._ts: int | None = None  # the stored timestamp of the document being checked
        self._timed = False  # the batch being applied carries timestamps (`_stamps`)
        self._rows: list[bytes] = []  # the band keys of the part being checked, joined
        self._remote = remote
        self._seen_segments: list[int] = []
        self._dropped: list[int] = []
        self._ahead: list[tuple[list[int], Sent]] = []  # batches asked ahead
        self.sealed: Sealed | None = None
        # Decide a batch's plain documents at once (`_classify`); False: every document
        # one by one (tests compare the two)
        self.bulk = True
        # Search a batch's near duplicates all at once when no verdict can change
        # them (engine/search.py; only with `bulk`); False: one by one in the loop
        self.bulk_search = True
        try:
            self._open_sealed()
        except BaseException:
            self.index.close()
            raise

    def __enter__(self) -> Deduplicator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self.sealed is not None:
            self.sealed.close()
            self.sealed = None
        self.index.close()

    # ------------------------------------------------------------------ segments

    def _open_sealed(self) -> None:
        """Open (again) the sealed segments the index registers; those open already
        stay open (a local segment's checksum is verified once per process)."""
        recover(self.index)  # a seal that committed and did not rename (yet) is finished
        entries = located_segments(self.index)  # inside the index: wherever it is now
        old = {} if self.sealed is None else dict(self.sealed.readers)
        self.sealed = None
        self._seen_segments = [e.number for e in entries]
        keep = {e.number for e in entries if e.number in old and old[e.number].entry == e}
        for n, r in old.items():
            if n not in keep:
                r.close()
        if not entries:
            return
        readers: list[SegmentReader] = []
        try:
            for e in entries:
                if e.number in keep:
                    readers.append(old.pop(e.number))
                elif not e.remote:
                    readers.append(LocalReader(e, self.params))
                elif self._remote is None:
                    raise ConfigError(
                        f"the index at {self.index.path} has remote sealed segments (segment "
                        f"{e.number}: {e.id}); give --bootstrap-servers so that their "
                        "segment servers can be asked"
                    )
                else:
                    readers.append(self._remote(e))
        except BaseException:
            for r in readers:
                r.close()
            raise
        self.sealed = Sealed(readers, self.params)
        self.index.read(self.sealed.load_masks)

    def _start_from(self, segment: str | os.PathLike[str], **asked: Any) -> None:
        """Attach `segment` as the base of this (new) index, after checking the
        explicit detection options against its parameters."""
        manifest = Manifest.read(segment)
        try:
            resolve_params(IndexParams.from_record(manifest.params), **asked)
        except ParameterMismatchError as exc:
            raise ParameterMismatchError(
                f"the base segment {segment}: {exc}", params=exc.params
            ) from exc
        attach(self.index, segment)

    def seal(self, dest: str | os.PathLike[str] | None = None, *, remote: bool = False) -> Manifest:
        """Move every document indexed so far into a new sealed segment (`dest`, by
        default the next number under `EngineOptions.segments_dir`, else
        INDEX/segments)."""
        if dest is None:
            number = self.index.read(next_number)
            base = self.options.segments_dir or os.path.join(self.index.path, "segments")
            dest = os.path.join(base, f"{number:06d}")
        manifest = seal(self.index, Path(dest), remote=remote)
        self._open_sealed()
        return manifest

    @staticmethod
    def _record_answers(t: Tables, sealed: Sealed) -> None:
        """Keep the last answer of each sealed segment in the index, for `stats`."""
        now = time.time_ns() // 1_000_000
        seen = dict(t.meta(MetaKey.SEGMENT_ANSWERS) or {})
        for n, rtt in sealed.round_trips.items():
            seen[str(n)] = {
                "at_ms": now,
                "round_trip_ms": round(rtt * 1000, 3),
                "waited_ms": round(sealed.waited.get(n, 0.0) * 1000, 3),
            }
        sealed.waited = {}
        t.set_meta(MetaKey.SEGMENT_ANSWERS, seen)

    def ask_ahead(self, prepared: Prepared | Sequence[Prepared]) -> None:
        """Send the sealed segments the questions of the batch `apply` gets next, so
        that their answers travel while this process decides the current batch."""
        if self.sealed is None:
            return
        parts = [prepared] if isinstance(prepared, Prepared) else list(prepared)
        self._ahead = [*self._ahead[-1:], ([id(p) for p in parts], self._send(parts))]

    def _send(self, parts: Sequence[Prepared]) -> Sent:
        assert self.sealed is not None
        return self.sealed.send(
            parts,
            self.options.max_bucket_candidates,
            self.params.threshold,
            self._margin,
            self.options.max_expire_per_batch if self.options.ttl_ms else 0,
        )

    def _discard(self, dropped: list[SegmentEntry]) -> None:
        """The directories of sealed segments the index just dropped (every document
        in them expired or was replaced): one inside the index directory
        (`--seal-every`'s) is removed -- the index made it, nothing else registers it;
        it stayed on disk for ever before.  Another (a `seal` to another disk, a
        remote segment's servers) is the operator's: a warning says it can go."""
        import logging  # (rare: not loaded with the engine)

        log = logging.getLogger(__name__)
        for entry in dropped:
            if remove_dropped(self.index, entry):
                log.info(
                    "sealed segment %d dropped: every document in it expired or was "
                    "replaced; its directory %s (inside the index) was removed",
                    entry.number,
                    entry.path,
                )
            else:
                log.warning(
                    "sealed segment %d dropped: every document in it expired or was "
                    "replaced; nothing reads %s any more: delete it%s",
                    entry.number,
                    entry.path,
                    " once its segment servers are stopped" if entry.remote else "",
                )

    def _maybe_seal(self) -> None:
        every = self.options.seal_every
        if every and self.index.read(lambda t: t.count("docs")) >= every:
            self.seal()

    def require_writable(self) -> None:
        """Raise ConfigError now if `apply` would refuse to add documents to this index
        (see `changelog`); `apply` itself refuses only a batch that changes documents,
        so a re-run over documents the index holds (`replay --mode reverdict`) goes on."""
        bound = self.index.read(lambda t: t.meta(MetaKey.CHANGELOG))
        check_changelog(self.index, bound, self.changelog)

    @property
    def changes(self) -> list[Change]:
        """The changes the last applied batch made to the index, in order: what a
        changelog mirrors (the worker publishes them after every batch).  Those of
        documents stored in bulk are made here, when first read: file mode never
        reads them, and they were a tenth of the bulk store's time."""
        for stored in self._unbuilt:
            stored.build(self._changes)
        self._unbuilt = []
        return self._changes

    @property
    def last_batch(self) -> Counters:
        """The work of the last applied batch."""
        return self._batch

    # ------------------------------------------------------------------ public API

    def check(self, doc_id: DocId, text: str, timestamp_ms: int | None = None) -> Verdict:
        """Check one document against everything indexed before it, then index it.

        The verdict says `unique` or `duplicate` (with the best-matching earlier id
        and its similarity); the document is in the index when this returns, in its
        own write transaction -- for many documents `check_batch` is far cheaper (one
        transaction for all).  The same `doc_id` checked again with the same text gets
        its stored verdict back; with other text it replaces the earlier document.
        `timestamp_ms` (epoch milliseconds) places it in the time window when the
        engine has one (`EngineOptions.ttl_ms`); None: it carries no time.  Errors
        are `StreamDedupError`s (errors.py) and name this API's parameters, not
        command-line flags."""
        return self.check_batch([Document(doc_id, text, timestamp_ms)])[0]

    def check_batch(self, docs: Iterable[Document | tuple[DocId, str]]) -> list[Verdict]:
        """Check and insert documents in order; one write transaction for all of them."""
        batch = [d if isinstance(d, Document) else Document(d[0], d[1]) for d in docs]
        return self.apply(self.preparer.prepare(batch, known=self.known))

    def known(self, keys: list[bytes], content: list[bytes]) -> set[int]:
        """Positions of the documents indexed under the same id with the same content."""

        def read(t: Tables) -> set[int]:
            stored = t.docnos_for_ids(keys)  # one read for the batch; most are new
            out = set()
            if stored:
                for i, (key, c) in enumerate(zip(keys, content, strict=True)):
                    docno = stored.get(key)
                    rec = None if docno is None else t.record(docno)
                    if rec is not None and rec.content_hash == c:
                        out.add(i)
            return out

        return self.index.read(read)

    def apply(
        self,
        prepared: Prepared | Sequence[Prepared],
        also: Callable[[Tables, list[Verdict]], None] | None = None,
    ) -> list[Verdict]:
        """Check and insert prepared documents, in order, in one write transaction.

        `also` runs inside that transaction with the verdicts, so a caller can record
        its own state (the Kafka worker: input offsets) atomically with the documents.
        """
        parts = [prepared] if isinstance(prepared, Prepared) else list(prepared)
        if not any(p.docs for p in parts) and also is None:
            return []

        def run(t: Tables) -> list[Verdict]:
            if [e.number for e in segments(t)] != self._seen_segments:  # sealed meanwhile
                raise _SegmentsChanged
            store: Store = t
            self._dropped = []
            if self.sealed is not None:
                self.sealed.begin()
                store = View(t, self.sealed)
            verdicts = self._apply(store, parts)
            if self.sealed is not None:
                self._record_answers(t, self.sealed)
                self._dropped = self.sealed.fully_masked()
                for n in self._dropped:  # every document expired or replaced
                    drop_segment(t, n)
            if self._changes:  # documents stored or forgotten: refused if unlogged
                check_changelog(self.index, t.meta(MetaKey.CHANGELOG), self.changelog)
            if also is not None:
                also(t, verdicts)
            return verdicts

        # A generous bound on what the batch adds to the file (its text twice, and
        # 2 KiB a document), so that a batch of unusually large documents still finds
        # its disk space allocated before it writes (index.Index._reserve).
        docs = _chained([p.docs for p in parts])
        grow = 2 * sum(map(len, map(_TEXT, docs))) + 2048 * sum(len(p.docs) for p in parts)
        mine = [id(p) for p in parts]
        sent = next((s for ids, s in self._ahead if ids == mine), None)
        self._ahead = [(ids, s) for ids, s in self._ahead if ids != mine]
        while True:
            if self.sealed is not None:
                if sent is None or sent.by is not self.sealed:  # not sent, or sealed since
                    sent = self._send(parts)
                self.sealed.receive(sent)
                sent = None
            try:
                with _collector_paused():
                    verdicts = self.index.write(run, grow=grow)
                break
            except _SegmentsChanged:
                self._open_sealed()
        self.counters.merge(self._batch)  # only once the batch is committed
        self._memory.commit()
        if self.sealed is not None:
            self.sealed.commit()
            if self._dropped:
                dropped = [self.sealed.readers[n].entry for n in self._dropped]
                self._open_sealed()  # (closes their readers)
                self._discard(dropped)
        self._maybe_seal()
        return verdicts

    # ------------------------------------------------------------------ internals

    def _apply(self, t: Store, parts: list[Prepared]) -> list[Verdict]:
        next_docno = int(t.meta(MetaKey.NEXT_DOCNO) or 0)
        self._counts = dict(t.meta(MetaKey.COUNTS) or {})
        self._batch = Counters(documents=sum(len(p.docs) for p in parts))
        self._changes = []
        self._unbuilt = []
        self.touched = []
        self._memory.clear(next_docno)
        clock = int(t.meta(MetaKey.CLOCK) or 0)
        stream = StreamClock(clock, t.meta(MetaKey.RECENT) or (), self.options.clock_window)
        ttl = self.options.ttl_ms
        skew = self.options.max_clock_skew_ms
        # Stream time follows the bulk of the timestamps (engine/clock.py), and only
        # those at most `skew` ahead of the wall clock: a message dated 2100 is not
        # counted at all.  The bound is on the future side only, so a replay of old
        # topics is unaffected.
        now = time.time_ns() // 1_000_000
        ahead = None if skew is None else now + skew
        repaired = ahead is not None and clock > ahead
        if repaired:  # moved by an outlier before the bound
            assert ahead is not None
            clock = stream.clock = t.newest_timestamp(ahead)
            stream.forget_after(ahead)
        position = 0
        # only a window needs the oldest document (with sealed segments, asking for it
        # is a round trip)
        oldest = t.oldest() if ttl is not None else None
        self._expiry = _Expiry(oldest, self.options.max_expire_per_batch)
        t.prefetch(
            list(_joined([p.keys for p in parts])), list(_joined([p.content for p in parts]))
        )
        # each document's band keys joined: its row of the batch's read-ahead
        rows = [p.band_rows for p in parts]
        t.batch_postings(self._searching(t, parts, rows), self.options.max_bucket_candidates)
        stamps, clocks = self._stamps(parts, stream, ahead, now)
        # Most documents of a stream are decided here at once and stored after the
        # loop, in bulk (`_store_bulk`); the loop only numbers them.
        bulk = (
            self._classify(t, parts, rows, stamps, None if ttl is None else clocks[-1] - ttl)
            if self.bulk and clocks and self.sealed is None and isinstance(t, Tables)
            else None
        )
        kinds = None if bulk is None else bulk.kinds
        out: list[Verdict] = []
        if bulk is not None and ttl is None:  # (a window looks at every position)
            next_docno = self._number(t, parts, rows, stamps, bulk, next_docno, out)
        else:
            for p, self._rows in zip(parts, rows, strict=True):
                for i in range(len(p.docs)):
                    self._ts = stamps[position]
                    if ttl is not None:
                        self._expire(t, clocks[position] - ttl)
                    if kinds is not None and kinds[position]:
                        assert bulk is not None
                        bulk.hold(position, position + 1, next_docno, stamps, out, self._changes)
                        next_docno += 1
                        position += 1
                        continue
                    position += 1
                    verdict, inserted = self._check_one(t, p, i, next_docno)
                    next_docno += inserted
                    out.append(verdict)
        clock = clocks[-1] if clocks else clock
        if bulk is not None and bulk.docnos:
            assert isinstance(t, Tables)
            self._store_bulk(t, parts, rows, bulk, out)
        t.flush_postings()
        self._memory.end_batch()  # its arrays are let go; exact sets kept once committed
        t.set_meta(MetaKey.NEXT_DOCNO, next_docno)
        t.set_meta(MetaKey.COUNTS, self._counts)
        t.set_meta(MetaKey.CLOCK, clock)
        if self._timed or repaired:
            t.set_meta(MetaKey.RECENT, list(stream.recent))
        b = self._batch
        if b.bucket_capped or b.exact_capped:  # kept for `stats`
            caps = dict(t.meta(MetaKey.CAPS) or {})
            caps["bucket"] = caps.get("bucket", 0) + b.bucket_capped
            caps["exact"] = caps.get("exact", 0) + b.exact_capped
            t.set_meta(MetaKey.CAPS, caps)
        return out

    def _number(
        self,
        t: Store,
        parts: list[Prepared],
        rows: list[list[bytes]],
        stamps: list[int | None],
        bulk: _Bulk,
        next_docno: int,
        out: list[Verdict],
    ) -> int:
        """The loop of `_apply` without a time window: each run of documents decided
        in bulk numbered at once (their places kept in `out` and `changes`), the
        others decided one by one between them, in batch order; the next docno after
        them.  In a batch of new ids every document is decided in bulk (but those
        without shingles): a loop over positions would be most of what is left of
        the batch's Python per document."""
        ones = np.flatnonzero(bulk.kind == 0).tolist()  # decided one by one
        starts = np.cumsum([0, *(len(p.docs) for p in parts)]).tolist()
        changes, n = self._changes, starts[-1]
        done = 0
        for pos in [*ones, n]:
            if pos > done:  # documents done .. pos - 1: in bulk
                bulk.hold(done, pos, next_docno, stamps, out, changes)
                next_docno += pos - done
            if pos == n:
                break
            part = bisect_right(starts, pos) - 1
            self._rows, self._ts = rows[part], stamps[pos]
            verdict, inserted = self._check_one(t, parts[part], pos - starts[part], next_docno)
            next_docno += inserted
            out.append(verdict)
            done = pos + 1
        return next_docno

    def _stamps(
        self, parts: list[Prepared], stream: StreamClock, ahead: int | None, now: int
    ) -> tuple[list[int | None], list[int]]:
        """Each document's timestamp as stored, and the stream clock once it is read,
        in batch order (they follow from the timestamps alone, not from any verdict);
        the clock outliers go to `outliers`.  `stream` takes the trusted timestamps."""
        self.outliers = []
        n = sum(len(p.docs) for p in parts)
        clock = stream.clock
        # file mode (a timestamp <= 0 counts as none, as below)
        self._timed = any(map(_TIMESTAMP, _chained([p.docs for p in parts])))
        if not self._timed:
            return [None] * n, [clock] * n
        stamps: list[int | None] = []
        clocks: list[int] = []
        position = 0
        for p in parts:
            for d in p.docs:
                ts = d.timestamp_ms
                if ts is not None and ts <= 0:  # Kafka's "no timestamp" (-1), or unset
                    ts = None
                elif ts is not None and ahead is not None and ts > ahead:
                    # an outlier: stored as of the current stream time (the wall clock
                    # before any), so it expires with its neighbours; the clock stays
                    self.outliers.append((position, ts))
                    self._batch.clock_outliers += 1
                    ts = clock or now
                elif ts is not None:
                    clock = stream.advance(ts)
                stamps.append(ts)
                clocks.append(clock)
                position += 1
        return stamps, clocks

    def _classify(
        self,
        t: Tables,
        parts: list[Prepared],
        rows: list[list[bytes]],
        stamps: list[int | None],
        cutoff: int | None,
    ) -> _Bulk:
        """Which of the batch's documents are decided in bulk, by kind, one per
        position (`_Bulk`), found by set and numpy operations over the whole batch
        (after `prefetch` and `batch_postings`), for an engine without sealed
        segments.  Each a new id: in neither the index nor another document of the
        batch; not `light`; with shingles; with a time window, stored as of the
        batch's last cutoff or later (`cutoff`: the window forgets or hides nothing
        these documents depend on during the batch -- a stored content owner of a
        copy must be as recent).  Then either

        PLAIN: its content hash is in neither the index nor another document of the
        batch, and its row is quiet: `unique`, stored as the owner of its content; or
        the first of the batch's documents with a content new to the index, all
        others of which are new ids (COPY);

        COPY: an exact copy of a stored document whose id no document of the batch
        has (so it keeps its content), or of such a first document: `duplicate`,
        `exact`, stored as a copy.

        In a batch whose every id is new (or a `light` replay), where the window
        forgets nothing, the documents left -- those that search
        for near duplicates -- are SEARCH (and the later copies of their contents
        COPY): decided by one search of the whole batch (`_search_kinds`,
        `_searched`, engine/search.py), whose answers no verdict can change.

        Their checks would answer as here whatever comes before them in the batch:
        no one else's id or content is theirs (only a replaced id is forgotten, and
        none of these is, nor a stored owner of their content), and nothing a plain
        document could meet in a bucket is written before it -- a quiet row shares
        no key with a stored document or a searching row of the batch; the rows
        `_searching` leaves out (exact copies) are their content owner's, stored or
        searching, so they share none either; an adopted copy takes a stored
        owner's keys or a searching row's.  What remains is a `light` document
        prepared again inside the transaction (its row is unforeseen): when one may
        be (its id is repeated in the batch, or no longer holds its content),
        nothing is decided in bulk.  Conversely, nothing is written for these
        documents before the loop ends, and no document decided one by one reads
        their entries: their ids and contents are not its own, and a plain
        document's keys are in no other row."""
        n = sum(len(p.docs) for p in parts)
        out = _Bulk(n)
        keys = list(_joined([p.keys for p in parts]))
        contents = list(_joined([p.content for p in parts]))
        ids, owners = t.read_ahead(keys, contents)
        free = ids == ABSENT
        # the ids that come more than once in the batch (most batches: none)
        repeated = set() if len(set(keys)) == n else {k for k, c in Counter(keys).items() if c > 1}
        if repeated:  # only those seen once may be free
            free &= np.fromiter((k not in repeated for k in keys), dtype=np.bool_, count=n)
        if cutoff is not None:  # with a time window: none the window reaches in the batch
            free &= np.fromiter(
                (ts is None or ts >= cutoff for ts in stamps), dtype=np.bool_, count=n
            )
        light = np.zeros(n, dtype=np.bool_)
        start = 0
        for p in parts:
            if p.light:
                light[[start + i for i in p.light]] = True
            start += len(p.docs)
        # The batch's searches can be made at once (engine/search.py) when no verdict
        # can change what a later document finds: every id new, or a `light` replay
        # (checked below: its stored document stays, unchanged) -- no document is
        # forgotten, replaced or adopted --, the window forgetting and hiding nothing
        # during the batch.
        oldest = self._expiry.oldest
        searchable = (
            self.bulk_search
            and not repeated
            and bool((free | light).all())
            and (self.params.verify == "signature" or all(p.hashes is not None for p in parts))
            and (cutoff is None or oldest is None or oldest[0] >= cutoff)
        )
        free &= np.fromiter(_chained([p.shingles for p in parts]), dtype=np.int64, count=n) > 0
        free &= ~light
        # (a batch of replays only has nothing to check)
        if not free.any() or not all(
            self._replays(t, p, repeated, cutoff) for p in parts if p.light
        ):
            return out
        quiet = t.quiet_rows(_chained(rows), n)
        new = owners == ABSENT
        kind = out.kind
        first_at = _first_positions(contents)
        if first_at is None:  # (every content once in the batch)
            kind[free & new & quiet] = PLAIN
        else:
            once = np.bincount(first_at, minlength=n)[first_at] == 1
            kind[free & new & quiet & once] = PLAIN
            # a content new to the index, several times in the batch: all or none
            groups: dict[bytes, list[int]] = {}
            for j in np.flatnonzero(new & ~once).tolist():
                groups.setdefault(contents[j], []).append(j)
            docs = _joined([p.docs for p in parts])
            for group in groups.values():
                first = group[0]
                if quiet[first] and free[group].all():
                    kind[first] = PLAIN
                    kind[group[1:]] = COPY
                    d = docs[first].id
                    out.of.update(dict.fromkeys(group[1:], (d, d)))
        copies = np.flatnonzero(free & (owners >= 0))
        if len(copies):  # of stored documents
            batch_keys = set(keys)
            stored: dict[int, tuple[DocId, DocId] | None] = {}
            for j, owner in zip(copies.tolist(), owners[copies].tolist(), strict=True):
                if owner not in stored:
                    rec = t.record(owner)
                    kept = (
                        rec is not None
                        and id_key(rec.doc_id) not in batch_keys
                        and not _reached(rec, cutoff)
                    )
                    stored[owner] = (rec.doc_id, rec.cluster) if rec is not None and kept else None
                if (got := stored[owner]) is not None:
                    kind[j] = COPY
                    out.of[j] = got
        if searchable:
            self._search_kinds(out, first_at, free & new & ~quiet, free)
        out.kinds = kind.tolist()
        return out

    @staticmethod
    def _search_kinds(
        out: _Bulk,
        first_at: npt.NDArray[np.intp] | None,
        searching: npt.NDArray[np.bool_],
        shingled: npt.NDArray[np.bool_],
    ) -> None:
        """In a batch whose searches no verdict can change (`_classify`), the
        documents that would search (`searching`: new ids with shingles, a content
        new to the index, a row that is not quiet) when the first of the batch with
        their content (`first_at`: `_first_positions`): SEARCH; the later ones with
        that content: their copies.
        Every other document with shingles (`shingled`) is PLAIN or COPY already; if
        one is not (a content owner without a record: a damaged index), nothing is
        searched in bulk (its check in the loop would meet documents not stored
        yet)."""
        kind = out.kind
        undecided = kind == 0
        if first_at is None:  # (every content once in the batch)
            kind[undecided & searching] = SEARCH
        else:
            firsts = first_at == np.arange(len(first_at))
            kind[undecided & searching & firsts] = SEARCH
            later = np.flatnonzero(undecided & searching & ~firsts)
            for j, owner in zip(later.tolist(), first_at[later].tolist(), strict=True):
                if kind[owner] == SEARCH:
                    kind[j] = COPY
                    out.copy_of[j] = owner
        if np.any((kind == 0) & shingled):  # (not expected: the classes cover them)
            kind[kind == SEARCH] = 0
            kind[list(out.copy_of)] = 0
            out.copy_of = {}

    def _searched(
        self,
        t: Tables,
        where: list[tuple[Prepared, int]],
        docnos: list[int],
        ids: list[DocId],
    ) -> list[Verdict]:
        """The verdicts of the batch's SEARCH documents (`where`, numbered `docnos`,
        ascending): their near duplicates searched at once (engine/search.py), the
        work counted as `_best_match` counts it.  A duplicate of an earlier SEARCH
        document of the batch (the only ones of the batch a search can meet) takes
        that document's cluster, known by then: they are decided in batch order."""
        buckets = t.batch_buckets()
        assert buckets is not None and not (buckets.stale or buckets.dropped or buckets.adopted)
        got = search_batch(
            t,
            self._memory,
            buckets,
            [(p, i, d) for (p, i), d in zip(where, docnos, strict=True)],
            self.options.max_bucket_candidates,
            self.params.threshold,
            self._margin,
            self.options.max_exact_checks,
            signature_only=self.params.verify == "signature",
        )
        c = self._batch
        c.candidates += got.candidates
        c.most_candidates = max(c.most_candidates, got.most_candidates)
        c.exact_checks += got.exact_checks
        c.bucket_capped += got.bucket_capped
        c.exact_capped += got.exact_capped
        c.searched += len(docnos)
        found = got.found
        mine: dict[int, tuple[DocId, DocId]] = {}  # docno -> (id, cluster), in the batch
        verdicts: list[Verdict] = []
        for docno, d in zip(docnos, ids, strict=True):
            best = found[docno]
            v = None
            if best is not None:
                match = mine.get(best[1])
                if match is None and (rec := t.record(best[1])) is not None:
                    match = (rec.doc_id, rec.cluster)
                if match is not None:
                    v = Verdict(d, "duplicate", *match, round(best[0], 4), False)
            if v is None:
                v = Verdict(d, "unique", None, d, None, False)
            mine[docno] = (d, v.cluster)
            verdicts.append(v)
        return verdicts

    @staticmethod
    def _replays(t: Tables, p: Prepared, repeated: set[bytes], cutoff: int | None) -> bool:
        """Whether every `light` document of `p` will be a replay (its stored
        document holds its content, stays inside the window through the batch, and no
        other document of the batch has its id: none is in `repeated`), so that none
        of them is prepared again inside the transaction."""
        for i in p.light:
            key = p.keys[i]
            if key in repeated:
                return False
            docno = t.docno_for_id(key)
            rec = None if docno is None else t.record(docno)
            if rec is None or rec.content_hash != p.content[i] or _reached(rec, cutoff):
                return False
        return True

    def _store_bulk(
        self,
        t: Tables,
        parts: list[Prepared],
        rows: list[list[bytes]],
        b: _Bulk,
        out: list[Verdict],
    ) -> None:
        """Decide and store the documents `_classify` found and the loop numbered:
        what `_check_one` and `_insert` do for each, in whole-list operations.  A
        plain one: `unique`, its own cluster, stored as the owner of its content
        with signature, postings and text.  A copy: `duplicate` of its content's
        owner, exact, stored as one of the content's copies.  Their verdicts and
        changes take the places the loop kept, so `out` and `changes` are as the
        one-by-one path makes them.  A SEARCH one: its verdict from the batch's
        search (`_searched`), stored as a plain one is (`put_plain`: the batch's
        documents sharing a bucket are SEARCH ones, stored in docno order, so the
        postings buffer keeps their order)."""
        one = parts[0] if len(parts) == 1 else None
        at = [] if one else [(p, i) for p in parts for i in range(len(p.docs))]
        docs_of = _joined([p.docs for p in parts])
        keys_of = _joined([p.keys for p in parts])
        content_of = _joined([p.content for p in parts])
        shingles_of = _joined([p.shingles for p in parts])
        sigs_of = _joined([p.sig_bytes for p in parts])
        rows_of = _joined(rows)
        counts = self._counts
        timeless = b.timestamps.count(None) == len(b.timestamps)  # (file mode)
        kind_of = b.kind[b.positions]  # each numbered document's kind, in loop order
        for kind in (SEARCH, PLAIN, COPY):  # (copies of SEARCH documents follow them)
            ms = np.flatnonzero(kind_of == kind).tolist()
            if not ms:
                continue
            pos = pick(b.positions, ms)
            where = list(zip(itertools.repeat(one), pos)) if one else pick(at, pos)
            docnos = pick(b.docnos, ms)
            keys = pick(keys_of, pos)
            ids = list(map(_ID, pick(docs_of, pos)))
            if kind == SEARCH:
                verdicts = self._searched(t, where, docnos, ids)
                by_position = dict(zip(pos, verdicts, strict=True))
                for j, owner in b.copy_of.items():
                    v = by_position[owner]
                    b.of[j] = (v.id, v.cluster)
            elif kind == PLAIN:
                verdicts = [Verdict(d, "unique", None, d, None, False) for d in ids]
            else:
                of = pick(b.of, pos)
                verdicts = [
                    Verdict(d, "duplicate", o[0], o[1], 1.0, True)
                    for d, o in zip(ids, of, strict=True)
                ]
            for j, v in zip(pos, verdicts, strict=True):
                out[j] = v
            if kind == SEARCH:
                tallied = Counter(itertools.chain.from_iterable(map(Verdict.kinds, verdicts)))
                for name, k in tallied.items():
                    counts[name] = counts.get(name, 0) + k
            else:
                for name in verdicts[0].kinds():  # (the same for every verdict of a kind)
                    counts[name] = counts.get(name, 0) + len(verdicts)
            stamps: list[int | None] = [None] * len(ms) if timeless else pick(b.timestamps, ms)
            contents = pick(content_of, pos)
            shingles = pick(shingles_of, pos)
            records = Packed(
                Record.pack_verdicts(verdicts, contents, stamps, shingles), contents, stamps
            )
            stored = _Stored(
                pick(b.change_at, ms), keys, docnos, verdicts, contents, stamps, shingles
            )
            self._unbuilt.append(stored)
            if kind == COPY:
                t.put_copies(docnos, keys, records)
                continue
            stored.signatures = sigs = pick(sigs_of, pos)
            # exact verification stores every indexed document's text (all parts or none)
            if one is not None and one.texts is not None:
                stored.texts = one.texts.take(pos)
            elif parts[0].texts is not None:
                stored.texts = [_text(p, i) for p, i in where]
            t.put_plain(docnos, keys, records, sigs, pick(rows_of, pos), stored.texts)
            # later documents of the batch meet them (if at all) through memory (the
            # search remembered SEARCH documents already)
            if kind == PLAIN:
                self._memory.fresh.update(zip(docnos, where, strict=True))
            # (nor are they the time window's `_expiry.oldest`: none is older than the
            # batch's last cutoff, so the window reaches none of them in the batch)
        self._batch.bulk += len(b.positions)

    @staticmethod
    def _searching(t: Store, parts: list[Prepared], rows: list[list[bytes]]) -> list[bytes]:
        """The rows of the documents that will search the buckets: not those without
        shingles or known (`light`), nor exact copies of a content indexed before or
        earlier in the batch (a third of a stream of short documents), which are
        decided without.  Only a guess that saves reading their buckets ahead: a
        document that searches after all (its content's owner was forgotten
        meanwhile) reads its buckets itself (`Tables.candidates`)."""
        out: list[bytes] = []
        seen: set[bytes] = set()
        stored = t.docno_for_content
        for p, part_rows in zip(parts, rows, strict=True):
            light = p.light
            for i, (row, shingles, c) in enumerate(
                zip(part_rows, p.shingles, p.content, strict=True)
            ):
                if not shingles or c in seen or i in light:
                    continue
                seen.add(c)  # (a stored content: its later copies are skipped as well)
                if stored(c) is None:
                    out.append(row)
        return out

    def _expire(self, t: Store, cutoff: int) -> None:
        """Forget documents older than the window, oldest first, a bounded number per
        batch; what is left over stays invisible (`_expired`) until a later batch."""
        e = self._expiry
        e.cutoff = cutoff
        while e.oldest is not None and e.oldest[0] < cutoff:
            if e.budget == 0:
                e.behind = True
                return
            ts, docno = e.oldest
            rec = t.record(docno)
            if rec is None:  # an orphan entry: drop it
                t.delete_expiry(ts, docno)
            else:
                self._forget(t, docno, id_key(rec.doc_id))
            self._batch.expired += 1
            e.budget -= 1
            e.oldest = t.oldest()
        e.behind = False

    def _expired(self, rec: Record) -> bool:
        e = self._expiry
        return e.cutoff is not None and rec.timestamp_ms is not None and rec.timestamp_ms < e.cutoff

    def _count(self, v: Verdict | Record, delta: int) -> None:
        """Keep the verdict tallies `stats` reports (documents currently indexed)."""
        if isinstance(v, Record):
            v = Verdict.from_record(v)
        for kind in v.kinds():
            self._counts[kind] = self._counts.get(kind, 0) + delta

    def _check_one(self, t: Store, p: Prepared, i: int, docno: int) -> tuple[Verdict, int]:
        doc, key, content = p.docs[i], p.keys[i], p.content[i]
        existing = t.docno_for_id(key)
        if existing is not None:
            rec = t.record(existing)
            if rec is not None and rec.content_hash == content and not self._expired(rec):
                self._batch.replayed += 1
                return Verdict.from_record(rec), 0
            self._forget(t, existing, key, own=True)
        row = self._rows[i]
        if i in p.light:  # it changed (or expired) since `known` looked: prepare it now
            p, i = self.preparer.prepare([doc]), 0
            row = p.band_rows[0]
        if p.shingles[i] == 0:
            verdict = Verdict(doc.id, "unique", None, doc.id, None, False, reason="empty")
            self._insert(t, p, i, docno, verdict, index_it=False)
            return verdict, 1
        same = t.docno_for_content(content)
        orig = None if same is None else t.record(same)
        if (
            same is not None
            and orig is not None
            and self._expiry.cutoff is not None
            and self._expired(orig)
        ):
            # its content passes to the oldest copy still inside the window, if any
            heir = self._successor(t, same, orig)
            orig = None if heir is None else t.record(heir)
        if orig is not None:
            verdict = Verdict(doc.id, "duplicate", orig.doc_id, orig.cluster, 1.0, True)
            self._insert(t, p, i, docno, verdict, index_it=False)
            return verdict, 1
        # a row none of whose buckets is stored or shared in the batch (most of them)
        # has no candidates: `_best_match` would find none
        best = None if t.is_quiet(row) else self._best_match(t, p, i, p.sigs[i])
        if best is None:
            verdict = Verdict(doc.id, "unique", None, doc.id, None, False)
        else:
            similarity, rec = best
            verdict = Verdict(
                doc.id, "duplicate", rec.doc_id, rec.cluster, round(similarity, 4), False
            )
        self._insert(t, p, i, docno, verdict, index_it=True, row=row)
        return verdict, 1

    def _best_match(
        self, t: Store, p: Prepared, i: int, sig: npt.NDArray[np.uint16]
    ) -> tuple[float, Record] | None:
        found = t.candidates(p.band_keys[i], self.options.max_bucket_candidates)
        c = self._batch
        if t.capped:
            c.bucket_capped += 1
        c.candidates += len(found)
        c.most_candidates = max(c.most_candidates, len(found))
        if not len(found):
            return None
        threshold = self.params.threshold
        signature_only = self.params.verify == "signature"
        # the candidates in rank order (highest estimate first, ties by document
        # number: the stream's tie-break), as far as any rule may look: the exact
        # check tries those within the margin, at most `max_exact_checks` (one more
        # tells whether that cap stopped it); the signature rule takes the first
        bar = -math.inf if signature_only else threshold - self._margin
        limit = 1 if signature_only else self.options.max_exact_checks + 1
        if self._expiry.behind:  # successors may stand in: any order
            kept_docnos, rows = self._one_by_one(t, found)
            docnos = np.asarray(kept_docnos, dtype=np.int64)
            est = estimate_jaccard(sig, rows)
            order = np.lexsort((docnos, -est))
            est = est[order]
            take = min(int(np.count_nonzero(est >= bar)), limit)
            kept, ranked, ranked_est = len(docnos), docnos[order[:take]].tolist(), est[:take]
        elif len(found) <= _FEW:
            # ranked by their positions among the (ascending) candidates kept: the
            # same order, ties by position being ties by docno
            kept_docnos, rows = self._one_by_one(t, found)
            n = len(kept_docnos)
            _, kept, at, ranked_est = rank_gathered(
                sig, rows, _POSITIONS[:n], _DOCNO_OF_POSITION[:n], bar, limit, fill=False
            )
            ranked = [kept_docnos[j] for j in at]
        else:  # the candidates' signatures gathered and ranked at once (compiled)
            kept, ranked, ranked_est = self._memory.ranked(t, sig, found, bar, limit)
        if not kept:
            return None
        if signature_only:
            if ranked_est[0] < threshold:
                return None
            rec = t.record(ranked[0])
            return None if rec is None else (float(ranked_est[0]), rec)
        best, checks = best_exact(
            t,
            self._memory,
            p,
            i,
            ranked,
            ranked_est,
            threshold,
            self._margin,
            self.options.max_exact_checks,
        )
        c.exact_checks += checks
        c.exact_capped += cap_stopped(
            ranked_est, checks, best, threshold, self._margin, self.options.max_exact_checks
        )
        if best is None:
            return None
        rec = t.record(best[1])
        return None if rec is None else (best[0], rec)

    def _one_by_one(
        self, t: Store, docnos: npt.NDArray[np.int64]
    ) -> tuple[list[int], npt.NDArray[np.uint16]]:
        """Candidates and their signatures one by one: for a few (most pages of a
        crawl have one or two, where the batched gather's numpy calls cost more than
        they save), and while the time window is behind, an expired candidate
        replaced by its successor (`_successor`)."""
        kept: list[int] = []
        rows: list[bytes] = []
        behind = self._expiry.behind
        for d in docnos.tolist():
            if behind and (r := t.record(d)) is not None and self._expired(r):
                heir = self._successor(t, d, r)
                if heir is None:
                    continue
                d = heir
            raw = self._memory.signature(t, d)
            if raw is not None:
                kept.append(d)
                rows.append(raw)
        if not kept:
            return kept, np.empty((0, self.params.num_perm), dtype=np.uint16)
        return kept, np.frombuffer(b"".join(rows), dtype="<u2").reshape(len(rows), -1)

    def _successor(self, t: Store, docno: int, rec: Record) -> int | None:
        """An expired candidate the window has not forgotten yet (the batch's budget
        ran out) is forgotten now; the copy of its content still inside the window
        that takes it over (if any) is the candidate instead, as it would be had the
        window caught up, so verdicts do not depend on the budget."""
        while True:
            content = rec.content_hash
            owned = t.docno_for_content(content) == docno
            self._forget(t, docno, id_key(rec.doc_id))
            heir = t.docno_for_content(content) if owned else None
            got = None if heir is None else t.record(heir)
            if heir is None or got is None:
                return None
            if not self._expired(got):
                return heir
            docno, rec = heir, got

    def _insert(
        self,
        t: Store,
        p: Prepared,
        i: int,
        docno: int,
        v: Verdict,
        *,
        index_it: bool,
        row: bytes | None = None,
    ) -> None:
        """Store document `i` of `p` with its verdict (`index_it`: with its signature,
        postings and text, so that later documents find it).  Run once per document:
        kept to the few statements it needs."""
        counts = self._counts
        for kind in v.kinds():
            counts[kind] = counts.get(kind, 0) + 1
        ts, shingles = self._ts, p.shingles[i]
        record = Record.of(v, p.content[i], ts, shingles)
        key = p.keys[i]
        sig: bytes | None = None
        text: bytes | None = None
        if index_it:
            sig = p.sig_bytes[i]
            text = p.texts[i] if p.texts is not None else None
            owns = t.put_document(docno, key, record, sig, p.band_keys[i], shingles > 0, text, row)
            self._memory.remember(docno, p, i)
        else:
            owns = t.put_document(docno, key, record, None, [], shingles > 0)
        if ts is not None:
            e = self._expiry
            if e.oldest is None or (ts, docno) < e.oldest:
                e.oldest = (ts, docno)
        self._changes.append(Change(key, docno, record, sig, owns, text))

    def _forget(self, t: Store, docno: int, key: bytes, own: bool = False) -> None:
        """Remove a document (replaced by new content, or expired).  If it owned its
        content and copies of it live on, the oldest copy becomes the owner and takes
        over its signature, postings and text, so later exact and near
        duplicates still find that content while any copy of it lives.

        `own`: the document is replaced by one of the batch's own (same id), which
        the batch stores; any other forgotten id, and a promoted copy's, go to
        `touched`."""
        self._memory.forget(docno)
        old = t.record(docno)
        if old is not None:
            self._count(old, -1)
        raw = t.signature(docno)
        keys = [] if raw is None else stored_band_keys(raw, self.params)
        heir = None
        if old is not None and t.docno_for_content(old.content_hash) == docno:
            heir = t.first_copy(old.content_hash)
        if heir is not None:  # read before `remove_document` deletes them
            text = t.text(docno) or None
        t.remove_document(docno, key, keys)
        self._changes.append(Change(key, docno, None, None, False))
        if not own:
            self.touched.append(key)
        if heir is None or old is None:
            return
        heir_rec = t.record(heir)
        if heir_rec is None:
            return
        self._memory.forget(heir)  # it takes a signature: read it again
        t.adopt(heir, old.content_hash, raw, keys, text)
        heir_key = id_key(heir_rec.doc_id)
        self._changes.append(Change(heir_key, heir, heir_rec, raw, True, text))
        self.touched.append(heir_key)


__all__ = ["Counters", "Deduplicator"]
