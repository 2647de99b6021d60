"""`streamdedup worker`: Kafka in, verdicts out, exactly once.

This module owns the loop (`Worker`): binding the index to the consumer group,
connecting, polling, and driving each batch through the steps below, with its
failure handling (abort, rewind, back off, give up).  The steps themselves live next
to it, each in a module of its own: the ledger in the index (`ledger`), the
apply-and-record step (`applier`), its stats, metrics and warnings (`observer`), the
per-assignment position checks (`positions`), what goes on the wire (`messages`),
the transactional producer (`publisher`) and the Kafka client settings (`settings`).

One poll batch is one unit of work:

1. decode every message (undecodable ones are bound for the dead-letter topic);
2. in ONE LMDB write transaction: check and insert the new documents, record for
   each input partition the next offset applied, and keep each verdict under its
   source offset (only the latest batch's, per partition);
3. in ONE Kafka transaction: produce the verdicts, the dead letters and the index's
   changes (with --changelog-topic), and commit the consumer offsets
   (`send_offsets_to_transaction`);
4. with the next batch's index transaction (or when idle, or on stopping): record
   those offsets as published, so messages a broker hands out again after their
   transaction committed are skipped.

If the process dies between 2 and 3, Kafka redelivers the batch; its messages are
below the offsets the index recorded, so their stored verdicts are published again
instead of being checked again -- no document becomes a duplicate of itself, and a
read_committed consumer of the verdict topic sees exactly one verdict per message.
The other way round -- an index behind the group's offsets, restored from a backup --
is caught up without publishing again (`PositionCheck.check`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple

from streamdedup import failpoints
from streamdedup.engine.deduplicator import Deduplicator
from streamdedup.errors import (
    BrokerUnavailableError,
    ConfigError,
    TransactionStuckError,
    UndeliveredError,
    UnsafeToContinueError,
)
from streamdedup.kafka.applier import BatchApplier, select
from streamdedup.kafka.changelog import encode_changes, params_record
from streamdedup.kafka.ledger import Progress
from streamdedup.kafka.membership import IndexAssignor, JoinWatch, identity
from streamdedup.kafka.messages import Outgoing
from streamdedup.kafka.observer import WorkerObserver, WorkerStats
from streamdedup.kafka.positions import PositionCheck
from streamdedup.kafka.publisher import BatchSink, Sink, TransactionalId
from streamdedup.kafka.settings import (
    consumer_settings,
    wait_for_broker,
)
from streamdedup.models import Change
from streamdedup.ops.logs import KafkaRefusals
from streamdedup.ops.metrics import Metrics
from streamdedup.store.keys import MetaKey
from streamdedup.store.tables import Tables
from streamdedup.worker_config import WorkerConfig

# Names the other commands (cli/main.py, cli/demo.py) still import from here; their
# homes are streamdedup.config and streamdedup.kafka.settings.
__all__ = [
    "Assigned",
    "Worker",
    "WorkerStats",
]

log = logging.getLogger("streamdedup.kafka.worker")


def partition_list(tps: Any) -> str:
    """`topic[0], topic[1]` -- how logs name partitions (not kafka-python's reprs)."""
    return ", ".join(f"{tp.topic}[{tp.partition}]" for tp in sorted(tps))


class Assigned(NamedTuple):
    """What a loop that assigns its own partitions (`replay`) answers once the
    consumer exists: when it is done, and per partition the earliest message
    timestamp to keep (a broker may answer a time lookup with the start of the record
    batch holding it, as Tansu does: earlier messages are dropped by the loop)."""

    finished: Callable[[], bool]
    not_before_ms: dict[int, int]


class Worker:
    """The consume -> check -> publish loop.  The `worker` command subscribes to the
    consumer group; `replay` composes the same loop through the constructor: it
    assigns partitions itself (`assign`, called with the consumer, answers
    `Assigned`), may publish elsewhere (`sink`, a `BatchSink`; the default is the
    Kafka `Sink`) and follows progress (`on_batch`, called after each committed
    batch with the stats and the batch's messages)."""

    def __init__(
        self,
        cfg: WorkerConfig,
        dedup: Deduplicator,
        *,
        metrics: Metrics | None = None,
        sink: BatchSink | None = None,
        assign: Callable[[Any], Assigned] | None = None,
        on_batch: Callable[[WorkerStats, list[Outgoing]], None] | None = None,
    ) -> None:
        if dedup.params.item != "text" and cfg.input_format in ("raw", "html"):
            raise ConfigError(
                f"--input-format {cfg.input_format} carries a text; this index compares "
                f"{dedup.params.item} items: use json or msgpack records with a "
                f"{cfg.fields.item_field or dedup.params.item!r} field"
            )
        self.cfg = cfg
        self.dd = dedup
        self.observer = WorkerObserver(metrics, dedup.max_clock_skew_ms)
        self.stats = self.observer.stats
        self.metrics = metrics
        self.stop_event = threading.Event()
        self._join = JoinWatch()
        self.consumer: Any = None
        self.progress = Progress(cfg.group_id, cfg.input_topic)
        self.sink = sink if sink is not None else self._kafka_sink()
        self._assign = assign
        self._on_batch = on_batch
        self._finished: Callable[[], bool] = lambda: False
        self.positions = PositionCheck(cfg, dedup.index, self.progress, by_group=assign is None)
        # replay --from-timestamp: see `Assigned`
        self._not_before_ms: dict[int, int] = {}
        self._params_logged = False
        # present state of the documents a batch published again (see current_changes)
        self._republished: list[Change] = []
        # last offsets whose verdicts Kafka committed and the index does not record yet
        # as published: the next batch's write transaction records them, or
        # `record_published` when the worker is idle or stops
        self._unrecorded: dict[int, int] = {}
        self._failed_in_a_row = 0  # Kafka transactions, since the last one that committed
        # set by bind_index: this index's id and when it was bound to the group
        self.index_id: str | None = None
        self._assignor: IndexAssignor | None = None

    def _kafka_sink(self) -> Sink:
        """The transactional producer, given what it needs as callables: it keeps no
        reference to the worker."""
        return Sink(
            self.cfg,
            transactional_id=TransactionalId(self.cfg, self.dd.path),
            group_metadata=lambda: self.consumer.group_metadata(),
            changelog=self.changelog_records,
            index_id=lambda: self.index_id,
        )

    # ------------------------------------------------------------------ setup

    def bind_index(self) -> None:
        """An index serves one consumer group on one input topic: refuse anything else.
        (And one group is served by one index: see `streamdedup.kafka.membership`.)"""
        want = {"group_id": self.cfg.group_id, "input_topic": self.cfg.input_topic}

        def check(t: Tables) -> tuple[dict[str, str] | None, dict[str, Any]]:
            have = t.meta(MetaKey.BINDING)
            if have is None:
                t.set_meta(MetaKey.BINDING, want)
            if self.cfg.changelog_topic and (have is None or have == want):
                # From now on only writers of this changelog may add to the index
                # (`engine.check_changelog`): `dedup` and `replay` are refused.
                t.set_meta(MetaKey.CHANGELOG, {"topic": self.cfg.changelog_topic, **want})
            return have, identity(t, fresh=have is None)

        have, ident = self.dd.write(check)
        self.index_id = str(ident["id"])
        self._assignor = IndexAssignor(
            self.cfg.group_id,
            self.index_id,
            float(ident["bound_at"]),
            self.dd.path,
        )
        self.positions.ancestors = frozenset(map(str, ident.get("restored_from") or ()))
        if have is not None and have != want:
            raise ConfigError(
                f"index {self.dd.path} belongs to consumer group {have['group_id']!r} "
                f"on topic {have['input_topic']!r}; this worker was started for group "
                f"{want['group_id']!r} on topic {want['input_topic']!r}. One index serves "
                "one consumer group and input topic: use another --index."
            )

    def connect(self) -> None:
        from kafka import KafkaConsumer
        from kafka.errors import KafkaConfigurationError, KafkaConnectionError, KafkaTimeoutError

        wait_for_broker(self.cfg.bootstrap_servers, self.cfg.connect_timeout_s)
        common = {"bootstrap_servers": self.cfg.bootstrap_servers, "client_id": self.cfg.client_id}
        refusals = KafkaRefusals.install()  # kafka-python only logs why it was refused
        refusals.reset()
        try:
            self.sink.open(common)
            settings = consumer_settings(self.cfg)
            if self._assign is None and self._assignor is not None:
                settings["partition_assignment_strategy"] = [self._assignor]
            self.consumer = KafkaConsumer(**common, **settings)
        except (KafkaTimeoutError, KafkaConnectionError, TransactionStuckError) as exc:
            raise BrokerUnavailableError(refusals.explain(self.cfg.bootstrap_servers, exc)) from exc
        except (KafkaConfigurationError, TypeError, AssertionError) as exc:
            # kafka-python checks its settings with asserts and exceptions of its own
            raise ConfigError(f"Kafka client settings rejected: {exc}") from exc
        if self._assign is not None:
            self._finished, self._not_before_ms = self._assign(self.consumer)
            return
        from kafka import ConsumerRebalanceListener

        checked = self.positions.checked
        join = self._join

        class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
            # Runs on kafka-python's I/O thread: log and mark, never block.  A batch in
            # flight when partitions move fails its commit and is aborted and rewound.
            def on_partitions_revoked(self, revoked: Any) -> None:
                if revoked:
                    log.info("partitions revoked: %s", partition_list(revoked))
                for tp in revoked:
                    checked.discard(tp.partition)

            def on_partitions_assigned(self, assigned: Any) -> None:
                join.joined()
                log.info(
                    "joined consumer group %r; partitions assigned: %s",
                    group,
                    partition_list(assigned) or "none (more members than partitions)",
                )
                for tp in assigned:
                    checked.discard(tp.partition)

        group = self.cfg.group_id
        self.consumer.subscribe([self.cfg.input_topic], listener=Listener())
        log.info(
            "joining consumer group %r on topic %r (session timeout %.0fs)",
            group,
            self.cfg.input_topic,
            self.consumer.config["session_timeout_ms"] / 1000,
        )

    # ------------------------------------------------------------------ the loop

    def run(self) -> WorkerStats:
        if self._assign is None:
            self.bind_index()
        self.connect()
        self._join.start(self.consumer.config)
        idle_since = time.monotonic()
        try:
            while not self.stop_event.is_set():
                if self.metrics is not None:
                    self.metrics.heartbeat()
                if self._finished():
                    break
                records = self._poll()
                if self._assignor is not None and self._assignor.refusal is not None:
                    raise UnsafeToContinueError(self._assignor.refusal)
                rewound = self.positions.check(
                    self.consumer, records, self._unrecorded, self.index_id
                )
                records = {tp: m for tp, m in records.items() if tp.partition not in rewound}
                if not self.consumer.assignment():
                    idle_since = time.monotonic()  # still joining the group: not idle
                    if self._assign is None:
                        bounded = self.cfg.idle_exit_s is not None
                        self._join.check(self.cfg.group_id, bounded=bounded)
                if records:
                    self.process(records)
                    idle_since = time.monotonic()
                else:
                    self.record_published()
                self.observer.update_gauges(self.consumer, self.dd.indexed, self.dd.file_bytes)
                idle = time.monotonic() - idle_since
                if (
                    not records
                    and self.cfg.idle_exit_s is not None
                    and idle >= self.cfg.idle_exit_s
                ):
                    break
        finally:
            self.close()
        return self.stats

    def _poll(self) -> Any:
        from kafka.errors import InconsistentGroupProtocolError

        try:
            return self.consumer.poll(timeout_ms=self.cfg.poll_timeout_ms)
        except InconsistentGroupProtocolError as exc:
            raise UnsafeToContinueError(
                f"consumer group {self.cfg.group_id!r} has members that join with another "
                "partition assignor than this worker's (streamdedup-index, which checks "
                "that the group's workers share one index): workers of an older streamdedup "
                "version, or other consumers, are in the group. Nothing was processed. "
                "Stop them, then start this one (upgrade every worker of a group together)."
            ) from exc

    def process(self, records: dict[Any, list[Any]]) -> None:
        from kafka.errors import KafkaError

        started = time.perf_counter()
        prog = self.progress
        applied, published = self.dd.read(
            lambda t: (Progress.read(t, prog.applied), Progress.read(t, prog.published))
        )
        published = Progress.past(published, self._unrecorded)
        batch, skipped = select(records, published, self._not_before_ms)
        self.stats.skipped += skipped
        if not batch:
            return
        applier = BatchApplier(
            batch,
            progress=prog,
            applied=applied,
            unrecorded=dict(self._unrecorded),
            silent_until=self.positions.silent_until,
            sink=self.sink,
            input_format=self.cfg.input_format,
            fields=self.cfg.fields.for_params(self.dd.params),
            changelog=bool(self.cfg.changelog_topic),
            changed_others=lambda: self.dd.changed_others,
        )
        prepared = self.dd.prepare(applier.documents())
        self.dd.apply(prepared, in_transaction=applier)
        out, to_decide, first, last = applier.out, applier.to_decide, applier.first, applier.last
        if self.cfg.changelog_topic:
            self._republished = applier.republished
        self._unrecorded.clear()
        if self.dd.outliers:
            self.observer.warn_outliers(
                [(to_decide[i][0], to_decide[i][1], ts) for i, ts in self.dd.outliers]
            )
        failpoints.reach("index-written")
        next_offsets = {p: off + 1 for p, off in last.items()}
        try:
            self.sink.publish(out, next_offsets)
        except (KafkaError, TransactionStuckError, UndeliveredError) as exc:
            log.warning("transaction failed (%s); aborting, the batch will be redelivered", exc)
            self.sink.abort()
            self._failed(exc)
            self._rewind(first)
            return
        if self._failed_in_a_row:
            if self._failed_in_a_row >= self.cfg.unhealthy_after_failures:
                log.info("a transaction committed again, after %d failed", self._failed_in_a_row)
            self._failed_in_a_row = 0
            if self.metrics is not None:
                self.metrics.trouble(None)
        self._params_logged = bool(self.cfg.changelog_topic)
        failpoints.reach("committed")
        # Recorded with the next batch (or when idle, or on close) rather than in a
        # transaction of its own: processes sharing the index each waited for the
        # other's whole batch transaction just to write this (measured: a tenth of a
        # process's time).  Until then it is kept here; a crash in between leaves the
        # index as a crash before this line always could (see the failpoint tests).
        for p, off in last.items():
            self._unrecorded[p] = max(self._unrecorded.get(p, -1), off)
        log.debug(
            "committed a batch of %d messages in %.3fs; next offsets %s",
            len(out),
            time.perf_counter() - started,
            next_offsets,
            extra={"batch_messages": len(out)},  # bench/bench_worker.py clocks by these
        )
        self.observer.count(out, applied, time.perf_counter() - started, self.dd.last_batch)
        if self._on_batch is not None:
            self._on_batch(self.stats, out)

    def _failed(self, exc: Exception) -> None:
        """Count a failed Kafka transaction.  A batch that fails every time it is
        redelivered (a record the broker or the producer refuses) would otherwise keep
        the loop turning, /healthz green, and nothing committed, for good: after
        `unhealthy_after_failures` in a row /healthz answers 503 (a supervisor restarts
        the process, which may clear a client-side fault) and the log says why; after
        `stop_after_failures` the worker stops (exit 7).  Retries back off, up to 5 s."""
        n = self._failed_in_a_row = self._failed_in_a_row + 1
        cfg = self.cfg
        if n >= cfg.stop_after_failures:
            raise UnsafeToContinueError(
                f"{n} Kafka transactions in a row failed, the last with: {exc}. Nothing "
                "was committed since (the batch stays unpublished and will be redelivered "
                "to the next worker). If the brokers are down, start the worker again once "
                "they answer; if a record is refused (a verdict or dead letter over the "
                "broker's or the producer's size limits, an authorization error), fix "
                "that setting (--producer-option max_request_size=..., the topics' "
                "max.message.bytes, ACLs) and start the worker again."
            )
        if n >= cfg.unhealthy_after_failures:
            why = f"{n} Kafka transactions in a row failed, the last with: {exc}"
            log.error("%s; reporting unhealthy on /healthz", why)
            if self.metrics is not None:
                self.metrics.trouble(why)
        if n >= 2:
            self.stop_event.wait(min(0.25 * 2 ** (n - 2), 5.0))

    def changelog_records(self) -> list[tuple[bytes, bytes | None]]:
        """The last batch's index changes, for the changelog topic; until a transaction
        with them commits, also the index parameters a restore needs."""
        records = encode_changes(self._republished + self.dd.changes)
        if not self._params_logged:
            records.append(params_record(self.dd.params))
        return records

    def _rewind(self, first: dict[int, int]) -> None:
        """After a failed transaction, go back to the group's committed offsets: a
        commit whose answer was lost may have gone through (then the batch must not be
        published again), or not (then it must be).  Until Kafka answers, wait."""
        from kafka import TopicPartition
        from kafka.errors import KafkaError

        tps = [TopicPartition(self.cfg.input_topic, p) for p in first]
        delay = 0.5
        while not self.stop_event.is_set():
            try:
                self.sink.settle()
                for tp in tps:
                    if tp not in self.consumer.assignment():
                        continue
                    committed = self.consumer.committed(tp)
                    self.consumer.seek(tp, first[tp.partition] if committed is None else committed)
                return
            except (KafkaError, TransactionStuckError) as exc:
                log.warning("Kafka not answering (%s); retrying in %.0fs", exc, delay)
                if self.metrics is not None:
                    self.metrics.heartbeat()  # waiting for the broker is not being stuck
                self.stop_event.wait(delay)
                delay = min(delay * 2, 15.0)

    def record_published(self) -> None:
        """Write down the published offsets the index does not hold yet."""
        if self._unrecorded:
            last = dict(self._unrecorded)
            self.dd.write(lambda t: Progress.advance(t, self.progress.published, last))
            self._unrecorded.clear()

    def close(self) -> None:
        for name, closer in (
            ("index", self.record_published),
            ("consumer", self._close_consumer),
            ("producer", self.sink.close),
        ):
            try:
                closer()
            except Exception as exc:
                log.warning("closing the %s: %s", name, exc)

    def _close_consumer(self) -> None:
        if self.consumer is not None:
            self.consumer.close()
