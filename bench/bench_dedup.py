"""streamdedup `dedup` next to datasketch, same corpus, same run.

For each threshold it runs, each as its own process (timed end to end, reading
JSON Lines and writing verdicts): streamdedup on one core (the default
configuration), streamdedup with --workers 1 and 2 (more processes computing
signatures; the machine has two cores), streamdedup with --verify signature,
streamdedup on the numpy code instead of its compiled kernels, and datasketch
(MinHash + MinHashLSH, query then insert).  It prints docs/s, peak memory, index
bytes per document, precision and recall of `duplicate` verdicts against exact
brute-force ground truth, and each speed as a ratio to datasketch.

Every contender runs --repeat times (default 3), each run its own process on a
fresh index, round robin (all contenders once, then again); the fastest run
counts, as with timeit, since on a shared machine noise only ever adds time.
All runs are printed.

    python bench/bench_dedup.py --docs 20000            # about 6 minutes
    python bench/bench_dedup.py --docs 20000 --skip-datasketch --num-perms 64 128 256
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import orjson

HERE = Path(__file__).parent
ROOT = HERE.parent
OUT = HERE / "out"
sys.path.insert(0, str(HERE))
from corpus import generate, ground_truth  # noqa: E402

_MEASURE = (
    "import json, resource, subprocess, sys, time\n"
    "t = time.perf_counter()\n"
    "r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)\n"
    "s = time.perf_counter() - t\n"
    "rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss\n"
    "print(json.dumps({'rc': r.returncode, 'seconds': s, 'rss_kb': rss,"
    " 'stderr': r.stderr.decode()[-2000:]}))\n"
)


def measure(cmd: list[str], env: dict[str, str] | None = None) -> dict[str, Any]:
    """Wall time and peak RSS (largest single process) of a command."""
    r = subprocess.run(
        [sys.executable, "-c", _MEASURE, *cmd],
        capture_output=True,
        check=True,
        env=None if env is None else {**os.environ, **env},
    )
    out: dict[str, Any] = json.loads(r.stdout.decode().strip().splitlines()[-1])
    if out["rc"] not in (0, 1):
        raise RuntimeError(f"{cmd[:4]} failed: {out['stderr']}")
    return out


def corpus_file(n: int, seed: int) -> Path:
    path = OUT / f"corpus-{n}-{seed}.jsonl"
    if not path.exists():
        OUT.mkdir(exist_ok=True)
        with open(path, "wb") as fh:
            for d in generate(n, seed):
                fh.write(d.jsonl())
    return path


def truth_for(path: Path, threshold: float) -> list[bool]:
    cache = path.with_suffix(f".truth-{threshold}.json")
    if cache.exists():
        return json.loads(cache.read_text())  # type: ignore[no-any-return]
    texts = [orjson.loads(x)["text"] for x in path.read_bytes().splitlines()]
    truth = ground_truth(texts, threshold)
    cache.write_text(json.dumps(truth))
    return truth


def accuracy(verdicts: Path, truth: list[bool]) -> tuple[float, float]:
    pred = [orjson.loads(x)["verdict"] == "duplicate" for x in verdicts.read_bytes().splitlines()]
    assert len(pred) == len(truth), (len(pred), len(truth))
    tp = sum(p and t for p, t in zip(pred, truth, strict=True))
    precision = tp / sum(pred) if sum(pred) else 1.0
    recall = tp / sum(truth) if sum(truth) else 1.0
    return precision, recall


def run_streamdedup(
    corpus: Path, tmp: Path, threshold: float, extra: list[str], env: dict[str, str] | None = None
) -> dict[str, Any]:
    index, out = tmp / "index", tmp / "verdicts.jsonl"
    cmd = [
        sys.executable,
        "-m",
        "streamdedup.cli",
        "dedup",
        str(corpus),
        "--index",
        str(index),
        "--output",
        str(out),
        "--threshold",
        str(threshold),
        "--progress",
        "never",
        *extra,
    ]
    m = measure(cmd, env)
    stats = json.loads(
        subprocess.run(
            [sys.executable, "-m", "streamdedup.cli", "stats", "--index", str(index), "--json"],
            capture_output=True,
            check=True,
        ).stdout
    )
    m["bytes_per_doc"] = stats["bytes_used"] / stats["documents"]
    m["file_bytes_per_doc"] = stats["file_bytes"] / stats["documents"]
    m["verdicts"] = out
    return m


def run_datasketch(corpus: Path, tmp: Path, threshold: float, n: int) -> dict[str, Any]:
    out, size = tmp / "verdicts.jsonl", tmp / "size"
    m = measure(
        [
            sys.executable,
            str(HERE / "datasketch_run.py"),
            str(corpus),
            str(out),
            "--threshold",
            str(threshold),
            "--index-size-to",
            str(size),
        ]
    )
    m["bytes_per_doc"] = int(size.read_text()) / n
    m["file_bytes_per_doc"] = None
    m["verdicts"] = out
    return m


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=20000)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--thresholds", type=float, nargs="+", default=[0.8, 0.5])
    ap.add_argument("--skip-datasketch", action="store_true")
    ap.add_argument(
        "--repeat",
        type=int,
        default=3,
        help="runs per contender; the fastest counts (noise on a shared machine only adds)",
    )
    ap.add_argument(
        "--num-perms",
        type=int,
        nargs="+",
        help="instead of the usual contenders, streamdedup's default at each of these K "
        "(the K trade-off in docs/parameters.md)",
    )
    args = ap.parse_args()

    # What an installed package has: its modules' bytecode compiled (an editable
    # install leaves that to the first run, and PYTHONDONTWRITEBYTECODE to none).
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", str(ROOT / "streamdedup")], check=True
    )
    version = subprocess.run(
        [sys.executable, "-m", "streamdedup.cli", "--version"], capture_output=True, text=True
    ).stdout.strip()
    print(version)
    corpus = corpus_file(args.docs, args.seed)
    size_mb = corpus.stat().st_size / 1e6
    print(f"corpus: {args.docs:,} documents, {size_mb:.1f} MB ({corpus})", flush=True)
    results: list[dict[str, Any]] = []
    for t in args.thresholds:
        truth = truth_for(corpus, t)
        print(f"\nthreshold {t}: {sum(truth):,} documents have an earlier one at Jaccard >= {t}")
        contenders: list[tuple[str, Any]] = [
            ("streamdedup (default, 1 core)", lambda tmp, t=t: run_streamdedup(corpus, tmp, t, [])),
            (
                "streamdedup --workers 1 (2 cores)",
                lambda tmp, t=t: run_streamdedup(corpus, tmp, t, ["--workers", "1"]),
            ),
            (
                "streamdedup --workers 2 (2 cores)",
                lambda tmp, t=t: run_streamdedup(corpus, tmp, t, ["--workers", "2"]),
            ),
            (
                "streamdedup --verify signature",
                lambda tmp, t=t: run_streamdedup(corpus, tmp, t, ["--verify", "signature"]),
            ),
            (
                "streamdedup, numpy kernels",
                lambda tmp, t=t: run_streamdedup(
                    corpus, tmp, t, [], {"STREAMDEDUP_KERNELS": "numpy"}
                ),
            ),
        ]
        if args.num_perms:
            contenders = [
                (
                    f"streamdedup --num-perm {k}",
                    lambda tmp, t=t, k=k: run_streamdedup(corpus, tmp, t, ["--num-perm", str(k)]),
                )
                for k in args.num_perms
            ]
        if not args.skip_datasketch:
            contenders.append(
                (
                    "datasketch MinHashLSH",
                    lambda tmp, t=t: run_datasketch(corpus, tmp, t, args.docs),
                )
            )
        # Round robin -- every contender once, then again -- so that a slow spell of
        # the machine falls on all of them alike rather than on one contender's runs.
        runs: dict[str, list[float]] = {name: [] for name, _ in contenders}
        last: dict[str, tuple[dict[str, Any], float, float]] = {}
        for _ in range(args.repeat):
            for name, fn in contenders:
                with tempfile.TemporaryDirectory(prefix="bench-") as d:  # a fresh index
                    m = fn(Path(d))
                    p, r = accuracy(m["verdicts"], truth)
                runs[name].append(m["seconds"])
                last[name] = (m, p, r)
        rows = []
        for name, _ in contenders:
            m, p, r = last[name]
            rows.append(
                {
                    "threshold": t,
                    "name": name,
                    "docs_per_s": args.docs / min(runs[name]),
                    "seconds": min(runs[name]),
                    "all_seconds": runs[name],
                    "peak_rss_mb": m["rss_kb"] / 1024,
                    "bytes_per_doc": m["bytes_per_doc"],
                    "file_bytes_per_doc": m["file_bytes_per_doc"],
                    "precision": p,
                    "recall": r,
                }
            )
            every = ", ".join(f"{args.docs / x:,.0f}" for x in runs[name])
            print(f"  {name:32} {rows[-1]['docs_per_s']:9,.0f} docs/s  (runs: {every})", flush=True)
        base = next((x["docs_per_s"] for x in rows if x["name"].startswith("datasketch")), None)
        print(
            f"\n  {'':32} {'docs/s':>9} {'vs ds':>6} {'peak MB':>8} {'B/doc':>7} "
            f"{'precision':>9} {'recall':>7}"
        )
        for x in rows:
            x["speedup_vs_datasketch"] = x["docs_per_s"] / base if base else None
            ratio = f"{x['speedup_vs_datasketch']:5.1f}x" if base else "   n/a"
            print(
                f"  {x['name']:32} {x['docs_per_s']:9,.0f} {ratio:>6} {x['peak_rss_mb']:8.0f} "
                f"{x['bytes_per_doc']:7,.0f} {x['precision']:9.4f} {x['recall']:7.4f}"
            )
        results.extend(rows)
    OUT.mkdir(exist_ok=True)
    (OUT / "bench_dedup.json").write_text(
        json.dumps(
            {"docs": args.docs, "seed": args.seed, "cpu_count": os.cpu_count(), "results": results},
            indent=2,
        )
    )
    print(f"\nresults written to {OUT / 'bench_dedup.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
