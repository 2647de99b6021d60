"""The time window of one batch: each document's stored timestamp and the stream
clock as it is read (`_stamps`, engine/clock.py), the clock's repair after an
outlier moved it (`_open_clock`), and forgetting documents older than the window,
oldest first and a bounded number per batch (`_expire`), an expired candidate's
content passed on to the copy still inside the window (`_successor`)."""

from __future__ import annotations

import itertools
import operator
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import TypeVar

from streamdedup.engine.clock import StreamClock
from streamdedup.engine.prepare import Prepared
from streamdedup.engine.roles import Store
from streamdedup.engine.state import BatchState, Expiry
from streamdedup.models import Record
from streamdedup.store.keys import MetaKey, id_key

_T = TypeVar("_T")
_TIMESTAMP = operator.attrgetter("timestamp_ms")


def chained(lists: Sequence[Iterable[_T]]) -> Iterator[_T]:
    """The items of the parts' lists, in batch order (for `np.fromiter`)."""
    return itertools.chain.from_iterable(lists)


def reached(rec: Record, cutoff: int | None) -> bool:
    """Whether the time window may forget (or hide) a stored document during a batch
    whose last cutoff is `cutoff` (None: no window)."""
    return cutoff is not None and rec.timestamp_ms is not None and rec.timestamp_ms < cutoff


class WindowRun(BatchState):
    """A batch's run, with its time window."""

    def _open_clock(self, t: Store) -> tuple[StreamClock, int | None, int, bool]:
        """The stream clock as stored (repaired if an outlier moved it past the
        bound), the bound on trusted timestamps (None: none), the wall clock, and
        whether the clock was repaired.

        Stream time follows the bulk of the timestamps (engine/clock.py), and only
        those at most `max_clock_skew_ms` ahead of the wall clock: a message dated
        2100 is not counted at all.  The bound is on the future side only, so a
        replay of old topics is unaffected."""
        clock = int(t.meta(MetaKey.CLOCK) or 0)
        stream = StreamClock(clock, t.meta(MetaKey.RECENT) or (), self.options.clock_window)
        skew = self.options.max_clock_skew_ms
        now = time.time_ns() // 1_000_000
        ahead = None if skew is None else now + skew
        repaired = ahead is not None and clock > ahead
        if repaired:  # moved by an outlier before the bound
            assert ahead is not None
            stream.clock = t.newest_timestamp(ahead)
            stream.forget_after(ahead)
        # only a window needs the oldest document (with sealed segments, asking for it
        # is a round trip)
        oldest = t.oldest() if self.options.ttl_ms is not None else None
        self._expiry = Expiry(oldest, self.options.max_expire_per_batch)
        return stream, ahead, now, repaired

    def _stamps(
        self, parts: list[Prepared], stream: StreamClock, ahead: int | None, now: int
    ) -> tuple[list[int | None], list[int]]:
        """Each document's timestamp as stored, and the stream clock once it is read,
        in batch order (they follow from the timestamps alone, not from any verdict);
        the clock outliers go to `outliers`.  `stream` takes the trusted timestamps."""
        n = sum(len(p.docs) for p in parts)
        clock = stream.clock
        # file mode (a timestamp <= 0 counts as none, as below)
        self._timed = any(map(_TIMESTAMP, chained([p.docs for p in parts])))
        if not self._timed:
            return [None] * n, [clock] * n
        stamps: list[int | None] = []
        clocks: list[int] = []
        outliers = self.outliers
        position = 0
        for p in parts:
            for d in p.docs:
                ts = d.timestamp_ms
                if ts is not None and ts <= 0:  # Kafka's "no timestamp" (-1), or unset
                    ts = None
                elif ts is not None and ahead is not None and ts > ahead:
                    # an outlier: stored as of the current stream time (the wall clock
                    # before any), so it expires with its neighbours; the clock stays
                    outliers.append((position, ts))
                    self.counters.clock_outliers += 1
                    ts = clock or now
                elif ts is not None:
                    clock = stream.advance(ts)
                stamps.append(ts)
                clocks.append(clock)
                position += 1
        return stamps, clocks

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
            self.counters.expired += 1
            e.budget -= 1
            e.oldest = t.oldest()
        e.behind = False

    def _expired(self, rec: Record) -> bool:
        e = self._expiry
        return e.cutoff is not None and rec.timestamp_ms is not None and rec.timestamp_ms < e.cutoff

    def _successor(self, t: Store, docno: int, rec: Record) -> int | None:
        """An expired candidate the window has not forgotten yet (the batch's budget
        ran out) is forgotten now; the copy of its content still inside the window
        that takes it over (if any) is the candidate instead, as it would be had the
        window caught up, so verdicts do not depend on the budget."""
        while True:
            content = rec.content_hash
            owned = t.docno_for_content(content) == docno
            self._forget(t, docno, id_key(rec.doc_id))
            next_owner = t.docno_for_content(content) if owned else None
            got = None if next_owner is None else t.record(next_owner)
            if next_owner is None or got is None:
                return None
            if not self._expired(got):
                return next_owner
            docno, rec = next_owner, got


__all__ = ["WindowRun", "chained", "reached"]
