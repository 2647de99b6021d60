"""Kafka client settings and the chores around the clients: the consumer's and the
producer's defaults (and the group timeouts on the embedded broker), waiting for a
broker to answer, probing the cluster before a start (topic there? which broker?),
creating topics (admin), and
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
from dataclasses import dataclass
from typing import Any

from streamdedup.errors import BrokerUnavailableError, MissingTopicError
from streamdedup.worker_config import WorkerConfig

__all__ = [
    "EMBEDDED_GROUP_TIMEOUTS",
    "PRODUCER_DEFAULTS",
    "ClusterProbe",
    "consumer_settings",
    "create_topics",
    "group_timeouts",
    "install_signal_handlers",
    "missing_topic",
    "probe_cluster",
    "require_topic",
    "topic_partitions",
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
    hosts = [h.strip().rpartition(":") for h in bootstrap_servers.split(",")]
    delay, deadline = 0.25, time.monotonic() + timeout_s
    last = "no address given"
    while True:
        for host, _, port in hosts:
            try:
                socket.create_connection((host, int(port)), timeout=2).close()
                return
            except socket.gaierror as exc:
                last = f"{host}: cannot resolve the name ({exc.strerror})"
            except ValueError:
                last = f"{host}:{port}: expected host:port"
            except OSError as exc:
                last = f"{host}:{port}: {exc.strerror or exc}"
        if time.monotonic() + delay > deadline:
            raise BrokerUnavailableError(
                f"no Kafka broker answered at {bootstrap_servers} within {timeout_s:.0f}s "
                f"({last}): check --bootstrap-servers (host:port of a running broker; "
                "`streamdedup broker` starts one on this machine for trying things out)"
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


# The probes before a start (topic there? embedded broker?) run once the broker answers
# TCP; a healthy one bootstraps in milliseconds.  One that refuses the client (TLS or
# SASL settings it does not speak) would hold kafka-python's admin client for 30 s:
# the probe gives up sooner and the worker's own clients report the refusal.
PROBE_TIMEOUT_MS = 5000


@dataclass(frozen=True)
class ClusterProbe:
    """What a command learns from the cluster before it starts: whether the broker
    answered the admin client at all, how many partitions the topic asked about has
    (0: it does not exist), and whether the broker is the embedded one (Tansu: its
    cluster id is `tansu_cluster` unless it was started with another)."""

    answered: bool = False
    partitions: int = 0
    embedded: bool = False


def probe_cluster(bootstrap: str, topic: str, settings: dict[str, Any]) -> ClusterProbe:
    """One admin client, which never creates the topic (a consumer's or a producer's
    metadata request may, on brokers that auto-create topics).  A broker that cannot
    be asked gives `answered=False`: the command's own clients then report why."""
    from kafka import KafkaAdminClient
    from kafka.errors import KafkaError

    try:
        admin = KafkaAdminClient(
            bootstrap_servers=bootstrap, bootstrap_timeout_ms=PROBE_TIMEOUT_MS, **settings
        )
    except (KafkaError, OSError, AssertionError, TypeError):
        return ClusterProbe()
    try:
        (description,) = admin.describe_topics([topic])
        partitions = 0 if description.get("error_code") else len(description["partitions"])
        cluster = str(admin.describe_cluster().get("cluster_id") or "")
        return ClusterProbe(True, partitions, cluster.startswith("tansu"))
    except (KafkaError, OSError):
        return ClusterProbe()
    finally:
        admin.close()


def topic_partitions(bootstrap: str, topic: str, settings: dict[str, Any]) -> int | None:
    """How many partitions `topic` has, 0 when it does not exist, None when the broker
    could not be asked."""
    probe = probe_cluster(bootstrap, topic, settings)
    return probe.partitions if probe.answered else None


def missing_topic(topic: str, bootstrap: str, flag: str, remedy: str) -> MissingTopicError:
    """The one-line refusal to start on a topic that does not exist."""
    return MissingTopicError(
        f"topic {topic!r} ({flag}) does not exist on {bootstrap}: check the name, or {remedy}"
    )


def require_topic(
    bootstrap: str, topic: str, settings: dict[str, Any], flag: str, remedy: str
) -> None:
    """Refuse, in one line, to start on a topic that does not exist."""
    if topic_partitions(bootstrap, topic, settings) == 0:
        raise missing_topic(topic, bootstrap, flag, remedy)


# Tansu answers a consumer-group join only after about twice the session timeout
# (measured: 23-25 s with kafka-python's 10 s default, 5 s with 6 s, 2 s with 3 s); on
# Apache Kafka a join takes well under a second whatever the timeout.  On the embedded
# broker the worker therefore uses a short session (heartbeats come from kafka-python's
# I/O thread, so a long batch does not miss them); --consumer-option overrides it.
EMBEDDED_GROUP_TIMEOUTS: dict[str, Any] = {"session_timeout_ms": 3000, "heartbeat_interval_ms": 500}


def group_timeouts(embedded: bool, consumer_options: dict[str, Any]) -> dict[str, Any]:
    """The consumer options, with `EMBEDDED_GROUP_TIMEOUTS` added on the embedded
    broker unless the user set a session or heartbeat timeout."""
    if not embedded or {"session_timeout_ms", "heartbeat_interval_ms"} & set(consumer_options):
        return consumer_options
    log.info(
        "embedded broker (Tansu): consumer-group session timeout %.0fs so the join takes "
        "seconds (--consumer-option session_timeout_ms=... overrides it)",
        EMBEDDED_GROUP_TIMEOUTS["session_timeout_ms"] / 1000,
    )
    return {**EMBEDDED_GROUP_TIMEOUTS, **consumer_options}
