"""The near-duplicate search of a whole batch at once (`search_batch`), for the
batches where no verdict can change what a later document of the batch finds.

Why that is most batches of a stream, and when it holds (`Deduplicator._classify`
checks it): no sealed segments; every document of the batch a new id (in neither the
index nor another document of the batch) or a replay (`resent`: sent again with the
content its stored document keeps); the time window forgets and hides nothing during
the batch.  Then no document is forgotten, replaced or adopted in the batch, so no
stored posting goes stale and every document is inserted or a replay.  A document is
indexed (its postings added, its signature and exact set findable) iff it has
shingles and its content has no owner yet -- a fact of the batch, not of any verdict.
So each searching document's candidates (per bucket the newest `cap` of the batch's
earlier indexed documents and of the stored postings read ahead), their ranking and
the best match (by exact Jaccard, or with `verify = "signature"` by estimate) are
fixed before any verdict is made; only the `cluster` of a
duplicate of one of the batch's documents follows that document's verdict, which
`Deduplicator._searched` resolves in batch order.

The answers and the counters are exactly those `Deduplicator._best_match` would give
one document at a time in the batch's loop (tests/engine/test_bulk.py compares the
two on random batches of near duplicates, inside the batch and against stored
documents, with caps that bite)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from streamdedup import kernels
from streamdedup.engine.prepare import Prepared
from streamdedup.engine.verify import VerifyCache, best_exact_all, cap_stopped
from streamdedup.sketch.signature import rank_gathered
from streamdedup.store.batch_postings import BatchPostings, Docnos
from streamdedup.store.tables import Tables, gather_newest

I64 = npt.NDArray[np.int64]


@dataclass
class Searched:
    """The answers of a batch's search: docno -> (exact similarity, docno of the best
    match) or None (unique); and the work counted as `Counters` counts it."""

    found: dict[int, tuple[float, int] | None] = field(default_factory=dict)
    candidates: int = 0
    most_candidates: int = 0
    exact_checks: int = 0
    bucket_capped: int = 0
    exact_capped: int = 0


def search_batch(
    t: Tables,
    memory: VerifyCache,
    buckets: BatchPostings,
    docs: list[tuple[Prepared, int, int]],
    cap: int,
    threshold: float,
    margin: float,
    max_checks: int,
    signature_only: bool = False,
) -> Searched:
    """Search every one of `docs` ((part, index in it, docno), in batch order: the
    batch's documents that search, as `_classify` found them) as `_best_match` would
    when the loop reaches it, under the conditions the module describes.

    Three steps over the whole batch rather than a chain of calls per document:
    every document's candidates gathered at once (`gather_all`: each meets the
    batch's earlier documents as the loop would have added them); the signatures of
    the stored ones among them read in one call and all of them ranked at once
    (`rank_all`); then the exact check of the documents with candidates near enough
    (`best_exact_all`: their own exact sets, then one compiled call for all of them).
    `signature_only` (`verify = "signature"`): the best estimate decides, at least
    `threshold`, as `_best_match` takes it."""
    out = Searched()
    found = out.found = dict.fromkeys((d for _, _, d in docs), None)
    if not docs:
        return out
    docnos = np.fromiter((d for _, _, d in docs), dtype=np.int64, count=len(docs))
    for p, i, docno in docs:  # (a document's candidates are earlier ones only)
        memory.remember(docno, p, i)
    # the batch's docnos by shared bucket, as the loop would have added them
    # (`BatchPostings.add`: only shared keys)
    added: dict[bytes, list[int]] = {bk: [] for bk in buckets.added}
    rows = [p.band_keys[i] for p, i, _ in docs]
    flat, offsets, capped = gather_all(rows, docnos, buckets.read_ahead, added, buckets.hot, cap)
    counts = np.diff(offsets)
    out.candidates = len(flat)
    out.most_candidates = int(counts.max())
    out.bucket_capped = int(np.count_nonzero(capped))
    if not len(flat):
        return out
    stored = _distinct_below(flat, int(docnos[0]))  # the rest: the batch's, remembered
    if len(stored):  # their signatures read into memory's matrix (the ranking: none)
        memory.ranked(t, docs[0][0].sigs[docs[0][1]], stored, math.inf, 0)
    matrix, slot = memory.matrix()
    # the candidates in the order any rule may look at them (`_best_match`): the
    # exact check tries those within the margin of the bar, at most `max_checks`
    # (one more says whether that cap stopped it); the signature rule the first
    # (on scores: the family's rule, `Bar`; a similarity's score is itself)
    rule, scale = memory.bar(threshold), memory.scale  # (`scale`: see single.py)
    bar = -math.inf if signature_only else scale.cut(rule.floor - margin)
    limit = 1 if signature_only else max_checks + 1
    kept, ranked, est, at = rank_all(_signatures(docs), matrix, slot, flat, offsets, bar, limit)
    est = scale.of(est)
    bounds = at.tolist()
    if signature_only:
        for j in np.flatnonzero(np.diff(at)).tolist():
            if est[bounds[j]] >= rule.floor:
                score = float(est[bounds[j]])
                found[docs[j][2]] = (rule.measured(score), int(ranked[bounds[j]]))
        return out
    near = np.flatnonzero(np.diff(at))  # those near enough to be checked exactly
    if not len(near):
        return out
    checked = [docs[j] for j in near.tolist()]
    # their candidates' bounds (documents between them have none)
    starts = np.append(at[near], at[near[-1] + 1])
    bests, checks = best_exact_all(
        t, memory, checked, ranked, est, starts, threshold, margin, max_checks
    )
    out.exact_checks = int(checks.sum())
    for (_, _, docno), best in zip(checked, bests, strict=True):
        found[docno] = best  # (its own exact set, made for the check, kept: `VerifyCache.own`)
    for k in np.flatnonzero(checks >= max_checks).tolist():  # where the cap may have cut
        ranked_est = est[starts[k] : starts[k + 1]]
        out.exact_capped += cap_stopped(
            ranked_est, int(checks[k]), bests[k], rule, margin, max_checks
        )
    del kept  # (a document none of whose candidates has a signature: no check either)
    return out


def _distinct_below(flat: I64, first: int) -> I64:
    """The distinct values of `flat` below `first`, ascending: by marking them in a
    mask over their span when it is not much wider than they are many (a templated
    batch has millions of candidates, mostly recent documents, which a sort would make
    distinct in ten times the time), else by a sort.  The mask starts at 0 when the
    values do not start far above it: one scatter of `flat` as it is, where a copy of
    the values below `first` and another shifted to the span's start cost as much
    again (3.3 million candidates: 7.7 against 4.8 ms)."""
    if not len(flat):
        return flat
    base, top = int(flat.min()), int(flat.max()) + 1
    if base >= first:
        return flat[:0]
    if top - base > 8 * len(flat) + (1 << 16):
        return np.unique(flat[flat < first])
    if base <= len(flat):
        base = 0
    seen = np.zeros(top - base, dtype=np.bool_)
    seen[flat - base if base else flat] = True
    return np.flatnonzero(seen[: first - base]).astype(np.int64) + base


def _signatures(docs: list[tuple[Prepared, int, int]]) -> npt.NDArray[np.uint16]:
    """The documents' signatures as the rows of one matrix (their parts' rows taken
    part by part)."""
    blocks: list[npt.NDArray[np.uint16]] = []
    j = 0
    while j < len(docs):
        p = docs[j][0]
        end = j
        while end < len(docs) and docs[end][0] is p:
            end += 1
        blocks.append(p.sigs[[i for _, i, _ in docs[j:end]]])
        j = end
    return np.ascontiguousarray(np.concatenate(blocks), dtype=np.uint16)


def gather_all(
    rows: list[list[bytes]],
    docnos: I64,
    read_ahead: Mapping[bytes, Docnos],
    added: dict[bytes, list[int]],
    hot: set[bytes],
    cap: int,
) -> tuple[I64, I64, npt.NDArray[np.bool_]]:
    """`gather_newest` for each document of a batch in turn (`rows`: their band keys;
    `docnos`: their numbers), each one's docno appended, once it is gathered, to the
    lists of `added` its keys have (changed in place), as the loop's inserts add
    them: the candidates of all of them end to end, where each one's begin (n + 1
    offsets), and whether a cap cut a bucket of each.  One compiled call
    (`gather_batch`); the loop below is the definition."""
    if kernels.native is not None:
        raw, off, raw_cut = kernels.native.gather_batch(
            rows, np.ascontiguousarray(docnos, dtype=np.int64), read_ahead, added, hot, cap
        )
        return (
            np.frombuffer(raw, dtype=np.int64),
            np.frombuffer(off, dtype=np.int64),
            np.frombuffer(raw_cut, dtype=np.uint8).astype(np.bool_),
        )
    lists: list[I64] = []
    offsets = [0]
    capped: list[bool] = []
    for keys, docno in zip(rows, docnos.tolist(), strict=True):
        got, cut = gather_newest(keys, read_ahead, added, hot, cap)
        lists.append(got)
        offsets.append(offsets[-1] + len(got))
        capped.append(cut)
        for bk in keys:
            later = added.get(bk)
            if later is not None:
                later.append(docno)
    return (
        np.concatenate(lists) if lists else np.zeros(0, dtype=np.int64),
        np.asarray(offsets, dtype=np.int64),
        np.asarray(capped, dtype=np.bool_),
    )


def rank_all(
    sigs: npt.NDArray[np.uint16],
    matrix: npt.NDArray[np.uint16],
    slot: npt.NDArray[np.int32],
    flat: I64,
    offsets: I64,
    bar: float,
    limit: int,
) -> tuple[I64, I64, npt.NDArray[np.float64], I64]:
    """`rank_gathered` (without `fill`) for each document of a batch: row j of `sigs`
    against its candidates `flat[offsets[j]:offsets[j + 1]]`: how many of each have
    a signature, and the ranked docnos and their estimates of all of them end to end,
    with where each one's begin (n + 1 offsets).  One compiled call (`rank_batch`);
    the loop below is the definition."""
    if kernels.native is not None:
        raw_kept, raw_ranked, raw_est, raw_at = kernels.native.rank_batch(
            np.ascontiguousarray(sigs, dtype=np.uint16),
            np.ascontiguousarray(matrix, dtype=np.uint16),
            np.ascontiguousarray(slot, dtype=np.int32),
            np.ascontiguousarray(flat, dtype=np.int64),
            np.ascontiguousarray(offsets, dtype=np.int64),
            bar,
            limit,
        )
        return (
            np.frombuffer(raw_kept, dtype=np.int64),
            np.frombuffer(raw_ranked, dtype=np.int64),
            np.frombuffer(raw_est, dtype=np.float64),
            np.frombuffer(raw_at, dtype=np.int64),
        )
    kept_of: list[int] = []
    ranked_of: list[int] = []
    est_of: list[npt.NDArray[np.float64]] = []
    at = [0]
    bounds = offsets.tolist()
    for j in range(len(bounds) - 1):
        _, kept, ranked, est = rank_gathered(
            sigs[j], matrix, slot, flat[bounds[j] : bounds[j + 1]], bar, limit, fill=False
        )
        kept_of.append(kept)
        ranked_of += ranked
        est_of.append(est)
        at.append(len(ranked_of))
    return (
        np.asarray(kept_of, dtype=np.int64),
        np.asarray(ranked_of, dtype=np.int64),
        np.concatenate(est_of) if est_of else np.zeros(0, dtype=np.float64),
        np.asarray(at, dtype=np.int64),
    )


__all__ = ["Searched", "gather_all", "rank_all", "search_batch"]
