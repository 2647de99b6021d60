"""The writer's side of its sealed segments (`Sealed`): their readers, their
tombstones, and the answers of the batch in progress, asked before the batch's
write transaction (`ask`, or `send` then `receive`); what the decisions raise
later, in follow-ups.  `View` (view.py) merges them with the open index; `Store`
(what the engine reads: `Tables` or `View`) came along from engine/sealed.py."""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from streamdedup.config import IndexParams
from streamdedup.engine.prepare import Prepared
from streamdedup.engine.sealed.probes import (
    Answer,
    LocalReader,
    Probe,
    SegmentReader,
    Waiting,
    answered,
    distinct,
    new_request,
)
from streamdedup.models import Record
from streamdedup.sketch.families import signature_width
from streamdedup.store.tables import Tables

KEPT_CONTENTS = 1_000_000  # contents whose holders are kept across batches, at most


@dataclass
class Sent:
    """A batch's questions, sent (`Sealed.send`), its answers not yet received."""

    waiting: list[Waiting]
    asked_keys: set[int]
    asked_ids: set[bytes]
    contents: set[bytes]
    cap: int
    expire: int
    segments: Sealed


class Sealed:
    """The sealed segments of one index, from the writer's side: their readers, the
    tombstones (committed, and those of the batch in progress), and the answers
    of the batch in progress."""

    def __init__(self, readers: Sequence[SegmentReader], params: IndexParams) -> None:
        self.readers: dict[int, SegmentReader] = {r.entry.number: r for r in readers}
        self.params = params
        self.numbers: list[int] = list(self.readers)  # the segments never change
        self.masks: dict[int, set[int]] = {n: set() for n in self.readers}
        self.pending: dict[int, set[int]] = {n: set() for n in self.readers}
        self.answers: dict[int, Answer] = {}
        self._asked_keys: set[int] = set()
        self._asked_ids: set[bytes] = set()
        self._asked_contents: set[bytes] = set()
        self._by_key: dict[bytes, list[tuple[int, list[int]]]] = {}
        self._records: dict[tuple[int, int], Record] = {}
        self._expiry: dict[int, list[tuple[int, int]]] = {n: [] for n in self.readers}
        self._expiry_more: dict[int, bool] = dict.fromkeys(self.readers, True)
        self._expiry_after: dict[int, bytes | None] = dict.fromkeys(self.readers)
        # What later batches may need again, kept across batches (segments do not
        # change): the holders of every content asked about, with their records and
        # signatures, and those of the expiry entries read ahead.
        self._kept: dict[int, Answer] = {n: Answer("", "") for n in self.readers}
        # per segment, seconds: from sending the last probe to having its answer
        # (with questions sent ahead, partly spent deciding the batch before), and
        # the time this process blocked waiting for answers since `waited` was reset
        self.capped = False  # the last merged bucket left postings out (the cap)
        self.round_trips: dict[int, float] = {}
        self.waited: dict[int, float] = {}
        self.follow_ups = 0

    def load_masks(self, t: Tables) -> None:
        for n in self.readers:
            self.masks[n] = set(t.masked(n).tolist())

    def close(self) -> None:
        for r in self.readers.values():
            r.close()

    # -------------------------------------------------------------- asking

    def ask(
        self,
        parts: Sequence[Prepared],
        cap: int,
        threshold: float,
        margin: float,
        expire: int = 0,
    ) -> None:
        """Send every sealed segment the batch's questions and wait for all answers
        (a silent segment stalls here: it is never skipped).  `expire`: how many
        documents the time window may forget in this batch (0: no window)."""
        self.receive(self.send(parts, cap, threshold, margin, expire))

    def send(
        self,
        parts: Sequence[Prepared],
        cap: int,
        threshold: float,
        margin: float,
        expire: int = 0,
    ) -> Sent:
        """The first half of `ask`: send the questions now (a writer sends the next
        batch's while it decides this one)."""
        looking: list[tuple[Prepared, int]] = [
            (p, i) for p in parts for i in range(len(p.docs)) if p.shingles[i] and i not in p.resent
        ]
        bands = self.params.bands
        if looking:
            flat = b"".join(p.band_rows[i] for p, i in looking)
            doc_keys = np.frombuffer(flat, dtype=">u8").astype(np.uint64).reshape(-1, bands)
            sigs = np.stack([p.sigs[i] for p, i in looking]).astype(np.uint16)
        else:
            doc_keys = np.empty((0, bands), dtype=np.uint64)
            sigs = np.empty((0, signature_width(self.params)), dtype=np.uint16)
        keys = distinct(doc_keys)
        ids = [k for p in parts for k in p.keys]
        contents = [c for p in parts for c in p.content]
        if len(self._asked_contents) > KEPT_CONTENTS:
            self._asked_contents = set()
            self._kept = {n: Answer("", "") for n in self.readers}
        # contents whose holders are known from earlier batches are not asked again
        contents = [c for c in contents if c not in self._asked_contents]
        probe = Probe(
            request="",
            segment="",
            threshold=threshold,
            margin=margin,
            exact=self.params.verify == "exact",
            depth=cap,
            doc_keys=doc_keys,
            sigs=sigs,
            ids=ids,
            contents=contents,
        )
        return Sent(
            self._submit(probe, self.numbers),
            set(keys.tolist()),
            set(ids),
            set(contents),
            cap,
            expire,
            self,
        )

    def receive(self, sent: Sent) -> None:
        """The second half of `ask`: wait for the answers and make them the batch's."""
        self._records = {}
        self._asked_keys = sent.asked_keys
        self._asked_ids = sent.asked_ids
        cap, expire = sent.cap, sent.expire
        self.answers = self._collect(sent.waiting)
        self._asked_contents.update(sent.contents)
        self._by_key = {}
        for n, a in self.answers.items():
            self._keep(n, a)
        leaving = [d for a in self.answers.values() for d in a.ids.values()]
        if expire:
            for n in self.numbers:
                leaving += [d for _, d in self._expiry[n][:expire] if self.live(n, d)]
        self._settle(leaving, cap)
        self._index_buckets()

    def _settle(self, docnos: list[int], cap: int) -> None:
        """Ask at once what deciding the batch would otherwise ask one question at a
        time: deeper postings for buckets whose newest ones are tombstoned, and who
        else holds the content of each document the batch may forget (`docnos`:
        those its ids replace, or the window expires)."""
        hashes = set()
        for d in docnos:
            got = self.record(d)
            if got is not None:
                hashes.add(got[1].content_hash)
        unasked = sorted(hashes - self._asked_contents)
        if unasked:
            self.follow_up(self.numbers, contents=unasked)
            self._asked_contents.update(unasked)
        gone = set(docnos)  # they may be masked before the batch reads a bucket
        while True:
            deeper: dict[int, list[int]] = {}
            depth: dict[int, int] = {}
            for n, a in self.answers.items():
                for k in a.cut:
                    listed = a.buckets.get(k, [])
                    masked = sum(1 for d in listed if d in gone or not self.live(n, d))
                    if masked and len(listed) - masked < cap:
                        deeper.setdefault(n, []).append(k)
                        depth[n] = max(depth.get(n, 0), len(listed) + 2 * masked)
            if not deeper:
                return
            for n, keys in deeper.items():
                self.follow_up([n], keys=np.array(sorted(keys), dtype=np.uint64), depth=depth[n])

    def _send(self, probe: Probe, numbers: list[int]) -> dict[int, Answer]:
        return self._collect(self._submit(probe, numbers))

    def _submit(self, probe: Probe, numbers: list[int]) -> list[Waiting]:
        waiting: list[Waiting] = []
        for n in numbers:
            reader = self.readers[n]
            probe.request, probe.segment = new_request(), reader.entry.id
            if isinstance(reader, LocalReader):  # same process: no need to pack
                waiting.append((n, time.monotonic(), answered(reader.ask(probe))))
            else:
                waiting.append((n, time.monotonic(), reader.submit(probe.request, probe.pack())))
        return waiting

    def _collect(self, waiting: list[Waiting]) -> dict[int, Answer]:
        out: dict[int, Answer] = {}
        for n, sent, wait in waiting:
            began = time.monotonic()
            got = wait()
            out[n] = got if isinstance(got, Answer) else Answer.unpack(got)
            now = time.monotonic()
            self.waited[n] = self.waited.get(n, 0.0) + now - began
            self.round_trips[n] = now - sent
        return out

    def follow_up(self, numbers: list[int], **questions: object) -> dict[int, Answer]:
        """Ask some segments more about this batch; their answers join the batch's
        (and are returned as they came)."""
        self.follow_ups += 1
        probe = Probe(request="", segment="", **questions)  # type: ignore[arg-type]
        got = self._send(probe, numbers)
        changed: set[int] = set()
        for a in got.values():
            changed.update(a.buckets)
        for n, a in got.items():
            self._keep(n, a)
            if n in self.answers:
                self.answers[n].merge(a)
            else:
                self.answers[n] = Answer.unpack(a.pack())  # a copy: merged into later
        if changed and self._by_key:
            self._index_buckets(changed)
        return got

    def _keep(self, n: int, a: Answer) -> None:
        """Keep what an answer says about contents (holders, their records)."""
        if not a.contents and not a.expiry:
            return
        kept = self._kept[n]
        for c, docnos in a.contents.items():
            kept.contents[c] = sorted(set(kept.contents.get(c, [])) | set(docnos))
            kept.more_copies.discard(c)
            for d in docnos:
                if d in a.records:
                    kept.records[d] = a.records[d]
                if d in a.sigs:
                    kept.sigs[d] = a.sigs[d]
        kept.more_copies |= a.more_copies
        for _, d in a.expiry:
            if d in a.records:
                kept.records[d] = a.records[d]
            if d in a.sigs:
                kept.sigs[d] = a.sigs[d]

    # -------------------------------------------------------------- masks

    def live(self, n: int, docno: int) -> bool:
        return docno not in self.masks[n] and docno not in self.pending[n]

    def begin(self) -> None:
        """A run of the batch's write transaction starts (it may run again)."""
        self.pending = {n: set() for n in self.readers}

    def commit(self) -> None:
        for n, docnos in self.pending.items():
            self.masks[n] |= docnos
        self.pending = {n: set() for n in self.readers}
        self.answers = {}
        self._records = {}

    def fully_masked(self) -> list[int]:
        return [
            n
            for n, r in self.readers.items()
            if len(self.masks[n] | self.pending[n]) >= r.entry.documents
        ]

    # -------------------------------------------------------------- lookups

    def _raw(self, n: int, docno: int) -> bytes | None:
        """A document's packed record from this batch's answers or those kept."""
        got = self.answers[n].records.get(docno)
        return got if got is not None else self._kept[n].records.get(docno)

    def holder(self, docno: int) -> int | None:
        """The sealed segment where `docno` lives, if any (asking if unknown)."""
        for n in self.answers:
            if self._raw(n, docno) is not None and self.live(n, docno):
                return n
        maybe = [
            n
            for n, r in self.readers.items()
            if r.entry.first_docno <= docno < r.entry.next_docno and self.live(n, docno)
        ]
        unasked = [n for n in maybe if docno not in self.answers.get(n, Answer("", "")).records]
        if unasked:
            self.follow_up(unasked, docnos=[docno])
            for n in unasked:
                if docno in self.answers[n].records:
                    return n
        return None

    def record(self, docno: int) -> tuple[int, Record] | None:
        n = self.holder(docno)
        if n is None:
            return None
        got = self._records.get((n, docno))
        if got is None:
            raw = self._raw(n, docno)
            assert raw is not None  # `holder` found it
            got = self._records[(n, docno)] = Record.unpack(raw)
        return n, got

    def signature(self, docno: int) -> bytes | None:
        n = self.holder(docno)
        if n is None:
            return None
        got = self.answers[n].sigs.get(docno)
        return got if got is not None else self._kept[n].sigs.get(docno)

    def text(self, docno: int) -> bytes:
        n = self.holder(docno)
        if n is None:
            return b""
        if docno not in self.answers[n].texts:
            self.follow_up([n], text_docnos=[docno])
        return self.answers[n].texts.get(docno, b"")

    def docno_for_id(self, key: bytes) -> int | None:
        if key not in self._asked_ids:
            self.follow_up(self.numbers, ids=[key])
            self._asked_ids.add(key)
        for n, a in self.answers.items():
            d = a.ids.get(key)
            if d is not None and self.live(n, d):
                return d
        return None

    def content_docnos(self, content_hash: bytes, count: int) -> list[int]:
        """The `count` oldest live sealed documents holding a content."""
        if content_hash not in self._asked_contents:
            self.follow_up(self.numbers, contents=[content_hash])
            self._asked_contents.add(content_hash)
        out: list[int] = []
        for n in self.numbers:
            kept = self._kept[n]  # every answer's contents pass through `_keep`
            if content_hash not in kept.contents:  # most contents: held nowhere sealed
                continue
            while True:
                have = kept.contents.get(content_hash, [])
                live = [d for d in have if self.live(n, d)]
                if len(live) >= count or content_hash not in kept.more_copies:
                    break
                self.follow_up([n], contents=[content_hash], after=have[-1])
            out += live[:count]
        return sorted(out)[:count]

    def _index_buckets(self, keys: Iterable[int] | None = None) -> None:
        """Band key (as the engine spells it) -> the sealed segments' postings, for
        the keys some segment holds (`keys`: only those, after a follow-up)."""
        if keys is None:
            keys = {k for a in self.answers.values() for k, v in a.buckets.items() if v}
        for k in keys:
            raw = k.to_bytes(8, "big")
            hits = [(n, a.buckets[k]) for n, a in self.answers.items() if a.buckets.get(k)]
            if hits:
                self._by_key[raw] = hits
            else:
                self._by_key.pop(raw, None)

    def newest(self, key: bytes, cap: int, newest: list[int]) -> list[int]:
        """A bucket's newest `cap` postings: the open segment's `newest` merged with
        the sealed segments' live ones."""
        k = int.from_bytes(key, "big")
        if key not in self._by_key and k in self._asked_keys:  # most keys: nothing sealed
            return newest
        if k not in self._asked_keys:
            self.follow_up(self.numbers, keys=np.array([k], dtype=np.uint64), depth=cap)
            self._asked_keys.add(k)
        merged = list(newest)
        for n, a in self.answers.items():
            got = a.buckets.get(k)
            if not got:
                continue
            live = [d for d in got if self.live(n, d)]
            while len(live) < cap and k in a.cut:
                depth = 2 * len(got) + cap
                self.follow_up([n], keys=np.array([k], dtype=np.uint64), depth=depth)
                a = self.answers[n]
                got = a.buckets.get(k, [])
                live = [d for d in got if self.live(n, d)]
            if len(live) > cap or k in a.cut:
                self.capped = True
            merged += live[:cap]
        if len(merged) == len(newest):
            return newest
        if len(merged) > cap:
            self.capped = True
        merged.sort(reverse=True)
        return merged[:cap]

    def present(self) -> set[int]:
        """Band keys with postings in some sealed segment (for the batch's unshared rows)."""
        out: set[int] = set()
        for a in self.answers.values():
            out.update(k for k, v in a.buckets.items() if v)
        return out

    def oldest(self) -> tuple[int, int] | None:
        """The oldest live timestamped sealed document: (timestamp, docno)."""
        best: tuple[int, int] | None = None
        for n in self.numbers:
            entries = self._expiry[n]
            while entries and entries[0][1] in self.masks[n]:
                entries.pop(0)
            at = 0
            while True:
                while at < len(entries) and not self.live(n, entries[at][1]):
                    at += 1
                if at < len(entries) or not self._expiry_more[n]:
                    break
                self._fill_expiry(n)
                entries = self._expiry[n]
            if at < len(entries) and (best is None or entries[at] < best):
                best = entries[at]
        return best

    def _fill_expiry(self, n: int, count: int = 4096) -> None:
        a = self.follow_up([n], expiry_after=self._expiry_after[n], expiry_count=count)[n]
        got = a.expiry
        self._expiry[n] += got
        self._expiry_more[n] = a.more_expiry
        if got:
            ts, d = got[-1]
            self._expiry_after[n] = ts.to_bytes(8, "big") + d.to_bytes(5, "big")
        self._settle([d for _, d in got], 0)

    def newest_timestamp(self, at_most: int) -> int:
        got = self.follow_up(self.numbers, newest_at_most=at_most)
        return max((a.newest for a in got.values()), default=0)
