"""The file-mode driver's ends: input lines read in blocks from a file or stdin, verdict
lines written whole to a file or stdout, and the refusals and messages that make both
safe (the output never truncates the input; a closed pipe or a short write is an
`InputOutputError` that counts the verdicts delivered)."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any

from streamdedup.errors import ConfigError, InputOutputError

if TYPE_CHECKING:  # (the WARC reader is loaded by a run that reads an archive)
    pass


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


def deliver(sink: IO[bytes], data: bytes, written: int, what: str = "verdicts") -> None:
    """Write and flush one batch's output lines; a failure is an `InputOutputError`
    (exit 4): the batch is already in the index, and the user must know that verdicts
    are missing from the output -- also when a reader closed the pipe early (`| head`).
    The message counts the verdicts delivered: those of the batches before (`written`)
    and the whole lines of this one that went out before the failure (`what` they
    are: the verdicts, or the kept input lines)."""
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
            f"the reader of {where} closed it early: {delivered:,} {what} were delivered, "
            "the ones after them were not (the index holds their documents: run the same "
            "input again for every verdict)"
        ) from exc
    except OSError as exc:
        delivered = written + data.count(b"\n", 0, sent.bytes)
        raise InputOutputError(
            f"cannot write the {what} to {where}: {exc.strerror or exc} ({delivered:,} "
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
