"""The one-by-one path: a document decided in the order of the checks, against
everything stored before it, including the batch's earlier documents -- same id
indexed (same content: its stored verdict; changed content: forget it and check
again) -> no shingles (unique, reason "empty") -> identical normalised content
(duplicate, exact) -> LSH candidates, verified by signature or by exact Jaccard
(verify.py) -> unique.  Every document the bulk path (bulk.py) does not decide comes
here, and with sealed segments, every document."""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from streamdedup.engine.prepare import Prepared
from streamdedup.engine.roles import Store
from streamdedup.engine.verify import best_exact, cap_stopped
from streamdedup.engine.window import WindowRun
from streamdedup.models import Record, Verdict
from streamdedup.sketch.families import signature_width
from streamdedup.sketch.signature import estimate_jaccard, rank_gathered

# At most this many candidates, their signatures are read one by one (`_one_by_one`);
# more are gathered by the batch's signature matrix (VerifyCache.ranked).
_FEW = 8
# row j of a few candidates' signatures is candidate j's (`_best_match`)
_POSITIONS = np.arange(_FEW + 1, dtype=np.int32)
_DOCNO_OF_POSITION = np.arange(_FEW + 1, dtype=np.int64)


class SingleRun(WindowRun):
    """A batch's run, with its one-by-one path."""

    def _check_one(
        self, t: Store, p: Prepared, i: int, docno: int, row: bytes, ts: int | None
    ) -> tuple[Verdict, int]:
        """Decide document `i` of `p` (its joined band keys `row`, stored timestamp
        `ts`) and store it as `docno`; its verdict and how many documents it stored."""
        doc, key, content = p.docs[i], p.keys[i], p.content[i]
        existing = t.docno_for_id(key)
        if existing is not None:
            rec = t.record(existing)
            if rec is not None and rec.content_hash == content and not self._expired(rec):
                self.counters.replayed += 1
                return Verdict.from_record(rec), 0
            self._forget(t, existing, key, own=True)
        if i in p.resent:  # it changed (or expired) since `known` looked: prepare it now
            p, i = self.preparer.prepare([doc]), 0
            row = p.band_rows[0]
        if p.shingles[i] == 0:
            verdict = Verdict(doc.id, "unique", None, doc.id, None, False, reason="empty")
            self._insert(t, p, i, docno, verdict, ts, index_it=False)
            return verdict, 1
        same = t.docno_for_content(content)
        orig = None if same is None else t.record(same)
        if (
            same is not None
            and orig is not None
            and self._expiry.cutoff is not None
            and self._expired(orig)
        ):
            # its content passes to the oldest copy still inside the window, if any
            next_owner = self._successor(t, same, orig)
            orig = None if next_owner is None else t.record(next_owner)
        if orig is not None:
            verdict = Verdict(doc.id, "duplicate", orig.doc_id, orig.cluster, 1.0, True)
            self._insert(t, p, i, docno, verdict, ts, index_it=False)
            return verdict, 1
        # a row none of whose buckets is stored or shared in the batch (most of them)
        # has no candidates: `_best_match` would find none
        best = None if t.is_unshared(row) else self._best_match(t, p, i, p.sigs[i])
        if best is None:
            verdict = Verdict(doc.id, "unique", None, doc.id, None, False)
        else:
            similarity, rec = best
            verdict = Verdict(
                doc.id,
                "duplicate",
                rec.doc_id,
                rec.cluster,
                self.params.reported(similarity),
                False,
            )
        self._insert(t, p, i, docno, verdict, ts, index_it=True, row=row)
        return verdict, 1

    def _best_match(
        self, t: Store, p: Prepared, i: int, sig: npt.NDArray[np.uint16]
    ) -> tuple[float, Record] | None:
        found = t.candidates(p.band_keys[i], self.options.max_bucket_candidates)
        c = self.counters
        if t.capped:
            c.bucket_capped += 1
        c.candidates += len(found)
        c.most_candidates = max(c.most_candidates, len(found))
        if not len(found):
            return None
        threshold = self.params.bar_value
        rule, scale = self._memory.bar(threshold), self._memory.scale
        signature_only = self.params.verify == "signature"
        # the candidates in rank order (highest estimate first, ties by document
        # number: the stream's tie-break), as far as any rule may look: the exact
        # check tries those within the margin, at most `max_exact_checks` (one more
        # tells whether that cap stopped it); the signature rule takes the first.
        # (The ranking's estimates are MinHash's: `scale` reads them on the family's.)
        bar = -math.inf if signature_only else scale.cut(rule.floor - self._margin)
        limit = 1 if signature_only else self.options.max_exact_checks + 1
        if self._expiry.behind:  # successors may stand in: any order
            kept_docnos, rows = self._one_by_one(t, found)
            docnos = np.asarray(kept_docnos, dtype=np.int64)
            est = estimate_jaccard(sig, rows)
            order = np.lexsort((docnos, -est))
            est = est[order]
            take = min(int(np.count_nonzero(est >= bar)), limit)
            kept, ranked, ranked_est = len(docnos), docnos[order[:take]].tolist(), est[:take]
        elif len(found) <= _FEW:
            # ranked by their positions among the (ascending) candidates kept: the
            # same order, ties by position being ties by docno
            kept_docnos, rows = self._one_by_one(t, found)
            n = len(kept_docnos)
            _, kept, at, ranked_est = rank_gathered(
                sig, rows, _POSITIONS[:n], _DOCNO_OF_POSITION[:n], bar, limit, fill=False
            )
            ranked = [kept_docnos[j] for j in at]
        else:  # the candidates' signatures gathered and ranked at once (compiled)
            kept, ranked, ranked_est = self._memory.ranked(t, sig, found, bar, limit)
        if not kept:
            return None
        ranked_est = scale.of(ranked_est)
        if signature_only:
            if ranked_est[0] < rule.floor:
                return None
            rec = t.record(ranked[0])
            return None if rec is None else (rule.measured(float(ranked_est[0])), rec)
        best, checks = best_exact(
            t,
            self._memory,
            p,
            i,
            ranked,
            ranked_est,
            threshold,
            self._margin,
            self.options.max_exact_checks,
        )
        c.exact_checks += checks
        c.exact_capped += cap_stopped(
            ranked_est, checks, best, rule, self._margin, self.options.max_exact_checks
        )
        if best is None:
            return None
        rec = t.record(best[1])
        return None if rec is None else (best[0], rec)

    def _one_by_one(
        self, t: Store, docnos: npt.NDArray[np.int64]
    ) -> tuple[list[int], npt.NDArray[np.uint16]]:
        """Candidates and their signatures one by one: for a few (most pages of a
        crawl have one or two, where the batched gather's numpy calls cost more than
        they save), and while the time window is behind, an expired candidate
        replaced by its successor (`_successor`)."""
        kept: list[int] = []
        rows: list[bytes] = []
        behind = self._expiry.behind
        for d in docnos.tolist():
            if behind and (r := t.record(d)) is not None and self._expired(r):
                next_owner = self._successor(t, d, r)
                if next_owner is None:
                    continue
                d = next_owner
            raw = self._memory.signature(t, d)
            if raw is not None:
                kept.append(d)
                rows.append(raw)
        if not kept:
            return kept, np.empty((0, signature_width(self.params)), dtype=np.uint16)
        return kept, np.frombuffer(b"".join(rows), dtype="<u2").reshape(len(rows), -1)


__all__ = ["SingleRun"]
