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
from streamdedup.models import CORRUPT_WARC, Rejected
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
        **settings,
    )
    warc = is_warc(args.input)
    if not warc:
        warc, source = sniff_warc(source)
    if warc:
        statuses: HttpStatuses = "any" if values["warc_status"] == "any" else "2xx"
        return _produce_warc(producer, source, values["topic"], values["max_doc_bytes"], statuses)
    id_field, ts_field = values["id_field"], values["timestamp_field"]
    sent = unparsed = 0
    try:
        for line in source:
            if not line.strip():
                continue
            key, ts = None, None
            try:
                doc = orjson.loads(line)
                key = str(doc.get(id_field)).encode() if isinstance(doc, dict) else None
                if ts_field and isinstance(doc, dict) and doc.get(ts_field) is not None:
                    ts = int(doc[ts_field])
            except (orjson.JSONDecodeError, ValueError, TypeError):
                unparsed += 1  # sent as it is: the worker dead-letters it
            producer.send(values["topic"], value=line.rstrip(b"\r\n"), key=key, timestamp_ms=ts)
            sent += 1
        producer.flush()
    finally:
        producer.close()
        if args.input != "-":
            source.close()
    print(f"sent {sent:,} messages to {values['topic']} ({unparsed:,} not JSON)", file=sys.stderr)
    return EXIT_OK


def _produce_warc(
    producer: Any, source: IO[bytes], topic: str, max_bytes: int, statuses: HttpStatuses
) -> int:
    """An archive's HTML pages as HTML messages: the value is the page's bytes as
    fetched, the key its URI, the header `warc-record-id` its record id (for
    `worker --input-format html`, or `--id-header warc-record-id`).  Pages are read
    as `dedup` reads them (`inputs.warc.html_pages`): a page over `--max-doc-bytes`,
    as stored or once decoded, is not sent (its body is never decoded beyond that
    limit), nor is one without a URI, or one the archive's damage cut off: each is
    counted with its reason, and the exit status is then 1, as `dedup`'s for an error
    record.  A page larger than a produce request may be (the producer's
    max_request_size, 1 MiB by default) is not sent either and is counted, but is no
    fault of the archive's: the exit status stays 0 for it."""
    from kafka.errors import MessageSizeTooLargeError

    from streamdedup.inputs.warc import html_pages

    sent = too_large = 0
    refused: dict[str, int] = {}
    try:
        for ref, page in html_pages(source, max_bytes=max_bytes, statuses=statuses):
            if isinstance(page, Rejected):
                refused[page.reason] = refused.get(page.reason, 0) + 1
                if page.reason == CORRUPT_WARC:
                    say(f"streamdedup: {page.message}")
                continue
            key = ref.url.encode() if ref.url else None
            headers = [("warc-record-id", ref.record_id.encode())] if ref.record_id else []
            try:
                producer.send(topic, value=page, key=key, headers=headers)
            except MessageSizeTooLargeError:
                too_large += 1
                continue
            sent += 1
        producer.flush()
    finally:
        producer.close()
        source.close()
    big = f" ({too_large:,} over the producer's message size limit, not sent)" if too_large else ""
    if refused:
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(refused.items()))
        big += f"; {sum(refused.values()):,} not sent ({kinds})"
    print(f"sent {sent:,} HTML pages to {topic}{big}", file=sys.stderr)
    return EXIT_REJECTED if refused else EXIT_OK
