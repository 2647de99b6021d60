"""The `LshFamily` an index's parameters name (`lsh_of`): for the layers below the
engine that need a family's maths without its items -- the store rebuilding postings
from stored signatures after a changelog restore -- so that they band a signature as
the engine did."""

from __future__ import annotations

from typing import Any

from streamdedup.config import IndexParams
from streamdedup.sketch.bitsampling import BitSampling
from streamdedup.sketch.family import LshFamily
from streamdedup.sketch.minhash import MinHashJaccard


def lsh_of(params: IndexParams) -> LshFamily[Any, Any]:
    """MinHash for Jaccard, bit sampling for Hamming (`IndexParams.metric`)."""
    if params.metric == "hamming":
        return BitSampling(params.bits, params.bands, params.rows, params.seed)
    return MinHashJaccard(params.num_perm, params.bands, params.rows, params.seed)
