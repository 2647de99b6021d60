"""`streamdedup replay` next to file-mode `dedup` on the same corpus, in one run.

The topic is filled before any clock starts.  Each replay runs as its own process,
timed from start to exit (so it includes connecting, finding the end offsets and
seeking); file mode is timed the same way.  Four runs:

- file mode (`dedup`) into a fresh index;
- replay --mode rebuild into a fresh index, verdicts to a JSON Lines file;
- replay --mode rebuild into a fresh index, verdicts to a topic (Kafka transactions);
- replay --mode reverdict against the rebuilt index (every id is known: stored
  verdicts come back without re-checking).

The replayed verdicts are compared with file mode's, so a fast wrong answer shows.

    python bench/bench_replay.py --docs 20000                # embedded Tansu broker
    python bench/bench_replay.py --bootstrap kafka:9092      # an external cluster
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import orjson

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
from bench_worker import cluster, fill, save  # noqa: E402
from corpus import generate  # noqa: E402


def timed(cmd: list[str]) -> float:
    t = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True)
    if r.returncode != 0:
        raise SystemExit(r.stderr.decode()[-3000:])
    return time.perf_counter() - t


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "streamdedup.cli", *args]


def verdicts(path: Path) -> list[dict[str, Any]]:
    out = []
    for raw in path.read_bytes().splitlines():
        v = orjson.loads(raw)
        v.pop("source", None)
        out.append(v)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=20000)
    ap.add_argument("--bootstrap", help="use this cluster instead of the embedded broker")
    args = ap.parse_args()
    n = args.docs
    lines = [
        orjson.dumps({"id": d.id, "text": d.text}) for d in generate(n, seed=41, memory=50_000)
    ]
    results: dict[str, Any] = {"docs": n}
    with (
        cluster(args.bootstrap) as bootstrap,
        tempfile.TemporaryDirectory(prefix="bench-replay-") as d,
    ):
        tmp = Path(d)
        corpus = tmp / "corpus.jsonl"
        corpus.write_bytes(b"\n".join(lines) + b"\n")
        from streamdedup.kafka.settings import create_topics

        tag = uuid.uuid4().hex[:8]
        topic, out_topic = f"docs-{tag}", f"replayed-{tag}"
        create_topics(bootstrap, [topic, out_topic], 1, {})
        fill(bootstrap, topic, lines, 1)
        kafka = [
            "--bootstrap-servers",
            bootstrap,
            "--input-topic",
            topic,
            "--progress",
            "never",
        ]
        runs = {
            "file mode (dedup)": cli(
                "dedup",
                str(corpus),
                "--index",
                str(tmp / "i-file"),
                "--output",
                str(tmp / "file.jsonl"),
                "--progress",
                "never",
            ),
            "replay rebuild -> file": cli(
                "replay",
                *kafka,
                "--index",
                str(tmp / "i-rebuild"),
                "--output",
                str(tmp / "rebuild.jsonl"),
            ),
            "replay rebuild -> topic": cli(
                "replay",
                *kafka,
                "--index",
                str(tmp / "i-topic"),
                "--output-topic",
                out_topic,
            ),
            "replay reverdict -> file": cli(
                "replay",
                *kafka,
                "--index",
                str(tmp / "i-rebuild"),
                "--mode",
                "reverdict",
                "--group-id",
                "again",
                "--output",
                str(tmp / "reverdict.jsonl"),
            ),
        }
        base = None
        for name, cmd in runs.items():
            seconds = timed(cmd)
            rate = n / seconds
            base = base or rate
            results[name] = {
                "seconds": seconds,
                "docs_per_s": rate,
                "vs_file_mode": rate / base,
            }
            print(f"{name:26s} {rate:8,.0f} docs/s  ({rate / base:.2f}x file mode)", flush=True)
        expected = verdicts(tmp / "file.jsonl")
        for name in ("rebuild", "reverdict"):
            same = verdicts(tmp / f"{name}.jsonl") == expected
            results[f"{name}_equals_file_mode"] = same
            print(f"replay {name} verdicts equal file mode's: {same}")
    save("bench_replay", results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
