"""What the families without a compiled check share (bit strings, float32 vectors,
sets, texts' count vectors): their items as tagged canonical bytes
(`TaggedItems`), fixed-width rows read out of them (`fixed_rows`, `RowPart`), and
the exact-check rule (`RowsChecks`): all of an item's candidates that the verifier
holds are measured in one call (`Measure`: for rows of one width, one numpy pass),
then walked in rank order by the rule every family keeps (`verify.choose_exact`).
Apart from the families so that Hamming, cosine, Euclidean and sets share one copy
of each instead of one a family."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from streamdedup.engine.compressed import decompress_text
from streamdedup.engine.similarity import Kept, KeptTable
from streamdedup.models import Document
from streamdedup.sketch.family import Bar
from streamdedup.sketch.jaccard import Choices, choose_each

# The measures of one kept representation against several, in one call.
Measure = Callable[[bytes, list[bytes]], list[float]]


@dataclass(frozen=True)
class TaggedItems:
    """A batch's items as canonical bytes: the family's one-byte tag, then the item's
    own bytes (b"": none).  The tag keeps a stored item from ever starting like a zstd
    frame (engine/compressed.py tells the two apart by their first bytes)."""

    raw: list[bytes]

    @classmethod
    def of(cls, docs: Sequence[Document], tag: bytes) -> TaggedItems:
        return cls([b"" if d.item is None else tag + d.item for d in docs])

    def without(self, resent: set[int]) -> TaggedItems:
        return TaggedItems([(b"" if i in resent else r) for i, r in enumerate(self.raw)])


def untagged(stored: bytes) -> bytes:
    """A stored item's own bytes: its stored form decompressed, without the tag."""
    return decompress_text(stored)[1:]


def fixed_rows(raw: list[bytes], width: int) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.bool_]]:
    """Tagged items of `width` bytes each as one (n, width) uint8 array (an absent
    item: a row of zeros), and which are present."""
    have = np.fromiter(map(len, raw), dtype=np.int64, count=len(raw)) > 0
    blank = bytes(width + 1)
    joined = b"".join(r if r else blank for r in raw)
    rows = np.frombuffer(joined, dtype=np.uint8).reshape(len(raw), width + 1)[:, 1:]
    return np.ascontiguousarray(rows), have


@dataclass(frozen=True)
class RowPart:
    """A sub-batch's items as rows of one array: what exact checks measure."""

    rows: npt.NDArray[Any]

    def of(self, j: int) -> npt.NDArray[Any]:
        row: npt.NDArray[Any] = self.rows[j]
        return row


class NoTable:
    """No pre-filter: a check is one vectorised measure of a few hundred bytes."""

    def put_many(self, docnos: list[int], kept: list[Kept]) -> None:
        pass

    def drop(self, docno: int) -> None:
        pass


def choose_ranked(
    measure: Measure,
    mine: Kept,
    sets: tuple[dict[int, Kept], ...],
    ranked: list[int],
    est: npt.NDArray[np.float64],
    bar: Bar,
    margin: float,
    max_checks: int,
    start: int = 0,
    best: int = -1,
    best_measure: float = 0.0,
) -> tuple[int, float, int, bool]:
    """`verify.choose_exact`'s rule over one item's ranked candidates (`ranked`, with
    estimates `est` in score units, descending), resumable, as
    `sketch.jaccard.choose_ranked` keeps it: (rank of the best or -1, its measure,
    checks made, `more`: the row of rank `checks` is in no dict).  The rows the
    dicts hold, up to the first missing one or the last the rule may reach, are
    measured at once; the rule then walks those measures."""
    reach = min(len(ranked), max_checks)
    got: list[bytes] = []
    for d in ranked[start:reach]:
        kept = next((s[d] for s in sets if d in s), None)
        if kept is None:
            break
        got.append(kept)
    measures = measure(mine, got) if got else []
    for checks in range(start, reach):
        floor = bar.floor if best < 0 else bar.score(best_measure)
        if est[checks] < floor - margin:
            return best, best_measure, checks, False
        if checks - start == len(measures):  # (the row of rank `checks`: in no dict)
            return best, best_measure, checks, True
        value = measures[checks - start]
        if bar.meets(value) and (best < 0 or bar.better(value, best_measure)):
            best, best_measure = checks, value
    return best, best_measure, max(start, reach), False


class RowsChecks:
    """The exact-check half of a `SimilarityFamily` whose candidates are measured by
    `measure` in one call (no pre-filter table): `choose` and `choose_all` are the
    walk above, for one item or for a batch's (`choose_each`)."""

    measure: Measure

    def kept_size(self, kept: Kept) -> int:
        return max(1, len(kept) // 8)

    def table(self) -> NoTable:
        return NoTable()

    def choose(
        self,
        mine: Kept,
        sets: tuple[dict[int, Kept], ...],
        ranked: list[int],
        est: npt.NDArray[np.float64],
        bar: Bar,
        margin: float,
        max_checks: int,
        start: int,
        best: int,
        best_sim: float,
        table: KeptTable | None,
    ) -> tuple[int, float, int, bool]:
        return choose_ranked(
            self.measure, mine, sets, ranked, est, bar, margin, max_checks, start, best, best_sim
        )

    def choose_all(
        self,
        mines: list[Kept],
        sets: tuple[dict[int, Kept], ...],
        ranked: npt.NDArray[np.int64],
        est: npt.NDArray[np.float64],
        at: npt.NDArray[np.int64],
        bar: Bar,
        margin: float,
        max_checks: int,
        state: Choices,
        first: int,
        table: KeptTable | None,
    ) -> int:
        measure = self.measure
        return choose_each(
            lambda mine, r, e, start, best, best_sim: choose_ranked(
                measure, mine, sets, r, e, bar, margin, max_checks, start, best, best_sim
            ),
            mines,
            ranked,
            est,
            at,
            state,
            first,
        )
