"""The stream's rules (engine/deduplicator.py), restated so that each applies to one
group of documents at a time, with no state carried from one document to the next:
what lets a Spark job decide a whole archive in parallel and still give, record for
record, the verdicts one ordered `dedup` run gives.

Positions stand in for document numbers: the engine numbers the documents it
stores in input order, so both orders agree wherever the rules compare them.

Why the groups are independent:

* **Ids** (`id_rule`): whether a document repeats the live document of its id (same
  content: the stored verdict comes back) or replaces it (changed content: the
  earlier one is forgotten at this position) depends only on that id's documents.
* **Contents** (`content_rule`): the owner of a normalised content at any position
  is the oldest live document with it (the first one, or, after the owner is
  forgotten, its oldest live copy: `Tables.adopt`).  So which documents are exact
  copies, and which own the content's postings over which stretch of positions,
  depend only on that content's documents and their forget positions -- never on
  near-duplicate verdicts.
* **Buckets** (`bucket_pairs`): given every posting with the positions over which
  it is live, a document's candidates in one band bucket are the newest `cap`
  postings live at its position: one bucket's postings, sorted.
* **Documents** (`choose`): the candidates' union, ranked by signature estimate
  (then document number), verified as the engine verifies (`choose_exact`).
* **Clusters**: the root of the `duplicate_of` chain, found by pointer jumping
  (job.py); a record's cluster is fixed when it is stored, i.e. its parent's.

A copy that takes over the postings of its forgotten owner ranks among a bucket's
postings by its own document number, from the position where it took them over, in
the stream as here (the engine once counted it among the newest until its batch was
written, so the stream's answer depended on where its batches ended; the engine was
fixed, and this rule followed).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np
import numpy.typing as npt

from streamdedup.engine.verify import choose_exact
from streamdedup.sketch.signature import estimate_rows

NEVER = 1 << 62  # a position after every document: "never forgotten"
QUERY_BLOCK = 512  # queries of a bucket whose estimates are computed in one numpy pass

# A posting: (docno, live_from, live_to, is_query, payload).  It is live for the
# queries of documents at positions live_from..live_to (inclusive).  `is_query`: the
# document made it when it was stored (and queried the buckets just before);
# otherwise a copy adopted it when its content's owner was forgotten.
Posting = tuple[int, int, int, bool, Any]


def id_rule(members: Iterable[tuple[int, bytes]]) -> list[tuple[int, int, int]]:
    """One id's documents, (position, content hash) in any order -> for each, in
    position order, (position, replay_of, forgotten_at): `replay_of` is the position
    of the live document it repeats with the same content (its verdict comes back;
    -1: it is checked and stored), `forgotten_at` the position of the document of
    the same id that replaces it (NEVER if none does)."""
    out: list[list[int]] = []
    live = -1  # index in `out` of the id's live document
    live_content = b""
    for pos, content in sorted(members):
        if live >= 0 and content == live_content:
            out.append([pos, out[live][0], NEVER])
            continue
        if live >= 0:
            out[live][2] = pos
        live, live_content = len(out), content
        out.append([pos, -1, NEVER])
    return [(a, b, c) for a, b, c in out]


def content_rule(
    members: Iterable[tuple[int, int]],
) -> tuple[list[tuple[int, int]], list[tuple[int, int, int, bool]]]:
    """One content's stored documents (position, forgotten_at) -> (owners, postings).

    `owners`: for each document, (position, the position of the content's owner when
    it came, -1 if none: it is checked against its candidates and owns the content).
    `postings`: (docno, live_from, live_to, is_query) for each stretch over which a
    document owned the content.  A stretch that ends before it begins is left out,
    but for the document that made the postings (`is_query`): replaced by the very
    next document, it is nobody's candidate, yet it asked its buckets when it came."""
    events: list[tuple[int, int, int]] = []  # (position, 0 forget | 1 arrive, member)
    for pos, gone in members:
        events.append((pos, 1, pos))
        if gone != NEVER:
            events.append((gone, 0, pos))
    events.sort()
    live: list[int] = []  # sorted; arrivals come in position order
    owners: list[tuple[int, int]] = []
    postings: list[tuple[int, int, int, bool]] = []
    owner, since, query = -1, 0, False
    for at, kind, pos in events:
        if kind == 1:
            owners.append((pos, owner))
            if owner < 0:
                owner, since, query = pos, pos + 1, True
            live.append(pos)
            continue
        del live[bisect.bisect_left(live, pos)]
        if pos != owner:
            continue
        if since <= at - 1 or query:
            postings.append((owner, since, at - 1, query))
        # the oldest live copy takes over (`Deduplicator._forget`), from this position
        owner, since, query = (live[0], at, False) if live else (-1, 0, False)
    if owner >= 0:
        postings.append((owner, since, NEVER, query))
    return owners, postings


def bucket_pairs(
    postings: list[Posting],
    cap: int,
    keep: Callable[[npt.NDArray[np.float64]], npt.NDArray[np.bool_]],
    capped: Callable[[int], None] | None = None,
) -> Iterator[tuple[int, int, float, Any]]:
    """One bucket's postings (payload: (signature bytes, id)) -> (query docno,
    candidate docno, estimate, candidate id) for every query and each of the newest
    `cap` postings live at its position whose estimate passes `keep`.  `capped` is
    called with each query's docno for which the bucket held more than `cap` live
    postings (the engine's `Tables.capped`: its search was cut short)."""
    if len(postings) <= cap + 1 and capped is not None:
        capped = None  # too few postings for any window to be cut
    if len(postings) < 2:  # most buckets: nothing to pair
        return
    postings = sorted(postings, key=lambda p: p[0])
    if not any(p[3] for p in postings):
        return
    plain = all(p[3] and p[2] == NEVER for p in postings)
    docnos = np.fromiter((p[0] for p in postings), dtype=np.int64, count=len(postings))
    sigs = np.frombuffer(b"".join(p[4][0] for p in postings), dtype="<u2").reshape(
        len(postings), -1
    )
    if plain:  # no document forgotten here: the window is the `cap` postings before
        ends = np.searchsorted(docnos, docnos, "left")  # first of equal docnos
        queries = np.unique(ends)
        windows = [(int(q), np.arange(max(0, q - cap), q)) for q in queries]
        if capped is not None:
            for q in queries[queries > cap].tolist():
                capped(int(docnos[q]))
    else:
        windows = []
        order = docnos.tolist()
        for q, post in enumerate(postings):
            if not post[3] or (q and postings[q - 1][0] == post[0]):
                continue
            at = post[0]
            found: list[int] = []
            for j in range(bisect.bisect_left(order, at) - 1, -1, -1):
                c = postings[j]
                if c[1] <= at <= c[2]:
                    if len(found) == cap:  # one more live than the window holds
                        if capped is not None:
                            capped(at)
                        break
                    found.append(j)
                    if len(found) == cap and capped is None:
                        break
            windows.append((q, np.asarray(found[::-1], dtype=np.int64)))
    for start in range(0, len(windows), QUERY_BLOCK):
        block = [w for w in windows[start : start + QUERY_BLOCK] if len(w[1])]
        if not block:
            continue
        width = max(len(w) for _, w in block)
        idx = np.zeros((len(block), width), dtype=np.int64)
        valid = np.zeros((len(block), width), dtype=np.bool_)
        for r, (_, w) in enumerate(block):
            idx[r, : len(w)] = w
            valid[r, : len(w)] = True
        q_rows = np.array([q for q, _ in block], dtype=np.int64)
        est = estimate_rows(sigs[q_rows], sigs[idx])
        rr, cc = np.nonzero(valid & keep(est))
        for r, col in zip(rr.tolist(), cc.tolist(), strict=True):
            j = int(idx[r, col])
            yield int(docnos[q_rows[r]]), int(docnos[j]), float(est[r, col]), postings[j][4][1]


def choose(
    candidates: list[tuple[int, float, Any]],
    threshold: float,
    exact: bool,
    margin: float,
    max_checks: int,
    mine: Callable[[], npt.NDArray[np.uint64]],
    theirs: Callable[[int], npt.NDArray[np.uint64]],
) -> tuple[tuple[float, int, Any] | None, bool]:
    """A document's verdict from its candidates (docno, estimate, id), as
    `Deduplicator._best_match` decides: ranked by estimate, highest first, ties by
    document number; with signature verification the first if it reaches the
    threshold, with exact verification `choose_exact`'s pick.  (similarity, docno,
    id), or None: unique; and whether `max_checks` stopped the search with a
    candidate left near enough to matter (the engine's `exact_capped`: `needed`
    passes one candidate more than may be checked, for this)."""
    if not candidates:
        return None, False
    by_docno = sorted(set(candidates))
    docnos = [d for d, _, _ in by_docno]
    est = np.array([e for _, e, _ in by_docno], dtype=np.float64)
    order: list[int] = np.lexsort((np.asarray(docnos), -est)).tolist()
    if not exact:
        j = order[0]
        if est[j] < threshold:
            return None, False
        return (float(est[j]), docnos[j], by_docno[j][2]), False
    best, checks = choose_exact(mine, theirs, docnos, est, order, threshold, margin, max_checks)
    floor = threshold if best is None else best[0]
    cut = max_checks <= checks < len(order) and bool(est[order[checks]] >= floor - margin)
    if best is None:
        return None, cut
    j = docnos.index(best[1])
    return (best[0], best[1], by_docno[j][2]), cut


def needed(
    candidates: list[tuple[int, float, Any]], threshold: float, margin: float, max_checks: int
) -> list[tuple[int, float, Any]]:
    """The candidates exact verification may look at: in rank order, those whose
    estimate reaches `threshold - margin`, at most `max_checks` (`choose_exact`
    stops at the first below that, or after that many checks), and one more: is
    there a candidate the cap left unchecked (`choose`)?"""
    ranked = sorted(set(candidates), key=lambda c: (-c[1], c[0]))
    return [c for c in ranked if c[1] >= threshold - margin][: max_checks + 1]


def roots(parents: dict[int, int]) -> dict[int, int]:
    """Each document's root by pointer jumping (the driver-side twin of the job's
    distributed version, for tests): parent -1 or itself is a root."""
    up = {d: (d if p < 0 else p) for d, p in parents.items()}
    while True:
        nxt = {d: up[p] for d, p in up.items()}
        if nxt == up:
            return up
        up = nxt


def live_content(members: Iterable[tuple[int, int]]) -> tuple[int, list[int]]:
    """One content's stored documents (position, forgotten_at) -> what the index
    holds of it once every document has come: (its owner, -1 if no document with it
    lives; the live copies, ascending).  The owner is the oldest live one: the first
    owner, or after it was forgotten the oldest live copy (`Tables.adopt`), which an
    owner's forgetting never changes -- `content_rule`'s last stretch, without the
    history."""
    live = sorted(pos for pos, gone in members if gone == NEVER)
    return (live[0], live[1:]) if live else (-1, [])
