"""The backfill's per-group rules and its input ranges, without Spark."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from streamdedup.backfill import rules
from streamdedup.backfill.reading import lines, splits
from streamdedup.filemode.streams import read_lines

NEVER = rules.NEVER


def test_id_rule_repeats_and_replacements() -> None:
    got = rules.id_rule([(7, b"b"), (1, b"a"), (3, b"a"), (9, b"a"), (12, b"a")])
    # 3 repeats 1; 7 replaces 1 (changed text); 9 replaces 7; 12 repeats 9
    assert got == [(1, -1, 7), (3, 1, NEVER), (7, -1, 9), (9, -1, NEVER), (12, 9, NEVER)]


def test_content_rule_owner_copies_and_heirs() -> None:
    # 2 owns; 5 and 8 are copies; 2 is replaced at 10 (its id changed text): 5, the
    # oldest live copy, takes over from 10; 5 replaced at 12, 8 takes over; 8 replaced
    # at 15: none left, so 20 owns the content again
    owners, postings = rules.content_rule([(2, 10), (5, 12), (8, 15), (20, NEVER)])
    assert owners == [(2, -1), (5, 2), (8, 2), (20, -1)]
    assert postings == [
        (2, 3, 9, True),
        (5, 10, 11, False),
        (8, 12, 14, False),
        (20, 21, NEVER, True),
    ]


def test_content_rule_a_copy_forgotten_before_the_owner() -> None:
    owners, postings = rules.content_rule([(1, NEVER), (4, 6), (9, NEVER)])
    assert owners == [(1, -1), (4, 1), (9, 1)]
    assert postings == [(1, 2, NEVER, True)]


def _posting(
    docno: int, lo: int | None = None, hi: int = NEVER, query: bool = True
) -> rules.Posting:
    sig = bytes(2 * 8)  # every signature equal: every estimate 1.0
    return (docno, docno + 1 if lo is None else lo, hi, query, (sig, f"d{docno}"))


def _pairs(postings: list[rules.Posting], cap: int) -> set[tuple[int, int]]:
    keep = lambda est: est >= 0.0  # noqa: E731
    return {(d, c) for d, c, _, _ in rules.bucket_pairs(postings, cap, keep)}


def test_bucket_windows_are_the_newest_live_postings() -> None:
    plain = [_posting(d) for d in (1, 4, 6, 9)]
    assert _pairs(plain, 2) == {(4, 1), (6, 1), (6, 4), (9, 4), (9, 6)}
    # 4 forgotten at 7: document 9 looks past it, to 1
    forgotten = [_posting(1), _posting(4, hi=6), _posting(6), _posting(9)]
    assert _pairs(forgotten, 2) == {(4, 1), (6, 1), (6, 4), (9, 6), (9, 1)}


@given(st.lists(st.binary(max_size=12), max_size=30), st.integers(1, 40), st.booleans())
def test_ranges_read_every_line_once(chunks: list[bytes], size: int, last_newline: bool) -> None:
    """Cut anywhere, the ranges' lines are the lines `dedup` reads, in order (lines
    with carriage returns, empty lines, a last line with or without its newline)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "in.jsonl"
        data = b"\n".join(chunks) + (b"\n" if chunks and last_newline else b"")
        path.write_bytes(data)
        got = [line for s in splits([str(path)], size) for line in lines(s)]
        with path.open("rb") as f:
            want = [line for batch in read_lines(f, 7) for line in batch]
        assert got == want


def test_a_document_replaced_by_the_next_one_still_queries() -> None:
    """Replaced at once, its stretch is empty (nobody's candidate), yet it asked its
    buckets when it came: the posting stays, as a query."""
    _, postings = rules.content_rule([(3, 4)])
    assert postings == [(3, 4, 3, True)]
    pairs = _pairs([_posting(1), _posting(3, hi=3)], 5)
    assert pairs == {(3, 1)}


@st.composite
def buckets(draw: st.DrawFn) -> list[rules.Posting]:
    docnos = draw(st.lists(st.integers(0, 60), unique=True, min_size=1, max_size=14))
    out = []
    for d in sorted(docnos):
        query = draw(st.booleans())
        lo = d + 1 if query else draw(st.integers(d + 1, 70))
        hi = draw(st.one_of(st.just(NEVER), st.integers(lo - 1, 80)))
        out.append(_posting(d, lo, hi, query))
    return out


@given(buckets(), st.integers(1, 5))
def test_bucket_windows_and_caps_are_the_newest_live_postings(
    postings: list[rules.Posting], cap: int
) -> None:
    """Against the definition, by brute force: a query's candidates are the newest
    `cap` postings live at its position; its search is cut (the engine's
    `Tables.capped`) when more than `cap` are live there."""
    cut: list[int] = []
    keep = lambda est: est >= 0.0  # noqa: E731
    got = {(d, c) for d, c, _, _ in rules.bucket_pairs(postings, cap, keep, cut.append)}
    want: set[tuple[int, int]] = set()
    want_cut: set[int] = set()
    for q in postings:
        if not q[3]:
            continue
        live = sorted(p[0] for p in postings if p[0] < q[0] and p[1] <= q[0] <= p[2])
        want |= {(q[0], c) for c in live[-cap:]}
        if len(live) > cap:
            want_cut.add(q[0])
    assert got == want
    assert set(cut) == want_cut and len(cut) == len(want_cut)
