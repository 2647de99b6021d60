"""The bulk path's second half: the documents `_classify` (classify.py) found and the
loop numbered, decided and stored together after the loop (`_store_bulk`) -- the
verdicts of those that search taken from one search of the whole batch
(`_searched`, engine/search.py) -- and their changes made only if read (`Stored`)."""

from __future__ import annotations

import itertools
import operator
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from streamdedup.engine.bulk.classify import COPY, PLAIN, SEARCH, Bulk, joined
from streamdedup.engine.compressed import pick
from streamdedup.engine.prepare import Prepared
from streamdedup.engine.search import search_batch
from streamdedup.engine.window import WindowRun
from streamdedup.models import Change, DocId, Record, Verdict
from streamdedup.store.tables import Packed, Tables

_ID = operator.attrgetter("id")


def _text(p: Prepared, i: int) -> bytes:
    assert p.texts is not None
    return p.texts[i]


@dataclass
class Stored:
    """Documents of one kind stored in bulk (`_store_bulk`), kept for their changes:
    those are made from them if `changes` is read (`build`), not for every batch.
    `signatures` (and `texts`, with exact verification): indexed ones, which own
    their content; None: exact copies."""

    at: list[int]  # the places of their changes in the batch's list
    keys: list[bytes]
    docnos: list[int]
    verdicts: list[Verdict]
    contents: list[bytes]
    timestamps: list[int | None]
    shingles: list[int]
    signatures: list[bytes] | None = None
    texts: list[bytes] | None = None

    def build(self) -> list[Change]:
        """Their changes, in the order of `at` (what `_insert` appends for a document
        stored one by one)."""
        records = [
            Record.of(v, c, ts, n)
            for v, c, ts, n in zip(
                self.verdicts, self.contents, self.timestamps, self.shingles, strict=True
            )
        ]
        if self.signatures is None:
            return [
                Change(key, docno, rec, None, False)
                for key, docno, rec in zip(self.keys, self.docnos, records, strict=True)
            ]
        texts: Sequence[bytes | None] = self.texts or [None] * len(records)
        return [
            Change(key, docno, rec, sig, True, text)
            for key, docno, rec, sig, text in zip(
                self.keys, self.docnos, records, self.signatures, texts, strict=True
            )
        ]


@dataclass
class _Joined:
    """A batch's per-document lists as one list each (`joined`), for `_store_bulk`."""

    one: Prepared | None  # the batch's only part, if it has one
    at: list[tuple[Prepared, int]]  # each position's part and place in it (several parts)
    docs: Sequence[object]
    keys: Sequence[bytes]
    content: Sequence[bytes]
    shingles: Sequence[int]
    sigs: Sequence[bytes]
    rows: Sequence[bytes]

    @classmethod
    def of(cls, parts: list[Prepared], rows: list[list[bytes]]) -> _Joined:
        one = parts[0] if len(parts) == 1 else None
        return cls(
            one,
            [] if one else [(p, i) for p in parts for i in range(len(p.docs))],
            joined([p.docs for p in parts]),
            joined([p.keys for p in parts]),
            joined([p.content for p in parts]),
            joined([p.shingles for p in parts]),
            joined([p.sig_bytes for p in parts]),
            joined(rows),
        )


class StoreRun(WindowRun):
    """A batch's run, storing the documents its bulk path decides."""

    def _store_bulk(
        self,
        t: Tables,
        parts: list[Prepared],
        rows: list[list[bytes]],
        b: Bulk,
        out: list[Verdict],
    ) -> None:
        """Decide and store the documents `_classify` found and the loop numbered:
        what `_check_one` and `_insert` do for each, in whole-list operations.  A
        plain one: `unique`, its own cluster, stored as the owner of its content
        with signature, postings and text.  A copy: `duplicate` of its content's
        owner, exact, stored as one of the content's copies.  Their verdicts and
        changes take the places the loop kept, so `out` and `changes` are as the
        one-by-one path makes them.  A SEARCH one: its verdict from the batch's
        search (`_searched`), stored as a plain one is (`put_plain`: the batch's
        documents sharing a bucket are SEARCH ones, stored in docno order, so the
        postings buffer keeps their order)."""
        lists = _Joined.of(parts, rows)
        timeless = b.timestamps.count(None) == len(b.timestamps)  # (file mode)
        kind_of = b.kind[b.positions]  # each numbered document's kind, in loop order
        for kind in (SEARCH, PLAIN, COPY):  # (copies of SEARCH documents follow them)
            ms = np.flatnonzero(kind_of == kind).tolist()
            if not ms:
                continue
            pos = pick(b.positions, ms)
            one = lists.one
            where = list(zip(itertools.repeat(one), pos)) if one else pick(lists.at, pos)
            docnos = pick(b.docnos, ms)
            verdicts = self._bulk_verdicts(t, kind, b, pos, where, docnos, lists)
            for j, v in zip(pos, verdicts, strict=True):
                out[j] = v
            stamps: list[int | None] = [None] * len(ms) if timeless else pick(b.timestamps, ms)
            stored = Stored(
                pick(b.change_at, ms),
                pick(lists.keys, pos),
                docnos,
                verdicts,
                pick(lists.content, pos),
                stamps,
                pick(lists.shingles, pos),
            )
            self.unbuilt.append(stored)
            self._put_kind(t, kind, stored, pos, where, parts, lists)
        self.counters.bulk += len(b.positions)

    def _bulk_verdicts(
        self,
        t: Tables,
        kind: int,
        b: Bulk,
        pos: list[int],
        where: list[tuple[Prepared, int]],
        docnos: list[int],
        lists: _Joined,
    ) -> list[Verdict]:
        """The verdicts of the documents of one kind decided in bulk, at positions
        `pos`, tallied."""
        ids = list(map(_ID, pick(lists.docs, pos)))
        counts = self._counts
        if kind == SEARCH:
            verdicts = self._searched(t, where, docnos, ids)
            by_position = dict(zip(pos, verdicts, strict=True))
            for j, owner in b.copy_of.items():
                v = by_position[owner]
                b.owner_of[j] = (v.id, v.cluster)
            tallied = Counter(itertools.chain.from_iterable(map(Verdict.kinds, verdicts)))
            for name, k in tallied.items():
                counts[name] = counts.get(name, 0) + k
            return verdicts
        if kind == PLAIN:
            verdicts = [Verdict(d, "unique", None, d, None, False) for d in ids]
        else:
            of = pick(b.owner_of, pos)
            verdicts = [
                Verdict(d, "duplicate", o[0], o[1], 1.0, True) for d, o in zip(ids, of, strict=True)
            ]
        for name in verdicts[0].kinds():  # (the same for every verdict of a kind)
            counts[name] = counts.get(name, 0) + len(verdicts)
        return verdicts

    def _put_kind(
        self,
        t: Tables,
        kind: int,
        stored: Stored,
        pos: list[int],
        where: list[tuple[Prepared, int]],
        parts: list[Prepared],
        lists: _Joined,
    ) -> None:
        """Store the documents of one kind decided in bulk: copies as copies, the
        others indexed (signature, postings, text)."""
        docnos, keys, contents, stamps = (
            stored.docnos,
            stored.keys,
            stored.contents,
            stored.timestamps,
        )
        records = Packed(
            Record.pack_verdicts(stored.verdicts, contents, stamps, stored.shingles),
            contents,
            stamps,
        )
        if kind == COPY:
            t.put_copies(docnos, keys, records)
            return
        stored.signatures = sigs = pick(lists.sigs, pos)
        # exact verification stores every indexed document's text (all parts or none)
        one = lists.one
        if one is not None and one.texts is not None:
            stored.texts = one.texts.take(pos)
        elif parts[0].texts is not None:
            stored.texts = [_text(p, i) for p, i in where]
        t.put_plain(docnos, keys, records, sigs, pick(lists.rows, pos), stored.texts)
        # later documents of the batch meet them (if at all) through memory (the
        # search remembered SEARCH documents already)
        if kind == PLAIN:
            self._memory.unstored.update(zip(docnos, where, strict=True))
        # (nor are they the time window's `_expiry.oldest`: none is older than the
        # batch's last cutoff, so the window reaches none of them in the batch)

    def _searched(
        self,
        t: Tables,
        where: list[tuple[Prepared, int]],
        docnos: list[int],
        ids: list[DocId],
    ) -> list[Verdict]:
        """The verdicts of the batch's SEARCH documents (`where`, numbered `docnos`,
        ascending): their near duplicates searched at once (engine/search.py), the
        work counted as `_best_match` counts it.  A duplicate of an earlier SEARCH
        document of the batch (the only ones of the batch a search can meet) takes
        that document's cluster, known by then: they are decided in batch order."""
        buckets = t.batch_buckets()
        assert buckets is not None and not (buckets.stale or buckets.dropped or buckets.adopted)
        got = search_batch(
            t,
            self._memory,
            buckets,
            [(p, i, d) for (p, i), d in zip(where, docnos, strict=True)],
            self.options.max_bucket_candidates,
            self.params.bar_value,
            self._margin,
            self.options.max_exact_checks,
            signature_only=self.params.verify == "signature",
        )
        c = self.counters
        c.candidates += got.candidates
        c.most_candidates = max(c.most_candidates, got.most_candidates)
        c.exact_checks += got.exact_checks
        c.bucket_capped += got.bucket_capped
        c.exact_capped += got.exact_capped
        c.searched += len(docnos)
        found = got.found
        mine: dict[int, tuple[DocId, DocId]] = {}  # docno -> (id, cluster), in the batch
        verdicts: list[Verdict] = []
        for docno, d in zip(docnos, ids, strict=True):
            best = found[docno]
            v = None
            if best is not None:
                match = mine.get(best[1])
                if match is None and (rec := t.record(best[1])) is not None:
                    match = (rec.doc_id, rec.cluster)
                if match is not None:
                    v = Verdict(d, "duplicate", *match, self.params.reported(best[0]), False)
            if v is None:
                v = Verdict(d, "unique", None, d, None, False)
            mine[docno] = (d, v.cluster)
            verdicts.append(v)
        return verdicts


__all__ = ["StoreRun", "Stored"]
