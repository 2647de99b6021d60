"""What a person running the worker sees of it, kept apart from the loop: the run's
counts (`WorkerStats`, printed when it stops), the Prometheus metrics and gauges
(consumer lag, index size) and the rate-limited warning about messages stamped too
far in the future.  The loop (worker.py) hands it what happened; it holds no
reference to the loop.  It logs as `streamdedup.kafka.worker`, the name operators
filter on."""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from streamdedup.engine.counters import Counters
from streamdedup.kafka.messages import Outgoing
from streamdedup.models import Rejected, Verdict
from streamdedup.ops.metrics import Metrics

log = logging.getLogger("streamdedup.kafka.worker")


@dataclass
class WorkerStats:
    batches: int = 0
    messages: int = 0
    verdicts: int = 0
    duplicates: int = 0
    dead_letters: int = 0
    republished: int = 0
    skipped: int = 0  # redelivered although already published and committed
    caught_up: int = 0  # applied without a verdict: published before the index was restored
    started: float = field(default_factory=time.monotonic)


class WorkerObserver:
    """The worker's stats, metrics and warnings (see the module docstring)."""

    def __init__(self, metrics: Metrics | None, max_clock_skew_ms: int | None) -> None:
        self.stats = WorkerStats()
        self.metrics = metrics
        self.max_clock_skew_ms = max_clock_skew_ms
        self._last_gauges = 0.0
        self._outliers_logged = float("-inf")  # monotonic time of the last outlier warning
        self._outliers_unlogged = 0

    def count(
        self, out: list[Outgoing], applied: dict[int, int], seconds: float, batch: Counters
    ) -> None:
        """One committed batch: its messages (`out`), the offsets the index had applied
        before it (`applied`: below them, a verdict is published again), its time, and
        the engine's counters of it."""
        s = self.stats
        verdicts = [o.item for o in out if isinstance(o.item, Verdict)]
        again = sum(
            isinstance(o.item, Verdict) and o.offset < applied.get(o.partition, 0) for o in out
        )
        rejected = sum(isinstance(o.item, Rejected) for o in out)
        dups = sum(v.is_duplicate for v in verdicts)
        s.batches += 1
        s.messages += len(out)
        s.verdicts += len(verdicts)
        s.duplicates += dups
        s.dead_letters += rejected
        s.republished += again
        s.caught_up += sum(o.item is None for o in out)
        m = self.metrics
        if m is not None:
            m.batch_seconds.observe(seconds)
            m.documents.inc(len(verdicts))
            m.duplicates.inc(dups)
            m.dead_letters.inc(rejected)
            m.republished.inc(again)
            m.expired.inc(batch.expired)
            m.capped.labels("bucket").inc(batch.bucket_capped)
            m.capped.labels("exact").inc(batch.exact_capped)

    def warn_outliers(self, found: list[tuple[int, int, int]]) -> None:
        """Counts the documents the index just took with timestamps too far in the
        future (partition, offset, timestamp); warns about them once a minute at most."""
        if self.metrics is not None:
            self.metrics.clock_outliers.inc(len(found))
        self._outliers_unlogged += len(found)
        if time.monotonic() - self._outliers_logged < 60.0:
            return
        self._outliers_logged = time.monotonic()
        p, offset, ts = found[0]
        when = dt.datetime.fromtimestamp(min(ts, 253402300799999) / 1000, dt.UTC)
        log.warning(
            "message at partition %d, offset %d has timestamp %d (%s), more than %dms ahead "
            "of the wall clock (--max-clock-skew): stored as of the current stream time, "
            "which it does not move (%d such messages since the last warning)",
            p,
            offset,
            ts,
            when.strftime("%Y-%m-%dT%H:%M:%SZ"),
            self.max_clock_skew_ms,
            self._outliers_unlogged,
        )
        self._outliers_unlogged = 0

    def update_gauges(
        self, consumer: Any, indexed: Callable[[], int], file_bytes: Callable[[], int]
    ) -> None:
        """Consumer lag per partition and the index's size, at most once a second."""
        m = self.metrics
        if m is None or time.monotonic() - self._last_gauges < 1.0:
            return
        self._last_gauges = time.monotonic()
        lags: dict[tuple[str, int], int] = {}
        for tp in consumer.assignment():
            high = consumer.highwater(tp)
            if high is None:
                lags[(tp.topic, tp.partition)] = 0
                continue
            try:
                pos = consumer.position(tp, timeout_ms=100)
            except Exception:  # a gauge is not worth failing the loop for
                continue
            if pos is not None:
                lags[(tp.topic, tp.partition)] = max(0, high - pos)
        m.set_lag(lags)
        m.indexed.set(indexed())
        m.index_bytes.set(file_bytes())
