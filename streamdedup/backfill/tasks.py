"""What the backfill's executors run, one function per stage and record (module level,
so Spark pickles them by reference): reading a byte range, the id, content and bucket
stages' rules (rules.py says why each may run per group), the picks, pointer jumping,
and the verdict lines.  The driver's side, the graph of stages, is in job.py."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson

from streamdedup import failpoints
from streamdedup.backfill import rules
from streamdedup.backfill.reading import Split, read_split
from streamdedup.config import Fields, IndexParams
from streamdedup.engine.jaccard_text import exact_shingles
from streamdedup.models import Verdict, output_record
from streamdedup.sketch.shingle import Shingler


def read_task(
    task: tuple[Split, int, int], params: IndexParams, fields: Fields, names: bool
) -> Any:
    split, first, first_line = task
    return read_split(split, first, first_line, params, fields, split.path if names else None)


def by_id(kv: tuple[int, tuple[Any, ...]]) -> tuple[bytes, tuple[Any, ...]]:
    pos, (_, doc_id, key, content, shingles, sig, keys, _text) = kv
    return key, (pos, content, shingles, doc_id, sig, keys)


def id_stage(kv: tuple[bytes, Iterable[tuple[Any, ...]]]) -> Iterator[tuple[Any, ...]]:
    members = {m[0]: m for m in kv[1]}
    for pos, replay_of, gone in rules.id_rule((p, m[1]) for p, m in members.items()):
        if replay_of >= 0:
            yield ("replay", pos, replay_of)
        else:
            _, content, shingles, doc_id, sig, keys = members[pos]
            yield ("stored", pos, gone, content, shingles, doc_id, sig, keys)


def content_stage(
    kv: tuple[bytes, Iterable[tuple[Any, ...]]], live: bool = False
) -> Iterator[tuple[Any, ...]]:
    members = {m[0]: m for m in kv[1]}  # pos -> (pos, gone, doc_id, sig, keys)
    owners, postings = rules.content_rule((p, m[1]) for p, m in members.items())
    if live:  # for a segment: who holds the content at the end
        owner, copies = rules.live_content((p, m[1]) for p, m in members.items())
        if owner >= 0:
            yield ("live", owner, True)
        for pos in copies:
            yield ("live", pos, False)
    for pos, owner in owners:
        if owner < 0:
            yield ("query", pos, members[pos][2])
        else:
            yield ("exact", pos, owner, members[owner][2], members[pos][2])
    for docno, lo, hi, query in postings:
        _, _, doc_id, sig, keys = members[docno]
        yield ("posting", docno, lo, hi, query, sig, keys, doc_id)


def explode(p: tuple[Any, ...]) -> Iterator[tuple[bytes, rules.Posting]]:
    _, docno, lo, hi, query, sig, keys, doc_id = p
    posting = (docno, lo, hi, query, (sig, doc_id))
    for i in range(0, len(keys), 8):
        yield keys[i : i + 8], posting


def _keep(floor: float, est: npt.NDArray[np.float64]) -> npt.NDArray[np.bool_]:
    out: npt.NDArray[np.bool_] = est >= floor
    return out


def bucket_stage(
    kv: tuple[bytes, Iterable[rules.Posting]], cap: int, floor: float
) -> Iterator[tuple[int, Any]]:
    """(query, (candidate, estimate, id)) pairs, and (query, None) for each query
    whose bucket held more than `cap` live postings (the stream's cap cut it)."""
    failpoints.reach("backfill-bucket")
    cut: list[int] = []
    pairs = rules.bucket_pairs(list(kv[1]), cap, functools.partial(_keep, floor), cut.append)
    for d, c, est, cid in pairs:
        yield d, (c, est, cid)
    for d in cut:
        yield d, None


def decide_signature(
    kv: tuple[int, Iterable[tuple[int, float, Any]]], threshold: float
) -> tuple[int, Any]:
    return kv[0], rules.choose(list(kv[1]), threshold, False, 0.0, 0, _none, _none_of)


def _none() -> npt.NDArray[np.uint64]:
    raise AssertionError("signature verification reads no sets")


def _none_of(_: int) -> npt.NDArray[np.uint64]:
    raise AssertionError("signature verification reads no sets")


def text_requests(kv: tuple[int, list[tuple[int, float, Any]]]) -> list[tuple[int, Any]]:
    """The texts a document's exact checks read: its candidates' and its own."""
    d, candidates = kv
    return [(c, (d, False)) for c, _, _ in candidates] + [(d, (d, True))]


def decide_exact(
    kv: tuple[int, tuple[Iterable[Any], Iterable[tuple[int, bool, bytes]]]],
    params: IndexParams,
    margin: float,
    max_checks: int,
) -> tuple[int, Any]:
    d, (needs, got) = kv
    candidates = next(iter(needs))
    texts: dict[int, bytes] = {}
    own_text = b""
    for pos, own, text in got:
        if own:
            own_text = text
        else:
            texts[pos] = text
    shingler = Shingler(params.shingle, params.hash_key)
    return d, rules.choose(
        candidates,
        params.threshold,
        True,
        margin,
        max_checks,
        lambda: exact_shingles(shingler, own_text),
        lambda c: exact_shingles(shingler, texts[c]),
    )


def jump(kv: tuple[int, tuple[int, int | None]]) -> tuple[int, tuple[int, bool]]:
    """(parent, (child, grandparent or None: the parent is a root)) -> (child, (the
    parent's parent, moved))."""
    parent, (child, grand) = kv
    return (child, (parent, False)) if grand is None else (child, (grand, True))


def verdict_of(kv: tuple[int, tuple[tuple[Any, ...], Any]]) -> tuple[int, tuple[Verdict, str]]:
    pos, ((doc_id, kind, dup_id, sim), root_id) = kv
    cluster = doc_id if root_id is None else root_id  # None: a root, its own cluster
    if kind == "exact":
        v = Verdict(doc_id, "duplicate", dup_id, cluster, 1.0, True)
    elif kind == "near":
        v = Verdict(doc_id, "duplicate", dup_id, cluster, round(sim, 4), False)
    elif kind == "empty":
        v = Verdict(doc_id, "unique", None, doc_id, None, False, reason="empty")
    else:
        v = Verdict(doc_id, "unique", None, doc_id, None, False)
    return pos, (v, kind)


def verdict_line(kv: tuple[int, tuple[Verdict, str]]) -> tuple[int, tuple[bytes, str]]:
    pos, (v, kind) = kv
    return pos, (orjson.dumps(output_record(v)), kind)


# -- the driver
