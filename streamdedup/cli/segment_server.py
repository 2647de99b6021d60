"""The `segment-server` command, and the option values -> `SegmentLink` /
`RemoteSegments` step the writer's commands share with it.

`segment-server SEGMENT_DIR` opens the sealed segment (its manifest read and its
checksum verified: a damaged or foreign directory is refused before anything
connects), then runs a `SegmentServer` answering with `engine.sealed.probes.Answerer.answer_bytes`
until SIGTERM or SIGINT, with `/metrics`, `/healthz` and `/readyz` on
`--metrics-port`.
"""

from __future__ import annotations

import argparse
import logging
import threading
import time
from pathlib import Path
from typing import Any

from streamdedup.errors import ConfigError
from streamdedup.kafka.segment_service.client import RemoteSegments
from streamdedup.kafka.segment_service.wire import DEFAULT_PREFIX, SegmentLink
from streamdedup.ops.metrics import HealthPolicy, SegmentClientMetrics, SegmentServerMetrics
from streamdedup.worker_config import connection_settings, parse_pairs, require_bootstrap

log = logging.getLogger("streamdedup.kafka.segment_server")


def link_from_options(values: dict[str, Any], *, pass_through: bool = True) -> SegmentLink:
    """The segments' Kafka settings from a command's option values.  `pass_through`:
    `--consumer-option`/`--producer-option` apply (the segment server's own clients);
    a writer's are meant for its input consumer and transactional producer, and stay
    out of its probe clients (a transactional id would make them transactional)."""
    require_bootstrap(values)
    pairs = (
        (
            parse_pairs(values.get("consumer_option"), "--consumer-option"),
            parse_pairs(values.get("producer_option"), "--producer-option"),
        )
        if pass_through
        else ({}, {})
    )
    return SegmentLink(
        bootstrap_servers=values["bootstrap_servers"],
        prefix=values.get("segment_prefix") or DEFAULT_PREFIX,
        # the same connection settings as the worker's, on every command that links
        client=connection_settings(values),
        consumer_options=pairs[0],
        producer_options=pairs[1],
        client_id=f"{values.get('client_id') or 'streamdedup'}-segments",
        connect_timeout_s=values.get("connect_timeout") or 60.0,
    )


def remote_for(
    values: dict[str, Any],
    *,
    metrics: SegmentClientMetrics | None = None,
    stop: threading.Event | None = None,
) -> RemoteSegments | None:
    """The writer's `RemoteSegments` (`--bootstrap-servers`, `--segment-prefix`,
    `--segment-timeout`), whose `.reader` is the factory `Deduplicator(remote=...)`
    takes; None without `--bootstrap-servers` (the engine then refuses an index with
    remote segments, saying to give it).  Nothing connects before the first reader:
    an index without remote segments costs nothing.  The caller closes it."""
    if not values.get("bootstrap_servers"):
        return None
    return RemoteSegments(
        link_from_options(values, pass_through=False),
        timeout_s=values.get("segment_timeout") or 10.0,
        metrics=metrics,
        stop=stop,
    )


def cmd_segment_server(args: argparse.Namespace, values: dict[str, Any]) -> int:
    from streamdedup.engine.sealed.probes import Answerer
    from streamdedup.kafka.segment_service.server import SegmentServer
    from streamdedup.kafka.settings import install_signal_handlers
    from streamdedup.ops.logs import setup_logging
    from streamdedup.store.segment.reading import SealedSegment

    setup_logging(values["log_level"], values["log_format"])
    link = link_from_options(values)  # option errors before the segment is read
    if values["max_probe_age"] <= 0 or values["log_every"] < 1:
        raise ConfigError("--max-probe-age must be above 0 and --log-every at least 1")
    segment = SealedSegment.open(Path(args.segment_dir))
    manifest = segment.manifest
    name = f"segment {manifest.number} ({manifest.id})"
    log.info(
        "%s at %s: %d documents, docnos %d-%d, %.1f MB",
        name,
        segment.path,
        manifest.documents,
        manifest.first_docno,
        manifest.next_docno - 1,
        (Path(segment.path) / "data.mdb").stat().st_size / 1e6,
    )
    metrics = None
    try:
        if values["metrics_port"] is not None:
            metrics = SegmentServerMetrics(HealthPolicy(stall_s=values["health_stall"]))
            port = metrics.serve(values["metrics_host"], values["metrics_port"])
            log.info("metrics on http://%s:%d/metrics", values["metrics_host"], port)
        server = SegmentServer(
            link,
            manifest.id,
            Answerer(segment).answer_bytes,
            name=name,
            metrics=metrics,
            max_age_s=values["max_probe_age"],
            log_every=values["log_every"],
        )
        install_signal_handlers(server.stop_event)
        stats = server.run()
    finally:
        segment.close()
        if metrics is not None:
            metrics.close()
    log.info(
        "stopped: %d probes answered (%d with an error), %d skipped, in %.1fs",
        stats.probes,
        stats.failed,
        stats.skipped,
        time.monotonic() - stats.started,
    )
    return 0
