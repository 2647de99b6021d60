"""streamdedup `dedup` next to datasketch and rensa, on three streams, in one run.

For each stream (crawl-like: corpus.py; template-heavy: templates.py; short one-line
documents: shorts.py) and threshold
it runs, each as its own process (timed end to end, reading JSON Lines and writing
verdicts): streamdedup on one core (the default configuration), streamdedup with
--workers 1 (unless --skip-workers-1), datasketch (one MinHash template for all
documents + MinHashLSH) and rensa (RMinHash + RMinHashLSH), both query then insert
(anchors.py); with --more also streamdedup --workers 2, --verify signature and the
numpy code.  It prints docs/s, peak memory, index bytes per document, precision and
recall of `duplicate` verdicts against exact brute-force ground truth, each speed as
a ratio to datasketch and to rensa, and the template-heavy stream's speed as a ratio
to the crawl-like one's.

Every contender runs --repeat times (default 3), each run its own process on a
fresh index, round robin (all contenders once, then again); the fastest run
counts, as with timeit, since on a shared machine noise only ever adds time.
All runs are printed.

    python bench/bench_dedup.py --docs 20000            # about 20 minutes
    python bench/bench_dedup.py --targets --repeat 2    # issue 22's targets, 6 minutes
    python bench/bench_dedup.py --docs 50000 --streams short --skip-anchors
    python bench/bench_dedup.py --docs 20000 --skip-datasketch --num-perms 64 128 256
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

HERE = Path(__file__).parent
ROOT = HERE.parent
OUT = HERE / "out"
sys.path.insert(0, str(HERE))
import shorts  # noqa: E402
import templates  # noqa: E402
from corpus import generate, ground_truth  # noqa: E402

_MEASURE = (
    "import json, resource, subprocess, sys, time\n"
    "t = time.perf_counter()\n"
    "r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)\n"
    "s = time.perf_counter() - t\n"
    "u = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
    "rss, cpu = u.ru_maxrss, u.ru_utime + u.ru_stime\n"
    "print(json.dumps({'rc': r.returncode, 'seconds': s, 'cpu': cpu, 'rss_kb': rss,"
    " 'stderr': r.stderr.decode()[-2000:]}))\n"
)


def measure(
    cmd: list[str], env: dict[str, str] | None = None, cwd: Path | None = None
) -> dict[str, Any]:
    """Wall time and peak RSS (largest single process) of a command."""
    r = subprocess.run(
        [sys.executable, "-c", _MEASURE, *cmd],
        capture_output=True,
        check=True,
        env=None if env is None else {**os.environ, **env},
        cwd=cwd,
    )
    out: dict[str, Any] = json.loads(r.stdout.decode().strip().splitlines()[-1])
    if out["rc"] not in (0, 1):
        raise RuntimeError(f"{cmd[:4]} failed: {out['stderr']}")
    return out


STREAMS = {
    "crawl-like": ("corpus", generate),
    "template-heavy": ("templates", templates.generate),
    "short": ("shorts", shorts.generate),  # one-line documents (item 5: 50,000 docs/s)
}


def corpus_file(n: int, seed: int, stream: str = "crawl-like", out: Path = OUT) -> Path:
    prefix, make = STREAMS[stream]
    path = out / f"{prefix}-{n}-{seed}.jsonl"
    if not path.exists():
        out.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as fh:
            for d in make(n, seed):
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
    corpus: Path,
    tmp: Path,
    threshold: float,
    extra: list[str],
    env: dict[str, str] | None = None,
    source: Path | None = None,
) -> dict[str, Any]:
    """`source`: another checkout of streamdedup to run instead of this one (the
    baseline of a side-by-side comparison), put first on the path, run from outside
    this tree."""
    if source is not None:
        env = {**(env or {}), "PYTHONPATH": str(source)}
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
    cwd = tmp if source is not None else None
    m = measure(cmd, env, cwd)
    stats = json.loads(
        subprocess.run(
            [sys.executable, "-m", "streamdedup.cli", "stats", "--index", str(index), "--json"],
            capture_output=True,
            check=True,
            env=None if env is None else {**os.environ, **env},
            cwd=cwd,
        ).stdout
    )
    m["bytes_per_doc"] = stats["bytes_used"] / stats["documents"]
    m["file_bytes_per_doc"] = stats["file_bytes"] / stats["documents"]
    m["verdicts"] = out
    return m


@functools.cache
def rensa_bands(threshold: float) -> int:
    """rensa's bands at K = 128 (anchors.py's default), worked out here rather than in
    each timed rensa run: that imports datasketch, a second of start-up."""
    from anchors import rensa_bands as bands

    return bands(threshold, 128)


def run_anchor(library: str, corpus: Path, tmp: Path, threshold: float, n: int) -> dict[str, Any]:
    out, size = tmp / "verdicts.jsonl", tmp / "size"
    bands = ["--bands", str(rensa_bands(threshold))] if library == "rensa" else []
    m = measure(
        [
            sys.executable,
            str(HERE / "anchors.py"),
            library,
            str(corpus),
            str(out),
            "--threshold",
            str(threshold),
            "--index-size-to",
            str(size),
            *bands,
        ]
    )
    m["bytes_per_doc"] = int(size.read_text()) / n
    m["file_bytes_per_doc"] = None
    m["verdicts"] = out
    return m


def contenders_for(
    corpus: Path,
    t: float,
    n: int,
    more: bool,
    anchors: bool,
    baseline: Path | None,
    num_perms: list[int] | None = None,
    workers_1: bool = True,
) -> list[tuple[str, Any]]:
    if num_perms:  # the K trade-off (docs/parameters.md): streamdedup's default at each K
        out: list[tuple[str, Any]] = [
            (
                f"streamdedup --num-perm {k}",
                lambda tmp, k=k: run_streamdedup(corpus, tmp, t, ["--num-perm", str(k)]),
            )
            for k in num_perms
        ]
        return out + (anchor_contenders(corpus, t, n) if anchors else [])
    out = [("streamdedup (default, 1 core)", lambda tmp: run_streamdedup(corpus, tmp, t, []))]
    if workers_1:
        out.append(
            (
                "streamdedup --workers 1",
                lambda tmp: run_streamdedup(corpus, tmp, t, ["--workers", "1"]),
            )
        )
    if baseline is not None:
        out.append(
            (
                "baseline (--baseline, 1 core)",
                lambda tmp: run_streamdedup(corpus, tmp, t, [], source=baseline),
            )
        )
    if more:
        out += [
            (
                "streamdedup --workers 2",
                lambda tmp: run_streamdedup(corpus, tmp, t, ["--workers", "2"]),
            ),
            (
                "streamdedup --verify signature",
                lambda tmp: run_streamdedup(corpus, tmp, t, ["--verify", "signature"]),
            ),
            (
                "streamdedup, numpy kernels",
                lambda tmp: run_streamdedup(corpus, tmp, t, [], {"STREAMDEDUP_KERNELS": "numpy"}),
            ),
        ]
    return out + (anchor_contenders(corpus, t, n) if anchors else [])


def anchor_contenders(corpus: Path, t: float, n: int) -> list[tuple[str, Any]]:
    return [
        ("datasketch (template)", lambda tmp: run_anchor("datasketch", corpus, tmp, t, n)),
        ("rensa", lambda tmp: run_anchor("rensa", corpus, tmp, t, n)),
    ]


def run_round_robin(
    contenders: list[tuple[str, Any]], truth: list[bool], n: int, repeat: int
) -> list[dict[str, Any]]:
    """Every contender once, then again (so that a slow spell of the machine falls
    on all of them alike rather than on one contender's runs); the fastest counts."""
    runs: dict[str, list[float]] = {name: [] for name, _ in contenders}
    cpu: dict[str, list[float]] = {name: [] for name, _ in contenders}
    last: dict[str, tuple[dict[str, Any], float, float]] = {}
    for _ in range(repeat):
        for name, fn in contenders:
            with tempfile.TemporaryDirectory(prefix="bench-") as d:  # a fresh index
                m = fn(Path(d))
                p, r = accuracy(m["verdicts"], truth)
            runs[name].append(m["seconds"])
            cpu[name].append(m["cpu"])
            last[name] = (m, p, r)
    rows = []
    for name, _ in contenders:
        m, p, r = last[name]
        rows.append(
            {
                "name": name,
                "docs_per_s": n / min(runs[name]),
                "seconds": min(runs[name]),
                "all_seconds": runs[name],
                # CPU seconds (user + system, every process of the run): on a machine
                # other jobs share, less disturbed than the wall clock (they slow a run
                # by taking turns on the cores, which CPU time does not count)
                "cpu_seconds": min(cpu[name]),
                "docs_per_cpu_s": n / min(cpu[name]),
                "peak_rss_mb": m["rss_kb"] / 1024,
                "bytes_per_doc": m["bytes_per_doc"],
                "file_bytes_per_doc": m["file_bytes_per_doc"],
                "precision": p,
                "recall": r,
            }
        )
        every = ", ".join(f"{n / x:,.0f}" for x in runs[name])
        per_cpu = ", ".join(f"{n / x:,.0f}" for x in cpu[name])
        print(
            f"  {name:32} {rows[-1]['docs_per_s']:9,.0f} docs/s  (runs: {every}; "
            f"per CPU second: {per_cpu})",
            flush=True,
        )
    return rows


def print_table(rows: list[dict[str, Any]]) -> None:
    """docs/s by the wall clock, and per CPU second, each as a ratio to the anchors."""
    ds = next((x for x in rows if x["name"].startswith("datasketch")), None)
    rs = next((x for x in rows if x["name"] == "rensa"), None)
    print(
        f"\n  {'':32} {'docs/s':>9} {'vs ds':>6} {'vs rensa':>8} {'/cpu-s':>7} {'vs ds':>6} "
        f"{'vs rensa':>8} {'peak MB':>8} {'B/doc':>7} {'precision':>9} {'recall':>7}"
    )
    for x in rows:
        x["vs_datasketch"] = x["docs_per_s"] / ds["docs_per_s"] if ds else None
        x["vs_rensa"] = x["docs_per_s"] / rs["docs_per_s"] if rs else None
        x["cpu_vs_datasketch"] = x["docs_per_cpu_s"] / ds["docs_per_cpu_s"] if ds else None
        x["cpu_vs_rensa"] = x["docs_per_cpu_s"] / rs["docs_per_cpu_s"] if rs else None
        a = f"{x['vs_datasketch']:5.1f}x" if ds else "   n/a"
        b = f"{x['vs_rensa']:7.2f}x" if rs else "     n/a"
        c = f"{x['cpu_vs_datasketch']:5.1f}x" if ds else "   n/a"
        d = f"{x['cpu_vs_rensa']:7.2f}x" if rs else "     n/a"
        print(
            f"  {x['name']:32} {x['docs_per_s']:9,.0f} {a:>6} {b:>8} {x['docs_per_cpu_s']:7,.0f} "
            f"{c:>6} {d:>8} {x['peak_rss_mb']:8.0f} {x['bytes_per_doc']:7,.0f} "
            f"{x['precision']:9.4f} {x['recall']:7.4f}"
        )


# `--targets`: issue 22's figures from one command, as (streams, documents, thresholds)
# of each part (the ratios of a part are taken within it: one build, one run).
TARGET_RUNS: tuple[tuple[tuple[str, ...], int, tuple[float, ...]], ...] = (
    (("crawl-like", "short"), 50_000, (0.8,)),
    (("template-heavy", "crawl-like"), 20_000, (0.8, 0.9)),
)
DEFAULT = "streamdedup (default, 1 core)"


def run_streams(
    streams: Sequence[str], docs: int, thresholds: Sequence[float], args: argparse.Namespace
) -> list[dict[str, Any]]:
    """Every contender on each stream and threshold; the rows, tagged with them."""
    results: list[dict[str, Any]] = []
    for stream in streams:
        corpus = corpus_file(docs, args.seed, stream, args.out)
        size_mb = corpus.stat().st_size / 1e6
        print(f"\n{stream}: {docs:,} documents, {size_mb:.1f} MB ({corpus})", flush=True)
        for t in thresholds:
            truth = truth_for(corpus, t)
            have = f"{sum(truth):,} documents have an earlier one at Jaccard >= {t}"
            print(f"\n{stream}, threshold {t}: {have}", flush=True)
            contenders = contenders_for(
                corpus,
                t,
                docs,
                args.more,
                not args.skip_anchors,
                args.baseline,
                args.num_perms,
                workers_1=not args.skip_workers_1,
            )
            rows = run_round_robin(contenders, truth, docs, args.repeat)
            print_table(rows)
            for x in rows:
                x.update(stream=stream, threshold=t, docs=docs)
            results.extend(rows)
    return results


def template_ratios(results: list[dict[str, Any]]) -> dict[float, tuple[float, float]]:
    """Template-heavy docs/s over crawl-like docs/s of the default contender, by the
    wall clock and per CPU second, at each threshold both streams ran."""
    out = {}
    for t in sorted({x["threshold"] for x in results}):
        ran = {x["stream"]: x for x in results if x["threshold"] == t and x["name"] == DEFAULT}
        if "template-heavy" in ran and "crawl-like" in ran:
            a, b = ran["template-heavy"], ran["crawl-like"]
            out[t] = (
                a["docs_per_s"] / b["docs_per_s"],
                a["docs_per_cpu_s"] / b["docs_per_cpu_s"],
            )
    return out


def check_targets(
    large: list[dict[str, Any]], small: list[dict[str, Any]]
) -> list[tuple[str, bool, str]]:
    """Issue 22's items against the rows of `--targets`' two parts (`large`: 50,000
    crawl-like and short documents at 0.8; `small`: 20,000 template-heavy and
    crawl-like at 0.8 and 0.9): (item, met, the figures)."""

    def row(rows: list[dict[str, Any]], stream: str, t: float, name: str = DEFAULT) -> Any:
        return next(
            x for x in rows if x["stream"] == stream and x["threshold"] == t and x["name"] == name
        )

    out = []
    tmpl = [row(small, "template-heavy", t) for t in (0.8, 0.9)]
    out.append(
        (
            "1 template-heavy precision and recall >= 0.99 at 0.8 and 0.9",
            all(x["precision"] >= 0.99 and x["recall"] >= 0.99 for x in tmpl),
            ", ".join(
                f"{x['threshold']}: P {x['precision']:.4f} R {x['recall']:.4f}" for x in tmpl
            ),
        )
    )
    ratios = template_ratios(small)
    out.append(
        (
            "2 template-heavy docs/s >= 0.60 of crawl-like, same run",
            all(wall >= 0.60 for wall, _ in ratios.values()) and bool(ratios),
            ", ".join(f"{t}: {w:.2f} (per CPU s {c:.2f})" for t, (w, c) in ratios.items()),
        )
    )
    anchors = [x for x in large + small if x["name"] in ("datasketch (template)", "rensa")]
    out.append(
        (
            "3 datasketch (template) and rensa side by side",
            {x["name"] for x in anchors} == {"datasketch (template)", "rensa"},
            f"{len(anchors)} anchor rows, precision and recall each",
        )
    )
    crawl = row(large, "crawl-like", 0.8)
    out.append(
        (
            "4 crawl-like 50k: >= 10x datasketch and >= 3x rensa on one core",
            crawl["vs_datasketch"] >= 10 and crawl["vs_rensa"] >= 3,
            f"{crawl['docs_per_s']:,.0f} docs/s = {crawl['vs_datasketch']:.1f}x and "
            f"{crawl['vs_rensa']:.2f}x (per CPU s {crawl['cpu_vs_datasketch']:.1f}x and "
            f"{crawl['cpu_vs_rensa']:.2f}x)",
        )
    )
    short = row(large, "short", 0.8)
    out.append(
        (
            "5 short documents: >= 50,000 docs/s end to end",
            short["docs_per_s"] >= 50_000,
            f"{short['docs_per_s']:,.0f} docs/s ({short['vs_rensa']:.2f}x rensa)",
        )
    )
    ours = [x for x in large + small if x["name"].startswith("streamdedup")]
    out.append(
        (
            "6 precision 1.000 on every corpus (exact verification)",
            all(x["precision"] == 1.0 for x in ours),
            f"lowest {min(x['precision'] for x in ours):.4f} over {len(ours)} rows",
        )
    )
    out.append(
        (
            "7 crawl-like index <= 2.5 KB per document",
            crawl["bytes_per_doc"] <= 2500,
            f"{crawl['bytes_per_doc']:,.0f} B/doc",
        )
    )
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=20000)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--thresholds", type=float, nargs="+", default=[0.8, 0.9])
    ap.add_argument("--streams", nargs="+", choices=list(STREAMS), default=list(STREAMS))
    ap.add_argument(
        "--targets",
        action="store_true",
        help="issue 22's runs (50,000 crawl-like and short documents at 0.8; 20,000 "
        "template-heavy and crawl-like at 0.8 and 0.9) and each target met or missed",
    )
    ap.add_argument(
        "--scale",
        type=float,
        default=1.0,
        help="with --targets: that share of the documents (a quick check of the script)",
    )
    ap.add_argument(
        "--skip-anchors",
        "--skip-datasketch",  # its name before rensa joined (README commands use it)
        dest="skip_anchors",
        action="store_true",
        help="no datasketch or rensa",
    )
    ap.add_argument(
        "--skip-workers-1",
        action="store_true",
        help="no `streamdedup --workers 1` (the worker pool's cost at one worker; no target "
        "of --targets is about it)",
    )
    ap.add_argument("--out", type=Path, default=OUT, help="corpora, ground truth and results")
    ap.add_argument("--more", action="store_true", help="also --workers 2, signature, numpy")
    ap.add_argument(
        "--num-perms",
        type=int,
        nargs="+",
        help="instead of the usual streamdedup contenders, its default at each of these K "
        "(the K trade-off in docs/parameters.md)",
    )
    ap.add_argument(
        "--baseline",
        type=Path,
        help="a checkout of another streamdedup version (its kernels built) to run side by side",
    )
    ap.add_argument(
        "--repeat",
        type=int,
        default=3,
        help="runs per contender; the fastest counts (noise on a shared machine only adds)",
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
    if args.targets and (args.skip_anchors or args.num_perms):
        ap.error("--targets runs the default contenders and both anchors")
    if args.targets:
        large, small = (
            run_streams(streams, max(int(n * args.scale), 10), ts, args)
            for streams, n, ts in TARGET_RUNS
        )
        results = large + small
    else:
        results = run_streams(args.streams, args.docs, args.thresholds, args)
    # Template-heavy against crawl-like: the same build, the same run.
    for t, (ratio, cpu_ratio) in template_ratios(small if args.targets else results).items():
        print(
            f"\nthreshold {t}: template-heavy / crawl-like docs/s (1 core) = {ratio:.2f} "
            f"(per CPU second: {cpu_ratio:.2f})"
        )
    if args.targets:
        print("\nissue 22's targets:")
        for item, met, figures in check_targets(large, small):
            print(f"  {'met   ' if met else 'MISSED'} item {item}: {figures}")
    (args.out / "bench_dedup.json").write_text(
        json.dumps(
            {"docs": args.docs, "seed": args.seed, "cpu_count": os.cpu_count(), "results": results},
            indent=2,
        )
    )
    print(f"\nresults written to {args.out / 'bench_dedup.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
