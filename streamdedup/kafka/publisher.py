"""The transactional Kafka producer the worker publishes each batch through (`Sink`),
and the seam it plugs into (`BatchSink`, which `replay`'s file sink implements too).
It owns what exactly-once publishing needs from Kafka: one transaction per batch
holding the verdicts, the dead letters, the changelog records and the consumer
offsets; every blocking client call bounded in time (`_bounded`); every record
acknowledged before the commit (`all_delivered`); a producer whose transaction's
outcome is unknown replaced, fencing the old one; the transactional id that makes
the fencing work across restarts (`TransactionalId`).  It holds no reference to the
worker: what it needs from the loop comes in through its constructor.
"""

from __future__ import annotations

import hashlib
import logging
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from streamdedup import failpoints, kernels
from streamdedup.errors import StreamDedupError, TransactionStuckError, UndeliveredError
from streamdedup.kafka.membership import offsets_metadata
from streamdedup.kafka.messages import (
    Outgoing,
    dead_letter_headers,
    fit_dead_letter,
    fits,
    too_large_to_keep,
    verdict_payload,
)
from streamdedup.kafka.settings import PRODUCER_DEFAULTS
from streamdedup.models import Rejected, Verdict
from streamdedup.store.tables import Tables
from streamdedup.worker_config import WorkerConfig

log = logging.getLogger("streamdedup.kafka.worker")


class BatchSink:
    """Where a batch's verdicts go: the seam the worker's loop publishes through.
    The worker calls `open` once connected, `in_index_transaction` inside the batch's
    LMDB write transaction (which may run it twice: see `BatchApplier`), `publish`
    after it, `abort` and `settle` when publishing failed, `close` on stopping.  This
    base does nothing at each step; `Sink` is Kafka, `replay` has a file sink."""

    def open(self, common: dict[str, Any]) -> None:
        """Connect (`common`: the client settings every Kafka client shares)."""

    def in_index_transaction(self, t: Tables, out: list[Outgoing]) -> None:
        """Runs inside the batch's LMDB write transaction (a file sink writes here)."""

    def publish(self, out: list[Outgoing], next_offsets: dict[int, int]) -> None:
        """Send the batch out; `next_offsets`: the input offsets to commit with it."""

    def abort(self) -> None:
        """The batch could not be published: drop what `publish` began."""

    def settle(self) -> None:
        """Before the group's committed offsets are read again: nothing undecided."""

    def close(self) -> None:
        """Release what `open` took."""


class Sink(BatchSink):
    """Where a batch's verdicts go.  This one: Kafka, in one transaction with the
    consumer offsets (and the changelog, if any).  `replay` has a file sink too.

    It knows nothing of the worker: what it needs from the loop comes through its
    constructor -- the transactional id (asked for when the producer is created,
    as it takes a lock file in the index), the consumer's group metadata (for
    `send_offsets_to_transaction`), the batch's changelog records, and the index's
    id that tags the committed offsets."""

    def __init__(
        self,
        cfg: WorkerConfig,
        *,
        transactional_id: Callable[[], str],
        group_metadata: Callable[[], Any],
        changelog: Callable[[], list[tuple[bytes, bytes | None]]] = list,
        index_id: Callable[[], str | None] = lambda: None,
    ) -> None:
        self.cfg = cfg
        self._transactional_id = transactional_id
        self._group_metadata = group_metadata
        self._changelog = changelog
        self._index_id = index_id
        self.producer: Any = None
        self._common: dict[str, Any] = {}
        self._broken = False

    def open(self, common: dict[str, Any]) -> None:
        from kafka import KafkaProducer

        self._common = common
        self.producer = KafkaProducer(
            **common,
            transactional_id=self._transactional_id(),
            **{**PRODUCER_DEFAULTS, **self.cfg.producer_options},
        )
        # Fences an earlier producer with this id and settles its open transaction.
        _bounded(self.producer.init_transactions, self.cfg.transaction_timeout_s)
        self._broken = False

    def publish(self, out: list[Outgoing], next_offsets: dict[int, int]) -> None:
        from kafka import TopicPartition
        from kafka.structs import OffsetAndMetadata

        if self._broken:
            self._reopen()
        cfg, producer = self.cfg, self.producer
        producer.begin_transaction()
        keys = [str(o.item.id).encode() if isinstance(o.item, Verdict) else b"" for o in out]
        partitions = self._partitions(cfg.output_topic, keys)
        sent: list[Any] = []  # each record's future, checked before the commit
        limit = int(getattr(producer, "config", {}).get("max_request_size", 1 << 20))

        def send(topic: str, **record: Any) -> None:
            sent.append(producer.send(topic, **record))

        def dead_letter(o: Outgoing, why: Rejected) -> None:
            if cfg.dead_letter_topic:
                headers = dead_letter_headers(why, cfg.input_topic, o.partition, o.offset)
                key, value, headers = fit_dead_letter(o.key, o.value, headers, limit)
                send(cfg.dead_letter_topic, key=key, value=value, headers=headers)

        for i, o in enumerate(out):
            if isinstance(o.item, Rejected):
                dead_letter(o, o.item)
            elif o.item is not None:
                send(
                    cfg.output_topic,
                    key=keys[i],
                    value=verdict_payload(
                        o.item, cfg.input_topic, o.partition, o.offset, cfg.output_format
                    ),
                    partition=None if partitions is None else partitions[i],
                )
                if cfg.keep_topic and o.item.verdict == "unique":
                    if fits(o.key, o.value, o.headers, limit):
                        send(cfg.keep_topic, key=o.key, value=o.value, headers=list(o.headers))
                    else:  # (over the producer's limit it would fail every retry)
                        dead_letter(o, too_large_to_keep(o, limit))
        if cfg.changelog_topic:
            records = self._changelog()
            at = self._partitions(cfg.changelog_topic, [key for key, _ in records])
            for i, (key, value) in enumerate(records):
                send(
                    cfg.changelog_topic,
                    key=key,
                    value=value,
                    partition=None if at is None else at[i],
                )
        # the index's id goes with the offsets: a worker on another index refuses them
        tag = offsets_metadata(self._index_id())
        offsets = {
            TopicPartition(cfg.input_topic, p): OffsetAndMetadata(off, tag, -1)
            for p, off in next_offsets.items()
        }
        try:
            # the batch's records go out now, whatever linger_ms says
            _bounded(producer.flush, cfg.transaction_timeout_s)
            all_delivered(sent)
            failpoints.reach("verdicts-sent")
            _bounded(
                lambda: producer.send_offsets_to_transaction(offsets, self._group_metadata()),
                cfg.transaction_timeout_s,
            )
            failpoints.reach("offsets-sent", before=producer.flush)
            # kafka-python waits for the commit without a time limit, and a connection
            # lost at the wrong moment can leave it waiting for good: bound it.
            _bounded(producer.commit_transaction, cfg.transaction_timeout_s)
        except TransactionStuckError:
            self._broken = True  # the outcome is unknown: the next producer settles it
            raise

    def _partitions(self, topic: str, keys: list[bytes]) -> list[int] | None:
        """The partition of each keyed record, as kafka-python's default partitioner
        would pick it, for the whole batch in C: its murmur2 is Python, a quarter of the
        cost of each send (measured).  None: leave it to the producer."""
        if kernels.native is None or "partitioner" in self.cfg.producer_options:
            return None
        ordered = sorted(self.producer.partitions_for(topic) or ())
        if not ordered:
            return None
        return [ordered[i] for i in kernels.native.kafka_partitions(keys, len(ordered))]

    def abort(self) -> None:
        """Abort the open transaction; if that fails, the producer is replaced (a new
        one with the same transactional id fences it and settles the transaction)."""
        if self._broken:
            return
        try:
            _bounded(self.producer.abort_transaction, self.cfg.transaction_timeout_s)
        except Exception as exc:
            log.warning("abort failed (%s); the producer will be re-created", exc)
            self._broken = True

    def settle(self) -> None:
        """Make sure no transaction of ours is still undecided (so the group's committed
        offsets are final): replace a broken producer now."""
        if self._broken:
            self._reopen()

    def _reopen(self) -> None:
        log.info("re-creating the transactional producer")
        old, self.producer = self.producer, None
        if old is not None:  # closing a wedged producer may block: not on this thread
            threading.Thread(target=old.close, kwargs={"timeout": 5}, daemon=True).start()
        self.open(self._common)

    def close(self) -> None:
        if self.producer is not None:
            producer, self.producer = self.producer, None
            producer.close(timeout=10)


class TransactionalId:
    """The producer's transactional id, made on first use: stable across restarts (a
    restarted worker fences its dead predecessor and aborts its open transaction at
    once), distinct between the processes sharing an index: group, host, index, and
    a slot held with a lock file in the index for the life of the process.  The
    configured --transactional-id, if any, instead."""

    def __init__(self, cfg: WorkerConfig, index_path: Path) -> None:
        self.cfg = cfg
        self.index_path = index_path
        self._txn_id: str | None = None
        self._slot_file: Any = None

    def __call__(self) -> str:
        if self.cfg.transactional_id:
            return self.cfg.transactional_id
        if self._txn_id is None:
            where = hashlib.blake2b(str(self.index_path.resolve()).encode(), digest_size=6)
            slot = self._take_slot()
            self._txn_id = (
                f"streamdedup-{self.cfg.group_id}-{socket.gethostname()}-{where.hexdigest()}-{slot}"
            )
        return self._txn_id

    def _take_slot(self) -> int:
        import fcntl

        for slot in range(1024):
            fh = open(self.index_path / f"worker-{slot}.lock", "a+b")  # noqa: SIM115
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                fh.close()
                continue
            self._slot_file = fh  # held for the life of the process
            return slot
        raise StreamDedupError("more than 1024 workers share this index")


def all_delivered(futures: list[Any]) -> None:
    """After the flush, every record sent in the transaction must be acknowledged.
    kafka-python fails a produce batch that ran out of retries or of its delivery
    timeout without marking the transaction as failed, so the commit would go through
    without those records (and the offsets with it): verdicts lost."""
    for f in futures:
        if not f.succeeded():
            reason = f.exception if f.failed() else "no answer after the flush"
            raise UndeliveredError(f"a record of the batch was not delivered: {reason}")


def _bounded(call: Callable[[], Any], timeout_s: float) -> Any:
    """Run a blocking Kafka client call with a time limit (on a helper thread, left
    behind if it never returns); its exceptions are re-raised here."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = call()
        except BaseException as exc:  # handed to the caller
            box["error"] = exc

    thread = threading.Thread(target=run, name="streamdedup-kafka-call", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        raise TransactionStuckError(f"no answer from Kafka within {timeout_s:.0f}s")
    if "error" in box:
        raise box["error"]
    return box.get("value")
