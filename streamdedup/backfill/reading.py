"""The backfill's input: JSON Lines files cut into byte ranges (`Split`), each read by
one Spark task, decoded and prepared there with the package's own code
(`decode_json`, `Preparer.prepare`: one implementation of shingling and hashing).

A line belongs to the range its first byte is in, so every line is read exactly
once whatever the cut points; lines are split on b"\\n" and lose trailing b"\\r"
and b"\\n", as `dedup` reads them (filemode/streams.read_lines), so the same bytes are
decoded into the same documents.  Executors open the files by path: on a cluster
the inputs must be on a filesystem every executor sees (NFS, a shared mount).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import orjson

from streamdedup.config import Fields, IndexParams
from streamdedup.engine.prepare import Preparer
from streamdedup.inputs.decode import decode_json
from streamdedup.models import Document, Rejected, output_record

SPLIT_BYTES = 32 << 20  # input bytes per task (a few seconds of preparing each)
PREPARE_BATCH = 2000  # documents prepared together (`Preparer.prepare`'s batch)


@dataclass(frozen=True)
class Split:
    """Bytes `start` to `end` of input number `input` (`path`)."""

    number: int
    input: int
    path: str
    start: int
    end: int


def splits(paths: list[str], split_bytes: int = SPLIT_BYTES) -> list[Split]:
    """The inputs as ranges of at most `split_bytes` (an empty file: no range)."""
    out: list[Split] = []
    for k, path in enumerate(paths):
        size = os.path.getsize(path)
        for start in range(0, size, split_bytes):
            out.append(Split(len(out), k, path, start, min(size, start + split_bytes)))
    return out


def lines(split: Split) -> Iterator[bytes]:
    """The lines that begin inside the range, without their line ends."""
    with open(split.path, "rb") as f:
        if split.start > 0:
            f.seek(split.start - 1)
            f.readline()  # the rest of the line the previous range reads
        while f.tell() < split.end:
            raw = f.readline()
            if not raw:
                return
            yield raw.rstrip(b"\r\n")


def count_lines(split: Split) -> int:
    return sum(1 for _ in lines(split))


# One input line as the job carries it, by position:
#   ("R", error record as JSON bytes) for a rejected line, or
#   ("D", id, id key, content hash, shingles, signature, band keys, text or None).
Row = tuple[Any, ...]


def read_split(
    split: Split,
    first: int,
    first_line: int,
    params: IndexParams,
    fields: Fields,
    name: str | None,
) -> Iterator[tuple[int, Row]]:
    """(position, row) of every line of the range: `first` is the position of its
    first line among all inputs, `first_line` its line number in its input (0-based);
    `name` the input as an error record names it (several inputs), or None."""
    preparer = Preparer(params)
    pos, line = first, first_line
    batch: list[tuple[int, Document]] = []

    def flush() -> Iterator[tuple[int, Row]]:
        p = preparer.prepare([d for _, d in batch])
        for i, (at, doc) in enumerate(batch):
            text = p.texts[i] if p.texts is not None else None
            yield (
                at,
                (
                    "D",
                    doc.id,
                    p.keys[i],
                    p.content[i],
                    p.shingles[i],
                    p.sig_bytes[i],
                    p.band_rows[i],
                    text,
                ),
            )
        batch.clear()

    for raw in lines(split):
        line += 1
        item = decode_json(raw, fields)
        if isinstance(item, Rejected):
            where: dict[str, Any] = {"line": line}
            if name is not None:
                where["input"] = name
            yield pos, ("R", orjson.dumps(output_record(item, **where)), item.reason)
        else:
            batch.append((pos, item))
            if len(batch) >= PREPARE_BATCH:
                yield from flush()
        pos += 1
    if batch:
        yield from flush()
