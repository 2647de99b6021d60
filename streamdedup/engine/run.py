"""One run of a batch's transaction (`BatchRun.run`): the order in which the rooms
act on a prepared batch inside the write transaction -- read ahead, the clock and
the window (window.py), the documents the bulk path decides (bulk.py), the loop over
the others in batch order (single.py), the bulk path's stores after it, and the
batch's totals written to `meta`.  A `BatchRun` is made for each run of the
transaction function and holds all of that run's state (state.py), so a run the
index repeats (after MapFull) starts clean."""

from __future__ import annotations

from bisect import bisect_right

import numpy as np

from streamdedup.engine.bulk import LATER, LATER_CHANGE, Bulk, BulkRun, joined
from streamdedup.engine.clock import StreamClock
from streamdedup.engine.prepare import Prepared
from streamdedup.engine.roles import Store
from streamdedup.engine.single import SingleRun
from streamdedup.models import Verdict
from streamdedup.store.keys import MetaKey


class BatchRun(BulkRun, SingleRun):
    """A batch checked and inserted in one run of its transaction."""

    def run(self, t: Store) -> list[Verdict]:
        """Check and insert the batch's documents in order; their verdicts (also kept
        as `verdicts`)."""
        parts = self.parts
        next_docno = int(t.meta(MetaKey.NEXT_DOCNO) or 0)
        self._counts = dict(t.meta(MetaKey.COUNTS) or {})
        self._memory.clear(next_docno)
        stream, ahead, now, repaired = self._open_clock(t)
        ttl = self.options.ttl_ms
        t.prefetch(list(joined([p.keys for p in parts])), list(joined([p.content for p in parts])))
        # each document's band keys joined: its row of the batch's read-ahead
        rows = [p.band_rows for p in parts]
        t.batch_postings(self._searching(t, parts, rows), self.options.max_bucket_candidates)
        stamps, clocks = self._stamps(parts, stream, ahead, now)
        # Most documents of a stream are decided here at once and stored after the
        # loop, in bulk (`_store_bulk`); the loop only numbers them.
        writes = (
            t.bulk_writes() if self.settings.bulk and clocks and not self.settings.sealed else None
        )
        bulk = (
            None
            if writes is None
            else self._classify(
                writes, parts, rows, stamps, None if ttl is None else clocks[-1] - ttl
            )
        )
        out: list[Verdict] = []
        if bulk is not None and ttl is None:  # (a window looks at every position)
            next_docno = self._number(t, rows, stamps, bulk, next_docno, out)
        else:
            next_docno = self._loop(t, rows, stamps, clocks, bulk, next_docno, out)
        if bulk is not None and bulk.docnos:
            assert writes is not None
            self._store_bulk(writes, parts, rows, bulk, out)
        t.flush_postings()
        self._memory.end_batch()  # its arrays are let go; exact sets kept once committed
        self._finish(t, next_docno, clocks[-1] if clocks else stream.clock, stream, repaired)
        self.verdicts = out
        return out

    def _loop(
        self,
        t: Store,
        rows: list[list[bytes]],
        stamps: list[int | None],
        clocks: list[int],
        bulk: Bulk | None,
        next_docno: int,
        out: list[Verdict],
    ) -> int:
        """The loop over every position: the window moved to each document's clock,
        those decided in bulk numbered, the others decided one by one; the next
        docno after them."""
        ttl = self.options.ttl_ms
        kinds = None if bulk is None else bulk.kinds
        changes = self.changes
        position = 0
        for p, part_rows in zip(self.parts, rows, strict=True):
            for i in range(len(p.docs)):
                if ttl is not None:
                    self._expire(t, clocks[position] - ttl)
                if kinds is not None and kinds[position]:
                    assert bulk is not None
                    bulk.hold(position, position + 1, next_docno, stamps, len(changes))
                    out.append(LATER)
                    changes.append(LATER_CHANGE)
                    next_docno += 1
                else:
                    verdict, inserted = self._check_one(
                        t, p, i, next_docno, part_rows[i], stamps[position]
                    )
                    next_docno += inserted
                    out.append(verdict)
                position += 1
        return next_docno

    def _number(
        self,
        t: Store,
        rows: list[list[bytes]],
        stamps: list[int | None],
        bulk: Bulk,
        next_docno: int,
        out: list[Verdict],
    ) -> int:
        """The loop without a time window: each run of documents decided in bulk
        numbered at once (their places kept in `out` and `changes`), the others
        decided one by one between them, in batch order; the next docno after them.
        In a batch of new ids every document is decided in bulk (but those without
        shingles): a loop over positions would be most of what is left of the
        batch's Python per document."""
        parts = self.parts
        ones = np.flatnonzero(bulk.kind == 0).tolist()  # decided one by one
        starts = np.cumsum([0, *(len(p.docs) for p in parts)]).tolist()
        changes, n = self.changes, starts[-1]
        done = 0
        for pos in [*ones, n]:
            if pos > done:  # documents done .. pos - 1: in bulk
                k = bulk.hold(done, pos, next_docno, stamps, len(changes))
                out += [LATER] * k
                changes += [LATER_CHANGE] * k
                next_docno += k
            if pos == n:
                break
            part = bisect_right(starts, pos) - 1
            i = pos - starts[part]
            verdict, inserted = self._check_one(
                t, parts[part], i, next_docno, rows[part][i], stamps[pos]
            )
            next_docno += inserted
            out.append(verdict)
            done = pos + 1
        return next_docno

    def _finish(
        self, t: Store, next_docno: int, clock: int, stream: StreamClock, repaired: bool
    ) -> None:
        """The batch's totals in `meta`: the next docno, the verdict tallies, the
        stream clock (and its recent timestamps), the caps met (for `stats`)."""
        t.set_meta(MetaKey.NEXT_DOCNO, next_docno)
        t.set_meta(MetaKey.COUNTS, self._counts)
        t.set_meta(MetaKey.CLOCK, clock)
        if self._timed or repaired:
            t.set_meta(MetaKey.RECENT, list(stream.recent))
        b = self.counters
        if b.bucket_capped or b.exact_capped:  # kept for `stats`
            caps = dict(t.meta(MetaKey.CAPS) or {})
            caps["bucket"] = caps.get("bucket", 0) + b.bucket_capped
            caps["exact"] = caps.get("exact", 0) + b.exact_capped
            t.set_meta(MetaKey.CAPS, caps)

    @staticmethod
    def _searching(t: Store, parts: list[Prepared], rows: list[list[bytes]]) -> list[bytes]:
        """The rows of the documents that will search the buckets: not those without
        shingles or known (`resent`), nor exact copies of a content indexed before or
        earlier in the batch (a third of a stream of short documents), which are
        decided without.  Only a guess that saves reading their buckets ahead: a
        document that searches after all (its content's owner was forgotten
        meanwhile) reads its buckets itself (`Tables.candidates`)."""
        out: list[bytes] = []
        seen: set[bytes] = set()
        stored = t.docno_for_content
        for p, part_rows in zip(parts, rows, strict=True):
            resent = p.resent
            for i, (row, shingles, c) in enumerate(
                zip(part_rows, p.shingles, p.content, strict=True)
            ):
                if not shingles or c in seen or i in resent:
                    continue
                seen.add(c)  # (a stored content: its later copies are skipped as well)
                if stored(c) is None:
                    out.append(row)
        return out


__all__ = ["BatchRun"]
