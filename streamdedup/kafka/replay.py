"""`streamdedup replay`: run a topic's history (again) through an index.

Two modes, one loop (the worker's, with partitions assigned here instead of by the
group, so a live worker on the same topic is never disturbed):

- **rebuild** fills a fresh index; its verdicts equal a live run's over the same order;
- **reverdict** runs against an existing index: ids it holds get their stored verdict
  back, new ones are checked and inserted.

Verdicts go to a topic (one Kafka transaction per batch, offsets committed for the
replay's own consumer group) or to a JSON Lines file, written inside the batch's
index transaction together with the file's new length, so an interrupted replay
resumes where it stopped: the file is cut back to the recorded length and the
consumer starts from the offsets the index recorded.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from streamdedup.engine.deduplicator import Deduplicator
from streamdedup.errors import (
    EXIT_BROKER,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_REJECTED,
    BrokerUnavailableError,
    ConfigError,
    InputOutputError,
    MissingTopicError,
)
from streamdedup.kafka.changelog import index_is_empty, true_end_offsets
from streamdedup.kafka.ledger import Progress
from streamdedup.kafka.messages import Outgoing
from streamdedup.kafka.publisher import BatchSink
from streamdedup.kafka.settings import install_signal_handlers, require_topic, wait_for_broker
from streamdedup.kafka.worker import Assigned, Worker, WorkerStats
from streamdedup.models import Rejected, Verdict, output_record
from streamdedup.store.index import Index
from streamdedup.store.keys import MetaKey
from streamdedup.store.tables import Tables
from streamdedup.worker_config import WorkerConfig, connection_settings, require_bootstrap

log = logging.getLogger("streamdedup.kafka.replay")

MODES = ("rebuild", "reverdict")


@dataclass(frozen=True)
class StartAt:
    """Where a replay starts when it has no progress of its own yet."""

    beginning: bool = True
    timestamp_ms: int | None = None
    offsets: dict[int, int] | None = None

    @classmethod
    def parse(cls, timestamp: str | None, offsets: str | None, beginning: bool = False) -> StartAt:
        """The start `--from-beginning`, `--from-timestamp` or `--from-offsets` asks
        for (at most one of them; none: the beginning)."""
        if sum(map(bool, (beginning, timestamp, offsets))) > 1:
            raise ConfigError("give one of --from-beginning, --from-timestamp, --from-offsets")
        if timestamp:
            try:
                when = dt.datetime.fromisoformat(timestamp)
            except ValueError as exc:
                raise ConfigError(f"--from-timestamp: not ISO 8601: {timestamp!r}") from exc
            if when.tzinfo is None:
                when = when.replace(tzinfo=dt.UTC)
            return cls(beginning=False, timestamp_ms=int(when.timestamp() * 1000))
        if offsets:
            out: dict[int, int] = {}
            for item in offsets.split(","):
                p, sep, o = item.strip().partition(":")
                if not sep or not p.isdigit() or not o.isdigit():
                    raise ConfigError(f"--from-offsets expects P:O[,P:O...], got {item!r}")
                out[int(p)] = int(o)
            return cls(beginning=False, offsets=out)
        return cls()


class FileSink(BatchSink):
    """Verdicts as JSON Lines, written in the index transaction with the new length."""

    def __init__(
        self, index: Index, progress: Progress, input_topic: str, path: Path, durable: bool
    ) -> None:
        self.index = index
        self.topic = input_topic
        self.path = path
        self.meta = MetaKey.REPLAY_FILE + progress.ns
        self.durable = durable
        self.fh: Any = None

    def open(self, common: dict[str, Any]) -> None:
        recorded = int(self.index.read(lambda t: t.meta(self.meta)) or 0)
        if recorded and not self.path.exists():
            raise ConfigError(
                f"{self.path} is gone, but the index records {recorded} bytes of verdicts in "
                "it; start over with --restart"
            )
        try:
            self.fh = open(self.path, "r+b" if self.path.exists() else "w+b")  # noqa: SIM115
        except OSError as exc:
            raise InputOutputError(
                f"cannot write the verdicts to {self.path}: {exc.strerror or exc}; choose a "
                "path in an existing, writable directory"
            ) from exc
        self.fh.truncate(recorded)  # drop what an interrupted batch left behind

    def in_index_transaction(self, t: Tables, out: list[Outgoing]) -> None:
        start = int(t.meta(self.meta) or 0)
        topic = self.topic
        lines = []
        for o in out:
            if isinstance(o.item, Verdict | Rejected):
                source = {"topic": topic, "partition": o.partition, "offset": o.offset}
                lines.append(orjson.dumps(output_record(o.item, source=source)) + b"\n")
        data = b"".join(lines)
        self.fh.seek(start)
        self.fh.write(data)
        self.fh.truncate()
        self.fh.flush()
        if self.durable:
            os.fsync(self.fh.fileno())
        t.set_meta(self.meta, start + len(data))

    def publish(self, out: list[Outgoing], next_offsets: dict[int, int]) -> None:
        pass  # written with the index transaction

    def abort(self) -> None:
        pass

    def close(self) -> None:
        if self.fh is not None:
            self.fh.close()


class Positioner:
    """Assigns every partition of the input topic and seeks each to its start: the
    replay's own progress if it has some, else the requested start.  The worker's
    `assign`: called with the consumer, it answers when the replay is done and the
    timestamps before which messages are dropped (`Assigned`)."""

    def __init__(
        self,
        index: Index,
        progress: Progress,
        topic: str,
        start: StartAt,
        follow: bool,
        to_file: bool,
    ) -> None:
        self.index, self.progress, self.topic = index, progress, topic
        self.start, self.follow, self.to_file = start, follow, to_file
        self.ends: dict[Any, int] = {}
        self.total = 0

    def __call__(self, consumer: Any) -> Assigned:
        from kafka import TopicPartition

        topic = self.topic
        parts = _partitions(consumer, topic)
        if self.start.offsets is not None:
            unknown = set(self.start.offsets) - set(parts)
            if unknown:
                raise ConfigError(f"{topic} has no partition {sorted(unknown)}")
            parts = sorted(self.start.offsets)
        tps = [TopicPartition(topic, p) for p in parts]
        consumer.assign(tps)
        self.ends = true_end_offsets(consumer, tps)
        applied = self.index.read(lambda t: Progress.read(t, self.progress.applied))
        not_before_ms: dict[int, int] = {}
        wanted = self._requested(consumer, tps)
        for tp in tps:
            at = applied.get(tp.partition) if self.to_file else consumer.committed(tp)
            if at is None:
                at = wanted[tp]
                if self.start.timestamp_ms is not None:
                    not_before_ms[tp.partition] = self.start.timestamp_ms
            consumer.seek(tp, at)
        self.total = sum(max(0, self.ends[tp] - consumer.position(tp)) for tp in tps)
        return Assigned(
            lambda: not self.follow and all(consumer.position(tp) >= self.ends[tp] for tp in tps),
            not_before_ms,
        )

    def _requested(self, consumer: Any, tps: list[Any]) -> dict[Any, int]:
        begin = consumer.beginning_offsets(tps)
        if self.start.timestamp_ms is not None:
            found = consumer.offsets_for_times({tp: self.start.timestamp_ms for tp in tps})
            return {tp: self.ends[tp] if found[tp] is None else found[tp].offset for tp in tps}
        if self.start.offsets is not None:
            return {tp: max(begin[tp], self.start.offsets[tp.partition]) for tp in tps}
        return dict(begin)


def _partitions(consumer: Any, topic: str) -> list[int]:
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        parts = consumer.partitions_for_topic(topic)
        if parts:
            return sorted(parts)
        consumer.topics()  # refreshes metadata
        time.sleep(0.2)
    raise MissingTopicError(
        f"topic {topic!r} (--input-topic) does not exist: check the name (the topic the "
        "worker read)"
    )


def _prepare_index(dd: Deduplicator, ns: str, mode: str, restart: bool, sink: str) -> None:
    """A rebuild wants a fresh index (or its own, interrupted); --restart forgets the
    replay's progress so it starts over."""
    run_key = MetaKey.REPLAY_RUN + ns
    want = {"mode": mode, "output": sink}

    def check(t: Tables) -> dict[str, str] | None:
        have: dict[str, str] | None = t.meta(run_key)
        if restart:
            for name in (MetaKey.APPLIED + ns, MetaKey.PUBLISHED + ns, MetaKey.REPLAY_FILE + ns):
                t.delete_meta(name)
            have = None
        if have is not None and have != want:
            raise ConfigError(
                f"this index holds an interrupted replay for the same group with {have}; "
                f"resume it with the same options, or pass --restart"
            )
        t.set_meta(run_key, want)
        return have

    resuming = dd.read(lambda t: t.meta(run_key)) is not None and not restart
    if mode == "rebuild" and not resuming and not index_is_empty(dd.index):
        n = dd.read(lambda t: t.count("ids"))
        if restart:
            # --restart forgets where a replay got to, not what it indexed: a rebuild
            # that starts over needs the index emptied, which only the user may do
            raise ConfigError(
                f"--restart with --mode rebuild starts over from an empty index, and "
                f"{dd.path} holds {n:,} documents (of the earlier run): remove that "
                "directory (or give another --index) and run the same command again "
                "without --restart"
            )
        raise ConfigError(
            f"--mode rebuild needs a fresh index, and {dd.path} holds {n:,} documents; "
            "use --mode reverdict to check against it, or give another --index"
        )
    dd.write(check)


def _summary(stats: WorkerStats, interrupted: bool) -> int:
    """The replay's closing line on stderr; its exit status."""
    elapsed = time.monotonic() - stats.started
    rate = stats.messages / elapsed if elapsed > 0 else 0.0
    print(
        f"replay {'interrupted' if interrupted else 'done'}: {stats.messages:,} messages, "
        f"{stats.verdicts:,} verdicts ({stats.duplicates:,} duplicate), "
        f"{stats.dead_letters:,} rejected, {elapsed:.1f}s ({rate:,.0f} docs/s)"
        + ("; run the same command again to resume" if interrupted else ""),
        file=sys.stderr,
    )
    if interrupted:
        return EXIT_INTERRUPTED
    # as `dedup` does: finished, but some records were rejected
    return EXIT_REJECTED if stats.dead_letters else EXIT_OK


def run_replay(
    values: dict[str, Any], open_engine: Callable[[dict[str, Any]], Deduplicator]
) -> int:
    from streamdedup.ops.logs import setup_logging

    setup_logging(values["log_level"], values["log_format"])
    require_bootstrap(values)
    out_topic, out_file = values.get("output_topic"), values.get("output")
    if bool(out_topic) == bool(out_file):
        raise ConfigError("give exactly one of --output-topic TOPIC and --output FILE")
    if out_file == "-":
        raise ConfigError("--output must be a file (an interrupted replay resumes in it)")
    if out_file and values.get("dead_letter_topic"):
        raise ConfigError(
            "--dead-letter-topic goes with --output-topic: with --output FILE the records "
            "that cannot be processed are written to the file as error records; drop "
            "--dead-letter-topic, or publish to a topic with --output-topic"
        )
    if out_file and values.get("keep_topic"):
        raise ConfigError(
            "--keep-topic goes with --output-topic: its messages are published in the "
            "transactions of the verdicts; publish them to a topic with --output-topic"
        )
    start = StartAt.parse(
        values["from_timestamp"], values["from_offsets"], values["from_beginning"]
    )
    cfg = WorkerConfig.from_options(values)
    from streamdedup.ops.progress import make_progress

    # before the index is opened (or created): a wrong address or topic creates nothing
    wait_for_broker(cfg.bootstrap_servers, cfg.connect_timeout_s)
    require_topic(
        cfg.bootstrap_servers,
        cfg.input_topic,
        connection_settings(values),
        "--input-topic",
        "give the topic the worker read",
    )
    with open_engine(values) as dd:
        progress = Progress(cfg.group_id, cfg.input_topic)
        ns = progress.ns
        target = f"topic:{out_topic}" if out_topic else f"file:{Path(str(out_file)).resolve()}"
        _prepare_index(dd, ns, values["mode"], values["restart"], target)
        sink: BatchSink | None = None  # the worker's own: Kafka
        if out_file:
            path, durable = Path(str(out_file)), values["durability"] == "full"
            if values["restart"] and path.exists():
                path.unlink()
            sink = FileSink(dd.index, progress, cfg.input_topic, path, durable)
        positioner = Positioner(
            dd.index, progress, cfg.input_topic, start, values["follow"], bool(out_file)
        )
        bar: Any = None

        def on_batch(stats: WorkerStats, out: list[Outgoing]) -> None:
            nonlocal bar
            if bar is None:
                total = positioner.total if not values["follow"] else None
                bar = make_progress(values["progress"], "replay", total)
            if bar is not None:
                bar.update(len(out))
                bar.set_postfix(duplicates=stats.duplicates, refresh=False)

        worker = Worker(cfg, dd, sink=sink, assign=positioner, on_batch=on_batch)
        install_signal_handlers(worker.stop_event)
        try:
            stats = worker.run()
        except BrokerUnavailableError as exc:
            log.error("%s", exc)
            return EXIT_BROKER
        finally:
            if bar is not None:
                bar.close()
    return _summary(stats, worker.stop_event.is_set())
