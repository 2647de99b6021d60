"""Inputs: bytes as they arrive (a Kafka message, a line of a file) become a `Document`
or a `Rejected` with a reason code.  The decoders know the wire formats (JSON, msgpack,
raw text) and nothing about sketches, indexes or Kafka; new formats live here.

`is_warc` and `sniff_warc` are here rather than in `warc`: a command asks them of
every input, and a run of JSON Lines need not load the WARC reader to hear no."""

from __future__ import annotations

import io
from typing import IO

WARC_SUFFIXES = (".warc", ".warc.gz")
# What a WARC archive starts with: its first record's version line, or (a .warc.gz)
# a gzip member.  Neither can start a line of JSON.
WARC_MAGIC = (b"WARC/", b"\x1f\x8b")
_SNIFF = max(map(len, WARC_MAGIC))


def is_warc(path: str) -> bool:
    """An input is read as a WARC archive when its name says so."""
    return path.lower().endswith(WARC_SUFFIXES)


def sniff_warc(stream: IO[bytes]) -> tuple[bool, IO[bytes]]:
    """Whether `stream` holds a WARC archive, told by its first bytes (stdin has no
    name to tell it by), and the stream to read it from: `stream` itself when it
    could look ahead without consuming (a file, a pipe with the bytes at hand), else
    one that gives the bytes read to look back first."""
    peek = getattr(stream, "peek", None)
    head = peek(_SNIFF)[:_SNIFF] if peek is not None else b""
    if len(head) < _SNIFF:
        head = b""
        while len(head) < _SNIFF and (more := stream.read(_SNIFF - len(head))):
            head += more
        stream = io.BufferedReader(_Replay(head, stream))
    return head.startswith(WARC_MAGIC), stream


class _Replay(io.RawIOBase):
    """`first`, then the rest of `rest`: a stream whose first bytes were read to
    look at them."""

    def __init__(self, first: bytes, rest: IO[bytes]) -> None:
        super().__init__()
        self.first = first
        self.rest = rest

    @property
    def name(self) -> str:
        return str(getattr(self.rest, "name", "the input"))

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        if self.first:
            n = min(len(buffer), len(self.first))
            buffer[:n] = self.first[:n]
            self.first = self.first[n:]
            return n
        read1 = getattr(self.rest, "read1", self.rest.read)
        data = read1(len(buffer))
        buffer[: len(data)] = data
        return len(data)
