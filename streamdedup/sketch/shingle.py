"""Text -> set of 64-bit shingle hashes (DESIGN.md, "Shingling definition").

Two implementations of one definition:

* `reference_shingles` / `reference_hash`: plain Python, one shingle string at a time.
  It is the specification made executable and is what the tests compare against.
* `Shingler.batch`: the production path.  It joins a whole batch of documents into
  one byte string and finds tokens, token hashes and shingle hashes with a handful
  of numpy operations per batch -- no Python work per token or shingle.  `word`
  shingling reads UTF-8 bytes: `\\w` is one `bytes.translate` for ASCII and a
  lookup table taken from Python's own regex engine for the rest, and most tokens'
  hashes come from one 8-byte read each.  `char` shingling reads code points.

A shingle's hash depends only on the shingle string and the index's secret key: for
`word:k` it is a keyed polynomial over the hashes of the shingle's tokens (a shingle
splits back into its tokens on the single spaces that joined them), each a keyed
polynomial over the token's UTF-8 bytes read as 4-byte digits; for `char:k` it is a
keyed polynomial over code points (hashing.py says why keyed, and over which field).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from streamdedup import kernels
from streamdedup.config import ShingleSpec
from streamdedup.sketch.hashing import (
    PUBLIC_KEY,
    U64,
    P,
    Poly,
    PowerTable,
    ShingleKey,
    finish,
    finish_np,
    mulmod_np,
    range_poly_hashes,
    reduce_np,
)
from streamdedup.sketch.words import shared_word_table

_WORD = re.compile(r"\w+")
_SEPARATOR = b"\x00"  # not matched by \w, so tokens never span two documents
CHUNK_CHARS = 1 << 21  # bounds the power tables a batch needs


def normalise(text: str) -> str:
    """NFKC then casefold, as the shingling contract prescribes.  ASCII text is
    already NFKC, so it only needs the (cheaper) case fold."""
    if text.isascii():
        return text.casefold()
    return unicodedata.normalize("NFKC", text).casefold()


_ASCII_BYTES = bytes(range(128))


def normalise_utf8(text: str) -> bytes:
    """`encode(normalise(text))`, what word shingling and the content hash read.

    `str.casefold` goes character by character once a text holds one non-ASCII
    character (30 us for a 3 KB page), while the UTF-8 bytes' `lower` folds A-Z at
    memory speed.  Case folding maps each character on its own, so when none of the
    non-ASCII characters (cut out of the bytes by one `translate`) changes under it,
    folding the ASCII letters is all there is to do."""
    if text.isascii():
        return text.encode("ascii").lower()
    nfkc = unicodedata.normalize("NFKC", text)
    raw = encode(nfkc)
    others = raw.translate(None, _ASCII_BYTES).decode("utf-8", "surrogatepass")
    if others.casefold() != others:
        return encode(nfkc.casefold())
    return raw.lower()


# --------------------------------------------------------------------------- reference


def reference_shingles(text: str, spec: ShingleSpec) -> set[str]:
    """The shingle set of `text`, straight from the definition."""
    norm = normalise(text)
    if spec.kind == "word":
        tokens = _WORD.findall(norm)
        if len(tokens) < spec.k:
            return {" ".join(tokens)} if tokens else set()
        return {" ".join(tokens[i : i + spec.k]) for i in range(len(tokens) - spec.k + 1)}
    flat = " ".join(norm.split())
    if len(flat) < spec.k:
        return {flat} if flat else set()
    return {flat[i : i + spec.k] for i in range(len(flat) - spec.k + 1)}


def reference_token_hash(token: str, key: ShingleKey) -> int:
    """A word token's hash: the keyed polynomial over its UTF-8 bytes read as
    little-endian 4-byte digits (the last one zero-padded: a `\\w` token holds no zero
    byte, so the digits and their number give the bytes back), which the batch path
    reads straight out of the text's bytes."""
    raw = encode(token)
    return key.token.of([int.from_bytes(raw[i : i + 4], "little") for i in range(0, len(raw), 4)])


def reference_hash(shingle: str, spec: ShingleSpec, key: ShingleKey) -> int:
    """The 64-bit hash of one shingle string: the keyed polynomial over its code
    points (`char`) or its tokens' hashes (`word`), spread over 64 bits by `finish`."""
    if spec.kind == "char":
        return finish(key.chars.of([ord(c) for c in shingle]))
    tokens = shingle.split(" ")
    return finish(key.window.of([reference_token_hash(t, key) for t in tokens]))


# --------------------------------------------------------------------------- batch path


_PAD = bytes(8)  # after the text, so that an 8-byte read at any of its bytes stays inside
_BYTE_MASKS = np.array([(1 << (8 * m)) - 1 for m in range(9)], dtype=np.uint64)


def _code_points(text: str) -> npt.NDArray[np.uint8] | npt.NDArray[np.uint32]:
    """Code points of `text`; one byte each when it is ASCII (the common case)."""
    if text.isascii():
        return np.frombuffer(text.encode("ascii"), dtype=np.uint8)
    return np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)


def encode(text: str) -> bytes:
    """The UTF-8 bytes word shingling reads (lone surrogates pass through)."""
    return text.encode("utf-8", "surrogatepass")


@dataclass(frozen=True)
class ShingleBatch:
    """Shingle hashes of n documents: document i owns hashes[offsets[i]:offsets[i+1]].

    Hashes are not deduplicated; a repeated shingle appears once per occurrence.
    `hashes` are under the public key (what signatures are made of); `exact`, when
    asked for, the same shingles in the same order under the index's secret key
    (what exact verification measures): `exact_batch`.
    """

    hashes: U64
    offsets: npt.NDArray[np.int64]
    exact: U64 | None = None

    def exact_batch(self) -> ShingleBatch:
        """The secretly keyed hashes, as a batch of their own."""
        if self.exact is None:
            raise ValueError("this batch was shingled without its exact hashes")
        return ShingleBatch(self.exact, self.offsets)

    @property
    def counts(self) -> npt.NDArray[np.int64]:
        return np.diff(self.offsets)

    def of(self, i: int) -> U64:
        return self.hashes[self.offsets[i] : self.offsets[i + 1]]

    @classmethod
    def concat(cls, parts: Sequence[ShingleBatch]) -> ShingleBatch:
        if len(parts) == 1:
            return parts[0]
        hashes, offsets = join_ragged([p.hashes for p in parts], [p.offsets for p in parts])
        exact = [p.exact for p in parts if p.exact is not None]
        if len(exact) < len(parts):
            return cls(hashes, offsets)
        return cls(hashes, offsets, np.concatenate(exact))


def offsets_of(counts: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """Where each of n consecutive runs of these lengths starts, and the end (n + 1)."""
    out = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=out[1:])
    return out


def join_ragged(
    values: Sequence[npt.NDArray[Any]], offsets: Sequence[npt.NDArray[np.int64]]
) -> tuple[npt.NDArray[Any], npt.NDArray[np.int64]]:
    """Several (values, offsets) batches of per-document runs as one, end to end."""
    counts = np.concatenate([np.diff(o) for o in offsets])
    return np.concatenate(values), offsets_of(counts)


def _window_counts(lengths: npt.NDArray[np.int64], k: int) -> npt.NDArray[np.int64]:
    """How many k-windows each segment has: a segment shorter than k has one, the
    whole segment; an empty one has none."""
    return np.where(lengths >= k, lengths - k + 1, np.minimum(lengths, 1))


def _windows(
    lengths: npt.NDArray[np.int64], k: int
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """All k-windows of consecutive segments laid end to end in one array.

    A segment shorter than k has one window, the whole segment; an empty one has none.
    Returns per-window (start, end) positions and the per-segment window counts.
    """
    counts = _window_counts(lengths, k)
    seg = np.repeat(np.arange(len(lengths)), counts)
    within = np.arange(len(seg)) - offsets_of(counts)[seg]
    starts = offsets_of(lengths)[seg] + within
    ends = starts + np.minimum(k, lengths[seg])
    return starts, ends, counts


HORNER_MAX_K = 8  # up to here, k shifted multiply-adds beat prefix sums and gathers


def _window_hashes(
    values: npt.NDArray[np.unsignedinteger[Any]],
    lengths: npt.NDArray[np.int64],
    k: int,
    table: PowerTable,
) -> tuple[U64, npt.NDArray[np.int64]]:
    """Finished keyed polynomial hashes of all the windows `_windows` defines, and
    per-segment counts.

    For small k, every k-window of the whole array is hashed by Horner's rule on
    shifted views (contiguous passes, no gathers), then the windows that run across
    a segment end are dropped; segments shorter than k are hashed on their own."""
    if k > HORNER_MAX_K:
        starts, ends, counts = _windows(lengths, k)
        return finish_np(range_poly_hashes(values, starts, ends, table)), counts
    counts = _window_counts(lengths, k)
    n_full = max(len(values) - k + 1, 0)
    digits = values.astype(np.uint64)  # below P: token hashes, or code points
    base = np.uint64(table.base)
    full = reduce_np(digits[:n_full] + np.uint64(table.poly.start * table.base % P))
    for j in range(1, k):
        full = reduce_np(mulmod_np(full, base) + digits[j : n_full + j])
    ends = offsets_of(lengths)[1:]
    crossing = (ends[:, None] - np.arange(1, k)).ravel()  # windows past a segment end
    keep = np.ones(n_full, dtype=np.bool_)
    keep[crossing[(crossing >= 0) & (crossing < n_full)]] = False
    full_hashes = finish_np(full[keep])
    short = (lengths > 0) & (lengths < k)
    if not short.any():
        return full_hashes, counts
    starts = ends[short] - lengths[short]
    short_hashes = finish_np(range_poly_hashes(values, starts, ends[short], table))
    is_short = np.zeros(int(counts.sum()), dtype=np.bool_)
    is_short[offsets_of(counts)[:-1][short]] = True
    out = np.empty(len(is_short), dtype=np.uint64)
    out[is_short] = short_hashes
    out[~is_short] = full_hashes
    return out, counts


def _doc_ends(encoded: Sequence[bytes]) -> npt.NDArray[np.int64]:
    """Where each document ends in `_SEPARATOR` + its documents joined by separators."""
    return offsets_of(np.fromiter(map(len, encoded), np.int64, len(encoded)) + 1)[1:]


def split_by_length(lengths: Sequence[int], budget: int) -> list[slice]:
    """Split a batch into runs of documents holding at most `budget` characters each
    (a document and its separator count n + 1; the last one's separator, and a first
    document over the budget on its own, are let through).  One search per run over
    the running totals: a Python step per document cost a tenth of preparing a
    one-line one."""
    n = len(lengths)
    total = np.zeros(n + 1, dtype=np.int64)  # total[j]: what documents < j hold
    np.cumsum(np.fromiter(lengths, np.int64, n) + 1, out=total[1:])
    out: list[slice] = []
    first = 0
    while True:
        # the run takes document i while total[i + 1] - total[first] - 1 <= budget
        end = int(np.searchsorted(total, total[first] + budget + 1, side="right")) - 1
        end = min(max(end, first + 1), n)
        if end >= n:
            out.append(slice(first, n))
            return out
        out.append(slice(first, end))
        first = end


class Shingler:
    """Batch shingling for one `ShingleSpec`; keeps power tables between batches.

    Each shingle is hashed under two keys (hashing.py): the public one, for
    signatures, so that which candidates LSH finds -- and so every verdict -- depends
    on the stored parameters and `seed` alone, never on a secret; and the index's
    secret `key` (`IndexParams.hash_key`), for the sets exact verification measures,
    so that nobody who cannot read the key can make two different shingles count as
    one.  A collision under the public key only makes a candidate."""

    def __init__(self, spec: ShingleSpec, key: bytes) -> None:
        self.spec = spec
        self.public = ShingleKey.of(PUBLIC_KEY)
        self.key = ShingleKey.of(key)
        self._tables: dict[Poly, PowerTable] = {}
        self._word = shared_word_table()

    def batch(
        self,
        normalised: Sequence[str] | None,
        encoded: Sequence[bytes] | None = None,
        *,
        exact: bool = False,
    ) -> ShingleBatch:
        """Shingle hashes for already-`normalise`d texts; `encoded`, their `encode`d
        bytes (`normalise_utf8`), if the caller has them already: word shingling reads
        only those, so it needs no `normalised`.  `exact`: the secretly keyed hashes
        too, in the same pass."""
        if self.spec.kind == "char":
            if normalised is None:
                raise ValueError("char shingling reads the normalised texts")
            units: Sequence[str] | Sequence[bytes] = normalised
        elif encoded is not None:
            units = encoded
        else:
            units = [encode(t) for t in normalised or ()]
        lengths = [len(u) for u in units]
        keys = (self.public, self.key) if exact else (self.public,)
        return ShingleBatch.concat(
            [self._one(units[c], keys) for c in split_by_length(lengths, CHUNK_CHARS)]
        )

    def one(self, normalised: str | None, encoded: bytes) -> U64:
        """The secretly keyed shingle hashes of one document (`batch(...).exact`):
        what exact verification asks of a stored text, one candidate at a time.  With
        word shingles and the compiled kernels, one kernel call: `batch`'s own work
        around it (splitting, joining, offsets) cost more than the shingling of a
        one-line document, about 45 us a call."""
        native = kernels.native
        if self.spec.kind != "word" or native is None:
            units = [encoded] if self.spec.kind == "word" else [normalised or ""]
            return self._one(units, (self.key,)).hashes
        data = _SEPARATOR + encoded
        doc_end = np.array([len(data)], dtype=np.int64)
        got = self._words_native(native, data, doc_end, (self.key,))
        return np.frombuffer(got[0], dtype=np.uint64)

    def _table(self, poly: Poly) -> PowerTable:
        table = self._tables.get(poly)
        if table is None:
            table = self._tables[poly] = PowerTable(poly)
        return table

    def _one(
        self, units: Sequence[str] | Sequence[bytes], keys: tuple[ShingleKey, ...]
    ) -> ShingleBatch:
        if self.spec.kind == "char":
            return self._chars_batch(units, keys)  # type: ignore[arg-type]
        return self._words(units, keys)  # type: ignore[arg-type]

    def _words(self, encoded: Sequence[bytes], keys: tuple[ShingleKey, ...]) -> ShingleBatch:
        if kernels.native is not None:
            return self._words_compiled(encoded, kernels.native, keys)
        # documents between NUL separators (not \w, so no token spans two of them),
        # one before the first so that every token start is a rising edge
        data = _SEPARATOR + _SEPARATOR.join([*encoded, _PAD])
        is_word = self._word.classify(data)
        bounds = np.flatnonzero(is_word[1:] != is_word[:-1]) + 1  # token start, end, ...
        tok_start, tok_end = bounds[0::2], bounds[1::2]
        doc_end = _doc_ends(encoded)
        # count token starts before each document's end
        tok_count = np.diff(np.searchsorted(tok_start, doc_end), prepend=0).astype(np.int64)
        out = []
        for key in keys:
            tok_hash = self._token_hashes(data, tok_start, tok_end - tok_start, key.token)
            hashes, counts = _window_hashes(
                tok_hash, tok_count, self.spec.k, self._table(key.window)
            )
            out.append(hashes)
        return ShingleBatch(out[0], offsets_of(counts), out[1] if len(out) > 1 else None)

    def _words_native(
        self,
        native: kernels.Kernels,
        data: bytes,
        doc_end: npt.NDArray[np.int64],
        keys: tuple[ShingleKey, ...],
    ) -> tuple[bytes, ...]:
        """`_kernels.word_shingles`, which classifies bytes itself (ASCII by their
        value, the rest by `WordTable.is_word`, grown here when it meets a code point
        past the table's end)."""
        flat = tuple(v for key in keys for v in key.word_values())
        while isinstance(
            got := native.word_shingles(data, self._word.is_word, doc_end, self.spec.k, flat),
            int,
        ):
            self._word.grow(got)
        return got

    def _words_compiled(
        self, encoded: Sequence[bytes], native: kernels.Kernels, keys: tuple[ShingleKey, ...]
    ) -> ShingleBatch:
        """`_words` in one pass of `_kernels.word_shingles` (under every key at once)."""
        data = _SEPARATOR + _SEPARATOR.join(encoded)
        got = self._words_native(native, data, _doc_ends(encoded), keys)
        hashes = [np.frombuffer(h, dtype=np.uint64) for h in got[:-1]]
        counts = np.frombuffer(got[-1], dtype=np.int64)
        return ShingleBatch(hashes[0], offsets_of(counts), hashes[1] if len(hashes) > 1 else None)

    def _token_hashes(
        self, data: bytes, start: npt.NDArray[np.int64], length: npt.NDArray[np.int64], t: Poly
    ) -> U64:
        """`reference_token_hash` of every token: one or two 4-byte digits for most,
        from one 8-byte read of the text (an unaligned view of it); longer ones read
        all their digits."""
        words8: U64 = np.ndarray((len(data) - 7,), dtype="<u8", buffer=data, strides=(1,))
        chunk = words8[start] & _BYTE_MASKS[np.minimum(length, 8)]
        low, high = chunk & np.uint64(0xFFFFFFFF), chunk >> np.uint64(32)
        one = reduce_np(low + np.uint64(t.start * t.base % P))  # start * base + d0
        two = reduce_np(  # start * base**2 + d0 * base + d1
            mulmod_np(low, np.uint64(t.base)) + high + np.uint64(t.start * t.base**2 % P)
        )
        out = np.where(length <= 4, one, two)
        long = np.flatnonzero(length > 8)
        if len(long):
            words4 = np.ndarray((len(data) - 3,), dtype="<u4", buffer=data, strides=(1,))
            n_digits = (length[long] + 3) >> 2
            bounds = offsets_of(n_digits)
            within = np.arange(bounds[-1]) - np.repeat(bounds[:-1], n_digits)
            digits = words4[np.repeat(start[long], n_digits) + 4 * within]
            digits[bounds[1:] - 1] &= _BYTE_MASKS[length[long] - 4 * (n_digits - 1)].astype(
                np.uint32
            )
            out[long] = range_poly_hashes(digits, bounds[:-1], bounds[1:], self._table(t))
        return out

    def _chars_batch(self, texts: Sequence[str], keys: tuple[ShingleKey, ...]) -> ShingleBatch:
        flat = [" ".join(t.split()) for t in texts]
        lengths = np.fromiter(map(len, flat), np.int64, len(flat))
        cps = _code_points("".join(flat))
        native = kernels.native
        k = self.spec.k
        wide = cps.astype(np.uint32) if native is not None else cps  # once for both keys
        out = []
        for key in keys:
            c = key.chars
            if native is not None:
                got = native.window_hashes(wide, lengths, k, c.base, c.start)
                out.append(np.frombuffer(got, dtype=np.uint64))
            else:
                out.append(_window_hashes(cps, lengths, k, self._table(c))[0])
        counts = _window_counts(lengths, k)
        return ShingleBatch(out[0], offsets_of(counts), out[1] if len(out) > 1 else None)
