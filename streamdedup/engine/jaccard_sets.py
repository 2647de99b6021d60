"""Jaccard on sets (`--item set`), a `SimilarityFamily` (engine/similarity.py) that
differs from Jaccard on texts (engine/jaccard_text.py) only in what an item's
elements are: the set's own elements, given, instead of a text's shingles.

An item arrives as its canonical payload (inputs/items.py): the msgpack array of its
distinct elements' canonical bytes, sorted, so that two equal sets -- whatever the
order or repeats they were sent with -- have equal bytes.  Its canonical bytes are
that payload behind a one-byte tag, `b"S"`: their SHA-256 is its content identity
and they are what is stored (compressed) for exact checks; the tag keeps a stored
item from ever starting like a zstd frame.  Its elements are hashed in one pass
for the whole batch (sketch/elements.py), under the public key for MinHash and under
the index's secret key for the exact set; everything after that -- the packed exact
sets, the compiled check and its pre-filter, the verdicts -- is the text family's."""

from __future__ import annotations

from collections.abc import Sequence

import msgpack
import numpy as np
import numpy.typing as npt

from streamdedup.config import IndexParams
from streamdedup.engine.compressed import decompress_text
from streamdedup.engine.jaccard_text import JaccardText, distinct
from streamdedup.engine.rows_family import TaggedItems
from streamdedup.engine.similarity import Items, Kept, SketchedPart
from streamdedup.models import Document
from streamdedup.sketch.elements import ElementHasher
from streamdedup.sketch.hashing import PUBLIC_KEY
from streamdedup.sketch.jaccard import summary_of
from streamdedup.sketch.shingle import ShingleBatch, offsets_of

TAG = b"S"  # leads a set's canonical bytes


def elements_of(canonical: bytes) -> list[bytes]:
    """A set's elements' canonical bytes, from its canonical bytes."""
    if not canonical:
        return []
    out: list[bytes] = msgpack.unpackb(canonical[len(TAG) :], use_list=True)
    return out


class JaccardSets(JaccardText):
    """`SimilarityFamily`: sets of strings or integers; MinHash, Jaccard."""

    def __init__(self, params: IndexParams) -> None:
        super().__init__(params)
        self.public = ElementHasher(PUBLIC_KEY)
        self.secret = ElementHasher(params.hash_key)

    def __getstate__(self) -> dict[str, object]:
        return {**super().__getstate__(), "public": self.public, "secret": self.secret}

    def canonical(self, docs: Sequence[Document]) -> TaggedItems:  # type: ignore[override]
        return TaggedItems.of(docs, TAG)

    def sketch(self, items: Items, part: slice, exact: bool) -> SketchedPart:
        sets = [elements_of(raw) for raw in items.raw[part]]
        counts = np.fromiter(map(len, sets), dtype=np.int64, count=len(sets))
        flat = [e for s in sets for e in s]
        ends = np.cumsum(np.fromiter(map(len, flat), dtype=np.int64, count=len(flat)))
        joined = b"".join(flat)
        offsets = offsets_of(counts)
        batch = ShingleBatch(self.public.hashes(joined, ends), offsets)
        got = self.lsh.sketch(batch)
        exact_part = ShingleBatch(self.secret.hashes(joined, ends), offsets) if exact else None
        return SketchedPart(counts, got, exact_part)

    def kept_stored(self, stored: bytes) -> Kept:
        return summary_of(self.exact_stored(stored))

    def exact_stored(self, stored: bytes) -> npt.NDArray[np.uint64]:
        flat = elements_of(decompress_text(stored))
        ends = np.cumsum(np.fromiter(map(len, flat), dtype=np.int64, count=len(flat)))
        return distinct(self.secret.hashes(b"".join(flat), ends))


__all__ = ["JaccardSets", "elements_of"]
