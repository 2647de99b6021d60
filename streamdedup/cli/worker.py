"""The `worker` command: from option values to a running `Worker` -- logging, the
metrics endpoint, topics created on request, an empty index restored from the
changelog before anything is consumed, signal handlers, and the exit status and
summary line.  It is the command's wiring, not the loop: the loop and its Kafka
clients live in `streamdedup.kafka`, below this layer, and know nothing of options.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from typing import Any

from streamdedup.cli.segment_server import remote_for
from streamdedup.cli.settings import require_index
from streamdedup.config import EngineOptions
from streamdedup.engine.deduplicator import Deduplicator
from streamdedup.errors import EXIT_BROKER, BrokerUnavailableError, SegmentWaitInterrupted
from streamdedup.kafka.ledger import Progress
from streamdedup.kafka.settings import (
    ClusterProbe,
    consumer_settings,
    create_topics,
    group_timeouts,
    install_signal_handlers,
    missing_topic,
    probe_cluster,
    wait_for_broker,
)
from streamdedup.kafka.worker import Worker
from streamdedup.ops.metrics import Metrics
from streamdedup.worker_config import WorkerConfig, connection_settings

log = logging.getLogger("streamdedup.kafka.worker")


def restore_if_empty(
    cfg: WorkerConfig,
    index_path: str,
    metrics: Metrics | None = None,
    clock_window: int = EngineOptions.clock_window,
) -> None:
    """With a changelog: an empty or missing index is rebuilt from it before the
    worker consumes (the pod lost its disk, or this is a new machine); its stream time
    by the worker's `--clock-window`."""
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
            stats = restore(
                index,
                consumer,
                cfg.changelog_topic,
                committed,
                ns,
                report,
                clock_window=clock_window,
            )
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


def run_from_options(values: dict[str, Any], open_engine: Callable[..., Deduplicator]) -> int:
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
        # the broker and the input topic are checked before the index is opened: a
        # wrong address or topic name is reported at once and creates nothing
        probe = _check_topics(cfg, values)
        options = group_timeouts(probe.embedded, cfg.consumer_options)
        cfg = dataclasses.replace(cfg, consumer_options=options)
        if cfg.changelog_topic:
            window = values.get("clock_window") or EngineOptions.clock_window
            restore_if_empty(cfg, require_index(values), metrics, window)
        # a stop ends a wait for a remote sealed segment (a dead one would hold it)
        remote = remote_for(values, metrics=None if metrics is None else metrics.segments)
        assert remote is not None  # the worker requires --bootstrap-servers
        try:
            with open_engine(values, remote=remote.reader) as dd:
                worker = Worker(cfg, dd, metrics=metrics)
                install_signal_handlers(worker.stop_event, on=remote.interrupt)
                try:
                    stats = worker.run()
                except SegmentWaitInterrupted as exc:
                    # stopped (SIGTERM) while a remote segment held the batch: it is
                    # redelivered to the next worker, as any batch not committed
                    log.warning("%s", exc)
                    stats = worker.stats
        finally:
            remote.close()
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


def _check_topics(cfg: WorkerConfig, values: dict[str, Any]) -> ClusterProbe:
    """Wait for the broker, then create the worker's topics (`--create-topics`) or
    refuse a missing input topic; the cluster's answer (`probe_cluster`)."""
    wait_for_broker(cfg.bootstrap_servers, cfg.connect_timeout_s)
    probe = probe_cluster(cfg.bootstrap_servers, cfg.input_topic, connection_settings(values))
    topics = (
        cfg.input_topic,
        cfg.output_topic,
        cfg.dead_letter_topic,
        cfg.changelog_topic,
        cfg.keep_topic,
    )
    if values["create_topics"]:
        create_topics(
            cfg.bootstrap_servers,
            [t for t in topics if t],
            values["partitions"],
            connection_settings(values),
            compacted=(cfg.changelog_topic,) if cfg.changelog_topic else (),
        )
    elif probe.answered and probe.partitions == 0:
        raise missing_topic(
            cfg.input_topic,
            cfg.bootstrap_servers,
            "--input-topic",
            "create it first (`streamdedup produce` does; or start the worker "
            "with --create-topics --partitions N)",
        )
    return probe
