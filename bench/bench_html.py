"""`dedup` on crawler input: a WARC archive of real HTML pages (extraction included)
next to the same pages pre-extracted as JSON Lines text, the extraction's share of
the time, and the two candidate extractors (resiliparse, trafilatura) side by side.

The pages are real HTML found on this machine: Debian's /usr/share/doc (Node.js,
Valgrind, libxslt, ... documentation) and, where rustup installed them, the Rust
books of each toolchain (mdBook pages: a large navigation sidebar around each
chapter; stable and nightly carry near-duplicate editions of the same chapters).
Without any, the vendored test pages are used (tests/data/html).

Measured, each in the same run, round robin, best of --repeat (on a shared machine
noise only ever adds time):

- `streamdedup dedup crawl.warc.gz` (read, extract main content, shingle, index),
  the same with `--workers 1 --batch-size 1000` (pages extracted in another process
  while this one updates the index), and `streamdedup dedup pages.jsonl` on the same
  pages' extracted text: docs/s of each, and their ratios;
- in this process: reading the archive alone (fastwarc, payloads only), and reading
  it with extraction (`inputs.warc.read_warc`): the extraction's cost per page and
  its share of the WARC run's time;
- the extractors on the same pages: pages/s, and quality on the test pages -- the
  same article under two templates (Jaccard of the extracts, higher is better) and
  two short articles under one template (lower is better) -- and on the real pages,
  how much of the text a page shares with every other page of its site (boilerplate
  kept; lower is better).

    python bench/bench_html.py --pages 2000            # a few minutes
"""

from __future__ import annotations

import argparse
import io
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

HERE = Path(__file__).parent
ROOT = HERE.parent
OUT = HERE / "out"
sys.path.insert(0, str(ROOT))

from streamdedup.config import ShingleSpec  # noqa: E402
from streamdedup.inputs.html import page_text  # noqa: E402
from streamdedup.inputs.warc import html_pages, read_warc  # noqa: E402
from streamdedup.models import Document  # noqa: E402
from streamdedup.sketch.shingle import reference_shingles  # noqa: E402
from tests.support.pages import DATA, Rec, short_items, syndicated, write_warc  # noqa: E402

MAX_PAGE = 400_000  # bytes: skip the few giant single-page indexes


def default_roots() -> list[Path]:
    roots = [Path("/usr/share/doc")]
    for toolchain in sorted(Path.home().glob(".rustup/toolchains/*/share/doc/rust/html")):
        roots += [toolchain / part for part in ("book", "reference", "cargo", "edition-guide")]
    return roots


def find_pages(roots: list[Path], limit: int) -> list[tuple[str, bytes]]:
    """Up to `limit` HTML files under `roots` (sorted; a root's pages interleaved with
    the others' so that a small limit still mixes sites), as (URI, bytes)."""
    per_root: list[list[Path]] = []
    for root in roots:
        if root.is_dir():
            files = sorted(
                p for p in root.rglob("*.html") if p.is_file() and 0 < p.stat().st_size <= MAX_PAGE
            )
            per_root.append(files)
    mixed = [p for group in itertools.zip_longest(*per_root) for p in group if p is not None]
    if not mixed:
        mixed = sorted(DATA.glob("*.html"))
    mixed = mixed[:limit]
    return [(f"file://{p}", p.read_bytes()) for p in mixed]


def measure(cmd: list[str]) -> float:
    """Wall seconds of a command (its own process, as a user runs it)."""
    started = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True)
    seconds = time.perf_counter() - started
    if r.returncode not in (0, 1):
        raise RuntimeError(f"{cmd[:5]} failed: {r.stderr.decode()[-2000:]}")
    return seconds


def dedup(src: Path, index: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "streamdedup.cli",
        "dedup",
        str(src),
        "--index",
        str(index),
        "--output",
        os.devnull,
        "--progress",
        "never",
        *extra,
    ]


def best_of(repeat: int, fn: Callable[[], float]) -> tuple[float, list[float]]:
    runs = [fn() for _ in range(repeat)]
    return min(runs), runs


def read_only(data: bytes) -> int:
    return sum(1 for _ in html_pages(io.BytesIO(data)))


def read_and_extract(data: bytes) -> int:
    return sum(1 for item, _ in read_warc(io.BytesIO(data)) if isinstance(item, Document))


def extractors() -> dict[str, Callable[[bytes], str]]:
    """The candidates: resiliparse (main content), and trafilatura if installed."""
    out: dict[str, Callable[[bytes], str]] = {}

    def resiliparse(data: bytes) -> str:
        text = page_text(data, "main")
        return text if isinstance(text, str) else ""

    out["resiliparse"] = resiliparse
    try:
        import trafilatura  # the bench extra
    except ImportError:
        return out

    def traf(data: bytes) -> str:
        return trafilatura.extract(data.decode("utf-8", "replace")) or ""

    out["trafilatura"] = traf
    return out


def jaccard(a: str, b: str) -> float:
    sa, sb = reference_shingles(a, ShingleSpec()), reference_shingles(b, ShingleSpec())
    return len(sa & sb) / len(sa | sb) if sa | sb else 1.0


def boilerplate_share(texts: list[tuple[str, str]]) -> float:
    """Mean share of a page's shingles found on at least half of the other pages of
    its site (the site: the page's directory): what a template leaves in the text."""
    by_site: dict[str, list[set[int]]] = {}
    for uri, text in texts:
        shingles = {hash(s) for s in reference_shingles(text, ShingleSpec())}
        by_site.setdefault(uri.rsplit("/", 1)[0], []).append(shingles)
    shares: list[float] = []
    for pages in by_site.values():
        if len(pages) < 4:
            continue
        counts: dict[int, int] = {}
        for s in pages:
            for h in s:
                counts[h] = counts.get(h, 0) + 1
        common = {h for h, c in counts.items() if c - 1 >= (len(pages) - 1) / 2}
        shares += [len(s & common) / len(s) for s in pages if s]
    return sum(shares) / len(shares) if shares else 0.0


def compare_extractors(pages: list[tuple[str, bytes]], sample: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    original, copy = syndicated("punycode")
    item1, item2 = short_items()
    subset = pages[:sample]
    for name, fn in extractors().items():
        started = time.perf_counter()
        texts = [(uri, fn(data)) for uri, data in subset]
        seconds = time.perf_counter() - started
        out[name] = {
            "pages_per_s": len(subset) / seconds,
            "ms_per_page": seconds / len(subset) * 1000,
            "syndicated_copy_jaccard": jaccard(fn(original), fn(copy)),
            "one_template_two_articles_jaccard": jaccard(fn(item1), fn(item2)),
            "boilerplate_share": boilerplate_share(texts),
            "empty_extracts": sum(1 for _, t in texts if not t.strip()),
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pages", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--compare-sample", type=int, default=300, help="pages per extractor")
    ap.add_argument("--roots", nargs="*", type=Path, help="where to find HTML pages")
    ap.add_argument("--results", type=Path, default=OUT)
    args = ap.parse_args()

    pages = find_pages(args.roots or default_roots(), args.pages)
    with tempfile.TemporaryDirectory(prefix="bench-html-") as tmp_dir:
        tmp = Path(tmp_dir)
        warc = write_warc(tmp / "crawl.warc.gz", [Rec(uri, data) for uri, data in pages])
        jsonl = tmp / "pages.jsonl"
        with jsonl.open("wb") as fh:
            for item, _ in read_warc(warc.open("rb")):
                if isinstance(item, Document):
                    fh.write(orjson.dumps({"id": item.id, "text": item.text}) + b"\n")
        runs: dict[str, list[float]] = {"warc": [], "warc_workers1": [], "jsonl": []}
        for r in range(args.repeat):  # round robin: all once, then again
            runs["warc"].append(measure(dedup(warc, tmp / f"w{r}")))
            runs["warc_workers1"].append(
                measure(dedup(warc, tmp / f"p{r}", "--workers", "1", "--batch-size", "1000"))
            )
            runs["jsonl"].append(measure(dedup(jsonl, tmp / f"j{r}")))
        data = warc.read_bytes()
        read_s, read_runs = best_of(args.repeat, lambda: _timed(read_only, data))
        extract_s, extract_runs = best_of(args.repeat, lambda: _timed(read_and_extract, data))
        html_bytes = sum(len(d) for _, d in pages)
        warc_bytes = len(data)

    n = len(pages)
    warc_s, jsonl_s = min(runs["warc"]), min(runs["jsonl"])
    extraction = extract_s - read_s
    result: dict[str, Any] = {
        "pages": n,
        "html_mb": html_bytes / 1e6,
        "warc_gz_mb": warc_bytes / 1e6,
        "dedup_warc": {"seconds": warc_s, "docs_per_s": n / warc_s, "runs": runs["warc"]},
        "dedup_warc_workers1_batch1000": {
            "seconds": min(runs["warc_workers1"]),
            "docs_per_s": n / min(runs["warc_workers1"]),
            "runs": runs["warc_workers1"],
        },
        "dedup_jsonl_text": {
            "seconds": jsonl_s,
            "docs_per_s": n / jsonl_s,
            "runs": runs["jsonl"],
        },
        "warc_over_jsonl_time": warc_s / jsonl_s,
        "read_warc_only_s": read_s,
        "read_and_extract_s": extract_s,
        "read_runs": read_runs,
        "extract_runs": extract_runs,
        "extraction_ms_per_page": extraction / n * 1000,
        "extraction_share_of_warc_run": extraction / warc_s,
        "extractors": compare_extractors(pages, min(args.compare_sample, n)),
    }
    args.results.mkdir(parents=True, exist_ok=True)
    (args.results / "bench_html.json").write_text(json.dumps(result, indent=2))
    sizes = f"{result['html_mb']:.1f} MB of HTML, WARC.gz {result['warc_gz_mb']:.1f} MB"
    print(f"{n} real HTML pages ({sizes})")
    print(
        f"dedup WARC (extraction included): {n / warc_s:,.0f} docs/s;  "
        f"same pages as JSON text: {n / jsonl_s:,.0f} docs/s;  "
        f"WARC run takes {warc_s / jsonl_s:.2f}x the time"
    )
    pooled = min(runs["warc_workers1"])
    print(
        f"dedup WARC --workers 1 --batch-size 1000: {n / pooled:,.0f} docs/s "
        f"({warc_s / pooled:.2f}x the speed of --workers 0)"
    )
    print(
        f"extraction: {result['extraction_ms_per_page']:.2f} ms/page, "
        f"{result['extraction_share_of_warc_run']:.0%} of the WARC run "
        f"(reading the archive alone: {read_s / warc_s:.0%})"
    )
    for name, e in result["extractors"].items():
        print(
            f"  {name:12s} {e['pages_per_s']:8,.0f} pages/s  "
            f"syndicated copy J={e['syndicated_copy_jaccard']:.2f} (higher better)  "
            f"one template, two articles J={e['one_template_two_articles_jaccard']:.2f} "
            f"(lower better)  boilerplate kept {e['boilerplate_share']:.1%}  "
            f"empty {e['empty_extracts']}"
        )


def _timed(fn: Callable[[bytes], int], data: bytes) -> float:
    started = time.perf_counter()
    fn(data)
    return time.perf_counter() - started


if __name__ == "__main__":
    main()
