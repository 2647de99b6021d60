"""What the writer and a `segment-server` agree on to talk about one sealed segment
over Kafka: the topic and group names, the settings that let multi-megabyte probes
and answers through, and the header an answer carries when the server could not
compute one.  The two ends are `client` (the writer's `RemoteSegments`) and
`server` (`SegmentServer`).

Per segment, from its id and a prefix (`--segment-prefix`):

- `{prefix}.{id}.probes`: one message per probe, key = request id (1 partition);
- `{prefix}.{id}.answers`: one message per answer, key = the probe's request id;
- consumer group `{prefix}.{id}`: the servers of the segment, replicas of each other
  (one partition, so one of them answers, the others stand by).

Probes and answers are opaque bytes here (`engine.sealed.probes` packs them).  A probe for
a 500-document batch is 1-3 MB and its answer similar, far above Kafka's 1 MB default
message limit: the topics are created with `max.message.bytes` = `MAX_MESSAGE_BYTES`,
the producers may send that much (zstd-compressed: the shingle sets and ids in them
compress well), and the consumers fetch that much per partition.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "DEFAULT_PREFIX",
    "ERROR_HEADER",
    "MAX_MESSAGE_BYTES",
    "WRITER_HEADER",
    "SegmentLink",
    "SegmentTopics",
    "consumer_settings",
    "ensure_topics",
    "producer_settings",
]

log = logging.getLogger("streamdedup.kafka.segments")

DEFAULT_PREFIX = "streamdedup-segments"
# The largest probe or answer (after compression).  Measured on the embedded broker
# (Tansu 0.6): messages of 100 MB went through with zstd, gzip and uncompressed alike,
# so the limit is Kafka's, per topic: set here when the topics are created.  A probe
# of 500 documents is a few MB: 64 MB leaves room for batches of long pages.
MAX_MESSAGE_BYTES = 64 << 20
# see consumer_settings
FETCH_WAIT_MS = 20
# An answer that is no answer: the server's reason, UTF-8 (the value is empty).
ERROR_HEADER = "streamdedup-error"
# On a probe: which writer (one `RemoteSegments`, a random id) sent it.  A server judges
# a probe's age only against the timestamps of the same writer's later probes: one
# host's clock, never the server's own (server.py).
WRITER_HEADER = "streamdedup-writer"


@dataclass(frozen=True)
class SegmentTopics:
    probes: str
    answers: str
    group: str

    @classmethod
    def of(cls, prefix: str, segment_id: str) -> SegmentTopics:
        base = f"{prefix}.{segment_id}"
        return cls(f"{base}.probes", f"{base}.answers", base)


@dataclass(frozen=True)
class SegmentLink:
    """How to reach the segments' topics: the cluster, the client settings shared by
    every client (security, `config.connection_settings`), the user's
    `--consumer-option`/`--producer-option` pass-throughs, and the topic prefix."""

    bootstrap_servers: str
    prefix: str = DEFAULT_PREFIX
    client: dict[str, Any] = field(default_factory=dict)
    consumer_options: dict[str, Any] = field(default_factory=dict)
    producer_options: dict[str, Any] = field(default_factory=dict)
    client_id: str = "streamdedup-segments"
    connect_timeout_s: float = 60.0

    def topics(self, segment_id: str) -> SegmentTopics:
        return SegmentTopics.of(self.prefix, segment_id)

    def common(self) -> dict[str, Any]:
        return {
            "bootstrap_servers": self.bootstrap_servers,
            "client_id": self.client_id,
            **self.client,
        }


def producer_settings(link: SegmentLink, *, compress: bool = True) -> dict[str, Any]:
    """Probes and answers: sent at once (a writer waits for each), up to
    `MAX_MESSAGE_BYTES`, acknowledged by every in-sync replica (the server commits a
    probe's offset only after its answer is acknowledged).  Answers are compressed
    (records and ids: msgpack text, about 3x smaller); probes are not: nearly all of a
    probe is already compressed texts and random signatures and band keys, which zstd
    does not shrink (3.65 MB a 2,000-page probe either way), and compressing it costs
    the writer, the one process everything waits for, time on every batch."""
    return {
        **link.common(),
        "acks": "all",
        "linger_ms": 0,
        "compression_type": "zstd" if compress else None,
        "max_request_size": MAX_MESSAGE_BYTES,
        **link.producer_options,
    }


def consumer_settings(link: SegmentLink) -> dict[str, Any]:
    """Fetches large enough for the largest probe or answer (kafka-python's default
    1 MB per partition would still return an oversized record, but one per fetch), and
    short fetch waits: a probe and its answer each wait for a fetch, and the embedded
    broker (Tansu 0.6) holds an empty fetch for its whole `fetch_max_wait_ms` even when
    a record arrives meanwhile.  Measured there, sequential round trips of 1 KB probes:
    p50 235 ms with kafka-python's 500 ms, 34 ms with 100, 18 ms with 20; of 2 MB
    probes 245, 72 and 46 ms.  Apache Kafka answers a waiting fetch as soon as data
    comes, so 20 ms costs it only idle fetches (50 a second per consumer)."""
    return {
        **link.common(),
        "enable_auto_commit": False,
        "max_partition_fetch_bytes": MAX_MESSAGE_BYTES,
        "fetch_max_bytes": 2 * MAX_MESSAGE_BYTES,
        "fetch_max_wait_ms": FETCH_WAIT_MS,
        **link.consumer_options,
    }


def ensure_topics(link: SegmentLink, topics: SegmentTopics) -> None:
    """Create the segment's probe and answer topics if missing (1 partition each,
    `max.message.bytes` raised); the writer and the servers both call it, so either
    may start first."""
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic
    from kafka.errors import TopicAlreadyExistsError

    admin = KafkaAdminClient(**link.common())
    try:
        existing = set(admin.list_topics())
        wanted = [
            NewTopic(t, 1, 1, topic_configs={"max.message.bytes": str(MAX_MESSAGE_BYTES)})
            for t in (topics.probes, topics.answers)
            if t not in existing
        ]
        if wanted:
            with contextlib.suppress(TopicAlreadyExistsError):
                admin.create_topics(wanted)
            log.info("created topics %s", ", ".join(t.name for t in wanted))
    finally:
        admin.close()
