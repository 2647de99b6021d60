"""`streamdedup worker`: Kafka in, verdicts out, exactly once.

One poll batch is one unit of work:

1. decode every message (undecodable ones are bound for the dead-letter topic);
2. in ONE LMDB write transaction: check and insert the new documents, record for
   each input partition the next offset applied, and keep each verdict under its
   source offset (only the latest batch's, per partition);
3. in ONE Kafka transaction: produce the verdicts and dead letters, and commit the
   consumer offsets (`send_offsets_to_transaction`).

If the process dies between 2 and 3, Kafka redelivers the batch; its messages are
below the offsets the index recorded, so their stored verdicts are published again
instead of being checked again -- no document becomes a duplicate of itself, and a
read_committed consumer of the verdict topic sees exactly one verdict per message.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgpack
import orjson

from .decode import Fields, Rejected, decode_message
from .engine import Deduplicator, Document, Verdict
from .errors import ConfigError, StreamDedupError
from .index import Tables

log = logging.getLogger("streamdedup.worker")

_REPLAY_PREFIX = b"replay/"


class BrokerUnavailableError(StreamDedupError):
    """No broker answered within the connection timeout."""


@dataclass(frozen=True)
class WorkerConfig:
    bootstrap_servers: str
    input_topic: str
    output_topic: str
    dead_letter_topic: str
    group_id: str
    input_format: str = "json"
    output_format: str = "json"
    fields: Fields = field(default_factory=Fields)
    max_poll_records: int = 2000
    poll_timeout_ms: int = 500
    transactional_id: str | None = None
    client_id: str = "streamdedup"
    consumer_options: dict[str, Any] = field(default_factory=dict)
    producer_options: dict[str, Any] = field(default_factory=dict)
    connect_timeout_s: float = 60.0
    idle_exit_s: float | None = None  # stop after this long without messages (demo, tests)


@dataclass
class WorkerStats:
    batches: int = 0
    messages: int = 0
    verdicts: int = 0
    duplicates: int = 0
    dead_letters: int = 0
    republished: int = 0
    skipped: int = 0  # redelivered although already published and committed
    started: float = field(default_factory=time.monotonic)


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


def _replay_key(topic: str, partition: int, offset: int) -> bytes:
    return _REPLAY_PREFIX + f"{topic}/{partition}/".encode() + offset.to_bytes(8, "big")


def _offsets_meta(topic: str) -> str:
    return f"offsets/{topic}"


def _published_meta(topic: str) -> str:
    return f"published/{topic}"


def _partition_map(t: Tables, name: str) -> dict[int, int]:
    return {int(k): int(v) for k, v in (t.meta(name) or {}).items()}


def _advance(t: Tables, name: str, last: dict[int, int]) -> None:
    """Move per-partition next offsets past `last`, read and written in the same write
    transaction: processes sharing the index update different partitions of one map."""
    now = _partition_map(t, name)
    for p, hi in last.items():
        now[p] = max(now.get(p, 0), hi + 1)
    t.set_meta(name, {str(k): v for k, v in now.items()})


class Worker:
    def __init__(self, cfg: WorkerConfig, dedup: Deduplicator) -> None:
        self.cfg = cfg
        self.dd = dedup
        self.stats = WorkerStats()
        self.stop_event = threading.Event()
        self.consumer: Any = None
        self._slot_file: Any = None
        self.producer: Any = None

    # ------------------------------------------------------------------ setup

    def bind_index(self) -> None:
        """An index serves one consumer group on one input topic: refuse anything else."""
        want = {"group_id": self.cfg.group_id, "input_topic": self.cfg.input_topic}

        def check(t: Tables) -> dict[str, str] | None:
            have = t.meta("binding")
            if have is None:
                t.set_meta("binding", want)
            return have  # type: ignore[no-any-return]

        have = self.dd.index.write(check)
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
        where = hashlib.blake2b(str(self.dd.index.path.resolve()).encode(), digest_size=6)
        slot = self._take_slot()
        return f"streamdedup-{self.cfg.group_id}-{socket.gethostname()}-{where.hexdigest()}-{slot}"

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

    def _wait_for_broker(self) -> None:
        """Retry a plain TCP connection with backoff: fast feedback, clear error."""
        hosts = [h.strip().rsplit(":", 1) for h in self.cfg.bootstrap_servers.split(",")]
        delay, deadline = 0.25, time.monotonic() + self.cfg.connect_timeout_s
        while True:
            for host, port in hosts:
                try:
                    socket.create_connection((host, int(port)), timeout=2).close()
                    return
                except (OSError, ValueError):
                    continue
            if time.monotonic() + delay > deadline:
                raise BrokerUnavailableError(
                    f"no Kafka broker answered at {self.cfg.bootstrap_servers} within "
                    f"{self.cfg.connect_timeout_s:.0f}s"
                )
            log.warning(
                "broker not reachable at %s, retrying in %.1fs", self.cfg.bootstrap_servers, delay
            )
            time.sleep(delay)
            delay = min(delay * 2, 10.0)

    def connect(self) -> None:
        from kafka import KafkaConsumer, KafkaProducer
        from kafka.errors import KafkaConnectionError, KafkaTimeoutError

        self._wait_for_broker()
        common = {"bootstrap_servers": self.cfg.bootstrap_servers, "client_id": self.cfg.client_id}
        try:
            self.producer = KafkaProducer(
                **common, transactional_id=self.transactional_id(), **self.cfg.producer_options
            )
            self.producer.init_transactions()
            self.consumer = KafkaConsumer(
                **common,
                **{
                    "group_id": self.cfg.group_id,
                    "enable_auto_commit": False,
                    "auto_offset_reset": "earliest",
                    "isolation_level": "read_committed",
                    "max_poll_records": self.cfg.max_poll_records,
                    # kafka-python fetches 1 MiB per partition by default: a few hundred
                    # pages, far below max_poll_records; each batch has fixed costs (two
                    # transactions), so let a poll bring a whole batch.
                    "max_partition_fetch_bytes": 32 << 20,
                    "fetch_max_bytes": 64 << 20,
                    **self.cfg.consumer_options,
                },
            )
        except (KafkaTimeoutError, KafkaConnectionError) as exc:
            raise BrokerUnavailableError(
                f"cannot use the Kafka cluster at {self.cfg.bootstrap_servers}: {exc}"
            ) from exc
        from kafka import ConsumerRebalanceListener

        class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
            # Runs on kafka-python's I/O thread: log only, never block.  A batch in
            # flight when partitions move fails its commit and is aborted and rewound.
            def on_partitions_revoked(self, revoked: Any) -> None:
                log.info("revoked %s", sorted(str(tp) for tp in revoked))

            def on_partitions_assigned(self, assigned: Any) -> None:
                log.info("assigned %s", sorted(str(tp) for tp in assigned))

        self.consumer.subscribe([self.cfg.input_topic], listener=Listener())

    # ------------------------------------------------------------------ the loop

    def run(self) -> WorkerStats:
        self.bind_index()
        self.connect()
        idle_since = time.monotonic()
        try:
            while not self.stop_event.is_set():
                records = self.consumer.poll(timeout_ms=self.cfg.poll_timeout_ms)
                if not self.consumer.assignment():
                    idle_since = time.monotonic()  # still joining the group: not idle
                if not records:
                    idle = time.monotonic() - idle_since
                    if self.cfg.idle_exit_s is not None and idle >= self.cfg.idle_exit_s:
                        break
                    continue
                self.process(records)
                idle_since = time.monotonic()
        finally:
            self.close()
        return self.stats

    def process(self, records: dict[Any, list[Any]]) -> None:
        from kafka.errors import KafkaError
        from kafka.structs import OffsetAndMetadata

        topic = self.cfg.input_topic
        applied, published = self.dd.index.read(
            lambda t: (
                _partition_map(t, _offsets_meta(topic)),
                _partition_map(t, _published_meta(topic)),
            )
        )
        # Messages below `published` went out in a transaction Kafka acknowledged as
        # committed; a broker may still hand them out again (a committed-offset fetch
        # that is not yet stable), so they are skipped here rather than trusted to it.
        batch = [
            (tp, m)
            for tp in sorted(records, key=lambda tp: tp.partition)
            for m in records[tp]
            if m.offset >= published.get(tp.partition, 0)
        ]
        self.stats.skipped += sum(len(v) for v in records.values()) - len(batch)
        if not batch:
            return
        decoded: list[Document | Rejected] = []
        fresh: list[tuple[int, int, Document]] = []
        for tp, m in batch:
            item = decode_message(
                m.value, m.key, self.cfg.input_format, self.cfg.fields, m.timestamp
            )
            decoded.append(item)
            if isinstance(item, Document) and m.offset >= applied.get(tp.partition, 0):
                fresh.append((tp.partition, m.offset, item))
        prepared = self.dd.preparer.prepare([d for _, _, d in fresh])
        first: dict[int, int] = {}
        last: dict[int, int] = {}
        for tp, m in batch:
            first.setdefault(tp.partition, m.offset)
            last[tp.partition] = m.offset

        def record(t: Tables, verdicts: list[Verdict]) -> None:
            cur = t.txn.cursor(db=t.db["meta"])
            for p, lo in first.items():  # verdicts of earlier, committed batches
                start = _replay_key(topic, p, 0)
                while cur.set_range(start) and bytes(cur.key()) < _replay_key(topic, p, lo):
                    cur.delete()
            for (p, off, _), v in zip(fresh, verdicts, strict=True):
                t.txn.put(_replay_key(topic, p, off), msgpack.packb(v.to_dict()), db=t.db["meta"])
            _advance(t, _offsets_meta(topic), last)

        verdicts = iter(self.dd.apply(prepared, also=record))
        stored: dict[tuple[int, int], Verdict] = {}
        needs_stored = [
            (tp.partition, m.offset)
            for (tp, m), item in zip(batch, decoded, strict=True)
            if isinstance(item, Document) and m.offset < applied.get(tp.partition, 0)
        ]
        if needs_stored:
            stored = self.dd.index.read(lambda t: self._stored(t, needs_stored))
        try:
            self.producer.begin_transaction()
            for (tp, m), item in zip(batch, decoded, strict=True):
                if isinstance(item, Rejected):
                    self.producer.send(
                        self.cfg.dead_letter_topic,
                        key=m.key,
                        value=m.value,
                        headers=dead_letter_headers(item, tp.topic, tp.partition, m.offset),
                    )
                    self.stats.dead_letters += 1
                    continue
                if m.offset < applied.get(tp.partition, 0):
                    v = stored[(tp.partition, m.offset)]
                    self.stats.republished += 1
                else:
                    v = next(verdicts)
                self.producer.send(
                    self.cfg.output_topic,
                    key=str(v.id).encode(),
                    value=verdict_payload(
                        v, tp.topic, tp.partition, m.offset, self.cfg.output_format
                    ),
                )
                self.stats.verdicts += 1
                self.stats.duplicates += v.is_duplicate
            offsets = {
                tp: OffsetAndMetadata(last[tp.partition] + 1, "", -1)
                for tp in records
                if tp.partition in last
            }
            self.producer.send_offsets_to_transaction(offsets, self.consumer.group_metadata())
            self.producer.commit_transaction()
        except KafkaError as exc:
            log.warning("transaction failed (%s); aborting, the batch will be redelivered", exc)
            self._abort_and_rewind(first)
            return

        self.dd.index.write(lambda t: _advance(t, _published_meta(topic), last))
        self.stats.batches += 1
        self.stats.messages += len(batch)

    def _stored(self, t: Tables, keys: list[tuple[int, int]]) -> dict[tuple[int, int], Verdict]:
        out = {}
        for p, off in keys:
            raw = t.txn.get(_replay_key(self.cfg.input_topic, p, off), db=t.db["meta"])
            if raw is None:
                raise StreamDedupError(
                    f"no stored verdict for {self.cfg.input_topic}/{p}@{off}, which the index "
                    "has already applied; was the index restored from an older backup?"
                )
            out[(p, off)] = Verdict.from_dict(msgpack.unpackb(bytes(raw)))
        return out

    def _abort_and_rewind(self, first: dict[int, int]) -> None:
        from kafka import TopicPartition

        try:
            self.producer.abort_transaction()
        except Exception as exc:
            log.warning("abort failed: %s", exc)
        for p, off in first.items():
            tp = TopicPartition(self.cfg.input_topic, p)
            if tp in self.consumer.assignment():
                self.consumer.seek(tp, off)

    def close(self) -> None:
        for client in (self.consumer, self.producer):
            if client is not None:
                try:
                    client.close(timeout=10) if client is self.producer else client.close()
                except Exception as exc:
                    log.warning("close: %s", exc)


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
    bootstrap: str, topics: list[str], partitions: int, settings: dict[str, Any]
) -> None:
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic
    from kafka.errors import TopicAlreadyExistsError

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, **settings)
    try:
        existing = set(admin.list_topics())
        wanted = [NewTopic(t, partitions, 1) for t in topics if t not in existing]
        if wanted:
            with contextlib.suppress(TopicAlreadyExistsError):
                admin.create_topics(wanted)
    finally:
        admin.close()


def run_from_options(
    values: dict[str, Any], open_engine: Callable[[dict[str, Any]], Deduplicator]
) -> int:
    """The `worker` command."""
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if not values.get("bootstrap_servers"):
        raise ConfigError("--bootstrap-servers is required (or STREAMDEDUP_BOOTSTRAP_SERVERS)")
    settings = connection_settings(values)
    consumer_options = {**settings, **parse_pairs(values["consumer_option"], "--consumer-option")}
    producer_options = {**settings, **parse_pairs(values["producer_option"], "--producer-option")}
    cfg = WorkerConfig(
        bootstrap_servers=values["bootstrap_servers"],
        input_topic=values["input_topic"],
        output_topic=values["output_topic"],
        dead_letter_topic=values["dead_letter_topic"],
        group_id=values["group_id"],
        input_format=values["input_format"],
        output_format=values["output_format"],
        fields=Fields.from_options(values),
        max_poll_records=values["max_poll_records"],
        transactional_id=values["transactional_id"],
        client_id=values["client_id"],
        consumer_options=consumer_options,
        producer_options=producer_options,
        connect_timeout_s=values["connect_timeout"],
        idle_exit_s=values["idle_exit"],
    )
    if values["create_topics"]:
        create_topics(
            cfg.bootstrap_servers,
            [cfg.input_topic, cfg.output_topic, cfg.dead_letter_topic],
            values["partitions"],
            settings,
        )
    with open_engine(values) as dd:
        worker = Worker(cfg, dd)
        install_signal_handlers(worker.stop_event)
        try:
            stats = worker.run()
        except BrokerUnavailableError as exc:
            log.error("%s", exc)
            return 3
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
