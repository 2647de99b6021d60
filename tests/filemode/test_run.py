"""Verdict lines and run summaries of `dedup` file mode, built a batch at a time,
against the record-at-a-time definitions they replace."""

from __future__ import annotations

import io
from pathlib import Path

import orjson
from hypothesis import example, given
from hypothesis import strategies as st

from streamdedup.config import Fields
from streamdedup.engine.deduplicator import Deduplicator
from streamdedup.filemode.run import json_lines, run_dedup
from streamdedup.filemode.streams import read_lines
from streamdedup.models import Rejected, Verdict, output_record
from streamdedup.ops.summary import Summary

ids = st.one_of(
    st.integers(-(2**63), 2**63 - 1),
    st.text(min_size=1, max_size=30),
    st.sampled_from(['},{"id":', '"},{"id":1}', "\\", '\\"', "a\nb", "\u2028", "\ud7ff"]),
)
verdicts = st.builds(
    Verdict,
    id=ids,
    verdict=st.sampled_from(["unique", "duplicate"]),
    duplicate_of=st.none() | ids,
    cluster=ids,
    similarity=st.none() | st.floats(0, 1),
    exact=st.booleans(),
    reason=st.none() | st.sampled_from(["empty", 'x},{"id":y']),
)


def _one_at_a_time(records: list[dict[str, object]]) -> bytes:
    return b"".join(orjson.dumps(r) + b"\n" for r in records)


@given(st.lists(verdicts, max_size=20), st.data())
@example([], None)
def test_json_lines_are_each_records_dumps(vs: list[Verdict], data: st.DataObject | None) -> None:
    """Ids and strings that spell the boundary between two records, quotes, escapes
    and line separators: still one line per record, each orjson's own bytes."""
    records = [output_record(v) for v in vs]
    if data is not None and vs:  # error records, with where their line was
        at = data.draw(st.integers(0, len(vs)))
        reject = Rejected("malformed", 'bad "},{"id": here', "x")
        records.insert(at, output_record(reject, line=at + 1, input='in},{"id":.jsonl'))
    got = json_lines(records)
    assert got == _one_at_a_time(records)
    assert [orjson.loads(line) for line in got.splitlines()] == records


def test_json_lines_of_nested_records_fall_back_to_one_call_each() -> None:
    """A nested object starting with "id" also matches the boundary: caught by the
    line count, and written record by record."""
    records = [{"id": 1, "x": [{"id": 2}, {"id": 3}]}, {"id": 4}]
    assert json_lines(records) == _one_at_a_time(records)


@given(st.lists(verdicts, max_size=30))
def test_summary_of_a_batch_is_the_sum_of_its_verdicts(vs: list[Verdict]) -> None:
    one, batch = Summary(), Summary()
    for v in vs:
        one.add(v)
    batch.add_verdicts(vs)
    assert one == batch


def test_dedup_writes_the_same_lines_with_and_without_rejected_lines(tmp_path: Path) -> None:
    """The all-verdicts batch path and the mixed one: the same verdict lines, the
    rejected ones in their places, and the same counts."""
    docs = [{"id": f"d{i}", "text": f"some words here number {i % 7} and more"} for i in range(40)]
    good = b"".join(orjson.dumps(d) + b"\n" for d in docs)
    mixed = good.replace(b'{"id":"d20"', b'{"id":"d20",]', 1) + b"not json\n"
    outs = []
    for name, src in (("good", good), ("mixed", mixed)):
        sink = io.BytesIO()
        with Deduplicator(tmp_path / name) as dedup:
            summary = run_dedup(dedup, io.BytesIO(src), sink, Fields(), batch_size=16)
        outs.append((sink.getvalue().splitlines(), summary))
    (good_lines, good_sum), (mixed_lines, mixed_sum) = outs
    assert len(good_lines) == 40 and len(mixed_lines) == 41
    assert good_sum.lines == 40 and good_sum.duplicates > 0 and good_sum.rejected == 0
    assert mixed_sum.rejected == 2 and mixed_sum.lines == 41
    assert orjson.loads(mixed_lines[20])["line"] == 21  # a repeat of d6: nothing else changes
    last = orjson.loads(mixed_lines[40])
    assert (last["verdict"], last["error"], last["line"]) == ("error", "malformed_json", 41)
    kept = [line for i, line in enumerate(good_lines) if i != 20]
    assert [line for i, line in enumerate(mixed_lines[:40]) if i != 20] == kept


def _by_line(data: bytes, batch_size: int) -> list[list[bytes]]:
    """The definition: the stream's own lines, each `rstrip(b"\\r\\n")`ed."""
    lines = [raw.rstrip(b"\r\n") for raw in io.BytesIO(data)]
    return [lines[i : i + batch_size] for i in range(0, len(lines), batch_size)]


@given(
    st.lists(
        st.sampled_from([b"a", b"{}", b"\r", b"\n", b"\r\n", b"xyz" * 5, b"\r\r"]), max_size=40
    ),
    st.integers(1, 7),
    st.integers(1, 9),
)
@example([b"abc\r"], 3, 1)  # a last line without its line feed
@example([b"\r"], 1, 1)  # a last line of a CR alone: an empty line, as before
def test_read_lines_are_the_streams_lines(parts: list[bytes], batch: int, block: int) -> None:
    data = b"".join(parts)
    got = list(read_lines(io.BytesIO(data), batch, block_bytes=block))
    assert got == _by_line(data, batch)


def test_read_lines_of_a_file(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    data = b"".join(b'{"id": %d}\r\n' % i if i % 3 else b'{"id": %d}\n' % i for i in range(3000))
    path.write_bytes(data + b"tail")
    with open(path, "rb") as f:
        got = list(read_lines(f, 1000, block_bytes=4096))
    assert got == _by_line(data + b"tail", 1000) and len(got) == 4
