"""The decision's facade (`Deduplicator`): a prepared batch (prepare.py) checked
against the store and inserted, in order, inside one LMDB write transaction
(`Deduplicator.apply`), so each document sees every document before it, including
earlier ones of its own batch, and no other writer can interleave.

The rooms it is made of, each one concern: opening the index (opening.py), one run
of a batch's transaction and its state, made fresh for each run (run.py, state.py),
the time window (window.py), the bulk path (bulk.py), the one-by-one path
(single.py), the sealed segments (sealing.py), the work tallies (counters.py).
The Kafka layer calls the intention-named methods here (`path`, `read`, `write`,
`prepare`, `indexed`, `file_bytes`, `max_clock_skew_ms`) instead of reaching into
the index, the preparer or the options.
"""

from __future__ import annotations

import gc
import operator
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from streamdedup.config import EngineOptions, Fields, ShingleSpec, Verify
from streamdedup.engine.counters import Counters
from streamdedup.engine.families import family_of
from streamdedup.engine.opening import Detection, open_index
from streamdedup.engine.params import check_changelog
from streamdedup.engine.prepare import Prepared, Preparer
from streamdedup.engine.roles import Store
from streamdedup.engine.run import BatchRun
from streamdedup.engine.sealed.asking import Sealed
from streamdedup.engine.sealed.view import View
from streamdedup.engine.sealing import RemoteSegments, Sealing, SegmentsChanged, probe_cut
from streamdedup.engine.state import Settings
from streamdedup.engine.verify import VerifyCache
from streamdedup.engine.window import chained
from streamdedup.errors import ConfigError
from streamdedup.inputs.decode import from_mapping
from streamdedup.models import Change, DocId, Document, Rejected, Verdict
from streamdedup.store.keys import MetaKey
from streamdedup.store.segment.manifest import Manifest
from streamdedup.store.tables import Tables

_R = TypeVar("_R")
# What `check` compares: a text, a bit string (hex or bytes), a vector, a set.
Item = (
    str
    | bytes
    | Sequence[float]
    | npt.NDArray[np.floating]
    | Sequence[str | int]
    | set[str]
    | set[int]
    | frozenset[str]
    | frozenset[int]
)
_TEXT = operator.attrgetter("text")  # a document's text


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
        metric: str | None = None,
        item: str | None = None,
        bits: int | None = None,
        max_distance: float | None = None,
        dim: int | None = None,
        bucket_width: float | None = None,
    ) -> None:
        """`metric`, `item`, `bits`, `max_distance`, `dim`, `bucket_width`: the
        similarity family of a new index (DESIGN.md "Items and similarity families";
        None: Jaccard on texts, or the index's own): `metric="hamming", bits=64,
        max_distance=3` compares 64-bit strings, `metric="cosine", dim=384,
        threshold=0.9` vectors (`check`).

        `remote`: how to reach sealed segments registered as remote (the Kafka
        layer's `RemoteSegments.reader`); an index with remote segments needs it.

        `base_segment`: a sealed segment a NEW index starts from (`backfill
        --segment` writes one): the index takes its parameters (explicit ones must
        match them) and holds its documents as its local sealed segment 1
        (`store.segment.registry.attach`).  Given again for the index that started from it,
        nothing changes; any other index holding documents is refused.

        `changelog`: the changelog topic this engine's changes go to.  An index a
        worker mirrors to a changelog (`--changelog-topic`) accepts documents only from
        an engine naming that topic -- whose caller publishes `changes` after every
        batch, as the worker does -- so that a restore from the changelog is never
        silently incomplete.  Reading such an index needs no name."""
        detection = Detection(
            threshold,
            num_perm,
            shingle,
            bands,
            rows,
            verify,
            seed,
            false_positive_weight,
            false_negative_weight,
            metric,
            item,
            bits,
            max_distance,
            dim,
            bucket_width,
        )
        self._open(path, detection, options, changelog, remote, base_segment)

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        detection: Detection | None = None,
        *,
        options: EngineOptions | None = None,
        changelog: str | None = None,
        remote: RemoteSegments | None = None,
        base_segment: str | os.PathLike[str] | None = None,
    ) -> Deduplicator:
        """The engine of the index at `path`, its detection options as one frozen
        record (`Detection`; None: the index's own, or the defaults) -- what the
        keyword constructor takes, grouped."""
        dd = cls.__new__(cls)
        dd._open(path, detection or Detection(), options, changelog, remote, base_segment)
        return dd

    def _open(
        self,
        path: str | os.PathLike[str],
        detection: Detection,
        options: EngineOptions | None,
        changelog: str | None,
        remote: RemoteSegments | None,
        base_segment: str | os.PathLike[str] | None,
    ) -> None:
        self.options = options or EngineOptions()
        self.changelog = changelog
        self.index, self.params = open_index(path, detection, self.options, base_segment)
        self.preparer = Preparer(self.params)
        family = family_of(self.params)
        self._margin = family.lsh.margin(self.params.bar_value)
        self.counters = Counters()
        # the last run of a batch's transaction (its verdicts, changes, counters)
        self._last: BatchRun | None = None
        # this batch's indexed documents, and its candidates' exact sets (verify.py)
        self._memory = VerifyCache(family)
        self._reported = family.reported
        # how `document` reads an item that is not a text (made once, not per item)
        self._items = Fields(item_field="item").for_params(self.params)
        # Decide a batch's plain documents at once (bulk.py); False: every document
        # one by one (tests compare the two)
        self.bulk = True
        # Search a batch's near duplicates all at once when no verdict can change
        # them (engine/search.py; only with `bulk`); False: one by one in the loop
        self.bulk_search = True
        cut = probe_cut(family.lsh, self.params, self._margin)
        self._sealing = Sealing(self.index, self.params, self.options, cut, remote)
        try:
            self._sealing.open()
        except BaseException:
            self.index.close()
            raise

    def __enter__(self) -> Deduplicator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._sealing.close()
        self.index.close()

    # ------------------------------------------------------------------ segments

    @property
    def sealed(self) -> Sealed | None:
        """The index's sealed segments, open (None: it has none)."""
        return self._sealing.sealed

    def seal(self, dest: str | os.PathLike[str] | None = None, *, remote: bool = False) -> Manifest:
        """Move every document indexed so far into a new sealed segment (`dest`, by
        default the next number under `EngineOptions.segments_dir`, else
        INDEX/segments)."""
        return self._sealing.seal(dest, remote=remote)

    def ask_ahead(self, prepared: Prepared | Sequence[Prepared]) -> None:
        """Send the sealed segments the questions of the batch `apply` gets next, so
        that their answers travel while this process decides the current batch."""
        self._sealing.ask_ahead([prepared] if isinstance(prepared, Prepared) else list(prepared))

    def require_writable(self) -> None:
        """Raise ConfigError now if `apply` would refuse to add documents to this index
        (see `changelog`); `apply` itself refuses only a batch that changes documents,
        so a re-run over documents the index holds (`replay --mode reverdict`) goes on."""
        bound = self.index.read(lambda t: t.meta(MetaKey.CHANGELOG))
        check_changelog(self.index, bound, self.changelog)

    # ------------------------------------------------------------------ the last batch

    @property
    def changes(self) -> list[Change]:
        """The changes the last applied batch made to the index, in order: what a
        changelog mirrors (the worker publishes them after every batch).  Those of
        documents stored in bulk are made here, when first read: file mode never
        reads them, and they were a tenth of the bulk store's time."""
        run = self._last
        if run is None:
            return []
        changes = run.changes
        for stored in run.unbuilt:
            for j, change in zip(stored.at, stored.build(), strict=True):
                changes[j] = change
        run.unbuilt = []
        return changes

    @property
    def changed_others(self) -> list[bytes]:
        """Ids (index keys) of the documents the last applied batch changed beyond
        storing its own: forgotten by the time window, or promoted to content owner
        when their owner went.  A worker keeps them with the batch's verdicts, so a
        redelivery of the batch re-sends their present state to the changelog too.
        Empty for most batches."""
        return [] if self._last is None else self._last.changed_others

    @property
    def outliers(self) -> list[tuple[int, int]]:
        """The last applied batch's clock outliers: (position in the batch, timestamp)."""
        return [] if self._last is None else self._last.outliers

    @property
    def last_batch(self) -> Counters:
        """The work of the last applied batch."""
        return Counters() if self._last is None else self._last.counters

    # ------------------------------------------------------------------ for the Kafka layer

    @property
    def path(self) -> Path:
        """The index's directory."""
        return self.index.path

    @property
    def max_clock_skew_ms(self) -> int | None:
        """How far ahead of the wall clock a timestamp is still trusted (None: any)."""
        return self.options.max_clock_skew_ms

    def read(self, fn: Callable[[Tables], _R]) -> _R:
        """`fn` run in a read transaction of the index (a caller's own state kept
        there: offsets, bindings)."""
        return self.index.read(fn)

    def write(self, fn: Callable[[Tables], _R]) -> _R:
        """`fn` run in a write transaction of the index (which may run it again)."""
        return self.index.write(fn)

    def prepare(self, docs: Sequence[Document]) -> Prepared:
        """Documents prepared for `apply`, those the index holds already (same id,
        same content) known as such."""
        return self.preparer.prepare(docs, known=self.known)

    def indexed(self) -> int:
        """How many documents the open index holds (not those of sealed segments)."""
        return self.index.read(lambda t: t.count("docs"))

    def file_bytes(self) -> int:
        """The size of the index's file."""
        return self.index.file_bytes()

    # ------------------------------------------------------------------ public API

    def check(
        self, doc_id: DocId, item: Item, timestamp_ms: int | None = None, *, insert: bool = True
    ) -> Verdict:
        """Check one document against everything indexed before it, then index it
        (`insert` False: a dry run, the verdict it would get, the index unchanged).

        `item` is what the index compares: a text; for an index of `bits` items a
        bit string as hexadecimal digits (or its N/8 bytes); for `vector` items a
        sequence of D numbers (a list, a numpy array); a malformed item is a
        `ConfigError` naming what is wrong.  The verdict says `unique` or `duplicate`
        (with the best-matching earlier id and its similarity, or distance); the
        document is in the index when this returns, in its own write transaction --
        for many documents `check_batch` is far cheaper (one transaction for all).
        The same `doc_id` checked again with the same item gets its stored verdict
        back; with another it replaces the earlier document.  `timestamp_ms` (epoch
        milliseconds) places it in the time window when the engine has one
        (`EngineOptions.ttl_ms`); None: it carries no time.  Errors are
        `StreamDedupError`s (errors.py) and name this API's parameters, not
        command-line flags."""
        return self.check_batch([self.document(doc_id, item, timestamp_ms)], insert=insert)[0]

    def document(self, doc_id: DocId, item: Item, timestamp_ms: int | None = None) -> Document:
        """The `Document` of `doc_id` and its item for this index (`check`)."""
        if self.params.item == "text":
            if not isinstance(item, str):
                raise ConfigError(f"a document's text is a string, not {type(item).__name__}")
            return Document(doc_id, item, timestamp_ms)
        if isinstance(item, np.ndarray):
            item = item.tolist()  # (its values as Python numbers)
        elif isinstance(item, set | frozenset | tuple):
            item = list(item)
        got = from_mapping({"id": doc_id, "item": item}, self._items, "item", timestamp_ms)
        if isinstance(got, Rejected):
            raise ConfigError(f"document {doc_id!r}: {got.message} ({got.reason})")
        return got

    def check_batch(
        self, docs: Iterable[Document | tuple[DocId, Item]], *, insert: bool = True
    ) -> list[Verdict]:
        """Check and insert documents in order; one write transaction for all of them
        (a pair `(id, item)` is made a `Document` as `check` makes it).  `insert`
        False: a dry run (`query`)."""
        batch = [d if isinstance(d, Document) else self.document(d[0], d[1]) for d in docs]
        if not insert:
            return self.query(batch)
        return self.apply(self.preparer.prepare(batch, known=self.known))

    def query(self, docs: Sequence[Document]) -> list[Verdict]:
        """The verdict each document would get if it were checked now, against the
        index as it is -- not against the others of `docs` -- with nothing inserted
        (each decided in a write transaction that is then aborted, so by the very
        rules `check` follows: the same id with the same item gets its stored
        verdict; with another, the verdict it would get replacing it)."""
        out: list[Verdict] = []
        for doc in docs:
            out += self.apply(self.preparer.prepare([doc], known=self.known), insert=False)
        return out

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
        in_transaction: Callable[[Tables, list[Verdict]], None] | None = None,
        *,
        insert: bool = True,
    ) -> list[Verdict]:
        """Check and insert prepared documents, in order, in one write transaction.

        `in_transaction` runs inside that transaction with the verdicts, so a caller can record
        its own state (the Kafka worker: input offsets) atomically with the documents.
        `insert` False: the transaction is aborted (a dry run): the verdicts, and
        nothing kept -- no counters, no exact sets remembered, no seal.
        """
        parts = [prepared] if isinstance(prepared, Prepared) else list(prepared)
        if not any(p.docs for p in parts) and in_transaction is None:
            return []
        sealing = self._sealing

        def run(t: Tables) -> BatchRun:
            sealing.check_unchanged(t)  # raises if sealed meanwhile
            store: Store = t
            if sealing.sealed is not None:
                sealing.sealed.begin()
                store = View(t, sealing.sealed)
            batch = self._apply(store, parts)
            batch.verdicts = self._reported(batch.verdicts)  # (the family's keys)
            batch.dropped = sealing.end_run(t)
            if batch.changes:  # documents stored or forgotten: refused if unlogged
                check_changelog(self.index, t.meta(MetaKey.CHANGELOG), self.changelog)
            if in_transaction is not None:
                in_transaction(t, batch.verdicts)
            return batch

        # A generous bound on what the batch adds to the file (its text twice, and
        # 2 KiB a document), so that a batch of unusually large documents still finds
        # its disk space allocated before it writes (index.Index._reserve).
        docs = chained([p.docs for p in parts])
        grow = 2 * sum(map(len, map(_TEXT, docs))) + 2048 * sum(len(p.docs) for p in parts)
        sent = sealing.asked(parts)
        while True:
            sealing.receive(parts, sent)
            sent = None
            try:
                with _collector_paused():
                    batch = self.index.write(run, grow=grow, commit=insert)
                break
            except SegmentsChanged:
                sealing.open()
        if not insert:  # (its exact sets stay pending: the next batch's run drops them)
            return batch.verdicts
        self.counters.merge(batch.counters)  # only once the batch is committed
        self._memory.commit()
        sealing.commit(batch.dropped)
        sealing.maybe_seal()
        return batch.verdicts

    def _apply(self, t: Store, parts: list[Prepared]) -> BatchRun:
        """One run of the batch's transaction, by a `BatchRun` made for it (a run
        the index repeats starts from a new one); kept as the last batch's, whose
        changes and changed-other ids `in_transaction` may read inside the transaction."""
        batch = BatchRun(self._settings(), self._memory, parts)
        self._last = batch
        batch.run(t)
        return batch

    def _settings(self) -> Settings:
        return Settings(
            self.params,
            self.options,
            self.preparer,
            self._margin,
            self.bulk,
            self.bulk_search,
            self._sealing.sealed is not None,
        )


__all__ = ["Counters", "Deduplicator", "Detection", "RemoteSegments"]
