"""The stored form of items' canonical bytes (`Texts`, `compress_texts`,
`decompress_text`): zstd level 1, or the bytes as they are when short.  Apart from
preparing (engine/prepare.py) because every family stores its items' canonical
bytes this way -- a text's normalised UTF-8 today -- and the verifier reads them
back for exact checks; the compression knows nothing of what the bytes mean."""

from __future__ import annotations

import operator
from collections.abc import Collection, Mapping, Sequence
from typing import Any, TypeVar, overload

import zstandard

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
