"""`streamdedup demo`: the main job on an embedded default, nothing to provide.

Runs file-mode dedup over the bundled crawl-like sample (or `--input`), into a fresh
temporary index unless `--index` is given, and prints what it found.
"""

from __future__ import annotations

import gzip
import shutil
import sys
import tempfile
from importlib import resources
from pathlib import Path
from typing import IO, Any

import orjson

from .decode import Fields
from .engine import Deduplicator
from .filemode import Summary, run_dedup
from .report import index_stats


def sample_stream() -> IO[bytes]:
    ref = resources.files("streamdedup") / "data" / "sample.jsonl.gz"
    return gzip.GzipFile(str(ref), "rb")  # type: ignore[return-value]


def run_demo(values: dict[str, Any]) -> int:
    from .cli import EXIT_OK, EXIT_REJECTED, make_progress

    source_name = values.get("input") or "bundled sample (2,000 crawl-like pages)"
    tmp = None if values.get("index") else tempfile.mkdtemp(prefix="streamdedup-demo-")
    index_dir = values.get("index") or str(Path(tmp or ".") / "index")
    verdict_path = values.get("output") or str(Path(tmp or ".") / "verdicts.jsonl")
    print(f"streamdedup demo: {source_name} -> index {index_dir}", file=sys.stderr)
    try:
        source = open(values["input"], "rb") if values.get("input") else sample_stream()  # noqa: SIM115
        fields = Fields(values["id_field"], values["text_field"], values["max_doc_bytes"])
        progress = make_progress(values.get("progress", "auto"), "demo")
        with source, open(verdict_path, "wb") as sink, Deduplicator(index_dir) as dd:
            summary = run_dedup(dd, source, sink, fields, progress=progress)
        if progress is not None:
            progress.close()
        _report(summary, verdict_path, index_dir, source_texts(values))
        return EXIT_REJECTED if summary.rejected else EXIT_OK
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def source_texts(values: dict[str, Any]) -> dict[Any, str]:
    source = open(values["input"], "rb") if values.get("input") else sample_stream()  # noqa: SIM115
    texts: dict[Any, str] = {}
    with source:
        for raw in source:
            try:
                obj = orjson.loads(raw)
                texts[obj[values["id_field"]]] = str(obj[values["text_field"]])
            except (orjson.JSONDecodeError, KeyError, TypeError):
                continue
    return texts


def _snippet(text: str, width: int = 70) -> str:
    flat = " ".join(text.split())
    return flat[:width] + ("..." if len(flat) > width else "")


def _report(summary: Summary, verdicts: str, index_dir: str, texts: dict[Any, str]) -> None:
    print(summary.text())
    near = []
    with open(verdicts, "rb") as fh:
        for raw in fh:
            v = orjson.loads(raw)
            if v.get("verdict") == "duplicate" and not v["exact"]:
                near.append(v)
    shown = sorted(near, key=lambda v: v["similarity"])
    picks = [shown[len(shown) * q // 4] for q in (0, 2, 3)] if len(shown) >= 4 else shown
    if picks:
        print("\nsome near-duplicates it found:")
    for v in picks:
        print(f"  {v['id']} ~ {v['duplicate_of']}  Jaccard {v['similarity']:.3f}")
        print(f"    new:     {_snippet(texts.get(v['id'], ''))}")
        print(f"    earlier: {_snippet(texts.get(v['duplicate_of'], ''))}")
    stats = index_stats(index_dir)
    print(
        f"\nindex: {stats['documents']:,} documents, {stats['clusters']:,} clusters, "
        f"{stats['bytes_per_document']:,.0f} bytes per document"
    )
