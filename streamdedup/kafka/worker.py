"""`streamdedup worker`: Kafka in, verdicts out, exactly once.

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
is caught up without publishing again (`Worker._check_positions`).
"""

from __future__ import annotations

import bisect
import contextlib
import datetime as dt
import hashlib
import logging
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import msgpack
import orjson

from streamdedup.config import Fields
from streamdedup.engine.deduplicator import Deduplicator
from streamdedup.errors import (
    EXIT_BROKER,
    BrokerUnavailableError,
    ConfigError,
    StreamDedupError,
    TransactionStuckError,
    UndeliveredError,
    UnsafeToContinueError,
)
from streamdedup.inputs.decode import decode_message
from streamdedup.kafka.changelog import current_changes, encode_changes, params_record
from streamdedup.kafka.membership import IndexAssignor, identity, index_of_offsets, offsets_metadata
from streamdedup.models import Change, Document, Rejected, Verdict
from streamdedup.ops import failpoints
from streamdedup.ops.logs import KafkaRefusals
from streamdedup.ops.metrics import Metrics
from streamdedup.sketch import kernels
from streamdedup.store.index import Tables, id_key

log = logging.getLogger("streamdedup.kafka.worker")


@dataclass(frozen=True)
class WorkerConfig:
    bootstrap_servers: str
    input_topic: str
    output_topic: str
    dead_letter_topic: str | None
    group_id: str
    input_format: str = "json"
    output_format: str = "json"
    fields: Fields = field(default_factory=Fields)
    max_poll_records: int = 5000  # each batch pays two transactions: amortise them
    poll_timeout_ms: int = 500
    transactional_id: str | None = None
    client_id: str = "streamdedup"
    consumer_options: dict[str, Any] = field(default_factory=dict)
    producer_options: dict[str, Any] = field(default_factory=dict)
    connect_timeout_s: float = 60.0
    idle_exit_s: float | None = None  # stop after this long without messages (demo, tests)
    changelog_topic: str | None = None
    transaction_timeout_s: float = 60.0
    # Kafka transactions failed in a row (the same batch, redelivered each time): after
    # this many /healthz answers 503; after `stop_after_failures` the worker exits (7)
    unhealthy_after_failures: int = 5
    stop_after_failures: int = 50

    @classmethod
    def from_options(cls, values: dict[str, Any], **overrides: Any) -> WorkerConfig:
        """The configuration `worker` and `replay` build from their option values."""
        require_bootstrap(values)
        settings = connection_settings(values)
        fields: dict[str, Any] = {
            "bootstrap_servers": values["bootstrap_servers"],
            "input_topic": values["input_topic"],
            "output_topic": values.get("output_topic") or "",
            "dead_letter_topic": values["dead_letter_topic"],
            "group_id": values["group_id"],
            "input_format": values["input_format"],
            "output_format": values["output_format"],
            "fields": Fields.from_options(values),
            "max_poll_records": values["max_poll_records"],
            "transactional_id": values["transactional_id"],
            "client_id": values["client_id"],
            "consumer_options": {
                **settings,
                **parse_pairs(values["consumer_option"], "--consumer-option"),
            },
            "producer_options": {
                **settings,
                **parse_pairs(values["producer_option"], "--producer-option"),
            },
            "connect_timeout_s": values["connect_timeout"],
            "transaction_timeout_s": values["transaction_timeout"],
            "idle_exit_s": values.get("idle_exit"),
            "changelog_topic": values.get("changelog_topic"),
        }
        return cls(**{**fields, **overrides})


def require_bootstrap(values: dict[str, Any]) -> None:
    if not values.get("bootstrap_servers"):
        raise ConfigError("--bootstrap-servers is required (or STREAMDEDUP_BOOTSTRAP_SERVERS)")


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


class Outgoing(NamedTuple):
    """What one input message produces: a verdict, a dead letter, or (`item` None)
    nothing, when its verdict went out before the index was restored from a backup.
    (A tuple: one is built per message, at half a frozen dataclass's cost.)"""

    partition: int
    offset: int
    key: bytes | None
    value: bytes
    item: Verdict | Rejected | None


def verdict_payload(v: Verdict, topic: str, partition: int, offset: int, fmt: str) -> bytes:
    record = v.to_dict()
    record["source"] = {"topic": topic, "partition": partition, "offset": offset}
    if fmt == "msgpack":
        return msgpack.packb(record)  # type: ignore[no-any-return]
    return orjson.dumps(record)


def dead_letter_headers(
    r: Rejected, topic: str, partition: int, offset: int
) -> list[tuple[str, bytes]]:
    return [
        ("streamdedup.reason", r.reason.encode()),
        ("streamdedup.message", r.message.encode("utf-8", "replace")),
        ("streamdedup.source.topic", topic.encode()),
        ("streamdedup.source.partition", str(partition).encode()),
        ("streamdedup.source.offset", str(offset).encode()),
    ]


# Room left under the producer's max_request_size for what a record costs beyond its
# key, value and headers (the record batch header is 61 bytes; varints, request framing).
RECORD_MARGIN = 1024
# A dead letter's key longer than this is cut too (the id of a hostile message).
DEAD_LETTER_MAX_KEY = 1024


def fit_dead_letter(
    key: bytes | None, value: bytes | None, headers: list[tuple[str, bytes]], max_bytes: int
) -> tuple[bytes | None, bytes | None, list[tuple[str, bytes]]]:
    """A dead letter that fits in one produce request of at most `max_bytes`: the
    message as it came, or, when it would not fit, its key and value cut short and
    headers saying so (`streamdedup.truncated: true`, `streamdedup.original_size`: the
    value's length in bytes, `streamdedup.original_key_size` when the key was cut).
    A record over the producer's limit fails its whole transaction, every time the
    batch is redelivered: one oversized message would stop the worker for good."""
    from kafka.record.default_records import DefaultRecordBatchBuilder

    size = DefaultRecordBatchBuilder.estimate_size_in_bytes(key, value, headers)
    if size + RECORD_MARGIN <= max_bytes:
        return key, value, headers
    headers = [
        *headers,
        ("streamdedup.truncated", b"true"),
        ("streamdedup.original_size", str(len(value or b"")).encode()),
    ]
    if key is not None and len(key) > DEAD_LETTER_MAX_KEY:
        headers.append(("streamdedup.original_key_size", str(len(key)).encode()))
        key = key[:DEAD_LETTER_MAX_KEY]
    rest = DefaultRecordBatchBuilder.estimate_size_in_bytes(key, b"", headers)
    room = max(0, max_bytes - RECORD_MARGIN - rest - 8)  # 8: the value's length varint
    return key, (value or b"")[:room], headers


class Progress:
    """Where one consumer (a group on a topic) stands in the index, kept in `meta`:

    - `applied/NS`: per partition, the next offset whose document the index holds;
    - `published/NS`: per partition, the next offset whose verdict is committed out;
    - `verdicts/NS/P/LAST`: the verdicts of the last applied batch, to publish again
      if that batch is redelivered: one msgpack list of rows per partition and batch,
      keyed by its last offset (a put and a pack per batch rather than per document);
    - `touched/NS/P/LAST`, next to those verdicts when the batch changed documents
      other than its own (`Deduplicator.touched`: copies promoted to content owner,
      documents the time window forgot): their ids, whose present state a redelivery
      of the batch sends to the changelog again, with its own documents'.

    NS is "group/topic", so a replay and a live worker can share an index."""

    def __init__(self, group_id: str, topic: str) -> None:
        self.ns = f"{group_id}/{topic}"
        self.applied = f"applied/{self.ns}"
        self.published = f"published/{self.ns}"
        self._verdicts = f"verdicts/{self.ns}/".encode()
        self._touched = f"touched/{self.ns}/".encode()

    def verdict_key(self, partition: int, offset: int) -> bytes:
        return self._verdicts + f"{partition}/".encode() + offset.to_bytes(8, "big")

    def touched_key(self, verdict_key: bytes) -> bytes:
        """Where the ids a stored batch touched beyond its own are kept."""
        return self._touched + verdict_key[len(self._verdicts) :]

    @staticmethod
    def read(t: Tables, name: str) -> dict[int, int]:
        return {int(k): int(v) for k, v in (t.meta(name) or {}).items()}

    @staticmethod
    def past(now: dict[int, int], last: dict[int, int]) -> dict[int, int]:
        """Per-partition next offsets `now`, moved past the last offsets `last` (never
        back)."""
        out = dict(now)
        for p, hi in last.items():
            out[p] = max(out.get(p, 0), hi + 1)
        return out

    @classmethod
    def advance(cls, t: Tables, name: str, last: dict[int, int]) -> None:
        """Move per-partition next offsets past `last`, read and written in the same
        write transaction: processes sharing the index update different partitions."""
        now = cls.past(cls.read(t, name), last)
        t.set_meta(name, {str(k): v for k, v in now.items()})

    def keep_verdicts(
        self,
        t: Tables,
        first: dict[int, int],
        verdicts: list[tuple[int, int, Verdict]],
        touched: list[bytes] | None = None,
    ) -> None:
        """Store this batch's verdicts (and the ids of other documents it changed,
        `touched`); drop those wholly below the batch, which went out in committed
        transactions.  A redelivered batch need not start where the stored one did, so
        a stored batch goes only once all of it is below."""
        cur = t.txn.cursor(db=t.db["meta"])
        for p, lo in first.items():
            for prefix in (self._verdicts, self._touched):
                start = prefix + f"{p}/".encode()
                stop = start + lo.to_bytes(8, "big")
                while cur.set_range(start) and bytes(cur.key()) < stop:
                    cur.delete()
        rows: dict[int, list[tuple[Any, ...]]] = {}
        for p, off, v in verdicts:
            rows.setdefault(p, []).append(
                (off, v.id, v.verdict, v.duplicate_of, v.cluster, v.similarity, v.exact, v.reason)
            )
        # Under every partition's part of the batch: a redelivery of any part of it
        # (the broker may cut it otherwise, a rebalance may split it) re-sends them.
        ids = msgpack.packb(list(dict.fromkeys(touched))) if touched else None
        for p, batch in rows.items():
            t.txn.put(self.verdict_key(p, batch[-1][0]), msgpack.packb(batch), db=t.db["meta"])
            if ids is not None:
                t.txn.put(self.touched_key(self.verdict_key(p, batch[-1][0])), ids, db=t.db["meta"])

    def stored_verdicts(
        self, t: Tables, wanted: list[tuple[int, int]], touched: list[bytes] | None = None
    ) -> list[Verdict]:
        """The stored verdicts of (partition, offset) messages: each in the stored
        batch of its partition that ends first at or after it (batches never overlap).
        `touched`, if given, gets the ids the stored batches read changed beyond their
        own documents (see `keep_verdicts`)."""
        cur = t.txn.cursor(db=t.db["meta"])
        rows: list[Any]
        part, rows = -1, []  # the stored batch last read
        out: list[Verdict] = []
        for p, offset in wanted:
            if p != part or not rows or not rows[0][0] <= offset <= rows[-1][0]:
                key = self.verdict_key(p, offset)
                found = cur.set_range(key) and bytes(cur.key())[:-8] == key[:-8]
                part, rows = p, msgpack.unpackb(bytes(cur.value())) if found else []
                if found and touched is not None:
                    ids = t.txn.get(self.touched_key(bytes(cur.key())), db=t.db["meta"])
                    if ids is not None:
                        touched.extend(msgpack.unpackb(bytes(ids)))
            at = bisect.bisect_left(rows, offset, key=lambda row: row[0])
            if at == len(rows) or rows[at][0] != offset:
                raise StreamDedupError(
                    f"no stored verdict for {self.ns} partition {p} offset {offset}, "
                    "which the index has already applied; were the consumer group's "
                    "offsets reset while the index was kept?"
                )
            out.append(Verdict(*rows[at][1:]))
        return out


class Sink:
    """Where a batch's verdicts go.  This one: Kafka, in one transaction with the
    consumer offsets (and the changelog, if any).  `replay` has a file sink too."""

    def __init__(self, worker: Worker) -> None:
        self.w = worker
        self.producer: Any = None
        self._common: dict[str, Any] = {}
        self._broken = False

    def open(self, common: dict[str, Any]) -> None:
        from kafka import KafkaProducer

        self._common = common
        self.producer = KafkaProducer(
            **common,
            transactional_id=self.w.transactional_id(),
            **{**PRODUCER_DEFAULTS, **self.w.cfg.producer_options},
        )
        # Fences an earlier producer with this id and settles its open transaction.
        _bounded(self.producer.init_transactions, self.w.cfg.transaction_timeout_s)
        self._broken = False

    def in_index_transaction(self, t: Tables, out: list[Outgoing]) -> None:
        """Runs inside the batch's LMDB write transaction (a file sink writes here)."""

    def publish(self, out: list[Outgoing], next_offsets: dict[int, int]) -> None:
        from kafka import TopicPartition
        from kafka.structs import OffsetAndMetadata

        if self._broken:
            self._reopen()
        w, cfg, producer = self.w, self.w.cfg, self.producer
        producer.begin_transaction()
        keys = [str(o.item.id).encode() if isinstance(o.item, Verdict) else b"" for o in out]
        partitions = self._partitions(cfg.output_topic, keys)
        sent: list[Any] = []  # each record's future, checked before the commit
        limit = int(getattr(producer, "config", {}).get("max_request_size", 1 << 20))

        def send(topic: str, **record: Any) -> None:
            sent.append(producer.send(topic, **record))

        for i, o in enumerate(out):
            if isinstance(o.item, Rejected):
                if cfg.dead_letter_topic:
                    headers = dead_letter_headers(o.item, cfg.input_topic, o.partition, o.offset)
                    key, value, headers = fit_dead_letter(o.key, o.value, headers, limit)
                    send(cfg.dead_letter_topic, key=key, value=value, headers=headers)
            elif o.item is not None:
                send(
                    cfg.output_topic,
                    key=keys[i],
                    value=verdict_payload(
                        o.item, cfg.input_topic, o.partition, o.offset, cfg.output_format
                    ),
                    partition=None if partitions is None else partitions[i],
                )
        if cfg.changelog_topic:
            records = w.changelog_records()
            at = self._partitions(cfg.changelog_topic, [key for key, _ in records])
            for i, (key, value) in enumerate(records):
                send(
                    cfg.changelog_topic,
                    key=key,
                    value=value,
                    partition=None if at is None else at[i],
                )
        # the index's id goes with the offsets: a worker on another index refuses them
        tag = offsets_metadata(getattr(w, "index_id", None))
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
                lambda: producer.send_offsets_to_transaction(offsets, w.consumer.group_metadata()),
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
        if kernels.native is None or "partitioner" in self.w.cfg.producer_options:
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
            _bounded(self.producer.abort_transaction, self.w.cfg.transaction_timeout_s)
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


class Worker:
    """The consume -> check -> publish loop.  The `worker` command subscribes to the
    consumer group; `replay` assigns partitions itself (`assign`) and may write to a
    file (`sink`)."""

    def __init__(
        self,
        cfg: WorkerConfig,
        dedup: Deduplicator,
        *,
        metrics: Metrics | None = None,
        sink: Callable[[Worker], Sink] = Sink,
        assign: Callable[[Any], Callable[[], bool]] | None = None,
    ) -> None:
        self.cfg = cfg
        self.dd = dedup
        self.stats = WorkerStats()
        self.metrics = metrics
        self.stop_event = threading.Event()
        self.consumer: Any = None
        self.progress = Progress(cfg.group_id, cfg.input_topic)
        self.sink = sink(self)
        self._assign = assign
        self._finished: Callable[[], bool] = lambda: False
        self._slot_file: Any = None
        self._txn_id: str | None = None
        # partitions whose first batch since assignment was compared with the index
        self._checked: set[int] = set()
        self._silent_until: dict[int, int] = {}
        # replay --from-timestamp: a broker may answer a time lookup with the start of
        # the record batch holding it (Tansu does); earlier messages are dropped here
        self.not_before_ms: dict[int, int] = {}
        self._params_logged = False
        # present state of the documents a batch published again (see current_changes)
        self._republished: list[Change] = []
        # last offsets whose verdicts Kafka committed and the index does not record yet
        # as published: the next batch's write transaction records them, or
        # `record_published` when the worker is idle or stops
        self._unrecorded: dict[int, int] = {}
        self._last_gauges = 0.0
        self._outliers_logged = float("-inf")  # monotonic time of the last outlier warning
        self._outliers_unlogged = 0
        self._failed_in_a_row = 0  # Kafka transactions, since the last one that committed
        # set by bind_index: this index's id and when it was bound to the group
        self.index_id: str | None = None
        self._assignor: IndexAssignor | None = None
        self.on_batch: Callable[[Worker, list[Outgoing]], None] | None = None

    # ------------------------------------------------------------------ setup

    def bind_index(self) -> None:
        """An index serves one consumer group on one input topic: refuse anything else.
        (And one group is served by one index: see `streamdedup.kafka.membership`.)"""
        want = {"group_id": self.cfg.group_id, "input_topic": self.cfg.input_topic}

        def check(t: Tables) -> tuple[dict[str, str] | None, dict[str, Any]]:
            have = t.meta("binding")
            if have is None:
                t.set_meta("binding", want)
            if self.cfg.changelog_topic and (have is None or have == want):
                # From now on only writers of this changelog may add to the index
                # (`engine.check_changelog`): `dedup` and `replay` are refused.
                t.set_meta("changelog", {"topic": self.cfg.changelog_topic, **want})
            return have, identity(t, fresh=have is None)

        have, ident = self.dd.index.write(check)
        self.index_id = str(ident["id"])
        self._assignor = IndexAssignor(
            self.cfg.group_id,
            self.index_id,
            float(ident["bound_at"]),
            str(self.dd.index.path.resolve()),
        )
        if have is not None and have != want:
            raise ConfigError(
                f"index {self.dd.index.path} belongs to consumer group {have['group_id']!r} "
                f"on topic {have['input_topic']!r}; this worker was started for group "
                f"{want['group_id']!r} on topic {want['input_topic']!r}. One index serves "
                "one consumer group and input topic: use another --index."
            )

    def transactional_id(self) -> str:
        """Stable across restarts (a restarted worker fences its dead predecessor and
        aborts its open transaction at once), distinct between the processes sharing
        an index: group, host, index, and a slot held with a lock file in the index."""
        if self.cfg.transactional_id:
            return self.cfg.transactional_id
        if self._txn_id is None:
            where = hashlib.blake2b(str(self.dd.index.path.resolve()).encode(), digest_size=6)
            slot = self._take_slot()
            self._txn_id = (
                f"streamdedup-{self.cfg.group_id}-{socket.gethostname()}-{where.hexdigest()}-{slot}"
            )
        return self._txn_id

    def _take_slot(self) -> int:
        import fcntl

        for slot in range(1024):
            fh = open(self.dd.index.path / f"worker-{slot}.lock", "a+b")  # noqa: SIM115
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                fh.close()
                continue
            self._slot_file = fh  # held for the life of the process
            return slot
        raise StreamDedupError("more than 1024 workers share this index")

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
            self._finished = self._assign(self.consumer)
            return
        from kafka import ConsumerRebalanceListener

        checked = self._checked

        class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
            # Runs on kafka-python's I/O thread: log and mark, never block.  A batch in
            # flight when partitions move fails its commit and is aborted and rewound.
            def on_partitions_revoked(self, revoked: Any) -> None:
                log.info("revoked %s", sorted(str(tp) for tp in revoked))
                for tp in revoked:
                    checked.discard(tp.partition)

            def on_partitions_assigned(self, assigned: Any) -> None:
                log.info("assigned %s", sorted(str(tp) for tp in assigned))
                for tp in assigned:
                    checked.discard(tp.partition)

        self.consumer.subscribe([self.cfg.input_topic], listener=Listener())

    # ------------------------------------------------------------------ the loop

    def run(self) -> WorkerStats:
        if self._assign is None:
            self.bind_index()
        self.connect()
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
                rewound = self._check_positions(records)
                records = {tp: m for tp, m in records.items() if tp.partition not in rewound}
                if not self.consumer.assignment():
                    idle_since = time.monotonic()  # still joining the group: not idle
                if records:
                    self.process(records)
                    idle_since = time.monotonic()
                else:
                    self.record_published()
                self._update_gauges()
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

    def _check_positions(self, records: dict[Any, list[Any]]) -> set[int]:
        """Once per assignment: if the index is behind a partition's committed position
        (it was restored from a backup), rewind to where the index stands; that range
        is applied again without publishing its verdicts a second time.

        The worker (not `replay`, which positions itself) also refuses an input topic
        that is not the one the index processed (`_check_topic`), and says loudly when
        the group's position is below what the index has published: the group's
        offsets were rewound, by hand or by a tool.  Those messages are skipped, not
        checked again, and the worker goes on rather than stopping: each of them was
        checked and its verdict committed before (checking it again would make it a
        duplicate of itself), so skipping drops nothing, while stopping would turn an
        offset reset into a crash loop with no way forward but a new index.  What the
        operator may have wanted -- their verdicts again -- is what `replay` gives, and
        the warning says how."""
        applied: dict[int, int] | None = None
        published: dict[int, int] = {}
        rewound: set[int] = set()
        fresh = [tp for tp in self.consumer.assignment() if tp.partition not in self._checked]
        if self._assign is None:
            # checked once a fetch answered for them (it brings the partition's end, see
            # _check_topic); until then none of their messages can be processed
            fresh = [
                tp for tp in fresh if records.get(tp) or self.consumer.highwater(tp) is not None
            ]
        if fresh and self._assign is None:
            applied, published = self.dd.index.read(
                lambda t: (
                    Progress.read(t, self.progress.applied),
                    Progress.read(t, self.progress.published),
                )
            )
            published = Progress.past(published, self._unrecorded)
            self._check_topic(fresh, applied)
            self._check_committer(fresh, applied)
        for tp in fresh:
            p = tp.partition
            if applied is None:
                applied = self.dd.index.read(lambda t: Progress.read(t, self.progress.applied))
            position = records[tp][0].offset if records.get(tp) else self.consumer.position(tp)
            if position is not None and position < published.get(p, 0):
                log.warning(
                    "consumer group %r is at offset %d of partition %d of %s, below what "
                    "index %s has already checked and published (up to offset %d): the "
                    "group's offsets were rewound. Messages %d to %d are SKIPPED, not checked "
                    "again (their verdicts went out before; checked again, each would be a "
                    "duplicate of itself). To get their verdicts again: streamdedup replay "
                    "--mode reverdict --index %s --input-topic %s --group-id "
                    "%s-reverdict --from-offsets %d:%d --output FILE. To check them afresh: "
                    "streamdedup replay --mode rebuild --index NEW_DIR --input-topic %s.",
                    self.cfg.group_id,
                    position,
                    p,
                    self.cfg.input_topic,
                    self.dd.index.path,
                    published[p],
                    position,
                    published[p] - 1,
                    self.dd.index.path,
                    self.cfg.input_topic,
                    self.cfg.group_id,
                    p,
                    position,
                    self.cfg.input_topic,
                )
            self._checked.add(p)
            self._silent_until.pop(p, None)
            if p in applied and position is not None and applied[p] < position:
                log.info(
                    "index is behind partition %d's committed position (%d < %d): "
                    "applying that range again without publishing its verdicts again",
                    p,
                    applied[p],
                    position,
                )
                self._silent_until[p] = position
                self.consumer.seek(tp, applied[p])
                rewound.add(p)
        return rewound

    def _check_committer(self, fresh: list[Any], applied: dict[int, int]) -> None:
        """The group's offsets of a partition this index never processed were committed
        by a worker on another index: this one is a second index in the group, alone in
        it for now (the join-time check needs two members to compare).  Refuse before
        processing anything.  An index restored from the changelog has the offsets as
        its progress, so it is not refused.  Brokers that do not keep offsets' metadata
        (the embedded Tansu 0.6) leave only a warning here."""
        from kafka.errors import KafkaError

        unknown: dict[int, int] = {}
        for tp in fresh:
            if tp.partition in applied:
                continue
            try:
                committed = self.consumer.committed(tp, metadata=True)
            except KafkaError as exc:  # a second line of defence: the join-time check holds
                log.warning(
                    "could not read the group's committed offset of partition %d to check "
                    "which index committed it (%s); going on with the join-time check only",
                    tp.partition,
                    exc,
                )
                continue
            if committed is None:
                continue
            other = index_of_offsets(getattr(committed, "metadata", None))
            if other is None:
                unknown[tp.partition] = committed.offset
            elif other != self.index_id:
                raise UnsafeToContinueError(
                    f"consumer group {self.cfg.group_id!r} has offsets on partition "
                    f"{tp.partition} of {self.cfg.input_topic!r} committed by a worker on "
                    f"another index (id {other}); this worker's index "
                    f"{self.dd.index.path} (id {self.index_id}) never processed it. Two "
                    "indexes in one group would split the input partitions between them, "
                    "and duplicates across the two halves would never be found. Nothing "
                    "was processed. Run every worker of the group on the same --index "
                    "directory (processes on one host), or give this index its own "
                    "--group-id (it then reads the whole topic)."
                )
        if unknown:
            log.warning(
                "index %s has never processed partitions %s of %s, but consumer group %r "
                "has offsets committed there (%s): the messages before them are not in "
                "this index, and their duplicates will not be found. If another worker on "
                "another index serves this group, stop this one: one group, one index.",
                self.dd.index.path,
                sorted(unknown),
                self.cfg.input_topic,
                self.cfg.group_id,
                unknown,
            )

    def _check_topic(self, fresh: list[Any], applied: dict[int, int]) -> None:
        """Refuse an input topic that was deleted and recreated (or truncated) since
        the index processed it: the index records, per partition, the next offset it
        applied, and everything below is skipped as done.  On a recreated topic that
        would drop every new message below those offsets -- no verdict, no log line,
        lag 0.  Two signs: the topic's id (Kafka 2.8+ brokers report one; the first
        seen is kept in the index) changed, or a partition now ends below the offset
        the index applied.  Nothing is processed before these checks.  The end is the
        high watermark of the last fetch response: Tansu 0.6 answers an end-offset
        query with the last record batch's base offset + 1 (measured), below the end
        whenever that batch holds more than one record."""
        topic, ns = self.cfg.input_topic, self.progress.ns
        key = f"topic-id/{ns}"
        cluster = getattr(getattr(self.consumer, "_client", None), "cluster", None)
        found = cluster.topic_id(topic) if cluster is not None else None
        now = None if found is None else str(found)

        def keep(t: Tables) -> str | None:
            have: str | None = t.meta(key)
            if now is not None and (have is None or not applied):
                t.set_meta(key, now)  # nothing applied yet: nothing to mistake
                return None
            return have

        before = self.dd.index.write(keep)
        where = (
            f"index {self.dd.index.path} has processed input topic {topic!r} for consumer "
            f"group {self.cfg.group_id!r} up to offsets {dict(sorted(applied.items()))}"
        )
        todo = (
            "Nothing was processed: going on would skip every new message below those "
            "offsets as if already processed. To process the new topic from its start, "
            "run the worker with a new, empty --index directory and a new --group-id. "
            "To check its messages against what this index holds instead, run "
            f"`streamdedup replay --mode reverdict --index {self.dd.index.path} "
            f"--input-topic {topic} --group-id NEW_GROUP --output-topic VERDICTS --follow`."
        )
        if before is not None and now is not None and before != now:
            raise UnsafeToContinueError(
                f"{where}, but the topic was deleted and recreated since (its topic id "
                f"was {before}, it is now {now}). {todo}"
            )
        ours = [tp for tp in fresh if tp.partition in applied]
        if not ours:
            return
        ends = {tp: self.consumer.highwater(tp) for tp in ours}
        short = {
            tp.partition: end
            for tp, end in ends.items()
            if end is not None and end < applied[tp.partition]
        }
        if short:
            raise UnsafeToContinueError(
                f"{where}, but the topic now ends at offsets {short}: it was deleted and "
                f"recreated, or truncated. {todo}"
            )

    def process(self, records: dict[Any, list[Any]]) -> None:
        from kafka.errors import KafkaError

        started = time.perf_counter()
        prog = self.progress
        applied, published = self.dd.index.read(
            lambda t: (Progress.read(t, prog.applied), Progress.read(t, prog.published))
        )
        published = Progress.past(published, self._unrecorded)
        records = dict(records)
        for tp in list(records):
            since = self.not_before_ms.get(tp.partition)
            if since is not None:
                keep = [m for m in records[tp] if m.timestamp >= since]
                if keep:
                    del self.not_before_ms[tp.partition]
                    records[tp] = records[tp][records[tp].index(keep[0]) :]
                else:
                    del records[tp]
        # Messages below `published` went out in a transaction Kafka acknowledged as
        # committed; a broker may still hand them out again (a committed-offset fetch
        # that is not yet stable), so they are skipped here rather than trusted to it.
        batch = [
            (tp.partition, m)
            for tp in sorted(records, key=lambda tp: tp.partition)
            for m in records[tp]
            if m.offset >= published.get(tp.partition, 0)
        ]
        self.stats.skipped += sum(len(v) for v in records.values()) - len(batch)
        if not batch:
            return
        decoded: list[Document | Rejected] = []
        fresh: list[tuple[int, int, Document]] = []
        for p, m in batch:
            # Kafka's "no timestamp" (-1, or 0 from some clients) is passed on as it is:
            # the engine treats every timestamp <= 0 as none (`Deduplicator._apply`)
            item = decode_message(
                m.value, m.key, self.cfg.input_format, self.cfg.fields, m.timestamp
            )
            decoded.append(item)
            if isinstance(item, Document) and m.offset >= applied.get(p, 0):
                fresh.append((p, m.offset, item))
        prepared = self.dd.preparer.prepare([d for _, _, d in fresh], known=self.dd.known)
        first: dict[int, int] = {}
        last: dict[int, int] = {}
        for p, m in batch:
            first.setdefault(p, m.offset)
            last[p] = m.offset
        out: list[Outgoing] = []

        def record(t: Tables, verdicts: list[Verdict]) -> None:
            kept = [(p, off, v) for (p, off, _), v in zip(fresh, verdicts, strict=True)]
            prog.keep_verdicts(t, first, kept, self.dd.touched)
            Progress.advance(t, prog.applied, last)
            if unrecorded:
                Progress.advance(t, prog.published, unrecorded)
            new = iter(verdicts)
            redelivered = [
                (p, m.offset)
                for (p, m), item in zip(batch, decoded, strict=True)
                if isinstance(item, Document) and m.offset < applied.get(p, 0)
            ]
            again: list[bytes] = []
            stored = iter(prog.stored_verdicts(t, redelivered, again))
            out.clear()
            for (p, m), item in zip(batch, decoded, strict=True):
                result: Verdict | Rejected | None = item if isinstance(item, Rejected) else None
                if isinstance(item, Document):
                    if m.offset < applied.get(p, 0):
                        result = next(stored)
                        again.append(id_key(item.id))
                    else:
                        result = next(new)
                    if m.offset < self._silent_until.get(p, -1):
                        result = None
                out.append(Outgoing(p, m.offset, m.key, m.value, result))
            if self.cfg.changelog_topic:
                self._republished = current_changes(t, again)
            self.sink.in_index_transaction(t, out)

        unrecorded = dict(self._unrecorded)
        self.dd.apply(prepared, also=record)
        self._unrecorded.clear()
        if self.dd.outliers:
            self._warn_outliers([(fresh[i][0], fresh[i][1], ts) for i, ts in self.dd.outliers])
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
        self._count(out, applied, time.perf_counter() - started)
        if self.on_batch is not None:
            self.on_batch(self, out)

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

    def _count(self, out: list[Outgoing], applied: dict[int, int], seconds: float) -> None:
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
            m.expired.inc(self.dd.last_batch.expired)

    def _warn_outliers(self, found: list[tuple[int, int, int]]) -> None:
        """Counts the documents the index just took with timestamps too far in the
        future; warns about them once a minute at most."""
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
            self.dd.options.max_clock_skew_ms,
            self._outliers_unlogged,
        )
        self._outliers_unlogged = 0

    def _update_gauges(self) -> None:
        m = self.metrics
        if m is None or time.monotonic() - self._last_gauges < 1.0:
            return
        self._last_gauges = time.monotonic()
        lags: dict[tuple[str, int], int] = {}
        for tp in self.consumer.assignment():
            high = self.consumer.highwater(tp)
            if high is None:
                lags[(tp.topic, tp.partition)] = 0
                continue
            try:
                pos = self.consumer.position(tp, timeout_ms=100)
            except Exception:  # a gauge is not worth failing the loop for
                continue
            if pos is not None:
                lags[(tp.topic, tp.partition)] = max(0, high - pos)
        m.set_lag(lags)
        m.indexed.set(self.dd.index.read(lambda t: t.count("docs")))
        m.index_bytes.set(self.dd.index.file_bytes())

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
            self.dd.index.write(lambda t: Progress.advance(t, self.progress.published, last))
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


# A batch's records are sent in one burst and flushed (bounded, like every other wait
# on the broker) before its transaction commits, so the producer may hold them back:
# with kafka-python's defaults (send at once, 16 KB batches) most records opened a
# batch of their own, a wake-up of its I/O thread and a produce request each (the
# wake-ups alone were an eighth of the main thread's samples, profiled; publishing
# went from 16% to 10% of them).  --producer-option overrides either.
PRODUCER_DEFAULTS: dict[str, Any] = {"linger_ms": 100, "batch_size": 512 << 10}


def consumer_settings(cfg: WorkerConfig) -> dict[str, Any]:
    return {
        "group_id": cfg.group_id,
        "enable_auto_commit": False,
        "auto_offset_reset": "earliest",
        "isolation_level": "read_committed",
        "max_poll_records": cfg.max_poll_records,
        # kafka-python fetches 1 MiB per partition by default: a few hundred pages, far
        # below max_poll_records; each batch has fixed costs (two transactions), so let
        # a poll bring a whole batch.
        "max_partition_fetch_bytes": 32 << 20,
        "fetch_max_bytes": 64 << 20,
        **cfg.consumer_options,
    }


def wait_for_broker(bootstrap_servers: str, timeout_s: float) -> None:
    """Retry a plain TCP connection with backoff: fast feedback, clear error."""
    hosts = [h.strip().rsplit(":", 1) for h in bootstrap_servers.split(",")]
    delay, deadline = 0.25, time.monotonic() + timeout_s
    while True:
        for host, port in hosts:
            try:
                socket.create_connection((host, int(port)), timeout=2).close()
                return
            except (OSError, ValueError):
                continue
        if time.monotonic() + delay > deadline:
            raise BrokerUnavailableError(
                f"no Kafka broker answered at {bootstrap_servers} within {timeout_s:.0f}s"
            )
        log.warning("broker not reachable at %s, retrying in %.1fs", bootstrap_servers, delay)
        time.sleep(delay)
        delay = min(delay * 2, 10.0)


def install_signal_handlers(stop: threading.Event, on: Callable[[], None] | None = None) -> None:
    import signal

    def handler(signum: int, frame: Any) -> None:
        log.info("signal %d: finishing the current batch, then stopping", signum)
        stop.set()
        if on is not None:
            on()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


def _option_value(text: str) -> Any:
    """KEY=VALUE pass-through values: int, float, true/false, else the string."""
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    return text


def parse_pairs(items: list[str] | None, flag: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"{flag} expects KEY=VALUE, got {item!r}")
        out[key.strip()] = _option_value(value.strip())
    return out


def connection_settings(values: dict[str, Any]) -> dict[str, Any]:
    """Security settings shared by consumer, producer and admin client."""
    out: dict[str, Any] = {"security_protocol": values["security_protocol"]}
    mapping = {
        "sasl_mechanism": "sasl_mechanism",
        "sasl_username": "sasl_plain_username",
        "sasl_password": "sasl_plain_password",
        "ssl_cafile": "ssl_cafile",
        "ssl_certfile": "ssl_certfile",
        "ssl_keyfile": "ssl_keyfile",
    }
    for ours, theirs in mapping.items():
        if values.get(ours) is not None:
            out[theirs] = values[ours]
    if values["security_protocol"].startswith("SASL") and not values.get("sasl_mechanism"):
        raise ConfigError(
            f"--security-protocol {values['security_protocol']} needs --sasl-mechanism"
        )
    return out


def create_topics(
    bootstrap: str,
    topics: list[str],
    partitions: int,
    settings: dict[str, Any],
    compacted: tuple[str, ...] = (),
) -> None:
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic
    from kafka.errors import TopicAlreadyExistsError

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, **settings)
    try:
        existing = set(admin.list_topics())
        wanted = [
            NewTopic(
                t,
                partitions,
                1,
                topic_configs={"cleanup.policy": "compact"} if t in compacted else {},
            )
            for t in dict.fromkeys(topics)
            if t not in existing
        ]
        if wanted:
            with contextlib.suppress(TopicAlreadyExistsError):
                admin.create_topics(wanted)
    finally:
        admin.close()


def restore_if_empty(cfg: WorkerConfig, index_path: str, metrics: Metrics | None = None) -> None:
    """With a changelog: an empty or missing index is rebuilt from it before the
    worker consumes (the pod lost its disk, or this is a new machine)."""
    from kafka import KafkaConsumer, TopicPartition

    from streamdedup.kafka.changelog import index_is_empty, restore
    from streamdedup.store.index import Index

    assert cfg.changelog_topic is not None
    index = Index(index_path)
    try:
        if not index_is_empty(index):
            return
        wait_for_broker(cfg.bootstrap_servers, cfg.connect_timeout_s)
        settings = {**consumer_settings(cfg), "enable_auto_commit": False}
        consumer = KafkaConsumer(
            bootstrap_servers=cfg.bootstrap_servers, client_id=cfg.client_id, **settings
        )
        try:
            inputs = sorted(consumer.partitions_for_topic(cfg.input_topic) or [])
            committed = {}
            for p in inputs:  # read before the changelog: see changelog.restore
                off = consumer.committed(TopicPartition(cfg.input_topic, p))
                if off is not None:
                    committed[p] = off
            if not (consumer.partitions_for_topic(cfg.changelog_topic) or []):
                log.info("changelog %s is empty or missing: starting fresh", cfg.changelog_topic)
                return
            log.info("index at %s is empty: restoring it from %s", index_path, cfg.changelog_topic)
            last_log = [0.0]

            def report(done: int, total: int) -> None:
                if metrics is not None:
                    metrics.heartbeat()  # restoring is progress: /healthz stays green
                if time.monotonic() - last_log[0] > 2.0:
                    last_log[0] = time.monotonic()
                    log.info("restoring: %d of about %d changelog records", done, total)

            ns = Progress(cfg.group_id, cfg.input_topic).ns
            stats = restore(index, consumer, cfg.changelog_topic, committed, ns, report)
            log.info(
                "restored %d documents from %d changelog records in %.1fs; resuming at %s",
                stats.documents,
                stats.records,
                stats.seconds,
                committed or "the beginning",
            )
        finally:
            consumer.close()
    finally:
        index.close()


def run_from_options(
    values: dict[str, Any], open_engine: Callable[[dict[str, Any]], Deduplicator]
) -> int:
    """The `worker` command."""
    from streamdedup.ops.logs import setup_logging
    from streamdedup.ops.metrics import HealthPolicy

    setup_logging(values["log_level"], values["log_format"])
    cfg = WorkerConfig.from_options(values)
    metrics = None
    if values["metrics_port"] is not None:
        metrics = Metrics(HealthPolicy(values["health_stall"], values["ready_max_lag"]))
        port = metrics.serve(values["metrics_host"], values["metrics_port"])
        log.info("metrics on http://%s:%d/metrics", values["metrics_host"], port)
    try:
        if values["create_topics"]:
            wait_for_broker(cfg.bootstrap_servers, cfg.connect_timeout_s)
            create_topics(
                cfg.bootstrap_servers,
                [
                    t
                    for t in (
                        cfg.input_topic,
                        cfg.output_topic,
                        cfg.dead_letter_topic,
                        cfg.changelog_topic,
                    )
                    if t
                ],
                values["partitions"],
                connection_settings(values),
                compacted=(cfg.changelog_topic,) if cfg.changelog_topic else (),
            )
        if cfg.changelog_topic:
            if not values.get("index"):
                raise ConfigError("--index DIR is required")
            restore_if_empty(cfg, values["index"], metrics)
        with open_engine(values) as dd:
            worker = Worker(cfg, dd, metrics=metrics)
            install_signal_handlers(worker.stop_event)
            stats = worker.run()
    except BrokerUnavailableError as exc:
        log.error("%s", exc)
        return EXIT_BROKER
    finally:
        if metrics is not None:
            metrics.close()
    elapsed = time.monotonic() - stats.started
    log.info(
        "stopped: %d messages in %d batches, %d verdicts (%d duplicates, %d republished), "
        "%d dead letters, %.1fs",
        stats.messages,
        stats.batches,
        stats.verdicts,
        stats.duplicates,
        stats.republished,
        stats.dead_letters,
        elapsed,
    )
    return 0
