"""docs/s as the index grows: the same `dedup` pipeline (JSON Lines in, verdicts out,
one LMDB write transaction per batch) measured over 10,000-document windows while
the index holds about 10,000, 100,000 and 1,000,000 documents.

The stream is crawl-like as in bench_dedup (prose paragraphs, 40% mutated
re-emissions).  It is written to a JSON Lines file first, so that neither its
generation nor the generator's memory (100,000 documents kept to re-emit from, which
the garbage collector would scan during the timed windows) is part of what is timed.
At each checkpoint the median of `--windows` consecutive windows is reported with
their range: one window on this kind of machine varies by a third, and a level merge
of the posting runs falls into some windows and not others.

The speed of this kind of machine also drifts by a third over minutes, so a ratio
between checkpoints minutes apart measures the drift as well.  At the later
checkpoints each window is therefore timed side by side with the 10,000-document
reference: just before it, a fresh index is fed the stream's first 10,000 documents
(untimed) and timed on the next 10,000, which is the first checkpoint's window again.
The ratio of those two medians is the figure that compares sizes.  (Timing copies of
the big index is no way out: a copy's pages are clean in the page cache, so every first
write to one faults, and it starts with a full map.)

    python bench/bench_growth.py --docs 1000000      # about 8 minutes, ~5 GB of disk
"""

from __future__ import annotations

import argparse
import gc
import io
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from itertools import islice
from pathlib import Path
from typing import IO

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
from corpus import generate  # noqa: E402

from streamdedup.config import Fields  # noqa: E402
from streamdedup.engine.deduplicator import Deduplicator  # noqa: E402
from streamdedup.filemode.run import run_dedup  # noqa: E402

WINDOW = 10_000
CHECKPOINTS = (10_000, 100_000, 1_000_000)


def write_stream(path: Path, n: int) -> None:
    started = time.perf_counter()
    with path.open("wb") as out:
        for i, d in enumerate(generate(n, seed=21, memory=100_000), 1):
            out.write(d.jsonl())
            if i % 100_000 == 0:
                print(f"  generated {i:,} documents ({time.perf_counter() - started:.0f}s)")
    gc.collect()


def timed(dd: Deduplicator, window: bytes, batch_size: int) -> float:
    t0 = time.perf_counter()
    summary = run_dedup(dd, io.BytesIO(window), io.BytesIO(), Fields(), batch_size=batch_size)
    return summary.lines / (time.perf_counter() - t0)


def reference(head: list[bytes], batch_size: int, scratch: Path) -> float:
    """The first checkpoint again: a fresh index holding the stream's first window,
    timed on its second."""
    shutil.rmtree(scratch, ignore_errors=True)
    try:
        with Deduplicator(scratch) as dd:
            run_dedup(dd, io.BytesIO(b"".join(head[:WINDOW])), io.BytesIO(), Fields())
            return timed(dd, b"".join(head[WINDOW:]), batch_size)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


def windows(stream: IO[bytes]) -> list[bytes]:
    return list(islice(stream, WINDOW))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=1_000_000)
    ap.add_argument("--batch-size", type=int, default=8000, help="documents per transaction")
    ap.add_argument("--windows", type=int, default=3, help="windows timed per checkpoint")
    ap.add_argument("--workdir", help="where the stream and index go (default: a temp dir)")
    args = ap.parse_args()
    checkpoints = [c for c in CHECKPOINTS if c <= args.docs]
    with tempfile.TemporaryDirectory(prefix="growth-", dir=args.workdir) as tmp:
        stream_path = Path(tmp) / "stream.jsonl"
        total = args.docs + args.windows * WINDOW
        print(f"writing the stream ({total:,} documents) to {stream_path}")
        write_stream(stream_path, total)
        with stream_path.open("rb") as stream:
            head = [next(stream) for _ in range(2 * WINDOW)]
        curve = []
        runs: list[float] = []
        refs: list[float] = []
        done = 0
        started = time.perf_counter()
        with Deduplicator(Path(tmp) / "index") as dd, stream_path.open("rb") as stream:
            while lines := windows(stream):
                window = b"".join(lines)
                at = next((c for c in checkpoints if c <= done < c + args.windows * WINDOW), None)
                if at is not None and at != checkpoints[0]:
                    refs.append(reference(head, args.batch_size, Path(tmp) / "reference"))
                rate = timed(dd, window, args.batch_size)
                if at is not None:
                    runs.append(rate)
                if at is not None and len(runs) == args.windows:
                    point = {
                        "indexed_before": at,
                        "docs_per_s": statistics.median(runs),
                        "runs": [round(r) for r in runs],
                        "reference_runs": [round(r) for r in refs],
                        "side_by_side": statistics.median(runs) / statistics.median(refs)
                        if refs
                        else 1.0,
                        "rss_mb": rss_mb(),
                        "index_file_bytes": dd.index.file_bytes(),
                    }
                    curve.append(point)
                    print(
                        f"index holding {at:>9,} documents: {point['docs_per_s']:8,.0f} docs/s "
                        f"(median of {', '.join(f'{r:,.0f}' for r in runs)}; "
                        f"index file {dd.index.file_bytes() / 1e9:.2f} GB)",
                        flush=True,
                    )
                    if refs:
                        print(
                            f"  side by side, 10,000-document reference: "
                            f"{', '.join(f'{r:,.0f}' for r in refs)} docs/s -> "
                            f"{point['side_by_side']:.2f}",
                            flush=True,
                        )
                    runs, refs = [], []
                elif at is None and (done // WINDOW) % 10 == 0:
                    print(
                        f"  ... {done:,} documents, {rate:,.0f} docs/s, "
                        f"{time.perf_counter() - started:.0f}s elapsed",
                        flush=True,
                    )
                done += len(lines)
    base = next((p["docs_per_s"] for p in curve if p["indexed_before"] == CHECKPOINTS[0]), None)
    base = base or curve[0]["docs_per_s"]
    for point in curve:
        point["relative_to_10k"] = point["docs_per_s"] / base
    print("\nindexed before   docs/s (median)   relative to 10,000   side by side with 10,000")
    for p in curve:
        print(
            f"  {p['indexed_before']:>12,} {p['docs_per_s']:14,.0f} "
            f"{p['relative_to_10k']:18.2f} {p['side_by_side']:22.2f}"
        )
    out = HERE / "out"
    out.mkdir(exist_ok=True)
    (out / "bench_growth.json").write_text(json.dumps(curve, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
