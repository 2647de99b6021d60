"""The backfill's index as a sealed segment (`backfill --segment DIR`): every table
the index of one `dedup` run over the same inputs would hold, computed on Spark as
sorted runs and written by the driver into a fresh LMDB (`store.segment.
SegmentBuilder`: scratch file, compacted copy, manifest with checksum, rename) --
not replayed insert by insert.

What the index holds at the end, by the rules the verdicts already follow:

* every stored document (not rejected, not a repeat of its id's live document)
  numbered in input order from 0: its document number is its rank among them
  (`dedup`'s `next_docno` counts exactly those);
* of those, the live ones (not replaced by a later document of the same id): `ids`
  and `docs` (the record of its verdict, `Record.of`);
* of each content, the oldest live document owns it (`rules.live_content`):
  `content`, its signature (`sigs`), stored text (`texts`) and postings; the other
  live ones are listed in `copies` (a copy that took over from a replaced owner
  holds the owner's identical signature, text and postings);
* documents without shingles: a record only;
* `meta`: the parameters, `next_docno`, the verdict tallies of the live documents,
  the stream clock (0: files carry no time).

Postings are grouped by the key's partition (its top byte, postings.py), sorted by
(key, document number) with numpy and stored as one run per partition.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from streamdedup import failpoints
from streamdedup.backfill import rules
from streamdedup.config import IndexParams
from streamdedup.models import Record, Verdict
from streamdedup.store.keys import MetaKey, id_key, native_keys
from streamdedup.store.postings import partition_of, sorted_run, unpack
from streamdedup.store.rows import document_rows
from streamdedup.store.segment.building import SegmentBuilder

if TYPE_CHECKING:
    from pyspark import RDD

# Element layouts of the job's RDDs this stage reads (job.py):
#   stored:   ("stored", pos, forgotten_at, content, shingles, id, signature, band keys)
#   live:     ("live", pos, owns its content)       -- from the contents stage
#   verdicts: (pos, (Verdict, kind))
#   texts:    (pos, stored text or None)


def _rows(kv: tuple[int, Any]) -> Iterator[tuple[tuple[str, bytes], bytes]]:
    """One live document's rows, ((table, key), value): `store.rows.document_rows`,
    what `Tables.put_document` (and `adopt`, for a copy that took its owner's place)
    leaves in the engine's index."""
    _, ((((content, shingles, doc_id, sig, _), docno), (verdict, _)), flag) = kv
    record = Record.of(verdict, content, None, shingles)
    owner, text = (None, None) if flag is None else flag  # no shingles: no content
    for table, (key, value) in document_rows(docno, id_key(doc_id), record, sig, text, owner):
        yield (table, key), value


def _owner_postings(kv: tuple[int, Any]) -> Iterator[tuple[int, bytes]]:
    _, ((((_, _, _, _, keys), docno), _), flag) = kv
    if flag is not None and flag[0]:
        yield docno, keys


def _by_partition(docs: Iterable[tuple[int, bytes]]) -> Iterator[tuple[int, tuple[bytes, bytes]]]:
    """A Spark partition's (docno, band keys) as (key partition, (keys, docnos)):
    one numpy pass, one element per key partition present."""
    failpoints.reach("backfill-segment")
    got = list(docs)
    if not got:
        return
    keys = native_keys(b"".join(k for _, k in got))
    docnos = np.repeat(
        np.array([d for d, _ in got], dtype=np.uint64), [len(k) // 8 for _, k in got]
    )
    parts = partition_of(keys)
    order = np.argsort(parts, kind="stable")
    keys, docnos, parts = keys[order], docnos[order], parts[order]
    edges = np.flatnonzero(np.r_[True, parts[1:] != parts[:-1], True])
    for a, b in itertools.pairwise(edges.tolist()):
        yield int(parts[a]), (keys[a:b].tobytes(), docnos[a:b].tobytes())


def _run(kv: tuple[int, Iterable[tuple[bytes, bytes]]]) -> tuple[int, bytes]:
    """A key partition's postings as its one run, ordered by (key, docno)."""
    part, pieces = kv
    got = list(pieces)
    keys = np.frombuffer(b"".join(k for k, _ in got), dtype=np.uint64)
    docnos = np.frombuffer(b"".join(d for _, d in got), dtype=np.uint64)
    return part, sorted_run(keys, docnos)


def _kinds(kv: tuple[int, Any]) -> tuple[str, ...]:
    verdict: Verdict = kv[1][0][1][0]
    return verdict.kinds()


def build_segment(
    builder: SegmentBuilder,
    params: IndexParams,
    stored: RDD[tuple[Any, ...]],
    live: RDD[tuple[Any, ...]],
    verdicts: RDD[tuple[int, tuple[Verdict, str]]],
    texts: RDD[tuple[int, bytes | None]],
    n_stored: int,
    caps: dict[str, int],
    width: int,
    report: Callable[[str], None],
) -> dict[str, int]:
    """Write every table into `builder` and finish it (the caller commits it once
    the verdicts are in place, or aborts it); returns rows written per table.
    `n_stored`: the documents stored (the next document number); `caps`: how many
    searches each cap cut short ({"bucket": n, "exact": n})."""
    from pyspark import StorageLevel

    docnos = stored.map(lambda t: t[1]).sortBy(lambda p: p, numPartitions=width).zipWithIndex()
    alive = stored.filter(lambda t: t[2] == rules.NEVER).map(
        lambda t: (t[1], (t[3], t[4], t[5], t[6], t[7]))
    )
    flags = live.map(lambda t: (t[1], t[2]))
    owned = flags.filter(lambda kv: kv[1]).join(texts, width).mapValues(lambda v: (True, v[1]))
    copies = flags.filter(lambda kv: not kv[1]).mapValues(lambda _: (False, None))
    joined = (
        alive.join(docnos, width)
        .join(verdicts, width)
        .leftOuterJoin(owned.union(copies), width)
        .persist(StorageLevel.MEMORY_AND_DISK)
    )
    try:
        written: dict[str, int] = {}
        rows: RDD[tuple[tuple[str, bytes], bytes]] = joined.flatMap(_rows).sortByKey(
            numPartitions=width
        )
        for table, group in itertools.groupby(rows.toLocalIterator(), key=lambda r: r[0][0]):
            written[table] = builder.put_sorted(table, ((k, v) for (_, k), v in group))
        runs: RDD[tuple[int, bytes]] = (
            joined.flatMap(_owner_postings)
            .mapPartitions(_by_partition)
            .groupByKey(width)
            .map(_run)
            .sortByKey(numPartitions=width)
        )
        written["postings"] = builder.put_runs(
            (part, *unpack(raw)) for part, raw in runs.toLocalIterator()
        )
        counts = Counter(joined.flatMap(_kinds).countByValue())
    finally:
        joined.unpersist()
    # `dedup` leaves a tally at 0 once its last document is replaced; a fresh index
    # never had one: tallies compare as counts, zeros left out
    meta: dict[str, Any] = {
        MetaKey.PARAMS: params.to_record(),
        MetaKey.NEXT_DOCNO: n_stored,
        MetaKey.COUNTS: {k: v for k, v in counts.items() if v},
        MetaKey.CLOCK: 0,
    }
    if any(caps.values()):  # documents whose search a cap cut short, as `dedup` keeps them
        meta[MetaKey.CAPS] = caps
    builder.set_meta(meta)
    manifest = builder.finish()
    report(
        f"{manifest.documents:,} documents ({written.get('copies', 0):,} exact copies), "
        f"{written['postings']:,} postings, {manifest.bytes / 1e6:,.1f} MB "
        f"to {builder.partial}"
    )
    return written
