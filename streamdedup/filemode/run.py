"""`streamdedup dedup`: JSON Lines in, one verdict line per input line out.

Per batch: decode lines -> prepare (here or in worker processes) -> check and insert
in one write transaction -> commit -> write and flush the batch's output lines.
Committing before writing means an interrupted run (Ctrl-C, kill -9) leaves an index
that holds every document whose verdict reached OUT; running the same input again
gives those documents their stored verdicts back."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterable, Iterator
from typing import IO, TYPE_CHECKING, Any

import orjson

from streamdedup.config import Fields
from streamdedup.engine.deduplicator import Deduplicator
from streamdedup.filemode.pool import Lined, PreparePool, decode_and_prepare
from streamdedup.inputs.decode import decode_json_lines
from streamdedup.models import Document, Rejected, Verdict, output_record

if TYPE_CHECKING:  # (the WARC reader is loaded by a run that reads an archive)
    from streamdedup.inputs.warc import HttpStatuses, Skipped, WarcId, WarcRef

from streamdedup.filemode.streams import deliver, read_lines
from streamdedup.ops.progress import InputProgress
from streamdedup.ops.summary import Summary
from streamdedup.store.keys import id_key


def run_dedup(
    dedup: Deduplicator,
    source: IO[bytes],
    sink: IO[bytes],
    fields: Fields,
    *,
    batch_size: int = 8000,
    workers: int = 0,
    progress: InputProgress | None = None,
    summary: Summary | None = None,
    where: dict[str, Any] | None = None,
    keep: IO[bytes] | None = None,
    dry: bool = False,
    kept_clusters: set[bytes] | None = None,
) -> Summary:
    """Process all of `source`; `progress` is the bar, or None.  With
    several inputs, one `summary` goes through all of them (its time included), and
    `where` (the input's name) is added to each error record.  `keep`: where the
    input lines of the `unique` documents go (`--keep`), each batch's after its
    verdicts; `kept_clusters`: one line a cluster instead (`kept_lines`), the set
    shared by every input of the run.  `dry`: each document only queried
    (`Deduplicator.query`)."""
    summary = summary if summary is not None else Summary()
    first = summary.lines
    started = time.perf_counter() - summary.seconds
    pool = None
    groups: Iterable[list[Lined]]
    if dry:  # (decoded here, each document prepared alone by `query`)
        lines = read_lines(source, batch_size)
        groups = ([Lined(decode_json_lines(b, fields), None, b, _size(b))] for b in lines)
    elif workers > 0:
        pool = PreparePool(workers, dedup.preparer, fields, source)
        groups = pool.groups(batch_size, keep_lines=keep is not None)
    else:
        tasks = read_lines(source, batch_size)
        kept = keep is not None  # (else the lines go once decoded: a batch ahead holds none)
        groups = (
            [
                Lined(
                    *decode_and_prepare(dedup.preparer, fields, b, dedup.known),
                    b if kept else [],
                    _size(b),
                )
            ]
            for b in tasks
        )
    try:
        for group in _ahead(groups, dedup):
            count = sum(len(part.decoded) for part in group)  # lines, rejected ones too
            verdicts = _decide(dedup, group)  # committed before writing
            records: list[dict[str, Any]]
            if len(verdicts) == count:  # no rejected line: all at once
                summary.add_verdicts(verdicts)
                records = [output_record(v) for v in verdicts]
            else:
                records = []
                each = iter(verdicts)
                for item in itertools.chain.from_iterable(part.decoded for part in group):
                    if isinstance(item, Rejected):  # an error record says where its line was
                        summary.add(item)
                        line = {"line": summary.lines - first, **(where or {})}
                        records.append(output_record(item, **line))
                    else:
                        verdict = next(each)
                        summary.add(verdict)
                        records.append(output_record(verdict))
            if progress is not None:
                progress.read(sum(part.size for part in group))
            _write_batch(sink, json_lines(records), summary, progress, count, started)
            if keep is not None:
                data = kept_lines(group, verdicts, kept_clusters)
                deliver(keep, data, summary.kept, "kept input lines")
                summary.kept += data.count(b"\n")
    finally:
        summary.seconds = time.perf_counter() - started
        if pool is not None:
            pool.close()
    return summary


def _size(lines: list[bytes]) -> int:
    """The bytes of lines in the input, each with its line feed."""
    return sum(map(len, lines)) + len(lines)


def _decide(dedup: Deduplicator, group: list[Lined]) -> list[Verdict]:
    """A group's verdicts: checked and inserted (committed before they are written),
    or, a dry run's group (not prepared), queried."""
    if any(part.prepared is None for part in group):
        docs = [d for part in group for d in part.decoded if isinstance(d, Document)]
        return dedup.query(docs)
    return dedup.apply([part.prepared for part in group if part.prepared is not None])


def kept_lines(
    group: list[Lined], verdicts: list[Verdict], clusters: set[bytes] | None = None
) -> bytes:
    """The input lines of a batch's `unique` documents, in order, each ended by a
    line feed (as read: without its line end, a CR before it included).  `clusters`
    (`--keep-per-cluster`): instead, the first document of each cluster the run has
    not kept yet -- a cluster first seen in an earlier run is kept once too -- and
    the set of those kept, updated (a cluster's first document comes before its
    members, so it is the one kept when the run has it)."""
    each = iter(verdicts)
    out: list[bytes] = []
    for part in group:
        for item, line in zip(part.decoded, part.lines, strict=True):
            if not isinstance(item, Document):
                continue
            v = next(each)
            if clusters is None:
                if v.verdict == "unique":
                    out.append(line + b"\n")
                continue
            key = id_key(v.cluster)  # (an id's type kept: "1" is not 1)
            if key not in clusters:
                clusters.add(key)
                out.append(line + b"\n")
    return b"".join(out)


def _ahead(groups: Iterable[list[Lined]], dedup: Deduplicator) -> Iterator[list[Lined]]:
    """The groups, each one's questions to remote sealed segments sent before the one
    before it is decided (`Deduplicator.ask_ahead`): the answers travel meanwhile."""
    it = iter(groups)
    current = next(it, None)
    if current is not None:  # the first batch's answers travel while the second is prepared
        dedup.ask_ahead([part.prepared for part in current if part.prepared is not None])
    while current is not None:
        following = next(it, None)
        if following is not None:
            dedup.ask_ahead([part.prepared for part in following if part.prepared is not None])
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
    progress: InputProgress | None,
    count: int,
    started: float,
) -> None:
    """One batch's output lines written (after its commit), the progress moved on."""
    deliver(sink, data, summary.lines - count)
    summary.seconds = time.perf_counter() - started
    if progress is not None:  # (the postfix first: `update` draws the bar with it)
        progress.set_postfix(dup=summary.duplicates, rejected=summary.rejected, refresh=False)
        progress.update(count)


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
    progress: InputProgress | None = None,
    summary: Summary | None = None,
    on_skip: Callable[[Skipped, int], None] | None = None,
    dry: bool = False,
) -> Summary:
    """Process a WARC archive: its HTML response records, in order, each page's text
    extracted as it is read (`inputs.warc`); the documents are checked and inserted
    in batches of `batch_size` records, like lines.  Every output record carries the
    page's `url` and `warc_record_id`; an error record also its `record` number in
    the archive.  Skipped records (`on_skip(record, number)`) get no output line.
    `statuses`: which HTTP responses are pages (`inputs.warc.read_pages`);
    `record_ids`: the record ids read so far in this run (`--warc-id record-id`),
    one set for every archive of the run, so that a repeat is an error record.
    `dry`: each page only queried (`Deduplicator.query`)."""
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
        verdicts = iter(dedup.check_batch(docs, insert=not dry))  # committed before writing
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
