"""The near-duplicate search of a whole batch, made before its per-document loop
(`search_batch`), for the batches where no verdict can change what a later document
of the batch finds.

Why that is most batches of a stream, and when it holds (`Deduplicator._classify`
checks it): no sealed segments; every document of the batch a new id (in neither the
index nor another document of the batch), none `light`; the time window forgets and
hides nothing during the batch; exact verification.  Then no document is forgotten,
replaced or adopted in the batch, so no stored posting goes stale and every document
is inserted: its document number is the batch's first plus its position.  A document
is indexed (its postings added, its signature and exact set findable) iff it has
shingles and its content has no owner yet -- a fact of the batch, not of any verdict.
So each searching document's candidates (per bucket the newest `cap` of the batch's
earlier indexed documents and of the stored postings read ahead), their ranking and
the exact best match are fixed before the loop starts; only the `cluster` of a
duplicate of one of the batch's documents follows that document's verdict, which the
loop reads when it stores the document (`Tables.record`).

The answers and the counters are exactly those `Deduplicator._best_match` would give
one document at a time (tests/engine/test_bulk.py compares the two on random batches
of near duplicates, inside the batch and against stored documents, with caps that
bite)."""

from __future__ import annotations

from dataclasses import dataclass, field

from streamdedup.engine.prepare import Prepared
from streamdedup.engine.verify import BatchMemory, best_exact
from streamdedup.store.batch import BatchPostings
from streamdedup.store.tables import Tables, gather_newest


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
    memory: BatchMemory,
    buckets: BatchPostings,
    docs: list[tuple[Prepared, int, int]],
    cap: int,
    threshold: float,
    margin: float,
    max_checks: int,
) -> Searched:
    """Search every one of `docs` ((part, index in it, docno), in batch order: the
    batch's documents that search, as `_classify` found them) as `_best_match` would
    when the loop reaches it, under the conditions the module describes.

    Each document is made findable (`BatchMemory.remember`, and its docno added to
    the buckets the batch shares, as `BatchPostings.add` adds it) once its own search
    is done, so a later one meets exactly the earlier ones."""
    out = Searched()
    # the batch's docnos by shared bucket, oldest first, as the loop will have added
    # them when each document searches (`BatchPostings.add`: only shared keys)
    added: dict[bytes, list[int]] = {bk: [] for bk in buckets.added}
    read_ahead, hot = buckets.read_ahead, buckets.hot
    bar, limit = threshold - margin, max_checks + 1
    found_of = out.found
    for p, i, docno in docs:
        keys = p.band_keys[i]
        found, capped = gather_newest(keys, read_ahead, added, hot, cap)
        n = len(found)
        out.bucket_capped += capped
        out.candidates += n
        if n > out.most_candidates:
            out.most_candidates = n
        best: tuple[float, int] | None = None
        if n:
            kept, ranked, ranked_est = memory.ranked(t, p.sigs[i], found, bar, limit)
            if kept:
                best, checks = best_exact(
                    t, memory, p, i, ranked, ranked_est, threshold, margin, max_checks
                )
                out.exact_checks += checks
                if len(ranked) > checks >= max_checks:
                    floor = threshold if best is None else best[0]
                    if ranked_est[checks] >= floor - margin:  # the cap stopped the search
                        out.exact_capped += 1
        found_of[docno] = best
        memory.remember(docno, p, i)
        for bk in keys:
            later = added.get(bk)
            if later is not None:
                later.append(docno)
    return out


__all__ = ["Searched", "search_batch"]
