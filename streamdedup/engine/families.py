"""Which similarity family an index uses (`family_of`): the one place that maps
stored parameters to a `SimilarityFamily`, so the Preparer, the verifier, reports
and the backfill all measure with the same one."""

from __future__ import annotations

from streamdedup.config import IndexParams
from streamdedup.engine.containment import ContainmentSets, ContainmentText
from streamdedup.engine.cosine_text import CosineText
from streamdedup.engine.hamming_bits import HammingBits
from streamdedup.engine.jaccard_sets import JaccardSets
from streamdedup.engine.jaccard_text import JaccardText
from streamdedup.engine.similarity import SimilarityFamily
from streamdedup.engine.vector_items import VectorFamily


def family_of(params: IndexParams) -> SimilarityFamily:
    """The family an index's parameters name: a new object each call (a family
    keeps its own shingling tables, so a Preparer in a thread and the verifier never
    share one), chosen by the stored `metric`."""
    if params.metric == "hamming":
        return HammingBits(params)
    if params.metric == "cosine" and params.item == "text":
        return CosineText(params)
    if params.metric == "containment":
        return ContainmentSets(params) if params.item == "set" else ContainmentText(params)
    if params.item == "vector":
        return VectorFamily(params)
    if params.item == "set":
        return JaccardSets(params)
    return JaccardText(params)
