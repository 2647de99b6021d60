"""The LSH buckets: a batch's buckets read ahead and its postings buffered
(`batch_postings`, `flush_postings`, store/batch.py), unshared rows, and a document's
candidates (`candidates`, `gather_newest`) from the postings (store/postings.py)."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Mapping

import numpy as np
import numpy.typing as npt

from streamdedup import kernels
from streamdedup.store.batch_postings import NONE, BatchPostings, Docnos, docnos
from streamdedup.store.keys import (
    native_keys,
    raw_keys,
)
from streamdedup.store.postings import distinct
from streamdedup.store.tables.base import TablesBase

_NO_DOCS: npt.NDArray[np.int64] = np.empty(0, dtype=np.int64)  # no candidates (never changed)
_FEW = 64  # candidates made distinct in Python below this, by numpy above


class Buckets(TablesBase):
    """The `postings` table, through a batch's read-ahead and buffer."""

    def batch_postings(
        self, band_keys: list[bytes], cap: int, elsewhere: set[int] | None = None
    ) -> None:
        """Read the buckets of a whole batch up front and buffer the postings it adds,
        both in key order (`flush_postings` writes the buffer).

        B-tree work in key order walks each page once, while it is in cache; one
        document at a time jumps all over the tree, and in a large index those jumps
        are most of a document's cost.  `candidates` then answers from the read-ahead
        and the buffer (this batch's documents, newer than anything stored); it reads
        a bucket again only if a removal in this batch changed it.

        `elsewhere`: band keys that have postings outside this index (in sealed
        segments): their rows are not unshared."""
        if not band_keys:
            self._postings = BatchPostings({}, {}, set(), set())
            return
        flat = native_keys(b"".join(band_keys))
        unique, inverse, counts = distinct(flat)
        # the stored keys, by their positions in `unique`; one more than the cap: is
        # it reached?
        found = self.postings.found(unique, cap + 1)
        at = np.fromiter(found, dtype=np.intp, count=len(found))
        stored = dict(zip(raw_keys(unique[at]), found.values(), strict=True))
        hot = set()
        for bk, newest in stored.items():
            if len(newest) > cap:
                hot.add(bk)
                del newest[cap:]
        # Documents none of whose keys is stored or shared with another document of
        # the batch (most of them) have no candidates: found here in numpy passes over
        # the distinct keys, then mapped back to each document's.
        busy_key = counts > 1
        shared = unique[busy_key]
        busy_key[at] = True
        if elsewhere:
            busy_key |= np.isin(unique, np.fromiter(elsewhere, dtype=np.uint64))
        busy = busy_key[inverse.reshape(-1)]
        unshared = (~np.any(busy.reshape(len(band_keys), -1), axis=1)).tolist()
        self._postings = BatchPostings(
            read_ahead=stored,
            hot=hot,
            added={bk: docnos() for bk in raw_keys(shared)},
            rows=set(band_keys),
            unshared=set(itertools.compress(band_keys, unshared)),
        )

    def batch_buckets(self) -> BatchPostings | None:
        """The batch's buckets read ahead and postings buffered (`batch_postings`), for
        a search of the whole batch before its documents are stored (engine/search.py);
        None outside a batch."""
        return self._postings

    def is_unshared(self, row: bytes) -> bool:
        """Whether a document of the batch (`row`: its band keys joined) has no
        candidates: none of its buckets is stored, nor shared with another document of
        the batch (`candidates` would answer {})."""
        p = self._postings
        return p is not None and row in p.unshared

    def unshared_rows(self, rows: Iterable[bytes], n: int) -> npt.NDArray[np.bool_]:
        """`is_unshared` of each of `n` rows, at once (a set lookup each in C)."""
        p = self._postings
        if p is None:
            return np.zeros(n, dtype=np.bool_)
        return np.fromiter(map(p.unshared.__contains__, rows), dtype=np.bool_, count=n)

    def flush_postings(self) -> None:
        """Write the buffered postings in key order and stop buffering."""
        postings, self._postings = self._postings, None
        if postings is None or not postings.docnos:
            return
        numbers, rows = postings.docnos, postings.doc_rows
        if postings.dropped:
            kept = [j for j, d in enumerate(numbers) if d not in postings.dropped]
            numbers, rows = [numbers[j] for j in kept], [rows[j] for j in kept]
        flat = native_keys(b"".join(rows))
        per = np.fromiter(map(len, rows), dtype=np.intp, count=len(rows)) // 8
        docnos = np.repeat(np.array(numbers, dtype=np.uint64), per)
        if postings.adopted:  # an adopted copy is older than the batch's documents
            order = np.argsort(docnos, kind="stable")
            flat, docnos = flat[order], docnos[order]
        self.postings.add(flat, docnos)  # docnos ascending

    def _newest(self, bk: bytes, cap: int) -> list[int]:
        """A bucket's stored postings, newest first, at most `cap` of them (and
        `capped` set if there are more)."""
        key = int.from_bytes(bk, "big")
        got = self.postings.lookup(np.array([key], dtype=np.uint64), cap + 1).get(key, [])
        if len(got) > cap:
            self.capped = True
            del got[cap:]
        return got

    def candidates(
        self,
        band_keys: list[bytes],
        cap: int,
        older: Callable[[bytes, int, list[int]], list[int]] | None = None,
    ) -> npt.NDArray[np.int64]:
        """The documents in any of the given buckets, ascending, from at most the
        `cap` newest postings of each bucket.  `older(key, cap, newest)`: the bucket's
        newest `cap` postings once those held elsewhere (sealed segments) are
        merged with this index's `newest`.

        A document whose buckets were all read ahead and not changed since (most of
        them) is answered by one compiled call (`gather_newest`); the loop below
        serves the rest.  Either way the buckets' lists are joined and made distinct
        at the end, not counted one posting at a time: a page of a templated site
        meets hundreds of its siblings in its buckets.  The array may be read-only."""
        lists: list[list[int]] = []
        p = self._postings
        self.capped = False
        row = b"".join(band_keys) if p is not None else b""
        if p is not None and row in p.unshared:
            return _NO_DOCS
        read_ahead = p is not None and row in p.rows
        if (
            p is not None
            and read_ahead
            and older is None
            and not p.stale
            and not p.dropped
            and not p.adopted
        ):  # the common case: every bucket answered from the read-ahead and the buffer
            found, self.capped = gather_newest(band_keys, p.read_ahead, p.added, p.hot, cap)
            return found
        for bk in band_keys:
            if p is None:
                newest = self._newest(bk, cap)
            else:
                stored = (
                    p.read_ahead.get(bk, NONE)
                    if read_ahead and not (p.stale and bk in p.stale)
                    else self._newest(bk, cap)
                )
                added = (
                    p.added.get(bk, NONE)  # the common case of `added_to`, inline
                    if read_ahead and not p.dropped
                    else p.added_to(bk, read_ahead)
                )
                if p.hot and bk in p.hot:
                    self.capped = True
                newest, cut = _newest_of(added, stored, cap, p.adopted)
                if cut:
                    self.capped = True
            if older is not None:
                newest = older(bk, cap, newest)
            if newest:
                lists.append(newest)
        return _distinct_docnos(lists)

    def _add_postings(
        self, docno: int, bucket_keys: list[bytes], adopted: bool = False, row: bytes | None = None
    ) -> None:
        if self._postings is not None:
            self._postings.add(bucket_keys, docno, adopted=adopted, row=row)
        else:
            keys = native_keys(b"".join(bucket_keys))
            self.postings.add(keys, np.full(len(keys), docno, dtype=np.uint64))

    def bucket_sizes(self) -> Iterator[int]:
        return self.postings.sizes()


def gather_newest(
    band_keys: list[bytes],
    read_ahead: Mapping[bytes, Docnos],
    added: Mapping[bytes, Docnos],
    hot: set[bytes],
    cap: int,
) -> tuple[npt.NDArray[np.int64], bool]:
    """`Tables.candidates` for a document whose buckets were all read ahead, none
    changed since (no removal, no adoption in the batch) and none held elsewhere: the
    distinct docnos, ascending, of each bucket's newest `cap` postings -- the batch's
    own (`added`, oldest first, all newer than stored ones) before the stored ones
    (`read_ahead`, newest first) -- and whether a cap cut a bucket.

    One compiled call (`gather`: dict lookups, the caps, a radix sort and the distinct
    pass in C) for what was a dozen Python operations per bucket and then numpy's
    fromiter, sort and mask: a template page meets hundreds of siblings in 16 buckets.
    The loop below is the definition the compiled one is tested against."""
    if kernels.native is not None:
        raw, capped = kernels.native.gather(band_keys, read_ahead, added, hot, cap)
        return np.frombuffer(raw, dtype=np.int64), capped
    lists: list[list[int]] = []
    capped = False
    for bk in band_keys:
        if hot and bk in hot:
            capped = True
        newest, cut = _newest_of(added.get(bk, NONE), read_ahead.get(bk, NONE), cap)
        capped = capped or cut
        if newest:
            lists.append(newest)
    return _distinct_docnos(lists), capped


def _newest_of(
    batch: Docnos, stored: Docnos, cap: int, adopted: bool = False
) -> tuple[list[int], bool]:
    """A bucket's newest `cap` postings, from the batch's own (`batch`, oldest first,
    newer than every stored one) and the stored ones (`stored`, newest first, at most
    `cap`); and whether the cap left any out.  `adopted`: a copy older than stored
    postings took over an owner's in the batch, so the two are sorted together."""
    if not batch:
        return list(stored), False
    cut = len(batch) + len(stored) > cap
    if adopted:
        return sorted([*batch, *stored], reverse=True)[:cap], cut
    # (batch[-cap:]: all of it for a cap of 0, as ever)
    if len(batch) >= cap:
        return list(batch[-cap:]), cut
    return [*batch, *stored[: cap - len(batch)]], cut


def _distinct_docnos(lists: list[list[int]]) -> npt.NDArray[np.int64]:
    if not lists:
        return _NO_DOCS
    joined = itertools.chain.from_iterable(lists)
    if sum(len(x) for x in lists) <= _FEW:  # most pages: a few, sorted in Python
        return np.array(sorted(set(joined)), dtype=np.int64)
    out = np.fromiter(joined, dtype=np.int64)
    out.sort()
    first = np.ones(len(out), dtype=np.bool_)
    np.not_equal(out[1:], out[:-1], out=first[1:])
    return out[first]
