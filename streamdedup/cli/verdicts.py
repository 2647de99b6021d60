"""`streamdedup verdicts`: print a verdict topic's committed view as JSON lines.

The tools users reach for first do not work on the embedded broker (kcat's librdkafka
cannot talk to it; kafka-python's read_committed consumer shows it the verdicts of
aborted transactions too), so the command reads the raw log and keeps what a
read_committed consumer of Apache Kafka would see (`kafka.txnlog`): every verdict a
worker or replay committed, once, none of an aborted batch.  From the beginning of
each partition; without `--follow` it stops at the end present when it started,
with `--follow` it waits for more until Ctrl-C or SIGTERM (exit 0).

msgpack verdicts (`--output-format msgpack`) are printed as JSON too.  A record that
is not a verdict (`decode`: an object with the contract's keys, an id and a verdict
of `unique` or `duplicate`) is skipped with a warning (the first few by offset) and
counted, and the exit status is then 1 (like rejected lines in `dedup`).

A transaction still open (a worker in the middle of a batch, or one that died and
whose transaction has not timed out yet) holds back every record after its first,
committed ones too, as it does for any read_committed consumer.  Without `--follow`
the command says so on stderr when it stops with records held back: printing
nothing and exiting 0 without a word looked like an empty topic.
"""

from __future__ import annotations

import signal
import sys
import threading
from typing import Any, BinaryIO

import msgpack
import orjson

from streamdedup.cli.console import say
from streamdedup.errors import EXIT_OK, EXIT_REJECTED, InputOutputError
from streamdedup.kafka.settings import wait_for_broker
from streamdedup.kafka.txnlog import CommittedView, LogReader, Record
from streamdedup.worker_config import connection_settings, require_bootstrap

VERDICTS = ("unique", "duplicate")
WARN_AT_MOST = 10  # records that are not verdicts named one by one; the rest counted


def decode(value: bytes | None) -> dict[str, Any] | None:
    """A verdict record from a message value (JSON or msgpack); None if it is not one.
    A verdict is an object with the contract's keys (id, verdict, duplicate_of,
    cluster, similarity, exact): its id a string or integer, its verdict `unique` or
    `duplicate`, `exact` true or false.  Anything with a "verdict" key was taken for
    one before: `{"verdict": 5}` was printed."""
    if not value:
        return None
    try:
        out = orjson.loads(value)
    except orjson.JSONDecodeError:
        try:
            out = msgpack.unpackb(value, raw=False, strict_map_key=False)
        except Exception:  # msgpack raises several unrelated types for garbage
            return None
    if not isinstance(out, dict) or not _is_id(out.get("id")):
        return None
    if out.get("verdict") not in VERDICTS or not isinstance(out.get("exact"), bool):
        return None
    if not _is_id(out.get("cluster")) or "similarity" not in out:
        return None
    of = out.get("duplicate_of", ...)
    return out if of is None or _is_id(of) else None


def _is_id(value: Any) -> bool:
    return isinstance(value, str | int) and not isinstance(value, bool)


def open_output(path: str, what: str = "the verdicts") -> tuple[BinaryIO, bool]:
    """The output stream and whether this command must close it."""
    if path == "-":
        if sys.stdout is None:
            raise InputOutputError("standard output is closed: give --output FILE")
        return sys.stdout.buffer, False
    try:
        return open(path, "wb"), True
    except OSError as exc:
        raise InputOutputError(
            f"cannot write {what} to {path}: {exc.strerror or exc}; "
            "give a writable --output path (or '-' for standard output)"
        ) from exc


class Printer:
    """Writes the verdicts that pass the `--only` filter; counts what it skipped."""

    def __init__(self, out: BinaryIO, only: str | None) -> None:
        self.out, self.only = out, only
        self.printed = self.skipped = 0

    def __call__(self, topic: str, partition: int, records: list[Record]) -> None:
        lines = []
        for r in records:
            verdict = decode(r.value)
            if verdict is None:
                self.skipped += 1
                if self.skipped <= WARN_AT_MOST:
                    say(
                        f"streamdedup: warning: {topic}[{partition}] offset {r.offset} "
                        "is not a verdict record; skipped"
                        + (" (further ones only counted)" if self.skipped == WARN_AT_MOST else "")
                    )
                continue
            if self.only is not None and verdict["verdict"] != self.only:
                continue
            raw = r.value or b""
            lines.append(
                raw if raw.startswith(b"{") and b"\n" not in raw else orjson.dumps(verdict)
            )
        if lines:
            self.out.write(b"\n".join(lines) + b"\n")
            self.printed += len(lines)


def cmd_verdicts(args: Any, values: dict[str, Any]) -> int:
    require_bootstrap(values)
    bootstrap, topic = values["bootstrap_servers"], values["topic"]
    settings = connection_settings(values)
    out, owned = open_output(values["output"])
    try:
        wait_for_broker(bootstrap, values["connect_timeout"])
        reader = LogReader(bootstrap, topic, values["partition"] or None, settings)
        try:
            printer = Printer(out, values["only"])
            read_topic(reader, printer, out, follow=bool(values["follow"]))
        finally:
            reader.close()
    finally:
        if owned:
            out.close()
        else:
            out.flush()
    if printer.skipped:
        say(f"streamdedup: {printer.skipped:,} records of {topic} were not verdicts (skipped)")
        return EXIT_REJECTED
    return EXIT_OK


def say_held_back(topic: str, views: dict[int, CommittedView]) -> None:
    """One warning per partition whose committed view stops at an open transaction."""
    for p, view in sorted(views.items()):
        first = view.stable_offset
        if first is None:
            continue
        held = view.held_back
        say(
            f"streamdedup: warning: {topic}[{p}]: a transaction open since offset {first:,} "
            f"holds back everything after it ({held:,} committed record"
            f"{'s' * (held != 1)} among them): a read_committed reader sees none of it "
            "until that transaction commits or aborts (a worker in the middle of a batch, "
            "or one that died: its transaction is aborted when the transaction timeout "
            "runs out). Run again later, or with --follow"
        )


def read_topic(reader: LogReader, printer: Printer, out: BinaryIO, *, follow: bool) -> None:
    """Round-robin over the partitions until each is read to the end it had when
    first fetched (or, with `follow`, until SIGINT or SIGTERM)."""
    views = {p: CommittedView() for p in reader.partitions}
    ends: dict[int, int] = {}
    stop = threading.Event()
    if follow:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
    while not stop.is_set():
        todo = [p for p in reader.partitions if follow or reader.offsets[p] < ends.get(p, 1)]
        if not todo:
            say_held_back(reader.topic, views)
            return
        for p in todo:
            batches, high = reader.fetch(p, max_wait_ms=200 if follow else 0)
            ends.setdefault(p, high)
            if not batches and not follow:
                ends[p] = reader.offsets[p]  # nothing more below the end: done
            for batch in batches:
                printer(reader.topic, p, views[p].feed(batch))
            if stop.is_set():
                break
        out.flush()
