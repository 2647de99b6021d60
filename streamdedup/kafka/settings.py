"""Kafka client settings and the chores around the clients: the consumer's and the
producer's defaults, waiting for a broker to answer, creating topics (admin), and
the signal handlers that let a batch finish before the process stops.  Parsing the
options into settings (`connection_settings`, `parse_pairs`, `require_bootstrap`) is
plain configuration and lives in `streamdedup.config`, below this layer, where
`WorkerConfig.from_options` needs it; callers import it from there.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from streamdedup.config import WorkerConfig
from streamdedup.errors import BrokerUnavailableError

__all__ = [
    "PRODUCER_DEFAULTS",
    "consumer_settings",
    "create_topics",
    "install_signal_handlers",
    "wait_for_broker",
]

log = logging.getLogger("streamdedup.kafka.worker")


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
