"""`stats`: a read-only summary of an index for operators (`inspect`, one
document: ops/inspect.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgpack
import numpy as np

from streamdedup.config import IndexParams
from streamdedup.errors import IndexOpenError
from streamdedup.store.index import Index
from streamdedup.store.integrity import check_index
from streamdedup.store.keys import (
    MetaKey,
)
from streamdedup.store.segment.manifest import MANIFEST
from streamdedup.store.segment.registry import segments
from streamdedup.store.tables import Tables


def open_readonly(path: str) -> tuple[Index, IndexParams]:
    """An index opened read-only, and its parameters (refused if it holds none)."""
    index = Index(path, readonly=True)
    rec = index.read(lambda t: t.meta(MetaKey.PARAMS))
    if rec is None:
        index.close()
        raise IndexOpenError(f"{path} holds no streamdedup index parameters")
    return index, IndexParams.from_record(rec)


def bucket_histogram(t: Tables) -> dict[str, Any]:
    """Bucket sizes in powers of two, plus the largest buckets' share of postings."""
    sizes = np.fromiter(t.bucket_sizes(), dtype=np.int64)
    if len(sizes) == 0:
        return {"buckets": 0, "postings": 0, "histogram": {}, "largest": []}
    classes = np.floor(np.log2(sizes)).astype(np.int64)
    hist: dict[str, int] = {}
    for c, n in zip(*np.unique(classes, return_counts=True), strict=True):
        lo, hi = 1 << int(c), (1 << (int(c) + 1)) - 1
        hist[str(lo) if lo == hi else f"{lo}-{hi}"] = int(n)
    largest = np.sort(sizes)[::-1][:5]
    total = int(sizes.sum())
    return {
        "buckets": len(sizes),
        "postings": total,
        "histogram": hist,
        "largest": [int(x) for x in largest],
        "largest_share": float(largest[0] / total),
    }


def index_stats(path: str, check: bool = False) -> dict[str, Any]:
    index, params = open_readonly(path)
    try:
        checked = check_index(index, params) if check else None

        def read(t: Tables) -> dict[str, Any]:
            counts = t.meta(MetaKey.COUNTS) or {}
            sealed = _segments(t, index.path)
            open_docs = t.count("docs")
            docs = open_docs + sum(e["documents"] - e["masked"] for e in sealed)
            table_bytes = t.table_bytes()
            used = sum(table_bytes.values())
            clusters = counts.get("unique", 0) - counts.get("empty", 0)
            return {
                "path": path,
                "parameters": params.public_record(),
                "documents": docs,
                "open_documents": open_docs,
                "indexed": t.count("sigs"),
                "unique": counts.get("unique", 0),
                "duplicate": counts.get("duplicate", 0),
                "exact_duplicate": counts.get("exact", 0),
                "empty": counts.get("empty", 0),
                "clusters": clusters,
                "capped": {"bucket": 0, "exact": 0, **(t.meta(MetaKey.CAPS) or {})},
                "duplicate_ratio": counts.get("duplicate", 0) / docs if docs else 0.0,
                "bytes_used": used,
                "bytes_per_document": used / open_docs if open_docs else 0.0,
                "file_bytes": index.file_bytes(),
                "table_bytes": table_bytes,
                "bucket_sizes": bucket_histogram(t),
                "positions": _positions(t),
                "clock_ms": t.meta(MetaKey.CLOCK),
                "oldest_ms": None if (o := t.oldest()) is None else o[0],
                "segments": sealed,
            }

        out = index.read(read)
        if checked is not None:
            out["check"] = checked
        return out
    finally:
        index.close()


def _segments(t: Tables, home: Path) -> list[dict[str, Any]]:
    """The registry's sealed segments (each `located` for the index directory
    `home`: those inside it move with it), each with its masked documents counted
    and, for a local one, whether its manifest is where the registry says (a quick
    look, not a checksum: `SealedSegment.open` does that)."""
    out: list[dict[str, Any]] = []
    answers = t.meta(MetaKey.SEGMENT_ANSWERS) or {}
    for entry in (e.located(home) for e in segments(t)):
        found = None if entry.remote else (Path(entry.path) / MANIFEST).is_file()
        out.append(
            {
                **entry.to_record(),
                "masked": t.mask_count(entry.number),
                "found": found,
                # the writer's last answer from it: at_ms, round_trip_ms, waited_ms
                "last_answer": answers.get(str(entry.number)),
            }
        )
    return out


def _positions(t: Tables) -> dict[str, dict[str, int]]:
    """Per consumer (group/topic), the next input offset applied, per partition."""
    out: dict[str, dict[str, int]] = {}
    prefix = MetaKey.APPLIED.encode()
    for key, raw in t.meta_entries(prefix):
        out[key[len(prefix) :].decode()] = msgpack.unpackb(raw)
    return out


def _iso(ms: int) -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _caps_line(capped: dict[str, int]) -> list[str]:
    """Said only when a cap cut a search short: near duplicates may have been missed."""
    if not capped["bucket"] and not capped["exact"]:
        return []
    return [
        f"  caps         {capped['bucket']:,} documents read a bucket cut at "
        f"--max-bucket-candidates, {capped['exact']:,} stopped at --max-exact-checks "
        "with candidates left near the threshold (raise them if recall matters more)"
    ]


def _family_text(p: dict[str, Any]) -> str:
    """What an index compares, as `stats` prints it."""
    metric = p.get("metric", "jaccard")
    if metric == "jaccard":
        on = "sets" if p.get("item") == "set" else p["shingle"]
        return f"threshold {p['threshold']}, {on}"
    if metric == "hamming":
        return (
            f"metric hamming on {p['bits']}-bit strings, max distance "
            f"{p['max_distance']:g} (threshold {p['threshold']})"
        )
    if metric == "cosine":
        return f"metric cosine on {p['dim']}-dimensional vectors, threshold {p['threshold']}"
    if metric == "containment":
        on = "sets" if p.get("item") == "set" else p["shingle"]
        return f"metric containment, threshold {p['threshold']}, {on}"
    return (
        f"metric euclidean on {p['dim']}-dimensional vectors, max distance "
        f"{p['max_distance']:g}, buckets {p['bucket_width']:g} wide"
    )


def _banding_text(p: dict[str, Any]) -> str:
    if p.get("metric") == "containment":  # (each pair of size classes banded its own way)
        return f"{p['bands']} bucket keys an item, banded per size class"
    return f"{p['bands']} bands x {p['rows']} rows"


def render_stats(s: dict[str, Any]) -> str:
    p = s["parameters"]
    lines = [
        f"index {s['path']}",
        f"  parameters   {_family_text(p)}, K {p['num_perm']}, {_banding_text(p)}, "
        f"verify {p['verify']}, seed {p['seed']}",
        f"  documents    {s['documents']:,} ({s['indexed']:,} in LSH buckets)"
        if not s["segments"]
        else f"  documents    {s['documents']:,}: {s['open_documents']:,} in the open index "
        f"({s['indexed']:,} in LSH buckets), the rest in {len(s['segments'])} sealed "
        f"segment{'s' * (len(s['segments']) != 1)}",
        f"  verdicts     unique {s['unique']:,} (empty {s['empty']:,}), duplicate "
        f"{s['duplicate']:,} (exact {s['exact_duplicate']:,}), ratio {s['duplicate_ratio']:.3f}",
        f"  clusters     {s['clusters']:,}",
        *_caps_line(s["capped"]),
        f"  size         {s['bytes_used']:,} bytes in use, {s['bytes_per_document']:,.0f} "
        f"per document (file {s['file_bytes']:,})"
        + (" in the open index" if s["segments"] else ""),
        "               " + ", ".join(f"{k} {v:,}" for k, v in s["table_bytes"].items()),
    ]
    for ns, offsets in s["positions"].items():
        where = ", ".join(
            f"p{p}@{o:,}" for p, o in sorted(offsets.items(), key=lambda x: int(x[0]))
        )
        lines.append(f"  consumed     {ns}: {where}")
    if s["oldest_ms"] is not None:
        lines.append(
            f"  time span    {_iso(s['oldest_ms'])} .. {_iso(s['clock_ms'])} (message timestamps)"
        )
    lines += _render_segments(s["segments"])
    b = s["bucket_sizes"]
    if "check" in s:
        c = s["check"]
        counters = (
            "counters agree"
            if c["counters"]
            else "counters not compared (they count the sealed segments' documents too)"
        )
        lines.append(
            f"  check        ok: {c['entries']:,} entries read, {counters}"
            + {
                "verified": ", file structure verified",
                "changed": " (file structure not verified: a batch committed meanwhile)",
                "unavailable": " (file structure not verified: needs py-lmdb 3 or later)",
            }[c["structure"]]
        )
    lines.append(f"  buckets      {b['buckets']:,} holding {b['postings']:,} postings")
    for label, n in b["histogram"].items():
        lines.append(f"    size {label:>13}: {n:,}")
    if b["largest"]:
        lines.append(
            f"    largest: {', '.join(f'{x:,}' for x in b['largest'])} "
            f"(the largest holds {b['largest_share']:.1%} of postings)"
        )
    return "\n".join(lines)


def _render_segments(sealed: list[dict[str, Any]]) -> list[str]:
    if not sealed:
        return []
    lines = [
        f"  segments     {len(sealed)} sealed, "
        f"{sum(e['documents'] for e in sealed):,} documents "
        f"({sum(e['masked'] for e in sealed):,} masked since), "
        f"{sum(e['bytes'] for e in sealed):,} bytes"
    ]
    for e in sealed:
        where = "remote" if e["remote"] else "local" if e["found"] else "local, MISSING"
        masked = f" ({e['masked']:,} masked)" if e["masked"] else ""
        lines.append(
            f"    #{e['number']:<4} docnos {e['first_docno']:,}..{e['next_docno'] - 1:,}  "
            f"{e['documents']:,} documents{masked}  {e['bytes']:,} bytes  {where}  {e['path']}"
        )
        if e["last_answer"]:
            a = e["last_answer"]
            lines.append(
                f"          last answer {_iso(int(a['at_ms']))}: round trip "
                f"{a['round_trip_ms']:,.1f} ms, the writer waited {a['waited_ms']:,.1f} ms"
            )
    return lines
