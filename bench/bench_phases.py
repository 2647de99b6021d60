"""Where `dedup`'s time goes, by stage, this checkout next to another: the CPU
seconds of preparing (decoding JSON, normalising, shingling, signatures, band keys,
compressing) and of applying (the index transaction: bookkeeping, candidate search,
writes), measured in process over the same batches as `dedup` makes them, and the
import time of the engine.  End-to-end docs/s are `bench_dedup.py`'s; this says which
stage moved.

    python bench/bench_phases.py CORPUS.jsonl [--baseline DIR] [--rounds 2] [--repeat 2]

Each checkout runs in its own process (`--baseline DIR` first on PYTHONPATH), the two
alternating `--rounds` times; each process reports the least CPU time of `--repeat`
passes (a fresh index each).  CPU time, not wall: on a shared machine it is the less
noisy of the two, though still not free of other jobs' cache pressure.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parent.parent

_MEASURE = """
import json, shutil, sys, tempfile, time
t0 = time.perf_counter()
from streamdedup.config import Fields
from streamdedup.engine.deduplicator import Deduplicator
from streamdedup.filemode.streams import read_lines
from streamdedup.filemode.pool import decode_and_prepare
imports = time.perf_counter() - t0
corpus, repeat = sys.argv[1], int(sys.argv[2])
best = {"prepare": float("inf"), "apply": float("inf")}
for _ in range(repeat):
    d = tempfile.mkdtemp()
    try:
        with Deduplicator(d + "/index") as dd, open(corpus, "rb") as f:
            prepare = apply = 0.0
            for lines in read_lines(f, 8000):
                a = time.process_time()
                _, p = decode_and_prepare(dd.preparer, Fields(), lines, dd.known)
                b = time.process_time()
                dd.apply([p])
                prepare += b - a
                apply += time.process_time() - b
    finally:
        shutil.rmtree(d)
    best = {"prepare": min(best["prepare"], prepare), "apply": min(best["apply"], apply)}
print(json.dumps({"imports": imports, **best}))
"""


def measure(corpus: Path, repeat: int, source: Path | None) -> dict[str, float]:
    env = dict(os.environ)
    if source is not None:
        env["PYTHONPATH"] = str(source)
    r = subprocess.run(
        [sys.executable, "-c", _MEASURE, str(corpus), str(repeat)],
        capture_output=True,
        check=True,
        env=env,
        cwd=source or ROOT,
        text=True,
    )
    out: dict[str, float] = json.loads(r.stdout.strip().splitlines()[-1])
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("corpus", type=Path)
    ap.add_argument("--baseline", type=Path, help="another checkout (its kernels built)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    for tree in [ROOT, args.baseline] if args.baseline else [ROOT]:
        subprocess.run(
            [sys.executable, "-m", "compileall", "-q", str(tree / "streamdedup")], check=True
        )
    names = ["this checkout"] + (["baseline"] if args.baseline else [])
    seen: dict[str, list[dict[str, float]]] = {n: [] for n in names}
    for _ in range(args.rounds):
        for name in names:
            got = measure(args.corpus, args.repeat, args.baseline if name == "baseline" else None)
            seen[name].append(got)
            print(
                f"  {name:14} imports {got['imports']:.3f} s  prepare {got['prepare']:.3f} s  "
                f"apply {got['apply']:.3f} s (CPU)",
                flush=True,
            )
    if args.baseline:
        for stage in ("imports", "prepare", "apply"):
            new = min(x[stage] for x in seen["this checkout"])
            old = min(x[stage] for x in seen["baseline"])
            print(f"  {stage:8} baseline / this checkout = {old / new:.2f}x (least of each)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
