"""`stats` and `inspect`: read-only views of an index for operators."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgpack
import numpy as np

from streamdedup.config import IndexParams
from streamdedup.engine.families import family_of
from streamdedup.engine.prepare import stored_band_keys
from streamdedup.errors import IndexOpenError
from streamdedup.models import Record, Verdict
from streamdedup.store.index import Index
from streamdedup.store.integrity import check_index
from streamdedup.store.keys import (
    MetaKey,
    id_key,
)
from streamdedup.store.segment.manifest import MANIFEST
from streamdedup.store.segment.reading import SealedSegment
from streamdedup.store.segment.registry import located_segments, segments
from streamdedup.store.tables import Tables


def _open(path: str) -> tuple[Index, IndexParams]:
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
    index, params = _open(path)
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


@dataclass(frozen=True)
class _Source:
    """Where `inspect` looks: the open index (`number` None) or a local sealed
    segment, with the documents of it the open index masks (replaced or expired)."""

    number: int | None
    index: Index
    masked: frozenset[int]


def inspect_document(path: str, doc_id: str, neighbours: int = 10) -> dict[str, Any]:
    """What the index knows about `doc_id`'s live document: its verdict, where it is
    stored (`segment`: the open index is None) and its nearest neighbours -- across
    the open index and every local sealed segment, as `dedup` matches them (a
    document masked by the open index, replaced or expired, is neither found nor a
    neighbour).  Remote segments cannot be opened here: `remote_segments` lists
    those not searched.  `found` is False when no live document has that id (then
    `expired_in`: the segment whose document of that id expired, if one did)."""
    index, params = _open(path)
    opened: list[SealedSegment] = []
    try:
        entries = located_segments(index)
        masks = index.read(
            lambda t: {e.number: frozenset(t.masked(e.number).tolist()) for e in entries}
        )
        sources = [_Source(None, index, frozenset())]
        remote = [e.number for e in entries if e.remote]
        for e in reversed(entries):  # newest first: an id's latest document
            if not e.remote:
                opened.append(SealedSegment.open(e.path, verify=False))
                sources.append(_Source(e.number, opened[-1].index, masks[e.number]))
        missing: dict[str, Any] = {
            "id": doc_id,
            "found": False,
            "expired_in": None,
            "remote_segments": remote,
        }
        for src in sources:
            hit = src.index.read(lambda t: _find(t, doc_id))
            if hit is None:
                continue
            if hit[0] in src.masked:  # its newest document expired (a replacement is
                return {**missing, "expired_in": src.number}  # found before it)
            return _describe(src, sources, params, hit, neighbours, remote)
        return missing
    finally:
        for seg in opened:
            seg.close()
        index.close()


def _find(t: Tables, doc_id: str) -> tuple[int, Record] | None:
    for candidate in _id_forms(doc_id):
        docno = t.docno_for_id(id_key(candidate))
        if docno is not None:
            rec = t.record(docno)
            return None if rec is None else (docno, rec)
    return None


def _describe(
    src: _Source,
    sources: list[_Source],
    params: IndexParams,
    hit: tuple[int, Record],
    limit: int,
    remote: list[int],
) -> dict[str, Any]:
    docno, rec = hit
    info: dict[str, Any] = {
        "id": rec.doc_id,
        "found": True,
        "verdict": "duplicate" if rec.verdict else "unique",
        "duplicate_of": rec.duplicate_of,
        "cluster": rec.cluster,
        **_measures(params, rec),
        "exact": rec.exact,
        "reason": rec.reason,
        "shingles": rec.shingles,
        "item": params.item,
        "timestamp_ms": rec.timestamp_ms,
        "docno": docno,
        "segment": src.number,
        "in_buckets": False,
        "neighbours": [],
        "remote_segments": remote,
    }
    sig = src.index.read(lambda t: t.signature(docno))
    if sig is None:
        return info
    info["in_buckets"] = True
    info["neighbours"] = _neighbours(src, sources, params, docno, sig, limit)
    return info


def _id_forms(doc_id: str) -> list[str | int]:
    forms: list[str | int] = [doc_id]
    if doc_id.lstrip("-").isdigit():
        forms.append(int(doc_id))
    return forms


def _measures(params: IndexParams, rec: Record) -> dict[str, Any]:
    """A stored verdict's measures as its verdict reports them (a distance family
    stores its distance: `similarity` and `distance` from it)."""
    reported = family_of(params).reported([Verdict.from_record(rec)])[0].to_dict()
    return {k: reported[k] for k in ("similarity", "distance") if k in reported}


def _neighbours(
    own: _Source, sources: list[_Source], params: IndexParams, docno: int, sig: bytes, limit: int
) -> list[dict[str, Any]]:
    """The documents sharing a bucket with `docno` in every source, nearest first by
    signature estimate (exact Jaccard beside it when the index verifies exactly)."""
    keys = stored_band_keys(sig, params)
    rows: list[tuple[_Source, int, bytes]] = []
    for src in sources:

        def gather(t: Tables, src: _Source = src) -> list[tuple[_Source, int, bytes]]:
            found = set(t.candidates(keys, 1000).tolist()) - src.masked
            if src is own:
                found.discard(docno)
            got = [(d, t.signature(d)) for d in sorted(found)]
            return [(src, d, s) for d, s in got if s is not None]

        rows += src.index.read(gather)
    if not rows:
        return []
    rows.sort(key=lambda row: row[1])  # document numbers are the index's, across segments
    mine = np.frombuffer(sig, dtype="<u2")
    others = np.stack([np.frombuffer(s, dtype="<u2") for _, _, s in rows])
    family = family_of(params)  # (Jaccard: MinHash's estimate and exact Jaccard)
    rule = family.lsh.bar(params.bar_value)
    est = family.lsh.estimate(mine, others)
    order = np.argsort(-est, kind="stable")[:limit]
    own_rep = (
        own.index.read(lambda t: family.exact_stored(t.text(docno)))
        if params.verify == "exact"
        else None
    )
    estimated, exact_key = {
        "jaccard": ("estimated_similarity", "jaccard"),
        "containment": ("estimated_jaccard", "containment"),  # (of this one in that one)
    }.get(params.metric, (f"estimated_{rule.measure}", rule.measure))
    out = []
    for j in order:
        src, d, _ = rows[int(j)]
        entry: dict[str, Any] = {
            "id": None,
            estimated: params.reported(rule.measured(float(est[j]))),
            "segment": src.number,
        }

        def describe(t: Tables, d: int = d, entry: dict[str, Any] = entry) -> None:
            rec = t.record(d)
            entry["id"] = None if rec is None else rec.doc_id
            if own_rep is not None:
                theirs = family.exact_stored(t.text(d))
                entry[exact_key] = params.reported(family.lsh.exact(own_rep, theirs))

        src.index.read(describe)
        out.append(entry)
    return out


# What `inspect` calls an item's size and its exact measure, by item and by key.
_SIZE_LABEL = {"text": "shingles", "set": "elements", "bits": "bits", "vector": "dimensions"}
_EXACT_LABEL = {
    "jaccard": "Jaccard",
    "containment": "containment",
    "similarity": "cosine",
    "distance": "distance",
}


def _remote_note(numbers: list[int]) -> str:
    listed = ", ".join(map(str, numbers))
    return f"remote sealed segment{'s' * (len(numbers) != 1)} {listed} (only their servers can)"


def missing_text(info: dict[str, Any]) -> str:
    """Why `inspect` found no document (its `found` is False)."""
    text = f"no document with id {info['id']!r} in the index"
    if info["expired_in"] is not None:
        text += f" (sealed segment {info['expired_in']} held one; it expired since)"
    if info["remote_segments"]:
        text += f"; not searched: {_remote_note(info['remote_segments'])}"
    return text


def render_inspect(info: dict[str, Any]) -> str:
    lines = [
        f"id          {info['id']!r}",
        f"verdict     {info['verdict']}"
        + (f" of {info['duplicate_of']!r}" if info["duplicate_of"] is not None else "")
        + (f", similarity {info['similarity']}" if info["similarity"] is not None else "")
        + (f", distance {info['distance']:g}" if info.get("distance") is not None else "")
        + (" (identical content)" if info["exact"] else "")
        + (f" ({info['reason']})" if info["reason"] else ""),
        f"cluster     {info['cluster']!r}",
        f"{_SIZE_LABEL.get(info.get('item', 'text'), 'shingles'):<12}{info['shingles']}",
        "stored in   "
        + ("the open index" if info["segment"] is None else f"sealed segment {info['segment']}"),
    ]
    if not info["in_buckets"]:
        lines.append("not in LSH buckets (empty, or an exact copy of an indexed document)")
    elif info["neighbours"]:
        first = info["neighbours"][0]
        exact = next((k for k in _EXACT_LABEL if k in first), None)
        estimated = next(k for k in first if k.startswith("estimated_"))
        lines.append(
            "nearest indexed neighbours (estimated from signatures"
            + (f", exact {_EXACT_LABEL[exact]}" if exact else "")
            + "):"
        )
        for n in info["neighbours"]:
            extra = f"  exact {n[exact]:.4f}" if exact in n else ""
            where = "" if n["segment"] is None else f"  (sealed segment {n['segment']})"
            lines.append(f"  {n['id']!r:40}  ~{n[estimated]:.4f}{extra}{where}")
    else:
        lines.append("no neighbours share a bucket")
    if info["remote_segments"]:
        lines.append(f"not searched: {_remote_note(info['remote_segments'])}")
    return "\n".join(lines)
