"""`streamdedup dedup`: JSON Lines in, one verdict line per input line out.

Per batch: decode lines -> prepare (here or in worker processes) -> check and insert
in one write transaction -> commit -> write and flush the batch's output lines.
Committing before writing means an interrupted run (Ctrl-C, kill -9) leaves an index
that holds every document whose verdict reached OUT; running the same input again
gives those documents their stored verdicts back.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import IO, Any

import orjson

from .decode import Fields, Rejected
from .engine import Deduplicator, Prepared, Verdict
from .pool import Decoded, PreparePool, decode_and_prepare


@dataclass
class Summary:
    """Counts for the closing line; `unit` and `rejected_as` name what was read and
    where rejects went (lines and error records in files, messages and the dead-letter
    topic on Kafka)."""

    lines: int = 0
    unique: int = 0
    duplicates: int = 0
    exact: int = 0
    empty: int = 0
    rejected: int = 0
    reasons: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    unit: str = "lines"
    rejected_as: str = "rejected"

    @property
    def rate(self) -> float:
        return self.lines / self.seconds if self.seconds > 0 else 0.0

    def add(self, item: Verdict | Rejected) -> None:
        self.lines += 1
        if isinstance(item, Rejected):
            self.rejected += 1
            self.reasons[item.reason] = self.reasons.get(item.reason, 0) + 1
        elif item.is_duplicate:
            self.duplicates += 1
            self.exact += item.exact
        else:
            self.unique += 1
            self.empty += item.reason == "empty"

    def text(self) -> str:
        parts = [
            f"{self.lines} {self.unit} in {self.seconds:.1f}s ({self.rate:,.0f} docs/s)",
            f"unique {self.unique} (empty {self.empty})",
            f"duplicate {self.duplicates} (exact {self.exact})",
            f"{self.rejected_as} {self.rejected}",
        ]
        if self.reasons:
            parts[-1] += " (" + ", ".join(f"{k} {v}" for k, v in sorted(self.reasons.items())) + ")"
        return "; ".join(parts)


def error_record(item: Rejected, line: int) -> dict[str, Any]:
    """The output line for an input line that could not be processed."""
    return {
        "id": item.id,
        "verdict": "error",
        "error": item.reason,
        "message": item.message,
        "line": line,
    }


def read_lines(stream: IO[bytes], batch_size: int) -> Iterator[list[bytes]]:
    batch: list[bytes] = []
    for raw in stream:
        batch.append(raw.rstrip(b"\r\n"))
        if len(batch) >= batch_size:
            yield batch
            batch = []
    if batch:
        yield batch


def run_dedup(
    dedup: Deduplicator,
    source: IO[bytes],
    sink: IO[bytes],
    fields: Fields,
    *,
    batch_size: int = 8000,
    workers: int = 0,
    progress: Any = None,
) -> Summary:
    """Process all of `source`; `progress` is a tqdm-like object or None."""
    summary = Summary()
    started = time.perf_counter()
    pool = None
    groups: Iterable[list[tuple[Decoded, Prepared]]]
    if workers > 0:
        pool = PreparePool(workers, dedup.preparer, fields, source)
        groups = pool.groups(batch_size)
    else:
        tasks = read_lines(source, batch_size)
        groups = ([decode_and_prepare(dedup.preparer, fields, b, dedup.known)] for b in tasks)
    try:
        for group in groups:
            decoded = [item for d, _ in group for item in d]
            verdicts = iter(dedup.apply([p for _, p in group]))  # committed before writing
            out: list[bytes] = []
            for item in decoded:
                result: Verdict | Rejected = item if isinstance(item, Rejected) else next(verdicts)
                summary.add(result)
                record = (
                    error_record(result, summary.lines)
                    if isinstance(result, Rejected)
                    else result.to_dict()
                )
                out.append(orjson.dumps(record))
            out.append(b"")
            sink.write(b"\n".join(out))
            sink.flush()
            summary.seconds = time.perf_counter() - started
            if progress is not None:
                progress.update(len(decoded))
                progress.set_postfix(
                    dup=summary.duplicates, rejected=summary.rejected, refresh=False
                )
    finally:
        summary.seconds = time.perf_counter() - started
        if pool is not None:
            pool.close()
    return summary


def stdin_or_file(path: str) -> IO[bytes]:
    return sys.stdin.buffer if path == "-" else open(path, "rb")


def stdout_or_file(path: str) -> IO[bytes]:
    return sys.stdout.buffer if path == "-" else open(path, "wb")
