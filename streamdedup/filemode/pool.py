"""Worker processes that decode and prepare file-mode input (`dedup --workers N`).

The main process keeps the index transaction, the one part that cannot be split;
the workers do everything before it.  The main thread talks to the workers over
one pipe each, without helper threads: multiprocessing.Pool's task and result
threads share the main process's GIL and cost it about a third of its time.  A
worker, by contrast, sends its results from a thread of its own, so it goes on
preparing while the main process applies a batch and is not reading.

Tasks are byte ranges of the input, cut at line ends, about `TASK_BYTES` each.
When the input is a regular file a worker reads its range itself and a task
message is a few bytes, so several can wait in each pipe (the workers never
idle while this process applies a batch).  Other input (a pipe, stdin) travels
in the message; a worker then gets its next task only after its last result has
been read, since a worker blocked sending a result could otherwise hold up this
process sending it a large task.  Results come back in input order.
"""

from __future__ import annotations

import contextlib
import gc
import os
import pickle
import queue
import threading
from collections import deque
from collections.abc import Callable, Iterator
from typing import IO, TYPE_CHECKING, Any, NamedTuple

from streamdedup.config import Fields
from streamdedup.engine.prepare import Prepared, Preparer
from streamdedup.errors import StreamDedupError
from streamdedup.inputs.decode import decode_json_lines
from streamdedup.models import Document, Rejected
from streamdedup.ops.progress import file_size

if TYPE_CHECKING:  # multiprocessing is imported by the pool (`--workers`) only
    from multiprocessing.connection import Connection

Decoded = list[Document | Rejected]
Part = tuple[Decoded, Prepared]


class Lined(NamedTuple):
    """A part as `dedup` takes it: its decoded lines, their prepared documents (None:
    a dry run's, prepared one by one by `Deduplicator.query`), the lines themselves
    (those `--keep` copies; empty when not asked for) and their bytes in the input
    (the progress bar's)."""

    decoded: Decoded
    prepared: Prepared | None
    lines: list[bytes]
    size: int


TASK_BYTES = 1 << 20  # about 330 pages of 3 KB
DEPTH = 8  # tasks in flight per worker when they are byte ranges of a file


def split_lines(data: bytes) -> list[bytes]:
    """The lines of a chunk cut at a line end, as `read_lines` yields them."""
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return [line.rstrip(b"\r") for line in lines]


def decode_and_prepare(
    preparer: Preparer,
    fields: Fields,
    lines: list[bytes],
    known: Callable[[list[bytes], list[bytes]], set[int]] | None = None,
) -> Part:
    decoded: Decoded = decode_json_lines(lines, fields)
    return decoded, preparer.prepare([d for d in decoded if isinstance(d, Document)], known)


def _serve(
    conn: Connection,
    preparer: Preparer,
    fields: Fields,
    path: str | None,
    gc_threshold: tuple[int, int, int],
) -> None:
    """A worker's loop: a task in, its pickled result (or exception) out.

    Results leave through a sender thread, so the worker goes on to its next task
    while the main process is busy applying a batch and not yet reading.  It
    collects cycles as its parent does (a spawned process starts with Python's
    defaults, not the command's: see `cli.main.settle_gc`)."""
    gc.set_threshold(*gc_threshold)
    fd = os.open(path, os.O_RDONLY) if path is not None else -1
    outbox: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
    sender = threading.Thread(target=_send_all, args=(conn, outbox), daemon=True)
    sender.start()
    try:
        while (task := conn.recv()) is not None:
            try:
                data = os.pread(fd, task[1], task[0]) if path is not None else task
                out: Any = decode_and_prepare(preparer, fields, split_lines(data))
            except Exception as exc:  # reported to the main process, which raises it
                out = exc
            outbox.put(pickle.dumps(out, protocol=pickle.HIGHEST_PROTOCOL))
    except (KeyboardInterrupt, EOFError, BrokenPipeError):
        pass  # the main process is stopping; it reports what happened
    finally:
        outbox.put(None)
        sender.join(timeout=5)
        if fd >= 0:
            os.close(fd)


def _send_all(conn: Connection, outbox: queue.SimpleQueue[bytes | None]) -> None:
    with contextlib.suppress(OSError):  # the main process is gone or stopping
        while (message := outbox.get()) is not None:
            conn.send_bytes(message)


def _chunks(source: IO[bytes]) -> Iterator[tuple[int, bytes]]:
    """(offset, data) pieces of about TASK_BYTES, each ending at a line end (the last
    one at the end of the input)."""
    offset, carry = 0, b""
    while block := _read(source):
        data = carry + block
        cut = data.rfind(b"\n") + 1
        if cut:
            yield offset, data[:cut]
            offset += cut
        carry = data[cut:]
    if carry:
        yield offset, carry


def _read(source: IO[bytes]) -> bytes:
    try:
        return source.read(TASK_BYTES)
    except OSError as exc:
        from streamdedup.filemode.streams import read_error

        raise read_error(source, exc) from exc


def _file_path(source: IO[bytes]) -> str | None:
    """The path of `source` if it is a regular file read from its start."""
    name = getattr(source, "name", None)
    return name if isinstance(name, str) and file_size(source) is not None else None


class PreparePool:
    def __init__(self, workers: int, preparer: Preparer, fields: Fields, source: IO[bytes]):
        self.source = source
        import multiprocessing

        self.path = _file_path(source)
        ctx = multiprocessing.get_context("spawn")  # never fork an open LMDB environment
        self.conns: list[Connection] = []
        self.procs: list[Any] = []
        for _ in range(workers):
            mine, theirs = ctx.Pipe()
            proc = ctx.Process(
                target=_serve,
                args=(theirs, preparer, fields, self.path, gc.get_threshold()),
                daemon=True,
            )
            proc.start()
            theirs.close()
            self.conns.append(mine)
            self.procs.append(proc)

    def groups(self, batch_size: int, keep_lines: bool = False) -> Iterator[list[Lined]]:
        """Prepared parts in input order, grouped into batches of up to `batch_size`
        lines -- but a batch never waits for more while some are ready, so this
        process stays busy while the workers catch up.  `keep_lines`: each part with
        its input lines (this process read them to hand them out: cut again here)."""
        chunks = _chunks(self.source)
        depth = DEPTH if self.path is not None else 1
        pending: deque[tuple[Connection, bytes, int]] = deque()  # a task's, in input order
        load = dict.fromkeys(self.conns, 0)

        def submit(conn: Connection) -> None:
            while load[conn] < depth and (chunk := next(chunks, None)) is not None:
                offset, data = chunk
                conn.send((offset, len(data)) if self.path is not None else data)
                pending.append((conn, data if keep_lines else b"", len(data)))
                load[conn] += 1

        for conn in self.conns:
            submit(conn)
        group: list[Lined] = []
        lines = 0
        while pending:
            conn, data, size = pending[0]
            if group and not conn.poll():
                yield group
                group, lines = [], 0
                continue
            decoded, prepared = self._receive(conn)
            pending.popleft()
            load[conn] -= 1
            submit(conn)
            kept = split_lines(data) if keep_lines else []
            group.append(Lined(decoded, prepared, kept, size))
            lines += len(decoded)
            if lines >= batch_size:
                yield group
                group, lines = [], 0
        if group:
            yield group

    def _receive(self, conn: Connection) -> Part:
        try:
            out = pickle.loads(conn.recv_bytes())
        except (EOFError, OSError) as exc:
            raise StreamDedupError("a worker process died (out of memory?)") from exc
        if isinstance(out, BaseException):
            raise out
        part: Part = out
        return part

    def close(self) -> None:
        for conn in self.conns:
            with contextlib.suppress(OSError):
                conn.send(None)
        for proc in self.procs:
            proc.join(timeout=2)
            if proc.is_alive():
                proc.terminate()
        for conn in self.conns:
            conn.close()
