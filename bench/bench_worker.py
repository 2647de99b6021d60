"""The Kafka worker end to end, next to file-mode `dedup` on the same corpus.

The input topic is filled before the clock starts.  The worker runs as its own
process (`streamdedup worker`); this script reads the verdict topic (read_committed)
and times from the first verdict to the last, sampling the lag (input messages
without a verdict yet) and the worker's anonymous memory (RssAnon: the process's own
heap, not LMDB's page cache, which the OS owns) as it goes.  Then one worker against
two processes sharing one index on a two-partition topic.

    python bench/bench_worker.py --docs 20000                 # embedded Tansu broker
    python bench/bench_worker.py --docs 200000 --skip-pair    # memory over a long run
    python bench/bench_worker.py --bootstrap kafka:9092       # an external cluster
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
from corpus import generate  # noqa: E402

FAST_GROUP = [
    "--consumer-option",
    "max_poll_interval_ms=5000",
    "--consumer-option",
    "session_timeout_ms=5000",
]


@contextlib.contextmanager
def cluster(bootstrap: str | None) -> Iterator[str]:
    """The given cluster, or an embedded broker for the length of the run."""
    if bootstrap:
        yield bootstrap
        return
    from streamdedup.broker import EmbeddedBroker

    with EmbeddedBroker() as embedded:
        yield embedded


def save(name: str, results: dict[str, Any]) -> None:
    out = HERE / "out"
    out.mkdir(exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(results, indent=2))


def rss_anon_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def make_topics(bootstrap: str, partitions: int) -> dict[str, str]:
    from kafka.admin import KafkaAdminClient, NewTopic

    tag = uuid.uuid4().hex[:8]
    names = {
        "input": f"docs-{tag}",
        "output": f"verdicts-{tag}",
        "dlq": f"dlq-{tag}",
        "group": f"bench-{tag}",
    }
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics(
        [
            NewTopic(names["input"], partitions, 1),
            NewTopic(names["output"], 1, 1),
            NewTopic(names["dlq"], 1, 1),
        ]
    )
    admin.close()
    return names


def fill(bootstrap: str, topic: str, lines: list[bytes], partitions: int) -> None:
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, batch_size=1 << 20)
    for i, raw in enumerate(lines):
        p.send(topic, value=raw, partition=i % partitions)
    p.flush()
    p.close()


def run_workers(
    bootstrap: str, names: dict[str, str], index: Path, n: int, processes: int
) -> dict[str, Any]:
    from kafka import KafkaConsumer, TopicPartition

    cmd = [
        sys.executable,
        "-m",
        "streamdedup.cli",
        "worker",
        "--bootstrap-servers",
        bootstrap,
        "--input-topic",
        names["input"],
        "--output-topic",
        names["output"],
        "--dead-letter-topic",
        names["dlq"],
        "--group-id",
        names["group"],
        "--index",
        str(index),
        *FAST_GROUP,
    ]
    procs = [
        subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(processes)
    ]
    reader = KafkaConsumer(
        bootstrap_servers=bootstrap, isolation_level="read_committed", enable_auto_commit=False
    )
    reader.assign([TopicPartition(names["output"], 0)])
    seen, first, last, first_batch = 0, None, None, 0
    samples: list[dict[str, float]] = []
    next_sample = 0.0
    deadline = time.time() + 3600
    while seen < n and time.time() < deadline:
        for batch in reader.poll(timeout_ms=200).values():
            seen += len(batch)
            now = time.perf_counter()
            if first is None:
                first, first_batch = now, len(batch)
            last = now
        now = time.perf_counter()
        if first is not None and now >= next_sample:
            samples.append(
                {
                    "t": round(now - first, 2),
                    "lag": n - seen,
                    "rss_anon_mb": rss_anon_mb(procs[0].pid) or 0.0,
                }
            )
            next_sample = now + 1.0
    reader.close()
    for p in procs:
        p.terminate()
        p.wait(timeout=60)
    assert first is not None and last is not None and seen >= n, f"only {seen} of {n} verdicts"
    # The first verdicts arrive after the first batch was processed: time the rest.
    rate = (seen - first_batch) / max(last - first, 1e-9)
    return {
        "processes": processes,
        "verdicts": seen,
        "seconds": last - first,
        "docs_per_s": rate,
        "lag_samples": samples,
    }


def file_mode(corpus: Path, tmp: Path) -> float:
    t = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "streamdedup.cli",
            "dedup",
            str(corpus),
            "--index",
            str(tmp / "file-index"),
            "--output",
            str(tmp / "file.jsonl"),
            "--progress",
            "never",
        ],
        check=True,
        capture_output=True,
    )
    return time.perf_counter() - t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=20000)
    ap.add_argument("--bootstrap", help="use this cluster instead of the embedded broker")
    ap.add_argument("--skip-pair", action="store_true", help="skip the two-process run")
    args = ap.parse_args()
    lines = [
        orjson.dumps({"id": d.id, "text": d.text})
        for d in generate(args.docs, seed=31, memory=50_000)
    ]
    results: dict[str, Any] = {"docs": args.docs}
    with (
        cluster(args.bootstrap) as bootstrap,
        tempfile.TemporaryDirectory(prefix="bench-worker-") as d,
    ):
        tmp = Path(d)
        corpus = tmp / "corpus.jsonl"
        corpus.write_bytes(b"\n".join(lines) + b"\n")
        fm = file_mode(corpus, tmp)
        results["file_mode_docs_per_s"] = args.docs / fm
        print(f"file mode: {args.docs / fm:,.0f} docs/s", flush=True)
        names = make_topics(bootstrap, 1)
        fill(bootstrap, names["input"], lines, 1)
        one = run_workers(bootstrap, names, tmp / "idx1", args.docs, 1)
        results["worker"] = one
        ratio = one["docs_per_s"] / results["file_mode_docs_per_s"]
        print(f"worker, 1 process: {one['docs_per_s']:,.0f} docs/s ({ratio:.0%} of file mode)")
        mem = [s["rss_anon_mb"] for s in one["lag_samples"] if s["rss_anon_mb"]]
        if mem:
            print(
                f"  worker RssAnon MB at start/middle/end: {mem[0]:.0f} / "
                f"{mem[len(mem) // 2]:.0f} / {mem[-1]:.0f}"
            )
        print(
            "  lag over time (s: messages waiting): "
            + ", ".join(
                f"{s['t']:.0f}: {s['lag']}"
                for s in one["lag_samples"][:: max(1, len(one["lag_samples"]) // 8)]
            )
        )
        if not args.skip_pair:
            names2 = make_topics(bootstrap, 2)
            fill(bootstrap, names2["input"], lines, 2)
            single = run_workers(bootstrap, names2, tmp / "idx2", args.docs, 1)
            names3 = make_topics(bootstrap, 2)
            fill(bootstrap, names3["input"], lines, 2)
            pair = run_workers(bootstrap, names3, tmp / "idx3", args.docs, 2)
            results["two_partitions"] = {"one": single, "two": pair}
            print(
                f"two partitions: 1 process {single['docs_per_s']:,.0f} docs/s, 2 processes "
                f"sharing one index {pair['docs_per_s']:,.0f} docs/s "
                f"({pair['docs_per_s'] / single['docs_per_s']:.2f}x)"
            )
    save("bench_worker", results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
