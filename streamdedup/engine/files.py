"""`streamdedup dedup`: JSON Lines in, one verdict line per input line out.

Per batch: decode lines -> prepare (here or in worker processes) -> check and insert
in one write transaction -> commit -> write and flush the batch's output lines.
Committing before writing means an interrupted run (Ctrl-C, kill -9) leaves an index
that holds every document whose verdict reached OUT; running the same input again
gives those documents their stored verdicts back.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import stat
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any

import orjson

from streamdedup.config import Fields
from streamdedup.engine.deduplicator import Deduplicator
from streamdedup.engine.pool import Decoded, PreparePool, decode_and_prepare
from streamdedup.engine.prepare import Prepared
from streamdedup.errors import ConfigError, InputOutputError
from streamdedup.models import Document, Rejected, Verdict, output_record

if TYPE_CHECKING:  # (the WARC reader is loaded by a run that reads an archive)
    from streamdedup.inputs.warc import HttpStatuses, Skipped, WarcId, WarcRef


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
    # WARC records that are not pages to check (no output line): reason -> count
    skipped: dict[str, int] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        return self.lines / self.seconds if self.seconds > 0 else 0.0

    def add(self, item: Verdict | Rejected) -> None:
        self.lines += 1
        if isinstance(item, Rejected):
            self.rejected += 1
            self.reasons[item.reason] = self.reasons.get(item.reason, 0) + 1
        else:
            self._count(item.kinds(), 1)

    def add_verdicts(self, verdicts: list[Verdict]) -> None:
        """`add` of each verdict, counted by their few distinct `kinds` first."""
        self.lines += len(verdicts)
        for kinds, n in Counter([v.kinds() for v in verdicts]).items():
            self._count(kinds, n)

    def _count(self, kinds: tuple[str, ...], n: int) -> None:
        for kind in kinds:
            name = "duplicates" if kind == "duplicate" else kind
            setattr(self, name, getattr(self, name) + n)

    def text(self) -> str:
        parts = [
            f"{self.lines} {self.unit} in {self.seconds:.1f}s ({self.rate:,.0f} docs/s)",
            f"unique {self.unique} (empty {self.empty})",
            f"duplicate {self.duplicates} (exact {self.exact})",
            f"{self.rejected_as} {self.rejected}",
        ]
        if self.reasons:
            parts[-1] += " (" + ", ".join(f"{k} {v}" for k, v in sorted(self.reasons.items())) + ")"
        if self.skipped:
            kinds = ", ".join(f"{k} {v}" for k, v in sorted(self.skipped.items()))
            parts.append(f"skipped {sum(self.skipped.values())} ({kinds})")
        return "; ".join(parts)


READ_BYTES = 1 << 20  # what `read_lines` asks of the stream at a time


def read_lines(
    stream: IO[bytes], batch_size: int, block_bytes: int = READ_BYTES
) -> Iterator[list[bytes]]:
    """The input's lines without their line ends (trailing CRs dropped too, as
    `line.rstrip(b"\r\n")` of each of the stream's lines), `batch_size` at a time.
    Read in blocks cut by `bytes.split`, not line by line: the per-line iteration was
    a tenth of a one-line document's time.  `read1` returns what one read brings, so
    a slow pipe's batches come out as soon as their lines are in, as before."""
    batch_size = max(batch_size, 1)
    batch: list[bytes] = []
    partial: list[bytes] = []  # the start of a line that runs past the block read
    while True:
        try:
            block = (
                stream.read1(block_bytes) if hasattr(stream, "read1") else stream.read(block_bytes)
            )
        except OSError as exc:
            raise read_error(stream, exc) from exc
        if not block:
            break
        if b"\n" not in block:
            partial.append(block)
            continue
        if partial:
            partial.append(block)
            block, partial = b"".join(partial), []
        lines = block.split(b"\n")
        partial.append(lines.pop())
        batch += [line.rstrip(b"\r") for line in lines] if b"\r" in block else lines
        while len(batch) >= batch_size:
            yield batch[:batch_size]
            del batch[:batch_size]
    last = b"".join(partial)
    if last:
        batch.append(last.rstrip(b"\r"))
    if batch:
        yield batch


def read_error(stream: IO[bytes], exc: OSError) -> InputOutputError:
    name = getattr(stream, "name", "the input")
    where = "stdin" if name == "<stdin>" else name
    return InputOutputError(f"cannot read {where}: {exc.strerror or exc}")


def run_dedup(
    dedup: Deduplicator,
    source: IO[bytes],
    sink: IO[bytes],
    fields: Fields,
    *,
    batch_size: int = 8000,
    workers: int = 0,
    progress: Any = None,
    summary: Summary | None = None,
    where: dict[str, Any] | None = None,
) -> Summary:
    """Process all of `source`; `progress` is a tqdm-like object or None.  With
    several inputs, one `summary` goes through all of them (its time included), and
    `where` (the input's name) is added to each error record."""
    summary = summary if summary is not None else Summary()
    first = summary.lines
    started = time.perf_counter() - summary.seconds
    pool = None
    groups: Iterable[list[tuple[Decoded, Prepared]]]
    if workers > 0:
        pool = PreparePool(workers, dedup.preparer, fields, source)
        groups = pool.groups(batch_size)
    else:
        tasks = read_lines(source, batch_size)
        groups = ([decode_and_prepare(dedup.preparer, fields, b, dedup.known)] for b in tasks)
    try:
        for group in _ahead(groups, dedup):
            count = sum(len(d) for d, _ in group)  # lines decoded, rejected ones too
            verdicts = dedup.apply([p for _, p in group])  # committed before writing
            records: list[dict[str, Any]]
            if len(verdicts) == count:  # no rejected line: all at once
                summary.add_verdicts(verdicts)
                records = [output_record(v) for v in verdicts]
            else:
                records = []
                each = iter(verdicts)
                for item in itertools.chain.from_iterable(d for d, _ in group):
                    if isinstance(item, Rejected):  # an error record says where its line was
                        summary.add(item)
                        line = {"line": summary.lines - first, **(where or {})}
                        records.append(output_record(item, **line))
                    else:
                        verdict = next(each)
                        summary.add(verdict)
                        records.append(output_record(verdict))
            _write_batch(sink, json_lines(records), summary, progress, count, started)
    finally:
        summary.seconds = time.perf_counter() - started
        if pool is not None:
            pool.close()
    return summary


def _ahead(
    groups: Iterable[list[tuple[Decoded, Prepared]]], dedup: Deduplicator
) -> Iterator[list[tuple[Decoded, Prepared]]]:
    """The groups, each one's questions to remote sealed segments sent before the one
    before it is decided (`Deduplicator.ask_ahead`): the answers travel meanwhile."""
    it = iter(groups)
    current = next(it, None)
    if current is not None:  # the first batch's answers travel while the second is prepared
        dedup.ask_ahead([p for _, p in current])
    while current is not None:
        following = next(it, None)
        if following is not None:
            dedup.ask_ahead([p for _, p in following])
        yield current
        current = following


_BOUNDARY = b'},{"id":'  # between two records in a JSON array of them


def json_lines(records: list[dict[str, Any]]) -> bytes:
    """`orjson.dumps` of each record (flat objects whose first key is "id", as
    `output_record` makes them), a line each.  One call for the batch, whose array
    is cut into lines where one record ends and the next begins: a call per record
    cost 25 times as much (4 against 0.15 us a verdict, measured).  The cut is safe
    because orjson writes compact JSON in which a quote inside a string is always
    escaped, so `{"` -- and with it `},{"id":` -- cannot occur inside a string; and
    a raw line feed never occurs in its output, so counting them checks that every
    record got one line (if not -- a nested object starting with "id" -- each record
    is written on its own)."""
    if not records:
        return b""
    data = orjson.dumps(records)[1:-1].replace(_BOUNDARY, b'}\n{"id":') + b"\n"
    if data.count(b"\n") == len(records):
        return data
    dumps = orjson.dumps
    return b"".join([dumps(r) + b"\n" for r in records])


def _write_batch(
    sink: IO[bytes],
    data: bytes,
    summary: Summary,
    progress: Any,
    count: int,
    started: float,
) -> None:
    """One batch's output lines written (after its commit), the progress moved on."""
    _deliver(sink, data, summary.lines - count)
    summary.seconds = time.perf_counter() - started
    if progress is not None:
        progress.update(count)
        progress.set_postfix(dup=summary.duplicates, rejected=summary.rejected, refresh=False)


def run_warc(
    dedup: Deduplicator,
    source: IO[bytes],
    sink: IO[bytes],
    fields: Fields,
    *,
    warc_id: WarcId = "uri",
    statuses: HttpStatuses = "2xx",
    record_ids: set[bytes] | None = None,
    batch_size: int = 8000,
    workers: int = 0,
    progress: Any = None,
    summary: Summary | None = None,
    on_skip: Callable[[Skipped, int], None] | None = None,
) -> Summary:
    """Process a WARC archive: its HTML response records, in order, each page's text
    extracted as it is read (`inputs.warc`); the documents are checked and inserted
    in batches of `batch_size` records, like lines.  Every output record carries the
    page's `url` and `warc_record_id`; an error record also its `record` number in
    the archive.  Skipped records (`on_skip(record, number)`) get no output line.
    `statuses`: which HTTP responses are pages (`inputs.warc.read_pages`);
    `record_ids`: the record ids read so far in this run (`--warc-id record-id`),
    one set for every archive of the run, so that a repeat is an error record."""
    summary = summary if summary is not None else Summary()
    started = time.perf_counter() - summary.seconds
    from streamdedup.inputs.warc import Skipped, read_warc

    items = read_warc(
        source,
        id_from=warc_id,
        extract=fields.extract,
        max_bytes=fields.max_bytes,
        statuses=statuses,
        seen=record_ids,
    )
    number = 0
    while chunk := list(itertools.islice(items, batch_size)):
        kept: list[tuple[Document | Rejected, WarcRef, int]] = []
        for item, ref in chunk:
            number += 1
            if isinstance(item, Skipped):
                summary.skipped[item.reason] = summary.skipped.get(item.reason, 0) + 1
                if on_skip is not None:
                    on_skip(item, number)
            else:
                kept.append((item, ref, number))
        docs = [item for item, _, _ in kept if isinstance(item, Document)]
        verdicts = iter(dedup.check_batch(docs))  # committed before writing
        records: list[dict[str, Any]] = []
        for item, ref, n in kept:
            result: Verdict | Rejected = item if isinstance(item, Rejected) else next(verdicts)
            summary.add(result)
            extra: dict[str, Any] = ref.fields()
            if isinstance(result, Rejected):
                extra["record"] = n
            records.append(output_record(result, **extra))
        _write_batch(sink, json_lines(records), summary, progress, len(kept), started)
    summary.seconds = time.perf_counter() - started
    return summary


def _deliver(sink: IO[bytes], data: bytes, written: int) -> None:
    """Write and flush one batch's output lines; a failure is an `InputOutputError`
    (exit 4): the batch is already in the index, and the user must know that verdicts
    are missing from the output -- also when a reader closed the pipe early (`| head`).
    The message counts the verdicts delivered: those of the batches before (`written`)
    and the whole lines of this one that went out before the failure."""
    name = getattr(sink, "name", "the output")
    where = "stdout" if name == "<stdout>" else name
    sent = Sent()
    try:
        write_all(sink, data, sent)
        sink.flush()
    except BrokenPipeError as exc:
        silence_stdout()
        delivered = written + data.count(b"\n", 0, sent.bytes)
        raise InputOutputError(
            f"the reader of {where} closed it early: {delivered:,} verdicts were delivered, "
            "the ones after them were not (the index holds their documents: run the same "
            "input again for every verdict)"
        ) from exc
    except OSError as exc:
        delivered = written + data.count(b"\n", 0, sent.bytes)
        raise InputOutputError(
            f"cannot write the verdicts to {where}: {exc.strerror or exc} ({delivered:,} "
            "written before; the index holds this batch: run the same input again once that "
            "is fixed)"
        ) from exc


@dataclass
class Sent:
    """How many bytes `write_all` got out before it failed."""

    bytes: int = 0


def write_all(sink: IO[bytes], data: bytes, sent: Sent | None = None) -> None:
    """Write every byte of `data`, or raise (`sent` counts what went out).  A raw
    stream's `write` (stdout under `python -u` or PYTHONUNBUFFERED, where
    `sys.stdout.buffer` is the unbuffered FileIO) may write only part of it and
    return the count: a pipe whose reader closes mid-write takes what fits and
    reports no error.  Ignoring that count lost the rest silently -- caught only by
    the next batch's write (EPIPE), so a run whose unread verdicts were in its last
    or only batch exited 0.  A buffered stream writes everything or raises."""
    sent = sent if sent is not None else Sent()
    view = memoryview(data)
    while sent.bytes < len(data):
        n: int | None = sink.write(view[sent.bytes :])
        if not n:  # None: a non-blocking stream that takes nothing now
            raise OSError(errno.EAGAIN, "the output takes no more data (non-blocking)")
        sent.bytes += n


def silence_stdout() -> None:
    """After the reader of stdout went away, point fd 1 at /dev/null so that Python's
    flush of stdout at exit does not fail a second time and print a traceback."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def _identity(path: str, std: Any) -> tuple[int, int] | None:
    """(device, inode) of the regular file `path` is (`-`: the file behind `std`)."""
    try:
        st = os.fstat(std.fileno()) if path == "-" else os.stat(path)
    except (OSError, ValueError, AttributeError):
        return None
    return (st.st_dev, st.st_ino) if stat.S_ISREG(st.st_mode) else None


def refuse_same_file(input_path: str, output_path: str) -> None:
    """Writing the verdicts over the input would truncate it before it is read: refuse
    any spelling of the same file (relative, absolute, symlink, hard link, and stdin or
    stdout redirected from or to it)."""
    src = _identity(input_path, sys.stdin)
    if src is not None and src == _identity(output_path, sys.stdout):
        where = {"-": "stdout"}.get(output_path, output_path)
        source = {"-": "stdin"}.get(input_path, input_path)
        raise ConfigError(
            f"the output ({where}) is the input file ({source}): writing verdicts there "
            "would destroy it; choose another --output"
        )


def stdin_or_file(path: str) -> IO[bytes]:
    if path == "-":
        if sys.stdin is None or _closed(sys.stdin):
            raise InputOutputError("stdin is closed: give INPUT as a file, or open stdin")
        return sys.stdin.buffer
    try:
        return open(path, "rb")
    except OSError as exc:
        raise InputOutputError(f"cannot read {path}: {exc.strerror or exc}") from exc


def stdout_or_file(path: str) -> IO[bytes]:
    """The output, opened but not yet truncated (`truncate_output` does that once the
    index is open, so a failed start leaves an existing output file as it was).
    Unbuffered: every batch is written whole and flushed at once anyway, and the raw
    stream's `write` says how much of a batch went out before a failure
    (`write_all`), so the message counts the verdicts delivered exactly."""
    if path == "-":
        if sys.stdout is None or _closed(sys.stdout):
            raise InputOutputError("stdout is closed: give --output FILE, or open stdout")
        buffered = sys.stdout.buffer
        buffered.flush()
        raw: IO[bytes] = getattr(buffered, "raw", buffered)
        return raw
    try:  # "wb" without O_TRUNC
        return open(
            path,
            "wb",
            buffering=0,
            opener=lambda p, _: os.open(p, os.O_WRONLY | os.O_CREAT, 0o666),
        )
    except OSError as exc:
        raise InputOutputError(
            f"cannot write the verdicts to {path}: {exc.strerror or exc}; choose a path in "
            "an existing, writable directory (or '-' for stdout)"
        ) from exc


def truncate_output(sink: IO[bytes]) -> None:
    with contextlib.suppress(OSError, ValueError):
        if stat.S_ISREG(os.fstat(sink.fileno()).st_mode):
            os.ftruncate(sink.fileno(), 0)


def _closed(std: Any) -> bool:
    try:
        os.fstat(std.fileno())
    except (OSError, ValueError, AttributeError):
        return True
    return False
