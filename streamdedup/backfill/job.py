"""`streamdedup backfill` as a Spark job: JSON Lines in, the verdicts one `dedup`
run over the same files would write, record for record (rules.py says why each
stage may run in parallel).

Stages, each a shuffle by one key (all per-document work runs in the executors,
with the package's own functions, in tasks.py):

1. read: the inputs cut into byte ranges, decoded and prepared per range
   (reading.py): position, id, content hash, signature, band keys, stored text.
2. ids: grouped by id -> repeats (the stored verdict comes back) and the position
   at which a changed document forgets its predecessor (`rules.id_rule`).
3. contents: grouped by normalised content -> exact copies of the owner of the
   moment, and who owns the content's postings when (`rules.content_rule`).
4. buckets: postings grouped by band key -> for each document, the newest `cap`
   live postings of each bucket, with their signature estimates
   (`rules.bucket_pairs`; only those close enough to matter are kept).
5. verify: grouped by document -> its pick (`rules.choose`, exact Jaccard on the
   stored texts of the few candidates it may check).
6. clusters: the root of each `duplicate_of` chain by pointer jumping.
   (segment, with `--segment`: every table of the index `dedup` would leave, as
   sorted runs, into a sealed segment's `.partial` (segment.py); renamed into place
   after the verdicts.)
7. write: sorted by position, streamed to a temporary file beside the output,
   renamed over it at the end: a failed job (or task retried by Spark) leaves no
   partial output.
"""

from __future__ import annotations

import contextlib
import functools
import os
import stat
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from streamdedup.backfill import rules, tasks
from streamdedup.backfill.reading import SPLIT_BYTES, Split, count_lines, splits
from streamdedup.backfill.segment import build_segment
from streamdedup.config import EngineOptions, Fields, IndexParams
from streamdedup.engine.verify import exact_margin
from streamdedup.errors import (
    BackfillFailedError,
    InputOutputError,
    StreamDedupError,
)
from streamdedup.ops.summary import Summary
from streamdedup.store.segment.building import SegmentBuilder

if TYPE_CHECKING:
    from pyspark import RDD
    from pyspark.sql import SparkSession


@dataclass(frozen=True)
class Backfill:
    """What one backfill reads, writes and decides with."""

    inputs: tuple[str, ...]
    output: str
    params: IndexParams
    options: EngineOptions = field(default_factory=EngineOptions)
    fields: Fields = field(default_factory=Fields)
    split_bytes: int = SPLIT_BYTES
    segment: str | None = None  # also write the index as a sealed segment there


PARTITION_BYTES = 64 << 20


class Stages:
    """Progress by stage on stderr (`report`), with counts and seconds."""

    def __init__(self, report: Callable[[str], None]) -> None:
        self.report = report
        self.started = self.last = time.perf_counter()

    def done(self, stage: str, text: str) -> None:
        now = time.perf_counter()
        self.report(f"backfill: {stage}: {text} ({now - self.last:.1f}s)")
        self.last = now


def run_backfill(
    spark: SparkSession, job: Backfill, report: Callable[[str], None] = lambda _: None
) -> Summary:
    """Run the job; the verdicts are in `job.output` when it returns (and nowhere,
    not even in part, if it raises).  A failed Spark job raises `BackfillFailedError`."""
    try:
        return _run(spark, job, report)
    except StreamDedupError:
        raise
    except Exception as exc:
        if not type(exc).__module__.startswith(("py4j", "pyspark")):
            raise
        first = next((line for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
        raise BackfillFailedError(
            f"the Spark job failed; no verdicts were written ({first.strip()[:300]})"
        ) from exc


@dataclass(frozen=True)
class _Graph:
    """What every stage of one run is built with: the Spark context, the shuffles'
    width, the storage level of what is kept, the progress lines, the job."""

    sc: Any
    width: int
    keep: Any
    stages: Stages
    job: Backfill


def _run(spark: SparkSession, job: Backfill, report: Callable[[str], None]) -> Summary:
    from pyspark import StorageLevel

    sc = spark.sparkContext
    parts = splits(list(job.inputs), job.split_bytes)
    # shuffles as wide as the input: a partition per PARTITION_BYTES of input (at least
    # one per core), so a task's share stays the same however large the archive (the
    # bucket stage shuffles about 1.2 bytes per input byte on crawl-like text)
    size = sum(p.end - p.start for p in parts)
    width = max(sc.defaultParallelism, -(-size // PARTITION_BYTES), 1)
    g = _Graph(sc, width, StorageLevel.MEMORY_AND_DISK, Stages(report), job)
    rows, docs, rejected, total, n_rejected = _read_stage(g, parts)
    ided, replays, stored, n_replays = _ids_stage(g, docs, total - n_rejected)
    contents, exact, empty, queries, postings, n_queries = _contents_stage(g, stored)
    pairs, near, caps = _verify_stage(g, docs, queries, postings, n_queries)
    nodes, up, verdicts, lines = _clusters_stage(g, near, exact, empty)
    builder = None
    try:
        if job.segment is not None:
            builder = SegmentBuilder(job.segment)
            build_segment(
                builder,
                job.params,
                stored,
                contents.filter(lambda t: t[0] == "live"),
                verdicts,
                docs.map(lambda kv: (kv[0], kv[1][7])),
                total - n_rejected - n_replays,
                caps,
                width,
                lambda text: g.stages.done("segment", text),
            )
        summary = _write_verdicts(job, lines, replays, rejected, total, width, g.stages, spark)
        if builder is not None:
            builder.commit()
    except BaseException:
        if builder is not None:
            builder.abort()
        raise
    for rdd in (rows, ided, contents, pairs, near, nodes, up, verdicts, lines):
        rdd.unpersist()
    return summary


def _read_stage(g: _Graph, parts: list[Split]) -> tuple[Any, Any, Any, int, int]:
    """Stage 1: lines counted per range (each range's first document number), then
    read and prepared; (rows, documents, rejected lines, lines, rejected count)."""
    job = g.job
    counts = g.sc.parallelize(parts, max(1, len(parts))).map(count_lines).collect() if parts else []
    ranges: list[tuple[Split, int, int]] = []
    total = 0
    in_input: dict[int, int] = {}
    for split, n in zip(parts, counts, strict=True):
        ranges.append((split, total, in_input.get(split.input, 0)))
        total += n
        in_input[split.input] = in_input.get(split.input, 0) + n
    read = functools.partial(
        tasks.read_task, params=job.params, fields=job.fields, names=len(job.inputs) > 1
    )
    rows = g.sc.parallelize(ranges, max(1, len(ranges))).flatMap(read)
    rows.persist(g.keep)
    docs = rows.filter(lambda kv: kv[1][0] == "D")
    rejected = rows.filter(lambda kv: kv[1][0] == "R").map(
        lambda kv: (kv[0], (kv[1][1], "R:" + kv[1][2]))
    )
    n_rejected = rejected.count()
    g.stages.done("read", f"{total:,} lines in {len(parts)} ranges, {n_rejected:,} rejected")
    return rows, docs, rejected, total, n_rejected


def _ids_stage(g: _Graph, docs: Any, decoded: int) -> tuple[Any, Any, Any, int]:
    """Stage 2: grouped by id; (the stage's output, repeats, stored documents, repeats'
    count)."""
    ided = docs.map(tasks.by_id).groupByKey(g.width).flatMap(tasks.id_stage).persist(g.keep)
    replays = ided.filter(lambda t: t[0] == "replay").map(lambda t: (t[2], t[1]))
    stored = ided.filter(lambda t: t[0] == "stored")
    n_replays = replays.count()
    g.stages.done("ids", f"{decoded - n_replays:,} stored, {n_replays:,} repeats")
    return ided, replays, stored, n_replays


def _contents_stage(g: _Graph, stored: Any) -> tuple[Any, Any, Any, Any, Any, int]:
    """Stage 3: grouped by content; (the stage's output, exact copies, empty documents,
    documents to check, postings, how many to check)."""
    width = g.width
    empty = stored.filter(lambda t: t[4] == 0).map(lambda t: (t[1], (t[5], "empty", None, None)))
    contents = (
        stored.filter(lambda t: t[4] > 0)
        .map(lambda t: (t[3], (t[1], t[2], t[5], t[6], t[7])))
        .groupByKey(width)
        .flatMap(functools.partial(tasks.content_stage, live=g.job.segment is not None))
        .persist(g.keep)
    )
    exact = contents.filter(lambda t: t[0] == "exact").map(
        lambda t: (t[1], ((t[4], "exact", t[3], None), t[2]))
    )
    queries = contents.filter(lambda t: t[0] == "query").map(lambda t: (t[1], t[2]))
    postings = contents.filter(lambda t: t[0] == "posting")
    n_queries, n_exact = queries.count(), exact.count()
    g.stages.done("contents", f"{n_queries:,} to check, {n_exact:,} exact copies")
    return contents, exact, empty, queries, postings, n_queries


def _verify_stage(
    g: _Graph, docs: Any, queries: Any, postings: Any, n_queries: int
) -> tuple[Any, Any, dict[str, int]]:
    """Stages 4 and 5: candidates from the buckets, then each document's pick; (the
    bucket pairs, each query's node, the searches the caps cut)."""
    params, options, width, keep = g.job.params, g.job.options, g.width, g.keep
    exact_mode = params.verify == "exact"
    margin = exact_margin(params.threshold, params.num_perm)
    floor = params.threshold - margin if exact_mode else params.threshold
    bucket = functools.partial(tasks.bucket_stage, cap=options.max_bucket_candidates, floor=floor)
    pairs = postings.flatMap(tasks.explode).groupByKey(width).flatMap(bucket).persist(keep)
    n_bucket_capped = pairs.filter(lambda kv: kv[1] is None).keys().distinct().count()
    grouped = pairs.filter(lambda kv: kv[1] is not None).groupByKey(width).mapValues(list)
    if exact_mode:
        picks = _exact_picks(g, docs, grouped, margin)
    else:
        picks = grouped.map(functools.partial(tasks.decide_signature, threshold=params.threshold))
    # (document, (pick or None, whether --max-exact-checks left a near candidate))
    picks.persist(keep)
    n_exact_capped = picks.filter(lambda kv: kv[1][1]).count()
    near = (
        queries.leftOuterJoin(
            picks.filter(lambda kv: kv[1][0] is not None).mapValues(lambda v: v[0]), width
        )
        .map(
            lambda kv: (
                kv[0],
                ((kv[1][0], "unique", None, None), -1)
                if kv[1][1] is None
                else ((kv[1][0], "near", kv[1][1][2], kv[1][1][0]), kv[1][1][1]),
            )
        )
        .persist(keep)
    )
    n_near = near.filter(lambda kv: kv[1][0][1] == "near").count()
    picks.unpersist()
    caps = {"bucket": n_bucket_capped, "exact": n_exact_capped}
    capped = (
        ""
        if not any(caps.values())
        else f" ({n_bucket_capped:,} searches cut by --max-bucket-candidates, "
        f"{n_exact_capped:,} by --max-exact-checks)"
    )
    g.stages.done("verify", f"{n_near:,} near duplicates among {n_queries:,} checked{capped}")
    return pairs, near, caps


def _exact_picks(g: _Graph, docs: Any, grouped: Any, margin: float) -> Any:
    """Stage 5 with exact checks: the texts of the candidates each document may check
    moved to it (one join for both sides), then its pick."""
    params, options, width = g.job.params, g.job.options, g.width
    need = grouped.mapValues(
        functools.partial(
            rules.needed,
            threshold=params.threshold,
            margin=margin,
            max_checks=options.max_exact_checks,
        )
    ).filter(lambda kv: bool(kv[1]))
    texts = docs.map(lambda kv: (kv[0], kv[1][7]))
    # one join for both sides: (text's position, (document, is its own))
    wanted = need.flatMap(tasks.text_requests)
    got = wanted.join(texts, width).map(lambda kv: (kv[1][0][0], (kv[0], kv[1][0][1], kv[1][1])))
    decide = functools.partial(
        tasks.decide_exact, params=params, margin=margin, max_checks=options.max_exact_checks
    )
    return need.cogroup(got, width).map(decide)


def _clusters_stage(g: _Graph, near: Any, exact: Any, empty: Any) -> tuple[Any, Any, Any, Any]:
    """Stage 6: every document's node, the root of each `duplicate_of` chain by pointer
    jumping over the duplicates only (a unique document is a root), the verdicts and
    their lines."""
    width, keep = g.width, g.keep
    nodes = near.union(exact).union(empty.map(lambda kv: (kv[0], (kv[1], -1)))).persist(keep)
    up = nodes.filter(lambda kv: kv[1][1] >= 0).mapValues(lambda v: v[1]).persist(keep)
    rounds = 0
    while True:
        rounds += 1
        step = up.map(lambda kv: (kv[1], kv[0])).leftOuterJoin(up, width)
        step = step.map(tasks.jump).persist(keep)
        moved = step.filter(lambda kv: kv[1][1]).count()
        up.unpersist()
        up = step.mapValues(lambda v: v[0]).persist(keep)
        if moved == 0:
            break
    ids = nodes.map(lambda kv: (kv[0], kv[1][0][0]))
    cluster = up.map(lambda kv: (kv[1], kv[0])).join(ids, width).map(lambda kv: kv[1])
    verdicts = nodes.mapValues(lambda v: v[0]).leftOuterJoin(cluster, width)
    verdicts = verdicts.map(tasks.verdict_of).persist(keep)
    lines = verdicts.map(tasks.verdict_line).persist(keep)
    g.stages.done("clusters", f"{rounds} rounds of pointer jumping")
    return nodes, up, verdicts, lines


def _write_verdicts(
    job: Backfill,
    lines: RDD[tuple[int, tuple[bytes, str]]],
    replays: RDD[tuple[int, int]],
    rejected: RDD[tuple[int, tuple[bytes, str]]],
    total: int,
    width: int,
    stages: Stages,
    spark: SparkSession,
) -> Summary:
    """The verdict file: every record in input order, renamed into place whole."""
    repeated = replays.join(lines, width).map(lambda kv: kv[1])
    everything: RDD[tuple[int, tuple[bytes, str]]] = (
        lines.union(repeated).union(rejected).sortByKey(numPartitions=width)
    )
    summary = _write(everything, job.output, total)
    summary.seconds = time.perf_counter() - stages.started
    shuffled = shuffle_bytes(spark)
    note = "" if shuffled is None else f", {shuffled / 1e6:,.1f} MB shuffled in all"
    stages.done("write", f"{summary.lines:,} records to {job.output}{note}")
    return summary


def shuffle_bytes(spark: SparkSession) -> int | None:
    """Bytes the application's stages wrote to shuffles so far, from Spark's own
    status store (what its web UI shows); None where this Spark does not answer."""
    try:
        sc: Any = spark.sparkContext
        gw = sc._gateway
        store = sc._jsc.sc().statusStore()
        listed = store.stageList(None, False, False, gw.new_array(gw.jvm.double, 0), None)
        return sum(int(listed.apply(i).shuffleWriteBytes()) for i in range(listed.size()))
    except Exception:  # a private API: a figure for the log, never a failure
        return None


def _write(records: RDD[tuple[int, tuple[bytes, str]]], output: str, expected: int) -> Summary:
    """Stream the records in order to a temporary file in the output's directory,
    then rename it over the output (atomic on one filesystem)."""
    summary = Summary()
    directory = os.path.dirname(os.path.abspath(output))
    try:
        fd, tmp = tempfile.mkstemp(prefix=".backfill-", suffix=".tmp", dir=directory)
    except OSError as exc:
        raise InputOutputError(
            f"cannot write the verdicts to {output}: {exc.strerror or exc}"
        ) from exc
    try:
        os.fchmod(fd, output_mode(output))
        with os.fdopen(fd, "wb") as f:
            for _, (line, kind) in records.toLocalIterator():
                f.write(line)
                f.write(b"\n")
                _count(summary, kind)
            f.flush()
            os.fsync(f.fileno())
        if summary.lines != expected:  # a lost or doubled record: never silently
            raise AssertionError(f"{summary.lines} records for {expected} input lines")
        os.replace(tmp, output)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return summary


def output_mode(output: str) -> int:
    """The permissions the verdict file gets, as `dedup`'s output would have them:
    an existing file keeps its own, a new one 0666 less the umask.  (The temporary
    file it is written to is made 0600 by `mkstemp`, which the rename kept: every
    backfill's output was readable by its owner only.)"""
    try:
        return stat.S_IMODE(os.stat(output).st_mode)
    except OSError:
        return 0o666 & ~current_umask()


def current_umask() -> int:
    """The process's umask, read without changing it where Linux shows it
    (/proc/self/status); elsewhere set and put back at once."""
    with contextlib.suppress(OSError, ValueError), open("/proc/self/status") as f:
        for line in f:
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _count(summary: Summary, kind: str) -> None:
    summary.lines += 1
    if kind.startswith("R:"):
        summary.rejected += 1
        reason = kind[2:]
        summary.reasons[reason] = summary.reasons.get(reason, 0) + 1
    elif kind == "unique":
        summary.unique += 1
    elif kind == "empty":
        summary.unique += 1
        summary.empty += 1
    elif kind == "near":
        summary.duplicates += 1
    else:
        summary.duplicates += 1
        summary.exact += 1
