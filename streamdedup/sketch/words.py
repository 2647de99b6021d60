"""Which characters are word characters (`\\w`, exactly as `re` has it), for word
shingling's tokenizer: a table over code points, built from `re` itself as text
reaches new blocks of Unicode, and shared by every Shingler of a process."""

from __future__ import annotations

import functools
import re
import threading

import numpy as np
import numpy.typing as npt

_MAX_UNICODE = 0x110000
_BLOCK_BITS = 12  # the table grows in blocks of 4096 code points


class WordTable:
    """`\\w`, exactly as `re` has it, for every byte of UTF-8 text.

    ASCII bytes are classified by one `bytes.translate`; the bytes of the (usually
    few) other characters are decoded back to code points and looked up in
    is_word[cp], a table taken from `re` itself and built only up to the highest
    code point seen so far (the whole table costs 0.2 s, and text rarely goes past
    the first few blocks).  The table is a fact about Unicode, not about a Shingler:
    every Shingler of a process shares one (`shared_word_table`), so one made per
    record (a backfill's picks) or per example (the property tests) does not build it
    again.  It only ever grows, under a lock, so a reader holding the array it read
    sees the same answers for every code point that array covers."""

    def __init__(self) -> None:
        self.is_word = np.zeros(0, dtype=np.bool_)
        self._lock = threading.Lock()
        self.grow(0)
        # ASCII -> 0/1 (is it \w), any byte of a non-ASCII character -> 2
        self._utf8 = self.is_word[:128].astype(np.uint8).tobytes() + b"\x02" * 128

    def classify(self, data: bytes) -> npt.NDArray[np.bool_]:
        """is_word of the character each byte of `data` (well-formed UTF-8, lone
        surrogates allowed) belongs to."""
        marks = data.translate(self._utf8)
        if data.isascii():
            return np.frombuffer(marks, dtype=np.bool_)
        out = np.frombuffer(bytearray(marks), dtype=np.uint8)
        raw = np.frombuffer(data, dtype=np.uint8)
        high = np.flatnonzero(out == 2)
        is_lead = (raw[high] & 0xC0) != 0x80
        lead = high[is_lead]
        b0 = raw[lead].astype(np.uint32)
        # the bytes after each lead (clipped at the end: a short character ignores them)
        last = len(raw) - 1
        b1, b2, b3 = ((raw[np.minimum(lead + j, last)] & 0x3F).astype(np.uint32) for j in (1, 2, 3))
        cps = np.where(
            b0 < 0xE0,
            ((b0 & 0x1F) << 6) | b1,
            np.where(
                b0 < 0xF0,
                ((b0 & 0x0F) << 12) | (b1 << 6) | b2,
                ((b0 & 0x07) << 18) | (b1 << 12) | (b2 << 6) | b3,
            ),
        )
        self.grow(int(cps.max()))
        out[high] = self.is_word[cps][np.cumsum(is_lead) - 1]
        return out.view(np.bool_)

    def grow(self, code_point: int) -> None:
        if code_point < len(self.is_word):
            return
        with self._lock:
            lo = len(self.is_word)
            if code_point < lo:  # another thread grew it meanwhile
                return
            hi = min(((code_point >> _BLOCK_BITS) + 1) << _BLOCK_BITS, _MAX_UNICODE)
            chars = np.arange(lo, hi, dtype="<u4").tobytes().decode("utf-32-le", "surrogatepass")
            marked = re.sub(r"\W", "\x00", chars)  # keeps exactly the \w code points
            codes = np.frombuffer(marked.encode("utf-32-le", "surrogatepass"), dtype="<u4")
            self.is_word = np.concatenate([self.is_word, codes != 0])


@functools.cache
def shared_word_table() -> WordTable:
    """The process's one `WordTable` (see its docstring)."""
    return WordTable()
