"""Containment (`--metric containment`, on `text` or `set`), a `SimilarityFamily`
(engine/similarity.py): a new item is a duplicate of an earlier one it lies inside,
|A n B| / |A| >= T -- an excerpt of an earlier page, a digest's part, a customer's
basket inside another's.

Everything but the signature is the Jaccard family's of the item's kind
(engine/jaccard_text.py, engine/jaccard_sets.py): the same canonical bytes, stored
form and element hashes, the same packed exact sets and the same compiled check,
told to measure |A n B| / |A| instead of the Jaccard (`contains`; every bound the
check rejects a candidate with holds for both, since both rise with |A n B|).  The
signature and band keys are MinHash's, banded per size class
(sketch/containment.py)."""

from __future__ import annotations

from streamdedup.config import IndexParams
from streamdedup.engine.jaccard_sets import JaccardSets
from streamdedup.engine.jaccard_text import JaccardText
from streamdedup.sketch.containment import MinHashContainment


def containment_lsh(params: IndexParams) -> MinHashContainment:
    return MinHashContainment(params.num_perm, params.seed, params.threshold)


class ContainmentText(JaccardText):
    """`SimilarityFamily`: texts, shingled by `params.shingle`; containment."""

    contains = True

    def __init__(self, params: IndexParams) -> None:
        super().__init__(params)
        self.lsh = containment_lsh(params)  # type: ignore[assignment]


class ContainmentSets(JaccardSets):
    """`SimilarityFamily`: sets of strings or integers; containment."""

    contains = True

    def __init__(self, params: IndexParams) -> None:
        super().__init__(params)
        self.lsh = containment_lsh(params)  # type: ignore[assignment]


__all__ = ["ContainmentSets", "ContainmentText", "containment_lsh"]
