"""Stage 1 of a batch: documents in, everything the index needs about them out
(`Preparer.prepare` -> `Prepared`): normalised text, content hashes, shingles,
MinHash signatures (from fingerprint sets), band keys, compressed texts.  Pure computation
over a whole batch at once, with no index, so a `Preparer` is picklable and runs in
worker processes (`engine.pool`).  Also the pieces of the same computation the
engine and reports need for stored documents: the band keys of a stored signature
and the exact shingle set of a stored text."""

from __future__ import annotations

import bisect
import hashlib
import operator
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, TypeVar, overload

import numpy as np
import numpy.typing as npt
import zstandard

from streamdedup.config import IndexParams
from streamdedup.models import Document
from streamdedup.sketch.jaccard import sorted_distinct
from streamdedup.sketch.shingle import (
    ShingleBatch,
    Shingler,
    encode,
    normalise,
    normalise_utf8,
    split_by_length,
)
from streamdedup.sketch.signature import band_keys, sketch
from streamdedup.store.keys import id_key


@dataclass(frozen=True)
class Prepared:
    """Everything the index needs about a batch, computed without the index."""

    docs: list[Document]
    keys: list[bytes]
    content: list[bytes]
    light: frozenset[int]  # known documents: prepared without shingles (see `prepare`)
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
    """The shingle hashes of a batch's documents, as its sub-batches made them (a
    few arrays, not one per document: cheap to pickle to and from `--workers`)."""

    parts: list[ShingleBatch]
    starts: list[int]  # the batch position of each part's first document

    def of(self, i: int) -> npt.NDArray[np.uint64]:
        k = bisect.bisect_right(self.starts, i) - 1
        return self.parts[k].of(i - self.starts[k])


SUB_BATCH_CHARS = 1 << 18  # about 90 pages of 3 KB (measured best of 2**17 ... 2**21)
SMALL_SET = 32  # `_distinct`: at most this many hashes take the Python path
TEXT_LEVEL = 1  # zstd level of the stored texts (3: 1% smaller, 1.4 times the time)
# Texts shorter than this are stored as they are: zstd's frame (header, a raw block)
# makes a title or a log line 9 bytes longer, and compressing it costs more than the
# rest of its preparing.  Measured on the one-line benchmark stream: zstd level 1
# wins only from about 80 bytes (64-79: 71 bytes raw against 73).
RAW_TEXT_BELOW = 80
# Every zstd frame starts with it; no UTF-8 text can (0xB5 cannot follow "(", and
# 0xFD is never a UTF-8 byte), so a stored text is a frame exactly when it does.
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def compress_texts(raw: list[bytes]) -> list[bytes]:
    """The stored form of normalised (UTF-8) texts: zstd level 1, which matched zlib
    level 1's size on web text at a quarter of its time (12 against 43 us a 3 KB page,
    and a third of its decompression time: 5 against 14 us); a text shorter than
    `RAW_TEXT_BELOW` as it is.  A compressor per call: they are cheap to make, and one
    kept on the Preparer would not pickle to `--workers`."""
    return list(Texts(raw))


_T = TypeVar("_T")


def pick(seq: Sequence[_T] | Mapping[int, _T], at: list[int]) -> list[_T]:
    """`[seq[j] for j in at]`, in one C call (`itemgetter`) rather than a loop of
    Python steps: a bulk store picks a dozen fields of each of its documents."""
    if len(at) > 1:
        return list(operator.itemgetter(*at)(seq))
    return [seq[j] for j in at]


class Texts(Sequence[bytes]):
    """`compress_texts(raw)`, but the texts the engine cannot need (`later`: known,
    empty, exact copies of an earlier document of the batch) are compressed only if
    it reads one after all.  Pickled (to or from `--workers`) compressed.  Up front,
    in one pass, for the rest: compressing on first read, inside the engine's
    transaction, cost more than it saved where most texts are stored (crawl pages:
    48,305 of 50,000 are, near duplicates too)."""

    def __init__(self, raw: list[bytes], later: Collection[int] = ()) -> None:
        self._compress = zstandard.ZstdCompressor(level=TEXT_LEVEL).compress
        store = self._store
        self._done: list[bytes | None]
        if later:
            self._done = [None if i in later else store(r) for i, r in enumerate(raw)]
        else:
            self._done = [store(r) for r in raw]
        # only the texts left for later are kept (a batch's texts are megabytes)
        self._raw = {i: raw[i] for i in later if 0 <= i < len(raw)}

    def _store(self, raw: bytes) -> bytes:
        return raw if len(raw) < RAW_TEXT_BELOW else self._compress(raw)

    def __len__(self) -> int:
        return len(self._done)

    @overload
    def __getitem__(self, i: int) -> bytes: ...

    @overload
    def __getitem__(self, i: slice) -> list[bytes]: ...

    def __getitem__(self, i: int | slice) -> bytes | list[bytes]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        got = self._done[i]
        if got is None:
            i = i + len(self._done) if i < 0 else i
            got = self._done[i] = self._store(self._raw.pop(i))
        return got

    def take(self, at: list[int]) -> list[bytes]:
        """`[self[i] for i in at]` (positions >= 0): the texts done up front picked in
        one C call (`pick`: a bulk store takes most of a batch's), the others as
        `self[i]`."""
        got = pick(self._done, at)
        if None not in got:
            return got  # type: ignore[return-value]  # (no None left: all bytes)
        return [self[i] if t is None else t for i, t in zip(at, got, strict=True)]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence):
            return NotImplemented
        return list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]  # mutable cache: compared by value

    def __getstate__(self) -> dict[str, Any]:
        return {"_raw": {}, "_done": list(self)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._compress = zstandard.ZstdCompressor(level=TEXT_LEVEL).compress


def decompress_text(text: bytes) -> bytes:
    """The inverse of `compress_texts` (frames carry their size)."""
    return _DECOMPRESSOR.decompress(text) if text.startswith(_ZSTD_MAGIC) else text


_DECOMPRESSOR = zstandard.ZstdDecompressor()


class Preparer:
    """Stage 1; picklable (it holds only parameters), so it can be shipped to workers."""

    def __init__(self, params: IndexParams) -> None:
        self.params = params
        self._shingler: Shingler | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"params": self.params, "_shingler": None}

    def prepare(
        self,
        docs: Sequence[Document],
        known: Callable[[list[bytes], list[bytes]], set[int]] | None = None,
    ) -> Prepared:
        """`known(keys, content_hashes)` names the documents the index already holds
        with the same content: they get their stored verdict back, so their shingles
        and signatures are not computed (replays, re-runs, redeliveries)."""
        p = self.params
        if self._shingler is None:
            self._shingler = Shingler(p.shingle, p.hash_key)
        norm: list[str] | None = None  # word shingling reads only the UTF-8 bytes
        if p.shingle.kind == "word":
            raw = [normalise_utf8(d.text) for d in docs]
        else:
            norm = [normalise(d.text) for d in docs]
            raw = [encode(t) for t in norm]
        keys = [id_key(d.id) for d in docs]
        content = [_content_hash(r) for r in raw]
        light = known(keys, content) if known is not None and docs else set()
        if light:
            if norm is not None:
                norm = [("" if i in light else t) for i, t in enumerate(norm)]
            raw = [(b"" if i in light else r) for i, r in enumerate(raw)]
        exact = p.verify == "exact"
        shingles: list[int] = []
        sig_parts: list[npt.NDArray[np.uint16]] = []
        key_parts: list[bytes] = []
        hash_parts: list[ShingleBatch] = []
        starts: list[int] = []
        # Sub-batches small enough for their arrays to stay in the CPU cache: numpy
        # passes over arrays of a whole batch run at memory speed, several times slower.
        for part in split_by_length([len(r) for r in raw], SUB_BATCH_CHARS):
            batch = self._shingler.batch(
                None if norm is None else norm[part], raw[part], exact=exact
            )
            got = sketch(batch, p.num_perm, p.seed, p.bands, p.rows)
            shingles += batch.counts.tolist()
            sig_parts.append(got.sigs)
            key_parts.append(got.keys)
            if exact:
                starts.append(part.start)
                hash_parts.append(batch.exact_batch())
        sigs = np.concatenate(sig_parts)
        band_keys = np.frombuffer(b"".join(key_parts), dtype="V8").reshape(-1, p.bands)
        return Prepared(
            docs=list(docs),
            keys=keys,
            content=content,
            light=frozenset(light),
            shingles=shingles,
            sigs=sigs,
            sig_bytes=_rows(np.ascontiguousarray(sigs, dtype="<u2")),
            band_keys=BandKeys(band_keys),
            band_rows=_rows(band_keys),
            hashes=HashParts(hash_parts, starts) if exact else None,
            texts=Texts(raw, _never_stored(light, shingles, content)) if exact else None,
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


def _never_stored(light: set[int], shingles: list[int], content: list[bytes]) -> set[int]:
    """The documents whose text the engine will not store, as far as the batch alone
    tells: known ones, empty ones (nothing to verify against) and exact copies of an
    earlier document of the batch (their verdict points to it)."""
    out = set(light)
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
    keys = band_keys(sig, params.bands, params.rows, params.seed)[0]
    return [k.to_bytes(8, "big") for k in keys.tolist()]


def exact_shingles(shingler: Shingler, text: bytes) -> npt.NDArray[np.uint64]:
    """The sorted distinct 64-bit shingle hashes of a stored (compressed, normalised,
    `encode`d) text: the set exact verification measures."""
    return _distinct(stored_hashes(shingler, text))


def stored_hashes(shingler: Shingler, text: bytes) -> npt.NDArray[np.uint64]:
    """The 64-bit shingle hashes of a stored text, in text order, repeats included
    (`exact_shingles` before its sort: the engine sorts and summarises in one call)."""
    raw = decompress_text(text)
    norm = None if shingler.spec.kind == "word" else raw.decode("utf-8", "surrogatepass")
    return shingler.one(norm, raw)


def own_shingles(p: Prepared, i: int) -> npt.NDArray[np.uint64]:
    """A prepared document's sorted distinct 64-bit shingle hashes."""
    return _distinct(own_hashes(p, i))


def own_hashes(p: Prepared, i: int) -> npt.NDArray[np.uint64]:
    """A prepared document's 64-bit shingle hashes, in text order, repeats included."""
    assert p.hashes is not None
    return p.hashes.of(i)


def _distinct(hashes: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """Sorted distinct values (a sort and a mask: 8 times faster than numpy 2's
    hash-based `unique` on a page's shingles; a Python set for a short document's
    handful, where numpy's four calls cost more than the work)."""
    if len(hashes) <= SMALL_SET:
        return np.array(sorted(set(hashes.tolist())), dtype=np.uint64)
    return sorted_distinct(hashes)


def _content_hash(encoded: bytes) -> bytes:
    """Of the `encode`d normalised text: 16 bytes of its SHA-256."""
    return hashlib.sha256(encoded).digest()[:16]
