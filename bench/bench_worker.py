"""The Kafka worker end to end, next to file-mode `dedup` on the same corpus.

The input topic is filled before the clock starts.  The worker runs as its own
process (`streamdedup worker`); this script times from its first committed batch to
its last, by the commit times the worker logs (at debug level, as JSON), while it
samples the lag (input messages without a committed verdict yet, from the consumer
group's offsets, which commit in the same Kafka transaction as the verdicts) and the
worker's anonymous memory (RssAnon: the process's own heap, not LMDB's page cache,
which the OS owns); then it checks that the committed verdict topic holds exactly
one verdict per document.  Then one worker against two processes sharing one index
on a two-partition topic.  Each measurement is repeated over interleaved rounds, the
ratios taken within a round.

    python bench/bench_worker.py --docs 20000                            # embedded Tansu
    python bench/bench_worker.py --docs 200000 --skip-pair --rounds 1    # memory, long run
    python bench/bench_worker.py --bootstrap kafka:9092                  # external cluster
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from statistics import median
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
    "--consumer-option",
    "heartbeat_interval_ms=1000",
]


@contextlib.contextmanager
def cluster(bootstrap: str | None) -> Iterator[str]:
    """The given cluster, or an embedded broker for the length of the run."""
    if bootstrap:
        yield bootstrap
        return
    from streamdedup.kafka.broker import EmbeddedBroker

    with EmbeddedBroker() as embedded:
        yield embedded


def save(name: str, results: dict[str, Any], out: Path = HERE / "out") -> None:
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
    bootstrap: str, names: dict[str, str], index: Path, n: int, processes: int, partitions: int
) -> dict[str, Any]:
    from kafka.admin import KafkaAdminClient

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
        # one JSON line per committed batch, with the time of its commit: the clock
        "--log-level",
        "debug",
        "--log-format",
        "json",
        *FAST_GROUP,
    ]
    logs = [index.parent / f"{index.name}-worker-{i}.log" for i in range(processes)]
    procs = [
        subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log.open("wb")) for log in logs
    ]
    # Meanwhile, twice a second: the group's committed offsets (they commit in the same
    # Kafka transaction as the verdicts), for the lag and to know when all is done, and
    # the worker's anonymous memory.  The clock itself is read from the workers' logs
    # afterwards, so watching costs the cores the workers share next to nothing (polling
    # the broker every 20 ms took 7% of a core, and more from two processes than one).
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    done = 0
    samples: list[dict[str, float]] = []
    deadline = time.time() + 3600
    while done < n and time.time() < deadline:
        time.sleep(0.5)
        offsets = admin.list_group_offsets(names["group"]).get(names["group"], {})
        done = sum(max(o.offset, 0) for tp, o in offsets.items() if tp.topic == names["input"])
        samples.append(
            {"at": time.time(), "lag": n - done, "rss_anon_mb": rss_anon_mb(procs[0].pid) or 0.0}
        )
    admin.close()
    for p in procs:
        p.terminate()
        p.wait(timeout=60)
    assert done >= n, f"only {done} of {n} documents committed within the hour"
    entries = {log: log_entries(log) for log in logs}
    start, counted, last = clock(entries, partitions)
    if not counted:
        raise SystemExit(
            f"all {n} documents were committed before the clock could start (it starts "
            "at the first commit): use more documents, several batches' worth"
        )
    for sample in samples:
        sample["t"] = round(sample.pop("at") - start, 2)
    # Clock stopped: the committed verdict topic holds one verdict per document.
    sources = verdict_sources(bootstrap, names["output"], n)
    assert len(sources) == n == len(set(sources)), f"{len(sources)} verdicts for {n} documents"
    return {
        "processes": processes,
        "verdicts": len(sources),
        "committed_before_clock": n - counted,
        # more than one or two per process: the group moved partitions mid-run
        "assignments": [len(assignments(entries[log])) for log in logs],
        "seconds": last - start,
        "docs_per_s": counted / max(last - start, 1e-9),
        "lag_samples": [x for x in samples if x["t"] >= 0],
    }


def clock(logs: dict[Path, list[dict[str, Any]]], partitions: int) -> tuple[float, int, float]:
    """(start, documents committed after it, last commit), from the workers' logs: the
    clock starts at the first commit after the group gave every process its share of
    the partitions (a process that joins late makes the group move partitions while
    the first one is already at work; a process's first batch includes its warm-up)
    and stops at the last."""
    ready, shares = 0.0, 0
    commits: list[tuple[float, int]] = []
    for log, entries in logs.items():
        moves = assignments(entries)
        if not moves:
            raise SystemExit(f"a worker never got a partition: see {log}")
        ready = max(ready, moves[-1]["at"])
        shares += len(re.findall(r"\[\d+\]", moves[-1]["message"]))  # topic[p], ...
        commits += [(e["at"], e["batch_messages"]) for e in entries if "batch_messages" in e]
    if shares != partitions:
        raise SystemExit(f"the processes ended holding {shares} of {partitions} partitions")
    after = sorted(c for c in commits if c[0] > ready)
    if not after:
        return ready, 0, ready
    return after[0][0], sum(m for _, m in after[1:]), after[-1][0]


def log_entries(log: Path) -> list[dict[str, Any]]:
    """A worker's JSON log lines, each with its time as epoch seconds under "at"."""
    out = []
    for line in log.read_bytes().splitlines():
        if line.startswith(b"{"):
            entry = orjson.loads(line)
            stamp = datetime.strptime(entry["time"], "%Y-%m-%dT%H:%M:%S.%fZ")
            entry["at"] = stamp.replace(tzinfo=UTC).timestamp()
            out.append(entry)
    return out


def assignments(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in entries if e["message"].startswith("joined consumer group")]


def verdict_sources(bootstrap: str, topic: str, n: int) -> list[tuple[int, int]]:
    """(partition, offset) of the input message behind each committed verdict."""
    from kafka import KafkaConsumer, TopicPartition

    reader = KafkaConsumer(
        bootstrap_servers=bootstrap,
        isolation_level="read_committed",
        enable_auto_commit=False,
        consumer_timeout_ms=5000,
    )
    tp = TopicPartition(topic, 0)
    reader.assign([tp])
    reader.seek_to_beginning(tp)
    sources = []
    for m in reader:
        src = orjson.loads(m.value)["source"]
        sources.append((src["partition"], src["offset"]))
        if len(sources) >= n:
            break
    # anything beyond n would be a duplicate verdict: look a little further
    extra = reader.poll(timeout_ms=2000)
    sources += [(-1, m.offset) for batch in extra.values() for m in batch]
    reader.close()
    return sources


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
    ap.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="rounds of each measurement, interleaved (this machine's speed drifts): "
        "the ratios are taken within a round, and their median reported",
    )
    ap.add_argument("--results", type=Path, default=HERE / "out", help="where the JSON goes")
    args = ap.parse_args()
    lines = [
        orjson.dumps({"id": d.id, "text": d.text})
        for d in generate(args.docs, seed=31, memory=50_000)
    ]
    results: dict[str, Any] = {"docs": args.docs, "rounds": []}
    with (
        cluster(args.bootstrap) as bootstrap,
        tempfile.TemporaryDirectory(prefix="bench-worker-") as d,
    ):
        tmp = Path(d)
        corpus = tmp / "corpus.jsonl"
        corpus.write_bytes(b"\n".join(lines) + b"\n")
        for r in range(args.rounds):
            print(f"round {r + 1} of {args.rounds}", flush=True)
            results["rounds"].append(one_round(bootstrap, lines, corpus, tmp / str(r), args))
        rounds = results["rounds"]
        if len(rounds) > 1:
            ratios = sorted(x["worker_vs_file"] for x in rounds)
            print(
                f"worker / file mode over {len(rounds)} rounds: "
                + ", ".join(f"{x:.0%}" for x in ratios)
                + f" (median {median(ratios):.0%})"
            )
            if not args.skip_pair:
                pairs = sorted(x["two_vs_one"] for x in rounds)
                print(
                    "2 processes / 1 process: "
                    + ", ".join(f"{x:.2f}x" for x in pairs)
                    + f" (median {median(pairs):.2f}x)"
                )
    save("bench_worker", results, args.results)
    return 0


def one_round(
    bootstrap: str, lines: list[bytes], corpus: Path, tmp: Path, args: argparse.Namespace
) -> dict[str, Any]:
    tmp.mkdir()
    n = args.docs
    out: dict[str, Any] = {"file_mode_docs_per_s": n / file_mode(corpus, tmp)}
    print(f"  file mode: {out['file_mode_docs_per_s']:,.0f} docs/s", flush=True)
    names = make_topics(bootstrap, 1)
    fill(bootstrap, names["input"], lines, 1)
    one = out["worker"] = run_workers(bootstrap, names, tmp / "idx1", n, 1, 1)
    out["worker_vs_file"] = one["docs_per_s"] / out["file_mode_docs_per_s"]
    print(
        f"  worker, 1 process: {one['docs_per_s']:,.0f} docs/s "
        f"({out['worker_vs_file']:.0%} of file mode)"
    )
    mem = [s["rss_anon_mb"] for s in one["lag_samples"] if s["rss_anon_mb"]]
    if mem:
        print(
            f"    worker RssAnon MB at start/middle/end: {mem[0]:.0f} / "
            f"{mem[len(mem) // 2]:.0f} / {mem[-1]:.0f} (range {min(mem):.0f}-{max(mem):.0f})"
        )
    print(
        "    lag over time (s: messages waiting): "
        + ", ".join(
            f"{s['t']:.0f}: {s['lag']}"
            for s in one["lag_samples"][:: max(1, len(one["lag_samples"]) // 8)]
        )
    )
    if args.skip_pair:
        return out
    names2 = make_topics(bootstrap, 2)
    fill(bootstrap, names2["input"], lines, 2)
    single = run_workers(bootstrap, names2, tmp / "idx2", n, 1, 2)
    names3 = make_topics(bootstrap, 2)
    fill(bootstrap, names3["input"], lines, 2)
    pair = run_workers(bootstrap, names3, tmp / "idx3", n, 2, 2)
    out["two_partitions"] = {"one": single, "two": pair}
    out["two_vs_one"] = pair["docs_per_s"] / single["docs_per_s"]
    print(
        f"  two partitions: 1 process {single['docs_per_s']:,.0f} docs/s, 2 processes "
        f"sharing one index {pair['docs_per_s']:,.0f} docs/s ({out['two_vs_one']:.2f}x; "
        f"assignments per process {pair['assignments']})"
    )
    return out


if __name__ == "__main__":
    sys.exit(main())
