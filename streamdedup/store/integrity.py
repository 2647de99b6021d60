"""`stats --check`: an index read through and held to itself -- LMDB's offline
verifier over the file, then every key and value of every table read once, the
tables held to each other (ids to documents, tombstones to their counts and their
segments' ranges) and to the counters in `meta`.  In the store because it reads
the tables' values by their layout, which nothing above the store may know."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from streamdedup.config import IndexParams
from streamdedup.errors import IndexCorruptError
from streamdedup.models import TALLIES, Record, Verdict
from streamdedup.sketch.families import signature_width
from streamdedup.store.index import Index
from streamdedup.store.keys import DOCNO_BYTES, SEGMENT_BYTES, MetaKey, docno_of, tomb_of
from streamdedup.store.segment.registry import segments
from streamdedup.store.tables import Tables


def check_tables(t: Tables, params: IndexParams) -> tuple[int, list[str]]:
    """Read every key and value of every table once (LMDB checks each page it walks)
    and hold the tables to each other and to the counters in `meta`.  Returns the
    entries read and the problems found."""
    problems: list[str] = []
    entries = 0
    kinds: dict[str, int] = {}
    last_docno = -1
    sig_bytes = 2 * signature_width(params)
    tombs: dict[int, _Tombs] = {}
    for name in t.table_names():
        n = 0
        for key, value in t.items(name):
            n += 1
            if name == "docs":
                try:
                    rec = Record.unpack(value)
                except Exception as exc:
                    if len(problems) < 20:
                        problems.append(f"docs: record {docno_of(key)} unreadable ({exc})")
                    continue
                last_docno = max(last_docno, docno_of(key))
                for kind in Verdict.from_record(rec).kinds():
                    kinds[kind] = kinds.get(kind, 0) + 1
            elif name == "sigs" and len(value) != sig_bytes:
                problems.append(f"sigs: signature {docno_of(key)} has {len(value)} bytes")
            elif name == "ids" and len(value) != DOCNO_BYTES:
                problems.append(f"ids: an entry holds {len(value)} bytes, not a document number")
            elif name == "tombs":
                _check_tomb(key, value, tombs, problems)
        stated = t.count(name)
        if n != stated:
            problems.append(f"{name}: {n:,} entries read, LMDB counts {stated:,}")
        entries += n
    problems += _check_tomb_counts(t, tombs)
    counts = t.meta(MetaKey.COUNTS) or {}
    # once sealed segments exist the counters cover their documents too, which
    # this walk over the open index does not see
    for kind in () if segments(t) else TALLIES:
        if counts.get(kind, 0) != kinds.get(kind, 0):
            problems.append(
                f"meta: {counts.get(kind, 0):,} {kind} counted, {kinds.get(kind, 0):,} stored"
            )
    if t.count("ids") != t.count("docs"):
        problems.append(f"ids: {t.count('ids'):,} ids for {t.count('docs'):,} documents")
    next_docno = int(t.meta(MetaKey.NEXT_DOCNO) or 0)
    if last_docno >= next_docno:
        problems.append(f"meta: next document number {next_docno} is not past {last_docno}")
    return entries, problems


@dataclass
class _Tombs:
    """What `stats --check` saw of one segment's tombstones (keys come in docno order)."""

    found: int = 0
    kept: int = 0  # the count stored beside them
    low: int = -1
    high: int = -1


def _check_tomb(key: bytes, value: bytes, tombs: dict[int, _Tombs], problems: list[str]) -> None:
    """One `tombs` entry: a segment's count (2-byte key) or a tombstone (7 bytes)."""
    if len(key) == SEGMENT_BYTES and len(value) == 8:
        tombs.setdefault(int.from_bytes(key, "big"), _Tombs()).kept = int.from_bytes(value, "big")
    elif len(key) == SEGMENT_BYTES + DOCNO_BYTES and not value:
        number, docno = tomb_of(key)
        seen = tombs.setdefault(number, _Tombs())
        seen.found += 1
        seen.low = docno if seen.low < 0 else seen.low
        seen.high = docno
    elif len(problems) < 20:
        problems.append(f"tombs: an entry of {len(key)} + {len(value)} bytes is no tombstone")


def _check_tomb_counts(t: Tables, tombs: dict[int, _Tombs]) -> list[str]:
    """Each segment's tombstones against its kept count, its registry entry and its range."""
    problems: list[str] = []
    registered = {e.number: e for e in segments(t)}
    for number, seen in sorted(tombs.items()):
        if seen.found != seen.kept:
            problems.append(
                f"tombs: segment {number} has {seen.found:,} tombstones, "
                f"its count says {seen.kept:,}"
            )
        entry = registered.get(number)
        if entry is None:
            problems.append(f"tombs: tombstones for segment {number}, which is not registered")
        elif seen.found and not entry.first_docno <= seen.low <= seen.high < entry.next_docno:
            problems.append(
                f"tombs: segment {number} masks docnos {seen.low}..{seen.high}, outside its "
                f"{entry.first_docno}..{entry.next_docno - 1}"
            )
    return problems


def _structure(index: Index) -> tuple[list[str], str]:
    """LMDB's offline verifier (py-lmdb >= 3: every page reachable exactly once, keys
    in order, the free list).  It reads the file outside any transaction, so its
    answer counts only if no batch committed meanwhile.  Returns the problems and
    "verified", "changed" (not counted) or "unavailable" (an older py-lmdb)."""
    try:
        from lmdb.verify import verify
    except ImportError:
        return [], "unavailable"
    before = index.last_txnid()
    try:
        problems = list(verify(str(index.path)))  # type: ignore[no-untyped-call]
    except Exception as exc:
        problems = [f"data.mdb: {exc}"]
    if index.last_txnid() != before:
        return [], "changed"
    return problems, "verified"


def check_index(index: Index, params: IndexParams) -> dict[str, Any]:
    """`stats --check`: the file structure verified, every table read through and the
    counters compared; damage raises IndexCorruptError.  The offline verifier goes
    first: it only reads bytes, where LMDB walking a badly damaged file could crash."""

    def fail(problems: list[str]) -> IndexCorruptError:
        more = f"; and {len(problems) - 5} more" if len(problems) > 5 else ""
        return index.damaged(Exception("; ".join(problems[:5]) + more))

    structure, status = _structure(index)
    if structure:
        raise fail(structure)
    entries, problems = index.read(lambda t: check_tables(t, params))  # damage: raises
    if problems:
        raise fail(problems)
    sealed = bool(index.read(segments))
    return {"entries": entries, "structure": status, "counters": not sealed}
