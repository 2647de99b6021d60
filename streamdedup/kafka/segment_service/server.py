"""`SegmentServer`: answers the writer's probes for one sealed segment over Kafka.

The server joins the segment's consumer group on its probe topic (every server of
the segment joins the same group: the one holding the single partition answers, the
others stand by and take over when it leaves or dies), and for each probe:

1. skips it if it is stale: its writer has sent probes more than `max_age_s` newer
   since (it sent this one again, or gave up on it: answering would only spend
   time), or if this server has answered its request id already (the writer re-sends
   a probe it waits for too long: a slow server must not answer each batch twice);
   each skip is logged and counted (`streamdedup_segment_probes_skipped{reason}`);
2. computes the answer with `handler` (bytes -> bytes: `engine.sealed.probes.Answerer.answer_bytes`
   bound to the open segment; the transport does not look inside);
3. produces it to the answer topic, keyed by the probe's request id;

and commits the probe offsets of a poll batch only once every answer of it is
acknowledged by the broker.  A server killed in between leaves the probes to its
replica (or its own restart), which answers them again: the writer ignores an answer
it already has, so a probe answered twice is harmless.

Staleness never compares two hosts' clocks.  A probe's timestamp is its writer's
clock (CreateTime; or the broker's, for a topic with LogAppendTime), so it is compared
only with the newest timestamp of the same writer's probes (`WRITER_HEADER`; probes
without one form one group): a server whose clock runs ahead (or behind) of the
writer's skips exactly what a server in step would.  A writer's clock that jumps
back cannot wedge it either: a request skipped as stale and then seen again is
answered, since a writer re-sends only what it still waits for.

A probe the handler cannot answer (it cannot be read, the segment is damaged) is
answered with an error header instead of being dropped: the writer would otherwise
wait for it forever; it stops with the server's reason.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from streamdedup.errors import BrokerUnavailableError, ConfigError
from streamdedup.kafka.segment_service.wire import (
    ERROR_HEADER,
    MAX_MESSAGE_BYTES,
    WRITER_HEADER,
    SegmentLink,
    consumer_settings,
    ensure_topics,
    producer_settings,
)
from streamdedup.kafka.settings import group_timeouts, probe_cluster, wait_for_broker
from streamdedup.ops.logs import KafkaRefusals
from streamdedup.ops.metrics import SegmentServerMetrics

__all__ = ["SegmentServer", "ServerStats"]

log = logging.getLogger("streamdedup.kafka.segment_server")

# A probe waits in the topic while no server answers (all down, a rebalance).  The
# writer sends it again every --segment-timeout (10 s by default) and the old copy
# is then of no use; 5 minutes keeps a slow restart from being skipped.
MAX_PROBE_AGE_S = 300.0
# One probe is one writer batch (hundreds of documents, a few MB): a poll brings a
# few, so that their answers are acknowledged and committed together well within
# the consumer's max_poll_interval.
MAX_POLL_PROBES = 8
ACK_TIMEOUT_S = 60.0
# Re-sent probes are recognised by request id among this many last answered: a
# writer re-sends each --segment-timeout, a few per waiting batch.  The same bound
# holds the writers' newest probe timestamps and the requests skipped as stale.
ANSWERED_KEPT = 4096


@dataclass
class ServerStats:
    probes: int = 0  # answered (with an answer or an error)
    failed: int = 0  # answered with an error
    skipped: int = 0  # stale, or without a request id
    bytes_in: int = 0
    bytes_out: int = 0
    answer_s: float = 0.0  # summed handler time
    started: float = field(default_factory=time.monotonic)


class SegmentServer:
    """`SegmentServer(link, segment_id, handler).run()` until `stop_event` is set
    (or, with `idle_exit_s`, after that long without a probe).  `name` says in the
    logs which segment this is (its number and directory)."""

    def __init__(
        self,
        link: SegmentLink,
        segment_id: str,
        handler: Callable[[bytes], bytes],
        *,
        name: str | None = None,
        metrics: SegmentServerMetrics | None = None,
        max_age_s: float = MAX_PROBE_AGE_S,
        log_every: int = 100,
        idle_exit_s: float | None = None,
        poll_timeout_ms: int = 500,
    ) -> None:
        self.link = link
        self.topics = link.topics(segment_id)
        self.handler = handler
        self.name = name or f"segment {segment_id}"
        self.metrics = metrics
        self.max_age_s = max_age_s
        self.log_every = max(1, log_every)
        self.idle_exit_s = idle_exit_s
        self.poll_timeout_ms = poll_timeout_ms
        self.stop_event = threading.Event()
        self.stats = ServerStats()
        self.consumer: Any = None
        self.producer: Any = None
        self._logged = (time.monotonic(), 0, 0, 0, 0.0)  # time, probes, in, out, answer_s
        # request ids of the last probes answered and acknowledged, oldest first
        self._answered: OrderedDict[bytes, None] = OrderedDict()
        self._in_batch: set[bytes] = set()  # and those of the poll batch in hand
        # per writer (its header, or None): the newest timestamp of its probes (ms)
        self._newest: OrderedDict[bytes | None, int] = OrderedDict()
        # request ids skipped as stale: a copy seen again is answered (module doc)
        self._stale: OrderedDict[bytes, None] = OrderedDict()

    # ------------------------------------------------------------------ setup

    def connect(self) -> None:
        from kafka import ConsumerRebalanceListener, KafkaConsumer, KafkaProducer
        from kafka.errors import (
            KafkaConfigurationError,
            KafkaConnectionError,
            KafkaError,
            KafkaTimeoutError,
        )

        link = self.link
        wait_for_broker(link.bootstrap_servers, link.connect_timeout_s)
        refusals = KafkaRefusals.install()
        refusals.reset()
        probe = probe_cluster(link.bootstrap_servers, self.topics.probes, link.client)
        options = group_timeouts(probe.embedded, link.consumer_options)
        try:
            ensure_topics(link, self.topics)
            self.producer = KafkaProducer(**producer_settings(link))
            settings = {
                **consumer_settings(link),
                "group_id": self.topics.group,
                # a probe sent before any server ran is answered when the first joins
                # (stale ones are skipped by age)
                "auto_offset_reset": "earliest",
                "max_poll_records": MAX_POLL_PROBES,
                **options,
            }
            self.consumer = KafkaConsumer(**settings)
        except (KafkaTimeoutError, KafkaConnectionError) as exc:
            raise BrokerUnavailableError(refusals.explain(link.bootstrap_servers, exc)) from exc
        except (KafkaConfigurationError, TypeError, ValueError, AssertionError) as exc:
            raise ConfigError(f"Kafka client settings rejected: {exc}") from exc
        except KafkaError as exc:  # refused: authentication, no right to create topics
            raise BrokerUnavailableError(refusals.explain(link.bootstrap_servers, exc)) from exc
        metrics, name, group = self.metrics, self.name, self.topics.group

        class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
            # runs on kafka-python's I/O thread: log and mark, never block
            def on_partitions_revoked(self, revoked: Any) -> None:
                if revoked:
                    log.info("%s: probe partition revoked (rebalance)", name)

            def on_partitions_assigned(self, assigned: Any) -> None:
                if assigned:
                    log.info("%s: answering probes (group %r)", name, group)
                else:
                    log.info("%s: standing by (another server of group %r answers)", name, group)
                if metrics is not None:
                    metrics.joined(bool(assigned))

        self.consumer.subscribe([self.topics.probes], listener=Listener())
        log.info(
            "%s: joining consumer group %r on %s (session timeout %.0fs)",
            self.name,
            group,
            self.topics.probes,
            self.consumer.config["session_timeout_ms"] / 1000,
        )

    # ------------------------------------------------------------------ the loop

    def run(self) -> ServerStats:
        self.connect()
        idle_since = time.monotonic()
        try:
            while not self.stop_event.is_set():
                if self.metrics is not None:
                    self.metrics.heartbeat()
                records = self.consumer.poll(timeout_ms=self.poll_timeout_ms)
                if not self.consumer.assignment():
                    idle_since = time.monotonic()  # standing by or joining: not idle
                for tp, batch in records.items():
                    self._serve(tp, batch)
                    idle_since = time.monotonic()
                self._report()
                if (
                    not records
                    and self.idle_exit_s is not None
                    and time.monotonic() - idle_since >= self.idle_exit_s
                ):
                    break
        finally:
            self.close()
        return self.stats

    def _serve(self, tp: Any, batch: list[Any]) -> None:
        """Answer a poll batch of one partition; commit it once every answer is
        acknowledged.  An answer the broker does not acknowledge: back to the first
        probe of the batch, answered again after a pause."""
        from kafka import OffsetAndMetadata
        from kafka.errors import CommitFailedError, KafkaError

        self._in_batch.clear()
        for m in batch:  # the batch's own newer probes count before any is judged
            self._saw(m)
        sent = [a for a in (self._answer(m) for m in batch) if a is not None]
        try:
            self.producer.flush(timeout=ACK_TIMEOUT_S)
            for _, future in sent:
                future.get(timeout=ACK_TIMEOUT_S)
        except KafkaError as exc:
            log.warning(
                "%s: answers not acknowledged (%s); answering from offset %d again",
                self.name,
                exc,
                batch[0].offset,
            )
            self.consumer.seek(tp, batch[0].offset)
            self.stop_event.wait(1.0)
            return
        for request, _ in sent:  # acknowledged: a copy sent again needs no answer
            self._remember(self._answered, request)
        try:
            self.consumer.commit({tp: OffsetAndMetadata(batch[-1].offset + 1, "", -1)})
        except CommitFailedError as exc:
            # the partition moved to a replica meanwhile: it answers these again
            log.info("%s: commit after a rebalance refused (%s)", self.name, exc)
        except KafkaError as exc:
            log.warning("%s: commit failed (%s); the probes may be answered again", self.name, exc)

    def _answer(self, message: Any) -> tuple[bytes, Any] | None:
        """Produce the answer to one probe: its request id and the send's future, or
        None if skipped."""
        m, s = self.metrics, self.stats
        if message.key is None:
            log.warning(
                "%s: probe at offset %d has no request id (message key): skipped",
                self.name,
                message.offset,
            )
            s.skipped += 1
            if m is not None:
                m.skipped.labels("no-request-id").inc()
            return None
        if message.key in self._answered or message.key in self._in_batch:
            # the writer sent it again (no answer within its --segment-timeout: this
            # server was slow, or the answer is on its way): answering again would
            # only add work to a server already behind
            s.skipped += 1
            if m is not None:
                m.skipped.labels("answered").inc()
            log.info(
                "%s: probe %r at offset %d answered already (a copy sent again): skipped",
                self.name,
                message.key,
                message.offset,
            )
            return None
        behind = self._behind_s(message)
        if behind > self.max_age_s and message.key not in self._stale:
            s.skipped += 1
            if m is not None:
                m.skipped.labels("stale").inc()
            self._remember(self._stale, message.key)
            log.info(
                "%s: probe %r at offset %d is stale (its writer sent probes %.0fs newer "
                "since; --max-probe-age %.0fs): skipped",
                self.name,
                message.key,
                message.offset,
                behind,
                self.max_age_s,
            )
            return None
        self._in_batch.add(message.key)
        payload: bytes = message.value or b""
        started = time.perf_counter()
        headers: list[tuple[str, bytes]] = []
        try:
            answer = self.handler(payload)
        except Exception as exc:  # a bad probe must not stop the server: tell the writer
            log.error("%s: cannot answer probe %r: %s", self.name, message.key, exc, exc_info=True)
            answer, headers = b"", [(ERROR_HEADER, f"{self.name}: {exc}".encode())]
        if len(answer) > MAX_MESSAGE_BYTES:
            why = (
                f"{self.name}: the answer to probe {message.key!r} is {len(answer)} bytes, "
                f"above the limit of {MAX_MESSAGE_BYTES}: use smaller batches"
            )
            log.error("%s", why)
            answer, headers = b"", [(ERROR_HEADER, why.encode())]
        seconds = time.perf_counter() - started
        s.probes += 1
        s.failed += bool(headers)
        s.bytes_in += len(payload)
        s.bytes_out += len(answer)
        s.answer_s += seconds
        if m is not None:
            m.probes.inc()
            m.failed.inc(bool(headers))
            m.answer_seconds.observe(seconds)
            m.probe_bytes.inc(len(payload))
            m.answer_bytes.inc(len(answer))
        future = self.producer.send(
            self.topics.answers, key=message.key, value=answer, headers=headers
        )
        return message.key, future

    @staticmethod
    def _writer(message: Any) -> bytes | None:
        for key, value in message.headers or ():
            if key == WRITER_HEADER:
                return bytes(value)
        return None

    def _saw(self, message: Any) -> None:
        """Note the probe's timestamp as its writer's newest, if it is."""
        writer = self._writer(message)
        newest = self._newest.get(writer)
        if newest is None or int(message.timestamp) > newest:
            self._remember(self._newest, writer, int(message.timestamp))

    def _behind_s(self, message: Any) -> float:
        """How far the probe's timestamp lies behind its writer's newest probe seen,
        in seconds: both read on the writer's clock (or both on the broker's)."""
        stamp = int(message.timestamp)
        newest = self._newest.get(self._writer(message), stamp)
        return max(0, newest - stamp) / 1000

    @staticmethod
    def _remember(seen: OrderedDict[Any, Any], key: Any, value: Any = None) -> None:
        """Set `key` in a bounded map, as its newest entry (the oldest is dropped)."""
        seen.pop(key, None)
        seen[key] = value
        if len(seen) > ANSWERED_KEPT:
            seen.popitem(last=False)

    def _report(self) -> None:
        """A log line every `log_every` probes, with the rates since the last one; the
        probe lag gauge."""
        s = self.stats
        at, probes, bytes_in, bytes_out, answer_s = self._logged
        if self.metrics is not None:
            self._update_lag()
        if s.probes - probes < self.log_every:
            return
        now = time.monotonic()
        span = max(now - at, 1e-9)
        n = s.probes - probes
        log.info(
            "%s: %d probes answered (%.1f/s over %.0fs; in %.2f MB/s, out %.2f MB/s; "
            "mean answer %.1f ms), %d skipped, %d failed in all",
            self.name,
            s.probes,
            n / span,
            span,
            (s.bytes_in - bytes_in) / span / 1e6,
            (s.bytes_out - bytes_out) / span / 1e6,
            (s.answer_s - answer_s) / n * 1000,
            s.skipped,
            s.failed,
        )
        self._logged = (now, s.probes, s.bytes_in, s.bytes_out, s.answer_s)

    def _update_lag(self) -> None:
        assert self.metrics is not None
        lag = 0
        for tp in self.consumer.assignment():
            high = self.consumer.highwater(tp)
            try:
                pos = self.consumer.position(tp, timeout_ms=100)
            except Exception:  # a gauge is not worth failing the loop for
                continue
            if high is not None and pos is not None:
                lag += max(0, high - pos)
        self.metrics.lag.set(lag)

    def close(self) -> None:
        """Leave the group at once (a replica takes the partition without waiting for
        the session to time out), then let the producer deliver what it holds."""
        for name, client in (("consumer", self.consumer), ("producer", self.producer)):
            if client is None:
                continue
            try:
                client.close()
            except Exception as exc:
                log.warning("%s: closing the %s: %s", self.name, name, exc)
        self.consumer = self.producer = None
