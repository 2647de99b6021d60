"""Stage 1 of a batch: documents in, everything the index needs about them out
(`Preparer.prepare` -> `Prepared`): content hashes, element counts, signatures,
band keys, exact representations and the compressed stored forms.  Pure
computation over a whole batch at once, with no index, so a `Preparer` is
picklable and runs in worker processes (`filemode.pool`).  What an item becomes is
its similarity family's business (`engine/similarity.py`, here Jaccard on text
shingles): the Preparer asks the family for canonical bytes and, a sub-batch at a
time, for sizes, signatures, band keys and exact representations, and assembles
them.  Also the pieces of the same computation the engine and reports need for
stored documents: the band keys of a stored signature and the exact shingle set of
a stored text."""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import Any, cast, overload

import numpy as np
import numpy.typing as npt

from streamdedup.config import IndexParams
from streamdedup.engine.compressed import Texts
from streamdedup.engine.families import family_of
from streamdedup.engine.jaccard_text import distinct
from streamdedup.engine.similarity import ExactPart, SimilarityFamily
from streamdedup.models import Document
from streamdedup.sketch.families import lsh_of
from streamdedup.sketch.shingle import split_by_length
from streamdedup.store.keys import id_key

__all__ = [
    "BandKeys",
    "HashParts",
    "Prepared",
    "Preparer",
    "own_hashes",
    "own_shingles",
    "stored_band_keys",
]


@dataclass(frozen=True)
class Prepared:
    """Everything the index needs about a batch, computed without the index."""

    docs: list[Document]
    keys: list[bytes]
    content: list[bytes]
    resent: frozenset[int]  # known documents: prepared without shingles (see `prepare`)
    shingles: list[int]
    sigs: npt.NDArray[np.uint16]
    sig_bytes: list[bytes]  # the rows of `sigs` as stored
    band_keys: BandKeys
    # Each document's band keys end to end (`b"".join(band_keys[i])`), cut from the
    # same buffer: what a batch's read-ahead of postings and the segments take.
    band_rows: list[bytes]
    # Exact verification only: the zstd-compressed normalised texts, stored so that
    # a candidate's exact shingle set can be computed again (`Texts`: those the
    # engine cannot need are compressed only if read), and the documents' 64-bit
    # shingle hashes (each one's own exact set, when it meets a candidate).
    texts: Texts | None = None
    hashes: HashParts | None = None

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        """Pickled (from `--workers`) with the signature rows and band keys as the
        arrays they come from, not a million small bytes objects: those took most of
        unpickling a batch in the main process, which is the one that waits."""
        bands = self.band_keys.bands
        flat = b"".join(self.band_rows)
        state = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in _REBUILT}
        return (_unpickled, (state, flat, bands))


_REBUILT = ("sig_bytes", "band_keys", "band_rows")  # `Prepared.__reduce__` ships them as arrays


class BandKeys(Sequence[list[bytes]]):
    """Each document's band keys, as a list of 8-byte strings made when asked.  The
    bulk path stores `band_rows` and looks buckets up one by one only for the
    documents that search; making every document's list up front (a million bytes
    objects for 50,000 documents) was a seventh of preparing one-line documents."""

    def __init__(self, keys: npt.NDArray[np.void]) -> None:
        self._keys = keys  # (documents, bands) of "V8"
        self.bands = keys.shape[1] if len(keys) else 0

    def __len__(self) -> int:
        return len(self._keys)

    @overload
    def __getitem__(self, i: int) -> list[bytes]: ...

    @overload
    def __getitem__(self, i: slice) -> list[list[bytes]]: ...

    def __getitem__(self, i: int | slice) -> list[bytes] | list[list[bytes]]:
        got: list[bytes] | list[list[bytes]] = self._keys[i].tolist()
        return got

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence):
            return NotImplemented
        return list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]  # (mutable-looking, like a list)


@dataclass(frozen=True)
class HashParts:
    """The exact representations of a batch's documents, as its sub-batches made
    them (a few arrays, not one per document: cheap to pickle to and from
    `--workers`); Jaccard on text: the secretly keyed shingle hashes."""

    parts: list[ExactPart]
    starts: list[int]  # the batch position of each part's first document

    def of(self, i: int) -> Any:
        k = bisect.bisect_right(self.starts, i) - 1
        return self.parts[k].of(i - self.starts[k])


SUB_BATCH_CHARS = 1 << 18  # about 90 pages of 3 KB (measured best of 2**17 ... 2**21)


class Preparer:
    """Stage 1; picklable (it holds only parameters and its family), so it can be
    shipped to workers."""

    def __init__(self, params: IndexParams) -> None:
        self.params = params
        self.family: SimilarityFamily = family_of(params)

    def prepare(
        self,
        docs: Sequence[Document],
        known: Callable[[list[bytes], list[bytes]], set[int]] | None = None,
    ) -> Prepared:
        """`known(keys, content_hashes)` names the documents the index already holds
        with the same content: they get their stored verdict back, so their shingles
        and signatures are not computed (replays, re-runs, redeliveries)."""
        p, family = self.params, self.family
        items = family.canonical(docs)
        keys = [id_key(d.id) for d in docs]
        content = [_content_hash(r) for r in items.raw]
        resent = known(keys, content) if known is not None and docs else set()
        if resent:
            items = items.without(resent)
        raw = items.raw
        exact = p.verify == "exact"
        sizes: list[int] = []
        sig_parts: list[npt.NDArray[np.uint16]] = []
        key_parts: list[bytes] = []
        exact_parts: list[ExactPart] = []
        starts: list[int] = []
        # Sub-batches small enough for their arrays to stay in the CPU cache: numpy
        # passes over arrays of a whole batch run at memory speed, several times slower.
        for part in split_by_length([len(r) for r in raw], SUB_BATCH_CHARS):
            got = family.sketch(items, part, exact)
            sizes += got.sizes.tolist()
            sig_parts.append(got.sketches.sigs)
            key_parts.append(got.sketches.keys)
            if got.exact is not None:
                starts.append(part.start)
                exact_parts.append(got.exact)
        sigs = np.concatenate(sig_parts)
        band_keys = np.frombuffer(b"".join(key_parts), dtype="V8").reshape(-1, p.bands)
        return Prepared(
            docs=list(docs),
            keys=keys,
            content=content,
            resent=frozenset(resent),
            shingles=sizes,
            sigs=sigs,
            sig_bytes=_rows(np.ascontiguousarray(sigs, dtype="<u2")),
            band_keys=BandKeys(band_keys),
            band_rows=_rows(band_keys),
            hashes=HashParts(exact_parts, starts) if exact else None,
            texts=Texts(raw, _never_stored(resent, sizes, content)) if exact else None,
        )


def _unpickled(state: dict[str, Any], band_bytes: bytes, bands: int) -> Prepared:
    """The inverse of `Prepared.__reduce__`."""
    sigs = state["sigs"]
    keys = np.frombuffer(band_bytes, dtype="V8").reshape(-1, max(bands, 1))
    return Prepared(
        **state,
        sig_bytes=_rows(np.ascontiguousarray(sigs, dtype="<u2")),
        band_keys=BandKeys(keys),
        band_rows=_rows(keys),
    )


def _never_stored(resent: set[int], shingles: list[int], content: list[bytes]) -> set[int]:
    """The documents whose text the engine will not store, as far as the batch alone
    tells: known ones, empty ones (nothing to verify against) and exact copies of an
    earlier document of the batch (their verdict points to it)."""
    out = set(resent)
    out.update(i for i, n in enumerate(shingles) if not n)
    first: dict[bytes, int] = {}
    out.update(i for i, c in enumerate(content) if first.setdefault(c, i) != i)
    return out


def _rows(a: npt.NDArray[Any]) -> list[bytes]:
    """Each row of a C-contiguous 2-D array as one bytes object: numpy's `tolist` of
    the rows viewed as single byte strings makes them in C, three times faster than
    slicing one buffer in Python."""
    rows: list[bytes] = a.view(f"V{a.shape[1] * a.itemsize}").ravel().tolist()
    return rows


def stored_band_keys(signature: bytes, params: IndexParams) -> list[bytes]:
    """The bucket keys of a stored signature (to remove or inspect its postings)."""
    sig = np.frombuffer(signature, dtype="<u2")[None, :]
    keys = lsh_of(params).band_keys(sig)[0]
    return [k.to_bytes(8, "big") for k in keys.tolist()]


def own_shingles(p: Prepared, i: int) -> npt.NDArray[np.uint64]:
    """A prepared document's sorted distinct 64-bit shingle hashes."""
    return distinct(own_hashes(p, i))


def own_hashes(p: Prepared, i: int) -> npt.NDArray[np.uint64]:
    """A prepared document's 64-bit shingle hashes, in text order, repeats included."""
    assert p.hashes is not None
    return cast(npt.NDArray[np.uint64], p.hashes.of(i))


def _content_hash(encoded: bytes) -> bytes:
    """Of the `encode`d normalised text: 16 bytes of its SHA-256."""
    return hashlib.sha256(encoded).digest()[:16]
