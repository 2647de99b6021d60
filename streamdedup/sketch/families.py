"""The `LshFamily` an index's parameters name (`lsh_of`): for the layers below the
engine that need a family's maths without its items -- the store rebuilding postings
from stored signatures after a changelog restore -- so that they band a signature as
the engine did."""

from __future__ import annotations

from typing import Any

from streamdedup.config import IndexParams
from streamdedup.sketch.bitsampling import BitSampling
from streamdedup.sketch.containment import MinHashContainment
from streamdedup.sketch.family import LshFamily
from streamdedup.sketch.minhash import MinHashJaccard
from streamdedup.sketch.projections import PStable, RandomHyperplanes
from streamdedup.sketch.simhash import SimHash


def lsh_of(params: IndexParams) -> LshFamily[Any, Any]:
    """MinHash for Jaccard, bit sampling for Hamming, random hyperplanes for cosine,
    p-stable projections for Euclidean, MinHash per size class for containment
    (`IndexParams.metric`)."""
    p = params
    if p.metric == "hamming":
        return BitSampling(p.bits, p.bands, p.rows, p.seed)
    if p.metric == "cosine" and p.item == "text":
        return SimHash(0, p.num_perm, p.bands, p.rows, p.seed)
    if p.metric == "cosine":
        return RandomHyperplanes(p.dim, p.num_perm, p.bands, p.rows, p.seed)
    if p.metric == "containment":
        return MinHashContainment(p.num_perm, p.seed, p.threshold)
    if p.metric == "euclidean":
        assert p.bucket_width is not None
        return PStable(p.dim, p.num_perm, p.bands, p.rows, p.seed, p.bucket_width)
    return MinHashJaccard(params.num_perm, params.bands, params.rows, params.seed)


def signature_width(params: IndexParams) -> int:
    """Positions in a stored signature: K, and a containment signature's size class."""
    return params.num_perm + (params.metric == "containment")
