"""`inspect`: what an index knows about one document -- its verdict and cluster,
where it is stored, its exact copies, its cluster's other members and its nearest
neighbours by signature -- across the open index and its local sealed segments."""

from __future__ import annotations

from typing import Any

import numpy as np

from streamdedup.config import IndexParams
from streamdedup.engine.families import family_of
from streamdedup.engine.prepare import stored_band_keys
from streamdedup.models import Record, Verdict
from streamdedup.ops.sources import Source, index_sources
from streamdedup.store.keys import id_key
from streamdedup.store.tables import Tables


def inspect_document(path: str, doc_id: str, neighbours: int = 10) -> dict[str, Any]:
    """What the index knows about `doc_id`'s live document: its verdict, where it is
    stored (`segment`: the open index is None) and its nearest neighbours -- across
    the open index and every local sealed segment, as `dedup` matches them (a
    document masked by the open index, replaced or expired, is neither found nor a
    neighbour).  Remote segments cannot be opened here: `remote_segments` lists
    those not searched.  `found` is False when no live document has that id (then
    `expired_in`: the segment whose document of that id expired, if one did)."""
    with index_sources(path) as found:
        missing: dict[str, Any] = {
            "id": doc_id,
            "found": False,
            "expired_in": None,
            "remote_segments": found.remote,
        }
        for src in found.local:
            hit = src.index.read(lambda t: _find(t, doc_id))
            if hit is None:
                continue
            if hit[0] in src.masked:  # its newest document expired (a replacement is
                return {**missing, "expired_in": src.number}  # found before it)
            info = _describe(src, found.local, found.params, hit, neighbours, found.remote)
            return info | _kin(found.local, hit)
        return missing


# How many of a document's exact copies and cluster members `inspect` names (it
# counts them all).
NAMED = 20


def _kin(sources: list[Source], hit: tuple[int, Record]) -> dict[str, Any]:
    """The document's exact copies (the live documents of the same content) and its
    cluster's members, the first `NAMED` of each by id in the order they came, and
    how many there are.  A cluster's members are found by reading every record (a
    second or two a million documents)."""
    docno, rec = hit
    copies: list[tuple[int, Any]] = []
    members: list[tuple[int, Any]] = []
    for src in sources:

        def gather(t: Tables, src: Source = src) -> None:
            for d in t.content_docnos(rec.content_hash, -1, 1 << 62):
                other = t.record(d)
                if d != docno and d not in src.masked and other is not None:
                    copies.append((d, other.doc_id))

        src.index.read(gather)
        members.extend((d, r.doc_id) for d, r in src.live_records() if r.cluster == rec.cluster)
    copies.sort(key=lambda x: x[0])
    members.sort(key=lambda x: x[0])
    return {
        "copies": [i for _, i in copies[:NAMED]],
        "copies_count": len(copies),
        "cluster_members": [i for _, i in members[:NAMED]],
        "cluster_size": len(members),
    }


def _find(t: Tables, doc_id: str) -> tuple[int, Record] | None:
    for candidate in _id_forms(doc_id):
        docno = t.docno_for_id(id_key(candidate))
        if docno is not None:
            rec = t.record(docno)
            return None if rec is None else (docno, rec)
    return None


def _describe(
    src: Source,
    sources: list[Source],
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
    own: Source, sources: list[Source], params: IndexParams, docno: int, sig: bytes, limit: int
) -> list[dict[str, Any]]:
    """The documents sharing a bucket with `docno` in every source, nearest first by
    signature estimate (exact Jaccard beside it when the index verifies exactly)."""
    keys = stored_band_keys(sig, params)
    rows: list[tuple[Source, int, bytes]] = []
    for src in sources:

        def gather(t: Tables, src: Source = src) -> list[tuple[Source, int, bytes]]:
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


def _named(info: dict[str, Any], ids: str, count: str, one: str, many: str = "") -> str:
    """`: a, b, c (and N more)` of a listing of ids, '' if it has none."""
    names, n = info.get(ids, []), info.get(count, 0)
    if not n:
        return ""
    more = f" and {n - len(names)} more" if n > len(names) else ""
    head = "" if ids == "copies" else f", {n} {one if n == 1 else many or one + 's'}"
    return f"{head}: {', '.join(map(repr, names))}{more}"


def render_inspect(info: dict[str, Any]) -> str:
    lines = [
        f"id          {info['id']!r}",
        f"verdict     {info['verdict']}"
        + (f" of {info['duplicate_of']!r}" if info["duplicate_of"] is not None else "")
        + (f", similarity {info['similarity']}" if info["similarity"] is not None else "")
        + (f", distance {info['distance']:g}" if info.get("distance") is not None else "")
        + (" (identical content)" if info["exact"] else "")
        + (f" ({info['reason']})" if info["reason"] else ""),
        f"cluster     {info['cluster']!r}"
        + _named(info, "cluster_members", "cluster_size", "member"),
        f"copies      {info['copies_count']}"
        + _named(info, "copies", "copies_count", "exact copy", "copies"),
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
