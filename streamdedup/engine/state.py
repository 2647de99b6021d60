"""One run of a batch's write transaction, as an object (`BatchState`): everything
the decision of one batch reads and changes besides the store -- the verdict tallies,
the work counters, the changes a changelog mirrors, the ids changed beyond the
batch's own, the time window's position -- made fresh for every run of the
transaction function.  `Index.write` may run that function again (a map grown after
MapFull); a run that starts from a new object cannot see a half-made earlier one, so
a rerun is safe by construction (quix-streams' `PartitionTransaction` is the model).

Also here, the two store changes both paths and the window make: storing a document
with its verdict (`_insert`) and forgetting one, its content passed on to a copy
(`_forget`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from streamdedup.config import EngineOptions, IndexParams
from streamdedup.engine.counters import Counters
from streamdedup.engine.prepare import Prepared, Preparer, stored_band_keys
from streamdedup.engine.roles import Store
from streamdedup.engine.verify import VerifyCache
from streamdedup.models import Change, Record, Verdict
from streamdedup.store.keys import id_key

if TYPE_CHECKING:
    from streamdedup.engine.bulk.store import Stored


@dataclass(frozen=True)
class Settings:
    """What every run of an engine's batches reads and never changes: the index's
    parameters, the engine's options, how to prepare a document again, the exact
    check's margin, and which paths are taken (`bulk`: decide a batch's plain
    documents at once; `bulk_search`: search its near duplicates at once; both only
    without sealed segments)."""

    params: IndexParams
    options: EngineOptions
    preparer: Preparer
    margin: float
    bulk: bool
    bulk_search: bool
    sealed: bool


@dataclass
class Expiry:
    """The time window's position in one batch."""

    oldest: tuple[int, int] | None
    budget: int
    cutoff: int | None = None
    behind: bool = False


class BatchState:
    """The state of one run of a batch's transaction (see the module docstring).
    `memory` is the engine's, kept across batches (`VerifyCache.clear` starts it
    over for each run)."""

    def __init__(self, settings: Settings, memory: VerifyCache, parts: list[Prepared]) -> None:
        self.settings = settings
        self.params = settings.params
        self.options = settings.options
        self.preparer = settings.preparer
        self._margin = settings.margin
        self._memory = memory
        self.parts = parts
        self._counts: dict[str, int] = {}
        self.counters = Counters(documents=sum(len(p.docs) for p in parts))
        # The changes of the batch, for a changelog (`Deduplicator.changes`); those
        # of the documents stored in bulk are made only if read (`Stored`).
        self.changes: list[Change] = []
        self.unbuilt: list[Stored] = []
        # Ids (index keys) of the documents the batch changed beyond storing its
        # own: forgotten by the time window, or promoted to content owner when their
        # owner went (`Deduplicator.changed_others`).
        self.changed_others: list[bytes] = []
        # The batch's clock outliers: (position in the batch, timestamp).
        self.outliers: list[tuple[int, int]] = []
        self._expiry = Expiry(None, 0)
        self._timed = False  # the batch carries timestamps (`_stamps`)
        self.verdicts: list[Verdict] = []
        self.dropped: list[int] = []  # sealed segments the batch emptied (sealing.py)

    def _count(self, v: Verdict | Record, delta: int) -> None:
        """Keep the verdict tallies `stats` reports (documents currently indexed)."""
        if isinstance(v, Record):
            v = Verdict.from_record(v)
        for kind in v.kinds():
            self._counts[kind] = self._counts.get(kind, 0) + delta

    def _insert(
        self,
        t: Store,
        p: Prepared,
        i: int,
        docno: int,
        v: Verdict,
        ts: int | None,
        *,
        index_it: bool,
        row: bytes | None = None,
    ) -> None:
        """Store document `i` of `p` with its verdict and its timestamp as stored
        (`index_it`: with its signature, postings and text, so that later documents
        find it).  Run once per document:
        kept to the few statements it needs."""
        counts = self._counts
        for kind in v.kinds():
            counts[kind] = counts.get(kind, 0) + 1
        shingles = p.shingles[i]
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
        self.changes.append(Change(key, docno, record, sig, owns, text))

    def _forget(self, t: Store, docno: int, key: bytes, own: bool = False) -> None:
        """Remove a document (replaced by new content, or expired).  If it owned its
        content and copies of it live on, the oldest copy becomes the owner and takes
        over its signature, postings and text, so later exact and near
        duplicates still find that content while any copy of it lives.

        `own`: the document is replaced by one of the batch's own (same id), which
        the batch stores; any other forgotten id, and a promoted copy's, go to
        `changed_others`."""
        self._memory.forget(docno)
        old = t.record(docno)
        if old is not None:
            self._count(old, -1)
        raw = t.signature(docno)
        keys = [] if raw is None else stored_band_keys(raw, self.params)
        next_owner = None
        if old is not None and t.docno_for_content(old.content_hash) == docno:
            next_owner = t.first_copy(old.content_hash)
        if next_owner is not None:  # read before `remove_document` deletes them
            text = t.text(docno) or None
        t.remove_document(docno, key, keys)
        self.changes.append(Change(key, docno, None, None, False))
        if not own:
            self.changed_others.append(key)
        if next_owner is None or old is None:
            return
        heir_rec = t.record(next_owner)
        if heir_rec is None:
            return
        self._memory.forget(next_owner)  # it takes a signature: read it again
        t.adopt(next_owner, old.content_hash, raw, keys, text)
        next_owner_key = id_key(heir_rec.doc_id)
        self.changes.append(Change(next_owner_key, next_owner, heir_rec, raw, True, text))
        self.changed_others.append(next_owner_key)


__all__ = ["BatchState", "Expiry", "Settings"]
