"""The signatures a batch's candidate search reads, as the rows of one matrix found
by document number (`SignatureRows`), and the batch's own indexed documents
(`unstored`).

Apart from the exact check (engine/verify.py) because it is the same for every
similarity family: a signature is K 16-bit positions whatever it estimates, and
ranking counts agreeing positions.  Within one batch: the batch's indexed documents
(where their signature is, so a later document of the batch checks against them
without reading what was just written), and the signatures of the candidates read
so far, so a document's candidates are gathered by one fancy index rather than one
LMDB read and one dict lookup each (a template-heavy page has hundreds)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from streamdedup.engine.prepare import Prepared
from streamdedup.engine.roles import Store
from streamdedup.sketch.signature import rank_gathered


class SignatureRows:
    """A batch's signature matrix and its indexed documents (the base of the
    engine's `VerifyCache`, which adds the exact representations)."""

    def __init__(self) -> None:
        self.unstored: dict[int, tuple[Prepared, int]] = {}
        # the docnos of `unstored`'s documents, by (id of their part, index): a batch
        # searched as a whole (engine/search.py) remembers every document before it
        # checks any, so `own` finds there the set a document has as a candidate
        self._unstored_docno: dict[tuple[int, int], int] = {}
        # docno -> row of `_rows` holding its signature (-1: not read in this batch)
        self._slot: npt.NDArray[np.int32] = np.full(0, -1, dtype=np.int32)
        self._rows: npt.NDArray[np.uint16] = np.empty((0, 0), dtype=np.uint16)
        self._used = 0
        self._filled: list[npt.NDArray[np.int64]] = []
        # this batch's indexed documents: their parts' signatures copied into `_rows`
        # whole (id of the part -> its first row), their docnos set in `_slot` as they
        # are stored (`remember`), so a later document of the batch ranks them without
        # a second look
        self._blocks: dict[int, tuple[Prepared, int]] = {}  # (held: ids stay unique)
        self._mine_rows: list[int] = []

    def end_batch(self) -> None:
        """The batch is decided: its arrays are let go."""
        self.unstored = {}
        self._unstored_docno = {}
        for docnos in self._filled:
            self._slot[docnos] = -1
        self._slot[self._mine_rows] = -1
        self._filled = []
        self._mine_rows = []
        self._blocks = {}
        self._used = 0

    def remember(self, docno: int, p: Prepared, i: int) -> None:
        """Document i of `p` is stored as `docno`: a later one of the batch finds it."""
        self.unstored[docno] = (p, i)
        self._unstored_docno[id(p), i] = docno
        block = self._blocks.get(id(p))
        if block is None:  # the part's signatures, copied once (a few hundred KB at most)
            block = self._blocks[id(p)] = (p, self._used)
            self._put_rows(np.empty(0, dtype=np.int64), p.sigs)
        base = block[1]
        if docno >= len(self._slot):
            self._room(docno)
        self._slot[docno] = base + i
        self._mine_rows.append(docno)

    def forget(self, docno: int) -> None:
        """A document is forgotten, or adopts another's signature: read it again."""
        fresh = self.unstored.pop(docno, None)
        if fresh is not None:
            self._unstored_docno.pop((id(fresh[0]), fresh[1]), None)
        if docno < len(self._slot):
            self._slot[docno] = -1

    def signature(self, t: Store, docno: int) -> bytes | None:
        """A candidate's signature: from memory if this batch holds it, else as stored."""
        fresh = self.unstored.get(docno)
        return fresh[0].sig_bytes[fresh[1]] if fresh is not None else t.signature(docno)

    def ranked(
        self,
        t: Store,
        sig: npt.NDArray[np.uint16],
        docnos: npt.NDArray[np.int64],
        bar: float,
        limit: int,
    ) -> tuple[int, list[int], npt.NDArray[np.float64]]:
        """`docnos` (ascending) ranked by their signatures' estimates against `sig`
        (`rank_gathered`): how many have a signature, and the first `limit` of them
        whose estimate reaches `bar`, with their estimates.  Each docno's signature is
        read from the store once a batch (`Store.signatures`, one call for a
        document's new ones) into the matrix the compiled ranking reads in place."""
        if not len(docnos):
            return 0, [], np.zeros(0, dtype=np.float64)
        missing, kept, ranked, est = rank_gathered(
            sig, self._rows, self._slot, docnos, bar, limit, fill=True
        )
        if missing is None:
            return kept, ranked, est
        # not read in this batch yet (the batch's own documents have their rows:
        # `remember`)
        self._room(int(missing[-1]))
        found, sigs = t.signatures(missing)
        if found.any():
            self._put_rows(missing[found], sigs[found])
        _, kept, ranked, est = rank_gathered(
            sig, self._rows, self._slot, docnos, bar, limit, fill=False
        )
        return kept, ranked, est

    def matrix(self) -> tuple[npt.NDArray[np.uint16], npt.NDArray[np.int32]]:
        """The signature matrix `ranked` reads and its docno -> row map (-1: none), for
        a search that ranks a whole batch's candidates in one call (engine/search.py)."""
        return self._rows, self._slot

    def _room(self, top: int) -> None:
        if top >= len(self._slot):
            grown = np.full(max(2 * len(self._slot), top + 1, 1024), -1, dtype=np.int32)
            grown[: len(self._slot)] = self._slot
            self._slot = grown

    def _put_rows(self, docnos: npt.NDArray[np.int64], sigs: npt.NDArray[np.uint16]) -> None:
        """Append `sigs` to the matrix, as the rows of `docnos` (none: a part's block,
        its slots set one by one by `remember`)."""
        n, k = sigs.shape
        if len(docnos):
            self._room(int(docnos.max()))
        if self._rows.shape[1] != k or self._used + n > len(self._rows):
            grown_rows = np.empty((max(2 * len(self._rows), self._used + n, 1024), k), np.uint16)
            if self._rows.shape[1] == k:
                grown_rows[: self._used] = self._rows[: self._used]
            self._rows = grown_rows
        self._rows[self._used : self._used + n] = sigs
        if len(docnos):
            self._slot[docnos] = np.arange(self._used, self._used + n, dtype=np.int32)
            self._filled.append(docnos)
        self._used += n
