"""The engine half of a similarity family (`SimilarityFamily`): what a document
becomes on its way into the index -- its canonical bytes (content identity and the
stored form), its element count, its signature and band keys (through the family's
maths, `sketch/family.py`), its exact representation -- and how a candidate is
checked exactly against a stored item, a batch at a time.

Why the seam sits here: the Preparer (`engine/prepare.py`) and the verifier
(`engine/verify.py`) are the only two places where the kind of item matters; the
decision order, the index, segments, the worker and the backfill handle signatures,
band keys, stored bytes and scores, whatever they measure.  Both obtain their
family-specific behaviour from one object, `families.family_of(params)`.  Its methods take
and return whole batches (ragged arrays, packed bytes), so nothing here adds Python
work per document or per candidate.  Jaccard on text shingles
(`engine/jaccard_text.py`) is the first implementation; docs/architecture.md, "How
a similarity family plugs in", says what a new one must provide."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from streamdedup.models import Document, Verdict
from streamdedup.sketch.family import Bar, LshFamily
from streamdedup.sketch.jaccard import Choices
from streamdedup.sketch.signature import Sketches

# An item's exact representation as the verifier keeps it: packed in one bytes
# object, read in place by the compiled check (no pair of arrays per candidate).
Kept = bytes


class Items(Protocol):
    """A batch's items in canonical form, as `SimilarityFamily.canonical` made them."""

    @property
    def raw(self) -> list[bytes]:
        """Each item's canonical bytes: hashed for its content identity (two items
        with equal bytes are exact copies) and, compressed, stored for exact checks."""
        ...

    def without(self, resent: set[int]) -> Items:
        """The same batch with items `resent` blanked (known ones: not sketched)."""
        ...


class ExactPart(Protocol):
    """The exact representations of a sub-batch's items (picklable: made in
    `--workers` processes)."""

    def of(self, j: int) -> Any:
        """Item j's representation, in the family's raw form (before packing)."""
        ...


@dataclass(frozen=True)
class SketchedPart:
    """What the family makes of a sub-batch: each item's element count (0: empty,
    never a candidate and never searched), its signature and band keys, and (exact
    verification) its exact representations."""

    sizes: npt.NDArray[np.int64]  # (n,)
    sketches: Sketches  # sigs (n, num_perm) uint16; keys n x bands x 8 bytes
    exact: ExactPart | None


class KeptTable(Protocol):
    """An optional pre-filter over kept representations, by docno, that lets the
    compiled check reject a candidate without its representation (Jaccard: the
    sizes and slice counts of the sets, `SetTable`)."""

    def put_many(self, docnos: list[int], kept: list[Kept]) -> None: ...

    def drop(self, docno: int) -> None: ...


class SimilarityFamily(Protocol):
    """One similarity family, engine side.  Picklable (the Preparer ships it to
    `--workers`).  The threshold rule (`Bar`) is `lsh.bar(threshold)`: every
    `choose` below compares scores against it."""

    @property
    def lsh(self) -> LshFamily[Any, Any]:
        """The family's maths: signature, band keys, estimate, exact measure, bar."""
        ...

    # -- preparing (no index)

    def canonical(self, docs: Sequence[Document]) -> Items:
        """The batch's items in canonical form."""
        ...

    def sketch(self, items: Items, part: slice, exact: bool) -> SketchedPart:
        """Sizes, signatures and band keys of items `part` (a sub-batch), with their
        exact representations if `exact`: one batch call, never one per item."""
        ...

    # -- verifying (the engine's memory of exact representations)

    def kept_own(self, part: ExactPart, j: int) -> Kept:
        """A prepared item's packed exact representation (item j of `part`)."""
        ...

    def kept_own_many(self, part: ExactPart, picks: list[int]) -> list[Kept]:
        """`kept_own` of items `picks` of one part, in one call."""
        ...

    def kept_stored(self, stored: bytes) -> Kept:
        """A stored item's packed exact representation, from its stored form (the
        compressed canonical bytes, as `Store.text` returns them)."""
        ...

    def exact_stored(self, stored: bytes) -> Any:
        """A stored item's exact representation, unpacked: what `lsh.exact`
        measures (reports and the backfill, one candidate at a time)."""
        ...

    def kept_size(self, kept: Kept) -> int:
        """What a kept representation costs, in 8-byte values (the memory budget)."""
        ...

    def table(self) -> KeptTable:
        """A fresh, empty pre-filter table."""
        ...

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
        """The exact-check rule (`verify.choose_exact`) over one item's candidates in
        rank order, resumable; see `sketch.jaccard.choose_ranked` for the contract:
        (rank of the best or -1, its measure, checks made, `more`: the rule wants a
        representation no dict holds, that of rank `checks`)."""
        ...

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
        """`choose` for items `first`, ... of a batch in one call (item j's candidates
        `ranked[at[j]:at[j + 1]]`); returns the first item that wants a
        representation no dict holds, or `len(mines)`."""
        ...

    # -- reporting

    def reported(self, verdicts: list[Verdict]) -> list[Verdict]:
        """The batch's verdicts with the family's measures as a verdict reports them
        (Hamming: `distance` and the `similarity` it stands for); the engine decides
        and stores the family's own measure (`Bar`'s), which a verdict of Jaccard
        reports as it is."""
        ...
