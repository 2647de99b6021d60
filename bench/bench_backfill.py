"""`streamdedup backfill` (PySpark, `local[1]` and `local[2]`) next to `dedup` on the
same crawl-like stream (corpus.py), in one run, and a projection to a cluster.

Each contender runs as its own process, timed end to end (JVM start included for
backfill) and by its own clock (backfill: from its first stage to the renamed
output); peak memory is the largest sum of the resident sizes of the whole process
tree (for backfill: the driver, the JVM and the Python workers), sampled from /proc
every 0.2 s.  Shuffle bytes are Spark's own count (the status
store behind its web UI).  The verdict files must be identical, else the run fails.

    python bench/bench_backfill.py --docs 50000
    python bench/bench_backfill.py --docs 500000 --skip-local1
    python bench/bench_backfill.py --docs 20000 --skip-local1 --segment

`--segment`: also `backfill local[2] --segment` (the index as a sealed segment) and
`streamdedup seal` of dedup's index, the way a stream gets the same segment; both
segments must hold the same documents.

`--pyspark-daemon`: also `local[2]` with the task workers forked from PySpark's own
daemon instead of the package's (backfill/worker_daemon.py): the same build, one
setting apart, to show what freezing the daemon's objects saves.

The projection: with r1 the job's docs/s on one core (`local[1]`, its own clock) and
e = r2 / (2 r1) the efficiency measured from two cores, C cores take about
N / (r1 * C * e) seconds for N documents; the shuffle (s bytes a document, measured)
must also cross the network: N * s / (nodes * B) at B bytes/s per node.  The larger
of the two is the estimate (no stragglers, no skew: a lower bound in practice).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
from bench_dedup import OUT, corpus_file  # noqa: E402

CLUSTER_NODES = 50
CORES_PER_NODE = 16
NETWORK_BYTES_PER_S = 1.25e9 / 2  # 10 Gbit/s per node, half of it for the shuffle


def _tree_rss(root: int) -> int:
    """Resident bytes of `root` and all its descendants, from /proc."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    page = os.sysconf("SC_PAGE_SIZE")
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid = int(name)
        children.setdefault(int(fields[1]), []).append(pid)
        rss[pid] = int(fields[21]) * page
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        total += rss.get(pid, 0)
        todo += children.get(pid, [])
    return total


def measure(cmd: list[str]) -> dict[str, Any]:
    """Wall time and peak resident memory of the whole process tree of a command."""
    with tempfile.TemporaryFile() as log:
        t = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log)
        peak = 0
        while proc.poll() is None:
            peak = max(peak, _tree_rss(proc.pid))
            time.sleep(0.2)
        seconds = time.perf_counter() - t
        log.seek(0)
        err = log.read().decode(errors="replace")
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"{cmd[:4]} failed: {err[-2000:]}")
    return {"seconds": seconds, "rss_kb": peak / 1024, "stderr": err}


def run_one(name: str, cmd: list[str], n: int) -> dict[str, Any]:
    m = measure(cmd)
    err = m["stderr"]
    own = re.search(r"lines in ([\d.]+)s", err)
    shuffled = re.search(r"([\d,.]+) MB shuffled", err)
    seconds = float(own.group(1)) if own else m["seconds"]
    return {
        "name": name,
        "wall_s": m["seconds"],
        "job_s": seconds,
        "docs_per_s_wall": n / m["seconds"],
        "docs_per_s_job": n / seconds,
        "peak_rss_mb": m["rss_kb"] / 1024,
        "shuffle_mb": float(shuffled.group(1).replace(",", "")) if shuffled else None,
        "stages": [line for line in err.splitlines() if line.startswith("backfill: ")],
    }


def project(rows: dict[str, dict[str, Any]], n: int) -> list[str]:
    r1 = rows["backfill local[1]"]["docs_per_s_job"] if "backfill local[1]" in rows else None
    r2 = rows["backfill local[2]"]["docs_per_s_job"]
    e = 1.0 if r1 is None else min(1.0, r2 / (2 * r1))
    per_core = r2 / 2 if r1 is None else r1
    s = (rows["backfill local[2]"]["shuffle_mb"] or 0.0) * 1e6 / n
    cores = CLUSTER_NODES * CORES_PER_NODE
    out = [
        f"per core r1 = {per_core:,.0f} docs/s, efficiency on 2 cores e = {e:.2f}, "
        f"shuffle s = {s:,.0f} bytes/doc",
        f"cluster: {CLUSTER_NODES} nodes x {CORES_PER_NODE} cores, "
        f"{NETWORK_BYTES_PER_S / 1e6:,.0f} MB/s of shuffle per node",
    ]
    for pages in (1e9, 1e10):
        compute = pages / (per_core * cores * e)
        network = pages * s / (CLUSTER_NODES * NETWORK_BYTES_PER_S)
        out.append(
            f"{pages:.0e} pages: compute {compute / 3600:,.1f} h, shuffle {network / 3600:,.1f} h"
            f" -> about {max(compute, network) / 3600:,.1f} h"
        )
    return out


# the CLI with the session left on PySpark's own worker daemon (what it used before
# worker_daemon.py): the same build, one setting apart
_PYSPARK_DAEMON = [
    sys.executable,
    "-c",
    "import sys; from streamdedup.backfill import session; "
    "session.worker_settings = lambda present: {}; "
    "from streamdedup.cli.main import main; sys.argv[0] = 'streamdedup'; sys.exit(main())",
]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=50_000)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--skip-local1", action="store_true")
    ap.add_argument("--segment", action="store_true", help="also write and time a segment")
    ap.add_argument(
        "--pyspark-daemon",
        action="store_true",
        help="also `local[2]` with task workers forked from PySpark's own daemon, not "
        "the package's frozen one (backfill/worker_daemon.py)",
    )
    args = ap.parse_args()
    src = corpus_file(args.docs, args.seed)
    cli = [sys.executable, "-m", "streamdedup.cli"]
    rows: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(dir=OUT) as tmp:
        t = Path(tmp)
        outs: dict[str, Path] = {}
        plan = [("dedup", [*cli, "dedup", str(src), "--index", str(t / "idx")])]
        masters = ["local[2]"] if args.skip_local1 else ["local[1]", "local[2]"]
        for master in masters:
            plan.append(
                (f"backfill {master}", [*cli, "backfill", str(src), "--spark-master", master])
            )
        if args.pyspark_daemon:
            plan.append(
                (
                    "backfill local[2] PySpark's daemon",
                    [*_PYSPARK_DAEMON, "backfill", str(src), "--spark-master", "local[2]"],
                )
            )
        if args.segment:
            seg = [*cli, "backfill", str(src), "--spark-master", "local[2]"]
            plan.append(("backfill local[2] --segment", [*seg, "--segment", str(t / "seg")]))
        for name, cmd in plan:
            outs[name] = t / (name.replace(" ", "-") + ".jsonl")
            rows[name] = run_one(name, [*cmd, "--output", str(outs[name])], args.docs)
            print(json.dumps(rows[name]), flush=True)
        if args.segment:
            rows["seal (after dedup)"] = run_one(
                "seal", [*cli, "seal", "--index", str(t / "idx"), str(t / "sealed")], args.docs
            )
            print(json.dumps(rows["seal (after dedup)"]), flush=True)
            built, sealed = (
                json.loads((t / d / "manifest.json").read_bytes()) for d in ("seg", "sealed")
            )
            keys = ("params", "first_docno", "next_docno", "documents")
            if [built[k] for k in keys] != [sealed[k] for k in keys]:
                raise SystemExit("the backfill's segment differs from the sealed one")
            print(
                f"segments: {built['documents']:,} documents, backfill {built['bytes']:,} bytes, "
                f"sealed {sealed['bytes']:,} bytes"
            )
        want = outs["dedup"].read_bytes()
        for name, path in outs.items():
            if path.read_bytes() != want:
                raise SystemExit(f"{name}: verdicts differ from dedup's")
    base = rows["dedup"]["docs_per_s_job"]
    print(f"\n{args.docs:,} crawl-like documents; verdicts identical in every run")
    print(
        f"  {'':34} {'docs/s (own clock)':>19} {'vs dedup':>9} {'wall s':>8} {'peak MB':>8} "
        f"{'shuffle MB':>11}"
    )
    for name, r in rows.items():
        shuffle = "" if r["shuffle_mb"] is None else f"{r['shuffle_mb']:,.0f}"
        print(
            f"  {name:34} {r['docs_per_s_job']:19,.0f} {r['docs_per_s_job'] / base:9.2f} "
            f"{r['wall_s']:8.1f} {r['peak_rss_mb']:8.0f} {shuffle:>11}"
        )
    print("\nprojection:")
    for line in project(rows, args.docs):
        print("  " + line)
    OUT.mkdir(exist_ok=True)
    (OUT / f"backfill-{args.docs}.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
