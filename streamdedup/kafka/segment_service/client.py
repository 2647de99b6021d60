"""The writer's side of remote sealed segments: `RemoteSegments` and its readers.

`RemoteSegments(link).reader(entry)` gives the engine a `SegmentReader` for one
remote sealed segment: `submit(request, payload)` sends the probe to the segment's
probe topic (key = request id) and returns a waiter, a callable that blocks until the
answer's bytes are there.  All readers share one producer and one consumer; the
consumer is assigned by hand to the answer topics (no group: a writer reads every
answer of its own probes) and is owned by one background thread, which files each
answer under its request id -- kafka-python consumers are not thread-safe, the
producer is.

A waiter never gives up on a segment (a verdict decided without one segment would
differ from the single index's): after `timeout_s` without an answer it logs a
warning naming the segment, counts a stall, reports the segment stalled (the
worker's `/readyz` fails) and sends the probe again -- a replica that joined after a
dead server took the first copy answers the new one -- and keeps waiting.  Only a
stop (`interrupt`, `close`, the `stop` event) ends the wait, with
`SegmentWaitInterrupted`.  Answers to requests nobody waits for (a probe answered
twice, by a replica and after a redelivery; answers meant for an earlier writer
process) are dropped.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from streamdedup.errors import (
    BrokerUnavailableError,
    ConfigError,
    RemoteSegmentError,
    SegmentWaitInterrupted,
)
from streamdedup.kafka.segment_service.wire import (
    ERROR_HEADER,
    WRITER_HEADER,
    SegmentLink,
    SegmentTopics,
    consumer_settings,
    ensure_topics,
    producer_settings,
)
from streamdedup.kafka.settings import wait_for_broker
from streamdedup.ops.logs import KafkaRefusals
from streamdedup.ops.metrics import SegmentClientMetrics
from streamdedup.store.segment.registry import SegmentEntry

__all__ = ["RemoteReader", "RemoteSegments"]

log = logging.getLogger("streamdedup.kafka.segments")

DEFAULT_TIMEOUT_S = 10.0
# how often the poll thread looks for readers added since (and for a stop)
POLL_MS = 100
# the slice a waiter sleeps before it looks at the stop signals again
WAIT_SLICE_S = 0.5


@dataclass
class _Pending:
    """One probe awaiting its answer."""

    segment: _Segment
    request: str
    payload: bytes
    sent: float  # monotonic time of the first send
    done: threading.Event = field(default_factory=threading.Event)
    answer: bytes | None = None
    error: BaseException | None = None


@dataclass
class _Segment:
    entry: SegmentEntry
    topics: SegmentTopics
    label: str  # the metrics label: the segment number
    name: str  # for the logs: number and id
    ready: threading.Event = field(default_factory=threading.Event)
    pending: int = 0
    last_answer_s: float | None = None
    stalled_since: float | None = None


class RemoteReader:
    """The `SegmentReader` of one remote sealed segment."""

    def __init__(self, owner: RemoteSegments, segment: _Segment) -> None:
        self._owner = owner
        self._segment = segment
        self.entry = segment.entry

    def submit(self, request: str, payload: bytes) -> Callable[[], bytes]:
        return self._owner._submit(self._segment, request, payload)

    @property
    def last_answer_s(self) -> float | None:
        """Round trip of this segment's last answered probe (None before the first)."""
        return self._segment.last_answer_s

    def close(self) -> None:
        """Nothing of its own: the shared clients close with `RemoteSegments.close`."""


class RemoteSegments:
    """The writer's connection to its remote sealed segments (see the module
    docstring).  `timeout_s`: `--segment-timeout`; `stop`: an event that ends every
    wait (the worker's stop event: SIGTERM does not hang on a dead segment)."""

    def __init__(
        self,
        link: SegmentLink,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        metrics: SegmentClientMetrics | None = None,
        stop: threading.Event | None = None,
    ) -> None:
        if timeout_s <= 0:
            raise ConfigError(
                "`timeout_s` must be above 0", params={"timeout_s": "--segment-timeout"}
            )
        self.link = link
        self.timeout_s = timeout_s
        self.metrics = metrics
        self._stop = stop or threading.Event()
        self._closing = threading.Event()
        self._lock = threading.Lock()
        self._pending: dict[str, _Pending] = {}
        self._segments: dict[str, _Segment] = {}  # by answer topic
        self._readers: dict[str, RemoteReader] = {}  # by segment id
        self._producer: Any = None
        self._consumer: Any = None
        self._thread: threading.Thread | None = None
        self._failure: BaseException | None = None  # what stopped the poll thread
        # names this writer on its probes: a server judges a probe's age only against
        # this writer's own later probes (one clock: server.py)
        self._writer = uuid.uuid4().hex.encode()

    # ------------------------------------------------------------------ readers

    def reader(self, entry: SegmentEntry) -> RemoteReader:
        """The reader of `entry`'s segment; its answer topic is read from its end on
        before this returns, so no answer to a probe sent after it can be missed."""
        with self._lock:
            known = self._readers.get(entry.id)
        if known is not None:
            return known
        self._start()
        topics = self.link.topics(entry.id)
        from kafka.errors import KafkaError

        try:
            ensure_topics(self.link, topics)
        except KafkaError as exc:  # refused: authentication, no right to create topics
            raise BrokerUnavailableError(
                f"cannot create or find the topics of segment {entry.number} ({entry.id}) "
                f"on {self.link.bootstrap_servers}: {exc}"
            ) from exc
        segment = _Segment(entry, topics, str(entry.number), f"segment {entry.number} ({entry.id})")
        with self._lock:
            self._segments[topics.answers] = segment
        deadline = time.monotonic() + self.link.connect_timeout_s
        while not segment.ready.wait(WAIT_SLICE_S):
            self._check_alive()
            if self._stop.is_set() or self._closing.is_set():
                raise SegmentWaitInterrupted(f"stopped while opening {segment.name}")
            if time.monotonic() > deadline:
                raise BrokerUnavailableError(
                    f"the answer topic of {segment.name} ({topics.answers}) could not be "
                    f"read within {self.link.connect_timeout_s:.0f}s"
                )
        reader = RemoteReader(self, segment)
        with self._lock:
            self._readers[entry.id] = reader
        return reader

    def latencies(self) -> dict[int, float | None]:
        """Per segment number, the round trip of its last answered probe (for `stats`)."""
        with self._lock:
            return {int(s.label): s.last_answer_s for s in self._segments.values()}

    def stalled(self) -> list[str]:
        """The segments waited for longer than the timeout right now."""
        with self._lock:
            return [s.name for s in self._segments.values() if s.stalled_since is not None]

    # ------------------------------------------------------------------ probes

    def _submit(self, segment: _Segment, request: str, payload: bytes) -> Callable[[], bytes]:
        self._check_alive()
        p = _Pending(segment, request, payload, time.monotonic())
        with self._lock:
            if request in self._pending:
                raise RemoteSegmentError(f"request id {request!r} is already waiting")
            self._pending[request] = p
            segment.pending += 1
            self._gauge(segment)
        self._send(p)
        return lambda: self._wait(p)

    def _send(self, p: _Pending) -> None:
        from kafka.errors import KafkaError, MessageSizeTooLargeError

        def failed(exc: BaseException) -> None:
            # on the producer's I/O thread: mark, never block.  Too large is for good;
            # anything else is retried by the next send of the waiter.
            if isinstance(exc, MessageSizeTooLargeError):
                self._finish(
                    p,
                    error=RemoteSegmentError(
                        f"the probe for {p.segment.name} ({len(p.payload)} bytes) is larger "
                        f"than the producer or broker accepts ({exc}): use smaller batches"
                    ),
                )
            else:
                log.warning("sending a probe to %s failed: %s", p.segment.name, exc)

        try:
            future = self._producer.send(
                p.segment.topics.probes,
                key=p.request.encode(),
                value=p.payload,
                headers=[(WRITER_HEADER, self._writer)],
            )
        except KafkaError as exc:  # raised at once: too large, no metadata in time
            failed(exc)
            return
        future.add_errback(failed)

    def _wait(self, p: _Pending) -> bytes:
        deadline = p.sent + self.timeout_s
        while True:
            if p.done.wait(min(WAIT_SLICE_S, max(0.0, deadline - time.monotonic()))):
                break
            if self._stop.is_set() or self._closing.is_set():
                self._forget(p)
                raise SegmentWaitInterrupted(
                    f"stopped while waiting for {p.segment.name} to answer a probe: "
                    "the batch was not decided (it is processed again on the next start)"
                )
            self._check_alive()
            if time.monotonic() >= deadline:
                self._stalled(p)
                self._send(p)
                deadline = time.monotonic() + self.timeout_s
        if p.error is not None:
            raise p.error
        assert p.answer is not None
        return p.answer

    def _stalled(self, p: _Pending) -> None:
        s = p.segment
        waited = time.monotonic() - p.sent
        why = (
            f"{s.name} has not answered a probe for {waited:.0f}s: is a "
            f"`streamdedup segment-server` running for it (consumer group {s.topics.group!r})?"
        )
        log.warning("%s; sending the probe again and waiting", why)
        with self._lock:
            if s.stalled_since is None:
                s.stalled_since = p.sent
        if self.metrics is not None:
            self.metrics.stall(s.label, why)

    # ------------------------------------------------------------------ answers

    def _file(self, message: Any) -> None:
        """On the poll thread: an answer arrived."""
        request = message.key.decode(errors="replace") if message.key is not None else None
        with self._lock:
            p = self._pending.get(request) if request is not None else None
        if p is None:
            return  # a duplicate, or an answer to an earlier process's probe
        error = None
        for key, value in message.headers or ():
            if key == ERROR_HEADER:
                error = RemoteSegmentError(
                    f"the server of {p.segment.name} could not answer: "
                    f"{value.decode(errors='replace')}"
                )
        if error is not None:
            self._finish(p, error=error)
        else:
            self._finish(p, answer=message.value or b"")

    def _finish(
        self, p: _Pending, *, answer: bytes | None = None, error: BaseException | None = None
    ) -> None:
        s = p.segment
        since: float | None = None
        latency = time.monotonic() - p.sent
        with self._lock:
            if self._pending.pop(p.request, None) is None:
                return
            s.pending -= 1
            self._gauge(s)
            if error is None:
                s.last_answer_s = latency
                since, s.stalled_since = s.stalled_since, None
        p.answer, p.error = answer, error
        p.done.set()
        if error is not None:
            return
        if self.metrics is not None:
            self.metrics.answered(s.label, latency)
            if since is not None:
                self.metrics.recovered(s.label)
        if since is not None:
            log.info("%s answered again after %.1fs", s.name, time.monotonic() - since)

    def _forget(self, p: _Pending) -> None:
        with self._lock:
            if self._pending.pop(p.request, None) is not None:
                p.segment.pending -= 1
                self._gauge(p.segment)

    def _gauge(self, s: _Segment) -> None:
        """Under the lock."""
        if self.metrics is not None:
            self.metrics.set_pending(s.label, s.pending)

    # ------------------------------------------------------------------ clients

    def _start(self) -> None:
        """The producer, the consumer and the poll thread, on the first reader."""
        with self._lock:
            if self._thread is not None:
                return
            from kafka import KafkaConsumer, KafkaProducer
            from kafka.errors import (
                KafkaConfigurationError,
                KafkaConnectionError,
                KafkaError,
                KafkaTimeoutError,
            )

            wait_for_broker(self.link.bootstrap_servers, self.link.connect_timeout_s)
            refusals = KafkaRefusals.install()
            refusals.reset()
            try:
                self._producer = KafkaProducer(**producer_settings(self.link, compress=False))
                self._consumer = KafkaConsumer(
                    **consumer_settings(self.link),
                    group_id=None,
                    auto_offset_reset="latest",
                )
            except (KafkaTimeoutError, KafkaConnectionError) as exc:
                raise BrokerUnavailableError(
                    refusals.explain(self.link.bootstrap_servers, exc)
                ) from exc
            except (KafkaConfigurationError, TypeError, ValueError, AssertionError) as exc:
                raise ConfigError(f"Kafka client settings rejected: {exc}") from exc
            except KafkaError as exc:  # refused: authentication, TLS
                raise BrokerUnavailableError(
                    refusals.explain(self.link.bootstrap_servers, exc)
                ) from exc
            self._thread = threading.Thread(
                target=self._poll_loop, name="streamdedup-segment-answers", daemon=True
            )
            self._thread.start()

    def _poll_loop(self) -> None:
        from kafka.errors import KafkaError

        try:
            while not self._closing.is_set():
                try:
                    self._assign()
                    batches = self._consumer.poll(timeout_ms=POLL_MS)
                except KafkaError as exc:
                    log.warning("reading segment answers: %s; retrying", exc)
                    self._closing.wait(1.0)
                    continue
                for messages in batches.values():
                    for message in messages:
                        self._file(message)
        except BaseException as exc:  # reported to every waiter, not lost in a thread
            log.error("the segment answer reader stopped: %s", exc, exc_info=True)
            self._failure = exc

    def _assign(self) -> None:
        """Add the answer partitions of readers created since, positioned at their
        end (resolved now, before `reader` returns and a probe can be sent)."""
        from kafka import TopicPartition

        with self._lock:
            new = [s for s in self._segments.values() if not s.ready.is_set()]
            if not new:
                return
            wanted = [TopicPartition(t, 0) for t in self._segments]
        self._consumer.assign(wanted)
        for s in new:
            tp = TopicPartition(s.topics.answers, 0)
            self._consumer.seek_to_end(tp)
            self._consumer.position(tp)
            s.ready.set()

    def _check_alive(self) -> None:
        if self._failure is not None:
            raise RemoteSegmentError(
                f"the reader of segment answers stopped: {self._failure}"
            ) from self._failure

    def interrupt(self) -> None:
        """End every wait now (a signal handler may call it)."""
        self._stop.set()

    def close(self) -> None:
        """Stop the poll thread and close the clients; waiters still blocked raise
        `SegmentWaitInterrupted`."""
        self._closing.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        for name, client in (("consumer", self._consumer), ("producer", self._producer)):
            if client is None:
                continue
            try:
                client.close()
            except Exception as exc:
                log.warning("closing the segment %s: %s", name, exc)
        self._consumer = self._producer = None

    def __enter__(self) -> RemoteSegments:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
