"""Stream time: the clock a time window (`--ttl`) forgets documents by.

Stream time follows the bulk of the stream's timestamps, not its most extreme one.
It was the newest timestamp seen (bounded only by `--max-clock-skew` ahead of the wall
clock): under `--ttl 1h`, one message dated 55 minutes ahead moved it, every document
stored more than 5 minutes before that expired at once, and the exact copies that
followed were all `unique`.  Now it is the newest time that a majority of the last
`window` timestamps (`EngineOptions.clock_window`, default 31) have reached:
`quorum(window)` of them at or past it, the median of a full window, never moving
back.  Fewer than a quorum of messages ahead of the rest, in any `window` in a row,
move nothing, whatever the TTL (also one shorter than the skew bound).  The price: in
a stream in time order, stream time trails the newest timestamp by a quorum less one
messages, so documents are forgotten that many messages later than their timestamps
alone would say, and a new index starts its clock once a quorum of timestamped
messages has come.  A window of 1 is the newest timestamp (for sparse streams whose
every message may move the clock).

The rule reads timestamps only, in processing order (no wall clock, no batching):
`dedup`, the worker and `replay` give the same verdicts over the same stream, and its
state -- the clock and the recent timestamps -- is kept in the index (`meta` `clock`
and `recent`) and written in each batch's transaction, so a batch redone after a
crash starts from the same state and gives the same verdicts.  A changelog restore
derives it from the stored documents' timestamps in document-number order
(kafka/changelog.py).
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections import deque
from collections.abc import Sequence

from streamdedup.config import EngineOptions

# The default window, 31 timestamps: the clock moves to a time once 16 of them have
# reached it, so a burst of up to 15 messages ahead of the rest (a producer with a
# fast clock, a few mislabelled messages) is ignored, and the clock trails an ordered
# stream by 15 messages.
RECENT = EngineOptions.clock_window


def quorum(window: int) -> int:
    """How many of the last `window` timestamps must have reached a time for the
    clock to move there: a majority."""
    return window // 2 + 1


class StreamClock:
    """The clock (epoch ms; 0: none yet) and the recent timestamps, oldest first."""

    def __init__(self, clock: int = 0, recent: Sequence[int] = (), window: int = RECENT) -> None:
        self.clock = clock
        self.window = window
        self._quorum = quorum(window)
        self.recent: deque[int] = deque(list(recent)[-window:], maxlen=window)
        self._ranked = sorted(self.recent)

    def advance(self, ts: int) -> int:
        """Take one trusted timestamp; the clock after it."""
        if len(self.recent) == self.window:
            del self._ranked[bisect_left(self._ranked, self.recent[0])]
        self.recent.append(ts)
        insort(self._ranked, ts)
        if len(self._ranked) >= self._quorum:
            reached = self._ranked[-self._quorum]
            if reached > self.clock:
                self.clock = reached
        return self.clock

    def forget_after(self, bound: int) -> None:
        """Drop the recent timestamps past `bound` (an index whose clock an outlier
        moved before the skew bound existed: see `Deduplicator._apply`)."""
        kept = [ts for ts in self.recent if ts <= bound]
        self.recent = deque(kept, maxlen=self.window)
        self._ranked = sorted(kept)
