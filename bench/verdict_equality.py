"""Verdict equality of two installed trees: the proof a refactor changed no verdict.

A refactor (issue 36) must leave every verdict byte-identical.  This script runs two
installed trees (each a venv with its own `streamdedup` executable) over the same
corpora, made once with bench/'s own generators and cached, and compares what they
write byte for byte:

- `dedup` of 50,000 crawl-like (corpus.py), 50,000 short (shorts.py) and 20,000
  template-heavy (templates.py) documents at `--threshold` 0.8 and 0.9, a fresh index
  each run;
- a worker run: a crawl-like stream in a one-partition topic of an embedded broker
  (loopback), `streamdedup worker --idle-exit`, the committed verdict topic read in
  order (the verdict values are compared, the fresh input topic's random tag in their
  `source` written as the fixed name `eq-docs`);
- a segmented run: `dedup` of part A, `seal` of its index, `dedup --base-segment` of
  part B on a new index;
- a backfill with `--segment` (PySpark `local[2]` on loopback) of part A, then
  `dedup --base-segment` of part B on that segment.

Each tree's outputs are kept under `--out DIR/<side>/`, so a later comparison reruns
only the new tree against the cached old outputs (`--old-cached`).  One line per
file: `same` or `DIFFERENT` with the first differing line; exit 1 if any differs.

    python bench/verdict_equality.py --old /work/wt/base/.venv --new .venv --out /tmp/eq
    python bench/verdict_equality.py --old-cached /tmp/eq/old --new .venv --out /tmp/eq
    python bench/verdict_equality.py --old .venv --new .venv --docs-scale 0.02 --cases dedup
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
from bench_dedup import corpus_file  # noqa: E402
from bench_worker import cluster  # noqa: E402

# stream -> documents at --docs-scale 1 (the sizes issue 36's "Done when" names)
DEDUP_SIZES = {"crawl-like": 50_000, "short": 50_000, "template-heavy": 20_000}
THRESHOLDS = (0.8, 0.9)
WORKER_DOCS = 6_000
SPLIT_DOCS = 20_000  # segmented and backfill: the first half is part A, the rest part B
CASES = ("dedup", "worker", "segmented", "backfill")


class Tree:
    """One installed tree: its `streamdedup` executable, run from outside any checkout
    with the caller's environment less PYTHONPATH (nothing but the venv's own code)."""

    def __init__(self, venv: Path, work: Path) -> None:
        self.exe = venv.resolve() / "bin" / "streamdedup"
        if not self.exe.exists():
            raise SystemExit(f"no streamdedup in {venv}/bin")
        self.work = work
        self.env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        self.env["SPARK_LOCAL_IP"] = "127.0.0.1"

    def run(self, *args: str) -> None:
        r = subprocess.run([str(self.exe), *args], cwd=self.work, env=self.env, capture_output=True)
        if r.returncode not in (0, 1):  # 1: duplicates were found
            raise RuntimeError(f"streamdedup {args[0]} failed: {r.stderr.decode()[-3000:]}")


def split(src: Path, at: int, out: Path) -> tuple[Path, Path]:
    """Parts A (the first `at` lines) and B (the rest) of a corpus, cached beside it."""
    a, b = out / f"{src.stem}-A{at}.jsonl", out / f"{src.stem}-B{at}.jsonl"
    if not (a.exists() and b.exists()):
        lines = src.read_bytes().splitlines(keepends=True)
        a.write_bytes(b"".join(lines[:at]))
        b.write_bytes(b"".join(lines[at:]))
    return a, b


def run_dedup(tree: Tree, corpora: dict[str, Path], out: Path) -> None:
    for stream, src in corpora.items():
        for t in THRESHOLDS:
            name = f"dedup-{stream}-{t}"
            tree.run(
                "dedup", str(src), "--index", str(tree.work / f"idx-{name}"),
                "--output", str(out / f"{name}.jsonl"), "--threshold", str(t),
                "--progress", "never",
            )  # fmt: skip


def run_segmented(tree: Tree, parts: tuple[Path, Path], out: Path) -> None:
    a, b = parts
    idx, seg, idx2 = (tree.work / n for n in ("seg-idx-a", "seg-sealed", "seg-idx-b"))
    tree.run("dedup", str(a), "--index", str(idx), "--output", str(out / "segmented-A.jsonl"))
    tree.run("seal", "--index", str(idx), str(seg))
    tree.run(
        "dedup", str(b), "--index", str(idx2), "--base-segment", str(seg),
        "--output", str(out / "segmented-B.jsonl"),
    )  # fmt: skip


def run_backfill(tree: Tree, parts: tuple[Path, Path], out: Path) -> None:
    a, b = parts
    seg, idx = tree.work / "bf-segment", tree.work / "bf-idx-b"
    tree.run(
        "backfill", str(a), "--output", str(out / "backfill-A.jsonl"),
        "--segment", str(seg), "--spark-master", "local[2]",
    )  # fmt: skip
    tree.run(
        "dedup", str(b), "--index", str(idx), "--base-segment", str(seg),
        "--output", str(out / "backfill-B.jsonl"),
    )  # fmt: skip


def run_worker(tree: Tree, src: Path, out: Path, bootstrap: str) -> None:
    """Fresh topics (one partition: one order), the stream produced by this script
    (the same bytes for either tree), the tree's worker until idle, then every
    committed verdict in order, one value a line."""
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import KafkaAdminClient, NewTopic

    tag = uuid.uuid4().hex[:8]
    docs, verdicts, dlq = f"eq-docs-{tag}", f"eq-verdicts-{tag}", f"eq-dlq-{tag}"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic(t, 1, 1) for t in (docs, verdicts, dlq)])
    admin.close()
    lines = src.read_bytes().splitlines()
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, batch_size=1 << 20)
    for raw in lines:
        producer.send(docs, value=raw, partition=0)
    producer.flush()
    producer.close()
    tree.run(
        "worker", "--bootstrap-servers", bootstrap, "--input-topic", docs,
        "--output-topic", verdicts, "--dead-letter-topic", dlq, "--group-id", f"eq-{tag}",
        "--index", str(tree.work / "worker-idx"), "--idle-exit", "5",
    )  # fmt: skip
    reader = KafkaConsumer(
        bootstrap_servers=bootstrap,
        isolation_level="read_committed",
        enable_auto_commit=False,
        consumer_timeout_ms=5000,
    )
    tp = TopicPartition(verdicts, 0)
    reader.assign([tp])
    reader.seek_to_beginning(tp)
    values = [m.value for m in reader]
    reader.close()
    # the one thing that differs from run to run: the fresh topic's name (its tag)
    ours, fixed = f'"topic":"{docs}"'.encode(), b'"topic":"eq-docs"'
    (out / "worker.jsonl").write_bytes(b"".join(v.replace(ours, fixed) + b"\n" for v in values))


def run_tree(venv: Path, side: Path, args: argparse.Namespace, corpora: dict[str, Any]) -> None:
    """Every chosen case for one tree, its outputs under `side`, timings in run.json."""
    side.mkdir(parents=True, exist_ok=True)
    for old in side.glob("*.jsonl"):
        old.unlink()
    work = side / "work"
    subprocess.run(["rm", "-rf", str(work)], check=True)
    work.mkdir()
    tree = Tree(venv, work)
    steps: dict[str, Callable[[], None]] = {
        "dedup": lambda: run_dedup(tree, corpora["dedup"], side),
        "segmented": lambda: run_segmented(tree, corpora["split"], side),
        "backfill": lambda: run_backfill(tree, corpora["split_bf"], side),
    }
    seconds: dict[str, float] = {}
    with cluster(args.bootstrap if "worker" in args.cases else "unused") as bootstrap:
        steps["worker"] = lambda: run_worker(tree, corpora["worker"], side, bootstrap)
        for case in args.cases:
            t = time.perf_counter()
            steps[case]()
            seconds[case] = round(time.perf_counter() - t, 1)
            print(f"  {side.name}: {case} in {seconds[case]:.1f} s", flush=True)
    subprocess.run(["rm", "-rf", str(work)], check=True)
    run = {"venv": str(venv.resolve()), "plan": plan_of(args), "seconds": seconds}
    (side / "run.json").write_text(json.dumps(run, indent=2) + "\n")


def plan_of(args: argparse.Namespace) -> dict[str, Any]:
    """What outputs depend on besides the tree: equal plans, comparable outputs."""
    return {"docs_scale": args.docs_scale, "seed": args.seed, "cases": list(args.cases)}


def first_difference(a: bytes, b: bytes) -> str:
    la, lb = a.splitlines(), b.splitlines()
    for i, (x, y) in enumerate(zip(la, lb, strict=False)):
        if x != y:
            return f"line {i + 1}: old {x.decode()[:300]!r} new {y.decode()[:300]!r}"
    return f"old has {len(la)} lines, new {len(lb)}"


def compare(old: Path, new: Path) -> bool:
    names = sorted({p.name for p in (*old.glob("*.jsonl"), *new.glob("*.jsonl"))})
    same = bool(names)
    for name in names:
        a, b = old / name, new / name
        if not (a.exists() and b.exists()):
            print(f"{name}: DIFFERENT (only in {'old' if a.exists() else 'new'})")
            same = False
        elif a.read_bytes() == b.read_bytes():
            print(f"{name}: same ({len(a.read_bytes().splitlines()):,} verdicts)")
        else:
            print(f"{name}: DIFFERENT ({first_difference(a.read_bytes(), b.read_bytes())})")
            same = False
    return same


def make_corpora(args: argparse.Namespace, store: Path) -> dict[str, Any]:
    def n(x: int) -> int:
        return max(10, round(x * float(args.docs_scale)))

    split_docs = n(SPLIT_DOCS)
    whole = corpus_file(split_docs, args.seed, "crawl-like", store)
    return {
        "dedup": {s: corpus_file(n(d), args.seed, s, store) for s, d in DEDUP_SIZES.items()},
        "worker": corpus_file(n(WORKER_DOCS), args.seed + 1, "crawl-like", store),
        "split": split(whole, split_docs // 2, store),
        "split_bf": split(corpus_file(split_docs, args.seed + 2, "crawl-like", store),
                          split_docs // 2, store),
    }  # fmt: skip


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    old = ap.add_mutually_exclusive_group(required=True)
    old.add_argument("--old", type=Path, help="the old tree's venv")
    old.add_argument("--old-cached", type=Path, help="an earlier run's outputs (DIR/<side>)")
    ap.add_argument("--new", type=Path, required=True, help="the new tree's venv")
    ap.add_argument("--out", type=Path, default=HERE / "out" / "equality")
    ap.add_argument("--docs-scale", type=float, default=1.0, help="times every corpus size")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--cases", default=",".join(CASES), help=f"of {','.join(CASES)}")
    ap.add_argument("--bootstrap", help="a Kafka broker for the worker case (else embedded)")
    args = ap.parse_args(argv)
    args.cases = [c for c in args.cases.split(",") if c]
    if unknown := set(args.cases) - set(CASES):
        ap.error(f"unknown cases: {sorted(unknown)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    corpora = make_corpora(args, args.out / "corpora")
    if args.old_cached is not None:
        old_side = args.old_cached
        cached = json.loads((old_side / "run.json").read_text())
        if cached["plan"] != plan_of(args):
            raise SystemExit(f"{old_side} was run with {cached['plan']}, not {plan_of(args)}")
    else:
        old_side = args.out / "old"
        run_tree(args.old, old_side, args, corpora)
    new_side = args.out / "new"
    if old_side.resolve() == new_side.resolve():
        raise SystemExit(f"{old_side} would be overwritten by the new tree's run: copy it first")
    run_tree(args.new, new_side, args, corpora)
    return 0 if compare(old_side, new_side) else 1


if __name__ == "__main__":
    sys.exit(main())
