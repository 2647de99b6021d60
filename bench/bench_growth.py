"""docs/s as the index grows: the same `dedup` pipeline (JSON Lines in, verdicts out,
one LMDB write transaction per batch) measured over 10,000-document windows while
the index holds about 10,000, 100,000 and 1,000,000 documents.

The stream is crawl-like as in bench_dedup (prose paragraphs, 40% mutated
re-emissions), generated ahead of each window so that generation is not timed.

    python bench/bench_growth.py --docs 1010000      # about 5 minutes, ~3 GB of index
"""

from __future__ import annotations

import argparse
import io
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

import orjson

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
from corpus import generate  # noqa: E402

from streamdedup.decode import Fields  # noqa: E402
from streamdedup.engine import Deduplicator  # noqa: E402
from streamdedup.filemode import run_dedup  # noqa: E402

WINDOW = 10_000


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=1_000_000)
    ap.add_argument("--index", help="index directory (default: a temporary one)")
    ap.add_argument("--batch-size", type=int, default=8000, help="documents per transaction")
    args = ap.parse_args()
    checkpoints = [c for c in (10_000, 100_000, 1_000_000) if c + WINDOW <= args.docs + WINDOW]
    tmp = tempfile.TemporaryDirectory(prefix="growth-")
    index = args.index or str(Path(tmp.name) / "index")
    stream = generate(args.docs + WINDOW, seed=21, memory=100_000)
    curve = []
    done = 0
    started = time.perf_counter()
    with Deduplicator(index) as dd:
        while done < args.docs + WINDOW:
            chunk = io.BytesIO(
                b"".join(
                    orjson.dumps({"id": d.id, "text": d.text}) + b"\n"
                    for _, d in zip(range(WINDOW), stream, strict=False)
                )
            )
            if chunk.getbuffer().nbytes == 0:
                break
            t0 = time.perf_counter()
            summary = run_dedup(dd, chunk, io.BytesIO(), Fields(), batch_size=args.batch_size)
            rate = summary.lines / (time.perf_counter() - t0)
            if any(done <= c < done + WINDOW for c in checkpoints) or done == 0:
                curve.append(
                    {
                        "indexed_before": done,
                        "docs_per_s": rate,
                        "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                        "index_file_bytes": dd.index.file_bytes(),
                    }
                )
                print(
                    f"index holding {done:>9,} documents: {rate:8,.0f} docs/s "
                    f"(index file {dd.index.file_bytes() / 1e9:.2f} GB)",
                    flush=True,
                )
            elif (done // WINDOW) % 10 == 0:
                print(
                    f"  ... {done:,} documents, {rate:,.0f} docs/s, "
                    f"{time.perf_counter() - started:.0f}s elapsed",
                    flush=True,
                )
            done += summary.lines
    base = next((p["docs_per_s"] for p in curve if p["indexed_before"] == 10_000), None)
    base = base or curve[0]["docs_per_s"]
    for point in curve:
        point["relative_to_10k"] = point["docs_per_s"] / base
    print("\nindexed before the window   docs/s   relative to 10,000")
    for p in curve:
        print(f"  {p['indexed_before']:>12,} {p['docs_per_s']:12,.0f} {p['relative_to_10k']:9.2f}")
    out = HERE / "out"
    out.mkdir(exist_ok=True)
    (out / "bench_growth.json").write_text(json.dumps(curve, indent=2))
    tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
