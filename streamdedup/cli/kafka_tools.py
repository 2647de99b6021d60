"""The Kafka helpers for trying things out: `streamdedup broker` (an embedded
Kafka-protocol broker on loopback until Ctrl-C or SIGTERM) and `streamdedup produce`
(JSON Lines documents sent to a topic, one message per line keyed by id).  The worker
and replay commands are not here: `main` hands them to the kafka package."""

from __future__ import annotations

import argparse
import signal
import sys
from typing import IO, TYPE_CHECKING, Any

import orjson

from streamdedup.cli.console import say
from streamdedup.errors import EXIT_BROKER, EXIT_OK, EXIT_REJECTED, ConfigError
from streamdedup.inputs import is_warc, sniff_warc
from streamdedup.models import Rejected
from streamdedup.worker_config import connection_settings

if TYPE_CHECKING:
    from streamdedup.inputs.warc import HttpStatuses


def cmd_broker(args: argparse.Namespace, values: dict[str, Any]) -> int:
    import threading

    from streamdedup.kafka.broker import EmbeddedBroker

    broker = EmbeddedBroker(values["port"])
    bootstrap = broker.start()
    print(f"Kafka-protocol broker (Tansu, in memory) on {bootstrap}; Ctrl-C stops it", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        while not stop.wait(0.5):
            if broker.proc is None or broker.proc.poll() is not None:
                print(f"broker exited: {broker.log_tail()}", file=sys.stderr)
                return EXIT_REJECTED
    except KeyboardInterrupt:
        pass
    finally:
        broker.stop()
    return EXIT_OK


def ensure_topic(bootstrap: str, topic: str, values: dict[str, Any]) -> str:
    """Create the topic with `--partitions` if it does not exist (rather than let the
    broker auto-create it with its own default: 4 partitions on the embedded broker,
    whose order of processing -- hence some verdicts -- then differs from run to run),
    and say what there is."""
    from streamdedup.kafka.settings import create_topics, topic_partitions

    if values["partitions"] < 1:
        raise ConfigError("--partitions must be at least 1")
    settings = connection_settings(values)
    have = topic_partitions(bootstrap, topic, settings)
    if have:
        note = ""
        if "partitions" in values["_explicit"] and have != values["partitions"]:
            note = f" (--partitions {values['partitions']} applies to a new topic only)"
        return f"topic {topic} exists with {have} partition{'s' * (have != 1)}{note}"
    create_topics(bootstrap, [topic], values["partitions"], settings)
    n = values["partitions"]
    return f"created topic {topic} with {n} partition{'s' * (n != 1)}"


def cmd_produce(args: argparse.Namespace, values: dict[str, Any]) -> int:
    from kafka import KafkaProducer

    from streamdedup.errors import BrokerUnavailableError
    from streamdedup.filemode.streams import stdin_or_file
    from streamdedup.kafka.settings import wait_for_broker
    from streamdedup.worker_config import require_bootstrap

    require_bootstrap(values)
    settings = connection_settings(values)  # the worker's: security, SASL, TLS
    if values["max_message_bytes"] < 1024:
        raise ConfigError("--max-message-bytes must be at least 1024")
    source = stdin_or_file(args.input)  # a missing input is reported before connecting
    try:
        wait_for_broker(values["bootstrap_servers"], values["connect_timeout"])
    except BrokerUnavailableError as exc:
        print(f"streamdedup: error: {exc}", file=sys.stderr)
        return EXIT_BROKER
    say(ensure_topic(values["bootstrap_servers"], values["topic"], values))
    producer = KafkaProducer(
        bootstrap_servers=values["bootstrap_servers"],
        linger_ms=20,
        batch_size=1 << 20,
        max_request_size=values["max_message_bytes"],
        **settings,
    )
    sending = Sending(producer, values["topic"])
    warc = is_warc(args.input)
    if not warc:
        warc, source = sniff_warc(source)
    try:
        if warc:
            statuses: HttpStatuses = "any" if values["warc_status"] == "any" else "2xx"
            key = values["message_key"] or "uri"
            _produce_warc(sending, source, key, values["max_doc_bytes"], statuses)
        else:
            _produce_lines(sending, source, values)
        producer.flush()
    finally:
        producer.close()
        if args.input != "-":
            source.close()
    say(sending.summary("HTML pages" if warc else "messages"))
    return EXIT_REJECTED if sending.left_out else EXIT_OK


class Sending:
    """The messages of one `produce` run: each sent, or left out and named on stderr
    with its reason (over the limit here, refused by the broker, or not a page to
    send), counted by reason for the closing line."""

    def __init__(self, producer: Any, topic: str) -> None:
        self.producer, self.topic = producer, topic
        self.sent = 0
        self.left_out: dict[str, int] = {}

    def send(self, name: str, value: bytes, key: bytes | None, **extra: Any) -> None:
        from kafka.errors import MessageSizeTooLargeError

        try:
            future = self.producer.send(self.topic, value=value, key=key, **extra)
        except MessageSizeTooLargeError:
            self.leave_out(
                name, "too_large_to_send", f"{len(value):,} bytes, over --max-message-bytes"
            )
            return
        future.add_errback(lambda exc: self.leave_out(name, "refused", str(exc)))
        self.sent += 1

    def leave_out(self, name: str, reason: str, why: str) -> None:
        if reason == "refused":
            self.sent -= 1  # (counted when handed to the producer)
        self.left_out[reason] = self.left_out.get(reason, 0) + 1
        say(f"not sent: {name}: {why} [{reason}]")

    def summary(self, what: str) -> str:
        text = f"sent {self.sent:,} {what} to {self.topic}"
        if self.left_out:
            kinds = ", ".join(f"{k} {v}" for k, v in sorted(self.left_out.items()))
            text += f"; {sum(self.left_out.values()):,} not sent ({kinds})"
        return text


def message_key(how: str, doc_id: Any, url: str | None) -> bytes | None:
    """A message's key: the document's id, its URI, or its URI's host (near copies of
    one site's pages then share a partition: docs/guide/worker.md)."""
    if how == "id":
        return None if doc_id is None else str(doc_id).encode()
    if not url:
        return None
    if how == "host":
        from urllib.parse import urlsplit

        host = urlsplit(url).hostname
        return None if host is None else host.encode()
    return url.encode()


def _produce_lines(sending: Sending, source: IO[bytes], values: dict[str, Any]) -> None:
    """JSON Lines, a message a line as it is (a line that is not JSON too: the worker
    dead-letters it), keyed by `--message-key` (id by default; uri and host read the
    field `url`), timed by `--timestamp-field`."""
    id_field, ts_field = values["id_field"], values["timestamp_field"]
    how = values["message_key"] or "id"
    for n, line in enumerate(source, 1):
        if not line.strip():
            continue
        key, ts = None, None
        try:
            doc = orjson.loads(line)
            if isinstance(doc, dict):
                url = doc.get("url")
                key = message_key(how, doc.get(id_field), url if isinstance(url, str) else None)
                if ts_field and doc.get(ts_field) is not None:
                    ts = int(doc[ts_field])
        except (orjson.JSONDecodeError, ValueError, TypeError):
            pass  # sent as it is: the worker dead-letters it
        sending.send(f"line {n}", line.rstrip(b"\r\n"), key, timestamp_ms=ts)


def _produce_warc(
    sending: Sending, source: IO[bytes], how: str, max_bytes: int, statuses: HttpStatuses
) -> None:
    """An archive's HTML pages as HTML messages: the value is the page's bytes as
    fetched, the key its URI (or its host, or its record id: `--message-key`), the
    header `warc-record-id` its record id (for `worker --input-format html`, or
    `--id-header warc-record-id`).  Pages are read as `dedup` reads them
    (`inputs.warc.html_pages`): a page over `--max-doc-bytes`, as stored or once
    decoded, is not sent (its body is never decoded beyond that limit), nor is one
    without a URI, or one the archive's damage cut off, nor one over the message
    size limit: each is named with its reason and counted, and the exit status is
    then 1."""
    from streamdedup.inputs.warc import html_pages

    for ref, page in html_pages(source, max_bytes=max_bytes, statuses=statuses):
        name = ref.url or ref.record_id or "(a record without a URI)"
        if isinstance(page, Rejected):
            sending.leave_out(name, page.reason, page.message)
            continue
        key = message_key(how, ref.record_id, ref.url)
        headers = [("warc-record-id", ref.record_id.encode())] if ref.record_id else []
        sending.send(name, page, key, headers=headers)
