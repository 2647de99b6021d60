"""Jaccard on text shingles, the first `SimilarityFamily` (engine/similarity.py).

An item is a text.  Its canonical bytes are the normalised text's UTF-8
(`normalise_utf8`, DESIGN.md's shingling definition): their SHA-256 is its content
identity, and they are what is stored (compressed) for exact checks.  Its elements
are its shingles, hashed twice in one pass (`Shingler.batch`): under the public
key for the MinHash signature and band keys (`sketch/minhash.py`), under the
index's secret key for the exact set.  An exact check measures the Jaccard of
the secretly keyed sets, the candidate's from its stored text shingled again; the
sets are kept packed (`summary_of`: sorted, distinct, with counts per slice of the
hash range) and checked by the compiled rule (`choose_ranked`, `choose_all`),
which rejects most candidates on a bound before any merge."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from streamdedup.config import IndexParams
from streamdedup.engine.compressed import decompress_text
from streamdedup.engine.similarity import ExactPart, Items, Kept, KeptTable, SketchedPart
from streamdedup.models import Document, Verdict
from streamdedup.sketch.family import Bar
from streamdedup.sketch.jaccard import (
    Choices,
    SetTable,
    choose_all,
    choose_ranked,
    sorted_distinct,
    summaries_of,
    summary_of,
    summary_values,
)
from streamdedup.sketch.minhash import MinHashJaccard
from streamdedup.sketch.shingle import ShingleBatch, Shingler, encode, normalise, normalise_utf8

SMALL_SET = 32  # `distinct`: at most this many hashes take the Python path


@dataclass(frozen=True)
class TextItems:
    """A batch's texts in canonical form: `raw`, the normalised UTF-8; `norm`, the
    normalised strings themselves where the shingling reads code points (`char:k`;
    `word:k` reads the bytes only)."""

    raw: list[bytes]
    norm: list[str] | None

    def without(self, resent: set[int]) -> TextItems:
        norm = self.norm
        if norm is not None:
            norm = [("" if i in resent else t) for i, t in enumerate(norm)]
        return TextItems([(b"" if i in resent else r) for i, r in enumerate(self.raw)], norm)


class JaccardText:
    """`SimilarityFamily`: texts, shingled by `params.shingle`; MinHash, Jaccard."""

    # What the compiled check measures: Jaccard, or the containment of the new item
    # in the candidate (engine/containment.py).
    contains = False

    def __init__(self, params: IndexParams, shingler: Shingler | None = None) -> None:
        self.params = params
        self.lsh = MinHashJaccard(params.num_perm, params.bands, params.rows, params.seed)
        self._shingler = shingler  # made when first needed (power tables: not pickled)

    @classmethod
    def of_shingler(cls, shingler: Shingler) -> JaccardText:
        """The verifying half only, for callers that hold a `Shingler` (its spec and
        secret key are all exact checks need): `VerifyCache(Shingler(...))`."""
        return cls(IndexParams(shingle=shingler.spec), shingler)

    def __getstate__(self) -> dict[str, Any]:
        return {"params": self.params, "lsh": self.lsh, "_shingler": None}

    @property
    def shingler(self) -> Shingler:
        if self._shingler is None:
            self._shingler = Shingler(self.params.shingle, self.params.hash_key)
        return self._shingler

    # -- preparing

    def canonical(self, docs: Sequence[Document]) -> TextItems:
        if self.params.shingle.kind == "word":  # word shingling reads only the UTF-8 bytes
            return TextItems([normalise_utf8(d.text) for d in docs], None)
        norm = [normalise(d.text) for d in docs]
        return TextItems([encode(t) for t in norm], norm)

    def sketch(self, items: Items, part: slice, exact: bool) -> SketchedPart:
        assert isinstance(items, TextItems)  # (the items `canonical` made)
        batch = self.shingler.batch(
            None if items.norm is None else items.norm[part], items.raw[part], exact=exact
        )
        got = self.lsh.sketch(batch)
        return SketchedPart(batch.counts, got, batch.exact_batch() if exact else None)

    # -- verifying

    def kept_own(self, part: ExactPart, j: int) -> Kept:
        return summary_of(part.of(j))

    def kept_own_many(self, part: ExactPart, picks: list[int]) -> list[Kept]:
        assert isinstance(part, ShingleBatch)
        return summaries_of(part.hashes, part.offsets, picks)

    def kept_stored(self, stored: bytes) -> Kept:
        return summary_of(stored_hashes(self.shingler, stored))

    def exact_stored(self, stored: bytes) -> npt.NDArray[np.uint64]:
        return exact_shingles(self.shingler, stored)

    def kept_size(self, kept: Kept) -> int:
        return summary_values(kept)

    def table(self) -> SetTable:
        return SetTable()

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
            mine,
            sets,
            ranked,
            est,
            bar.floor,  # (a similarity: the threshold itself)
            margin,
            max_checks,
            start,
            best,
            best_sim,
            _set_table(table),
            self.contains,
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
        return choose_all(
            mines,
            sets,
            ranked,
            est,
            at,
            bar.floor,
            margin,
            max_checks,
            state,
            first,
            _set_table(table),
            self.contains,
        )

    # -- reporting

    def reported(self, verdicts: list[Verdict]) -> list[Verdict]:
        return verdicts  # (the similarity the engine measured, as it is)


def _set_table(table: KeptTable | None) -> SetTable | None:
    assert table is None or isinstance(table, SetTable)
    return table


def exact_shingles(shingler: Shingler, text: bytes) -> npt.NDArray[np.uint64]:
    """The sorted distinct 64-bit shingle hashes of a stored (compressed, normalised,
    `encode`d) text: the set exact verification measures."""
    return distinct(stored_hashes(shingler, text))


def stored_hashes(shingler: Shingler, text: bytes) -> npt.NDArray[np.uint64]:
    """The 64-bit shingle hashes of a stored text, in text order, repeats included
    (`exact_shingles` before its sort: the engine sorts and summarises in one call)."""
    raw = decompress_text(text)
    norm = None if shingler.spec.kind == "word" else raw.decode("utf-8", "surrogatepass")
    return shingler.one(norm, raw)


def distinct(hashes: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """Sorted distinct values (a sort and a mask: 8 times faster than numpy 2's
    hash-based `unique` on a page's shingles; a Python set for a short document's
    handful, where numpy's four calls cost more than the work)."""
    if len(hashes) <= SMALL_SET:
        return np.array(sorted(set(hashes.tolist())), dtype=np.uint64)
    return sorted_distinct(hashes)
