"""Prometheus metrics and the health endpoints of a long-running worker.

One HTTP server answers three paths:

- `/metrics`: Prometheus text format (prometheus_client renders it);
- `/healthz`: 200 while the processing loop keeps turning (a loop stuck for longer
  than `stall_s` -- a hung broker call, a deadlock -- answers 503, so a supervisor
  restarts the process; so does a loop that turns without progress, reported with
  `trouble`: Kafka transactions failing batch after batch);
- `/readyz`: 200 once partitions are assigned and the summed consumer lag is at most
  `ready_max_lag` (a worker still catching up or restoring is alive but not ready).

Each worker has its own registry, so several workers (tests, embedding) can live in
one process without sharing counters.

The segmented index adds two sets: `SegmentClientMetrics`, the writer's view of its
remote sealed segments (probe round trips, answers pending, stalls; part of the
worker's `Metrics`, and a stalled segment fails its `/readyz`), and
`SegmentServerMetrics`, the endpoints of a `segment-server` process (probes
answered, answer time).  Both servers share the HTTP part, `Endpoints`.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

from streamdedup.errors import ConfigError

_BATCH_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
# A connection that sends no complete request within this many seconds is closed:
# each connection holds a thread while it is open.
IDLE_TIMEOUT_S = 10.0

log = logging.getLogger(__name__)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """socketserver prints a traceback to stderr for anything a handler raises,
        which would break a `--log-format json` log; a client that hangs up or stays
        silent is routine, anything else goes through the package's logging."""
        import sys

        exc = sys.exc_info()[1]
        if isinstance(exc, ConnectionError | TimeoutError):
            return
        log.warning("metrics request from %s failed", client_address[0], exc_info=True)


@dataclass(frozen=True)
class HealthPolicy:
    stall_s: float = 120.0
    ready_max_lag: int = 10_000


class Endpoints:
    """A process's own registry and the HTTP server of `/metrics`, `/healthz` and
    `/readyz`: liveness from the loop's heartbeat (and `trouble`), readiness as the
    subclass defines it."""

    def __init__(self, policy: HealthPolicy | None = None) -> None:
        self.policy = policy or HealthPolicy()
        self.registry = CollectorRegistry()
        self._beat = time.monotonic()
        self._trouble: str | None = None
        self._server: _Server | None = None

    def heartbeat(self) -> None:
        self._beat = time.monotonic()

    def trouble(self, why: str | None) -> None:
        """Report the process unhealthy although its loop turns (`why`: the reason
        /healthz gives), or healthy again (None): a batch whose transactions keep
        failing makes no progress however fast the loop goes."""
        self._trouble = why

    def healthy(self) -> tuple[bool, str]:
        if self._trouble is not None:
            return False, self._trouble
        quiet = time.monotonic() - self._beat
        if quiet > self.policy.stall_s:
            return False, f"processing loop silent for {quiet:.0f}s"
        return True, "ok"

    def ready(self) -> tuple[bool, str]:
        return True, "ok"

    def render(self) -> bytes:
        return generate_latest(self.registry)

    # -- HTTP
    def serve(self, host: str, port: int) -> int:
        """Serve in a daemon thread; returns the bound port (0 picks a free one)."""
        metrics = self

        class Handler(BaseHTTPRequestHandler):
            timeout = IDLE_TIMEOUT_S  # socket timeout: an idle connection is closed

            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    self._send(200, metrics.render(), CONTENT_TYPE_LATEST)
                elif path in ("/healthz", "/readyz"):
                    ok, why = metrics.healthy() if path == "/healthz" else metrics.ready()
                    self._send(200 if ok else 503, why.encode() + b"\n", "text/plain")
                else:
                    self._send(404, b"try /metrics, /healthz or /readyz\n", "text/plain")

            def _send(self, status: int, body: bytes, ctype: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # scrapes every few seconds would drown the worker's own log

        try:
            self._server = _Server((host, port), Handler)
        except OSError as exc:
            raise ConfigError(f"cannot serve metrics on {host}:{port}: {exc}") from exc
        threading.Thread(
            target=self._server.serve_forever, name="streamdedup-metrics", daemon=True
        ).start()
        return int(self._server.server_address[1])

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


class Metrics(Endpoints):
    """The worker's metrics (and its remote segments', `segments`)."""

    def __init__(self, policy: HealthPolicy | None = None) -> None:
        super().__init__(policy)
        r = self.registry
        self.documents = Counter(
            "streamdedup_documents", "Verdicts published (input messages decoded)", registry=r
        )
        self.duplicates = Counter(
            "streamdedup_duplicates", "Verdicts that were duplicate", registry=r
        )
        self.dead_letters = Counter(
            "streamdedup_dead_letters", "Messages sent to the dead-letter topic", registry=r
        )
        self.republished = Counter(
            "streamdedup_republished",
            "Verdicts published again from the index after a redelivery",
            registry=r,
        )
        self.expired = Counter(
            "streamdedup_expired", "Documents forgotten by the time window (--ttl)", registry=r
        )
        self.capped = Counter(
            "streamdedup_capped",
            "Documents whose search a cap cut short (cap: bucket = a bucket held more than "
            "--max-bucket-candidates postings; exact = candidates near the threshold left "
            "unchecked at --max-exact-checks): near duplicates may be missed",
            ["cap"],
            registry=r,
        )
        self.clock_outliers = Counter(
            "streamdedup_clock_outliers",
            "Messages timestamped further ahead of the wall clock than --max-clock-skew "
            "(stored as of the stream time, which they do not move)",
            registry=r,
        )
        self.batch_seconds = Histogram(
            "streamdedup_batch_seconds",
            "Wall time of one poll batch: decode, index transaction, Kafka transaction",
            buckets=_BATCH_BUCKETS,
            registry=r,
        )
        self.lag = Gauge(
            "streamdedup_consumer_lag",
            "Messages behind the partition's end",
            ["topic", "partition"],
            registry=r,
        )
        # the labelled gauge has no sample until a partition is assigned; the total is
        # there from the start (0), so a dashboard or alert never sees it missing
        self.lag_total = Gauge(
            "streamdedup_total_consumer_lag",
            "Messages behind the ends of all assigned partitions (0 before any is assigned)",
            registry=r,
        )
        self.indexed = Gauge(
            "streamdedup_indexed_documents", "Documents the index holds", registry=r
        )
        self.index_bytes = Gauge(
            "streamdedup_index_bytes", "Disk space taken by the index file", registry=r
        )
        self.assigned = Gauge(
            "streamdedup_assigned_partitions", "Input partitions assigned", registry=r
        )
        self.segments = SegmentClientMetrics(r)
        self._lag: dict[tuple[str, int], int] = {}

    # -- fed by the worker
    def set_lag(self, lags: dict[tuple[str, int], int]) -> None:
        for gone in set(self._lag) - set(lags):
            self.lag.remove(gone[0], str(gone[1]))
        for (topic, partition), lag in lags.items():
            self.lag.labels(topic, str(partition)).set(lag)
        self._lag = dict(lags)
        self.assigned.set(len(lags))
        self.lag_total.set(sum(lags.values()))

    # -- read by the endpoints
    def ready(self) -> tuple[bool, str]:
        stalled = self.segments.stalled()
        if stalled is not None:
            return False, stalled
        if not self._lag:
            return False, "no partitions assigned"
        total = sum(self._lag.values())
        if total > self.policy.ready_max_lag:
            return False, f"lag {total} above {self.policy.ready_max_lag}"
        return True, f"ok, lag {total}"


# probe round trips: a batch's probe is answered in milliseconds by an idle local
# server, in seconds by a loaded one; a stall runs into the segment timeout (10 s)
_PROBE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class SegmentClientMetrics:
    """The writer's remote sealed segments, labelled by segment number: round trip of
    each probe (sent to answer filed), answers still awaited, the latency of the last
    answer (what `stats` shows), and stalls -- a segment that has not answered within
    its timeout.  A stalled segment fails the worker's `/readyz` (`stalled`) until it
    answers again: the writer never skips a segment, so it is waiting, not failing."""

    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.probe_seconds = Histogram(
            "streamdedup_segment_probe_seconds",
            "Round trip of one probe to a remote sealed segment (sent to answer received)",
            ["segment"],
            buckets=_PROBE_BUCKETS,
            registry=r,
        )
        self.pending = Gauge(
            "streamdedup_segment_answers_pending",
            "Probes sent to a remote sealed segment and not answered yet",
            ["segment"],
            registry=r,
        )
        self.last_answer = Gauge(
            "streamdedup_segment_last_answer_seconds",
            "Round trip of the last answered probe of a remote sealed segment",
            ["segment"],
            registry=r,
        )
        self.stalls = Counter(
            "streamdedup_segment_stalls",
            "Times a remote sealed segment left a probe unanswered for --segment-timeout "
            "(the writer waits and sends the probe again)",
            ["segment"],
            registry=r,
        )
        self.stalled_now = Gauge(
            "streamdedup_segment_stalled",
            "1 while a remote sealed segment is overdue with an answer",
            ["segment"],
            registry=r,
        )
        self._lock = threading.Lock()
        self._stalled: dict[str, str] = {}

    def answered(self, segment: str, seconds: float) -> None:
        self.probe_seconds.labels(segment).observe(seconds)
        self.last_answer.labels(segment).set(seconds)

    def set_pending(self, segment: str, count: int) -> None:
        self.pending.labels(segment).set(count)

    def stall(self, segment: str, why: str) -> None:
        self.stalls.labels(segment).inc()
        self.stalled_now.labels(segment).set(1)
        with self._lock:
            self._stalled[segment] = why

    def recovered(self, segment: str) -> None:
        self.stalled_now.labels(segment).set(0)
        with self._lock:
            self._stalled.pop(segment, None)

    def stalled(self) -> str | None:
        """Why the writer waits (each stalled segment), or None."""
        with self._lock:
            reasons = sorted(self._stalled.values())
        return "; ".join(reasons) if reasons else None


_ANSWER_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class SegmentServerMetrics(Endpoints):
    """A `segment-server` process: probes answered, skipped (stale, malformed) or
    failed, bytes in and out, the time to answer one, and the probes waiting.
    `/readyz` is green once the server is a member of its segment's consumer group,
    whether it holds the probe partition or stands by as a replica."""

    def __init__(self, policy: HealthPolicy | None = None) -> None:
        super().__init__(policy)
        r = self.registry
        self.probes = Counter(
            "streamdedup_segment_probes", "Probes answered by this segment server", registry=r
        )
        self.skipped = Counter(
            "streamdedup_segment_probes_skipped",
            "Probes not answered: older than --max-probe-age (stale), answered already "
            "(a re-sent copy), or without a request id",
            ["reason"],
            registry=r,
        )
        self.failed = Counter(
            "streamdedup_segment_probes_failed",
            "Probes answered with an error (the writer stops with it rather than guess)",
            registry=r,
        )
        self.answer_seconds = Histogram(
            "streamdedup_segment_answer_seconds",
            "Time to compute one answer from the sealed segment",
            buckets=_ANSWER_BUCKETS,
            registry=r,
        )
        self.probe_bytes = Counter(
            "streamdedup_segment_probe_bytes", "Bytes of probes read", registry=r
        )
        self.answer_bytes = Counter(
            "streamdedup_segment_answer_bytes", "Bytes of answers sent", registry=r
        )
        self.lag = Gauge(
            "streamdedup_segment_probe_lag",
            "Probes in the segment's probe topic not yet answered by this server "
            "(0 on a standby replica)",
            registry=r,
        )
        self.assigned = Gauge(
            "streamdedup_segment_assigned",
            "1 when this server holds the probe partition, 0 on a standby replica",
            registry=r,
        )
        self._member = False
        self._holds = False

    def joined(self, holds_partition: bool) -> None:
        """A rebalance ended: this server holds the probe partition or stands by."""
        self._member = True
        self._holds = holds_partition
        self.assigned.set(1 if holds_partition else 0)

    def ready(self) -> tuple[bool, str]:
        if not self._member:
            return False, "not yet a member of the segment's consumer group"
        if self._holds:
            return True, "ok, answering probes"
        return True, "ok, standby replica (another server holds the probe partition)"
