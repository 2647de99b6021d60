"""Worker processes for `dedup --workers`: same lines, same order, same results as
preparing in this process, whether the input is a file or a stream."""

import io
import random
from pathlib import Path

import orjson
import pytest

from streamdedup.config import Fields, IndexParams
from streamdedup.engine.prepare import Preparer
from streamdedup.filemode import pool
from streamdedup.filemode.pool import PreparePool, decode_and_prepare, split_lines
from streamdedup.filemode.streams import read_lines
from streamdedup.models import Rejected


def messy_input(n: int) -> bytes:
    """JSON lines with CRLF endings, blank and broken lines, no final newline."""
    rnd = random.Random(n)
    out = []
    for i in range(n):
        text = " ".join(f"w{rnd.randrange(300)}" for _ in range(rnd.randint(0, 120)))
        line = orjson.dumps({"id": i, "text": text})
        out.append(line + (b"\r\n" if i % 3 == 0 else b"\n"))
        if i % 17 == 0:
            out.append(b"\n")
        if i % 29 == 0:
            out.append(b'{"id": "broken\n')
    return b"".join(out).rstrip(b"\n")


def flatten(parts: list) -> tuple[list, list[bytes]]:
    items = [item for decoded, *_ in parts for item in decoded]
    sigs = [s for _, prepared, *_ in parts for s in prepared.sig_bytes]
    return [i.reason if isinstance(i, Rejected) else i for i in items], sigs


@pytest.fixture
def small_tasks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pool, "TASK_BYTES", 4096)  # many tasks, cut mid-line


def test_split_lines_matches_read_lines() -> None:
    data = messy_input(200)
    expected = [line for batch in read_lines(io.BytesIO(data), 10**9) for line in batch]
    assert split_lines(data) == expected


@pytest.mark.parametrize("as_file", [True, False])
def test_workers_give_what_this_process_gives(tmp_path: Path, small_tasks, as_file) -> None:
    data = messy_input(300)
    preparer, fields = Preparer(IndexParams()), Fields()
    here = flatten([decode_and_prepare(preparer, fields, split_lines(data))])
    path = tmp_path / "in.jsonl"
    path.write_bytes(data)
    with open(path, "rb") as fh:
        source = fh if as_file else io.BufferedReader(io.BytesIO(data))  # type: ignore[arg-type]
        workers = PreparePool(2, preparer, fields, source)
        try:
            assert (workers.path is not None) == as_file
            groups = list(workers.groups(batch_size=50))
        finally:
            workers.close()
    assert flatten([part for g in groups for part in g]) == here
    assert len(groups) > 3 and all(sum(len(d) for d, *_ in g) <= 50 + 60 for g in groups)


def test_a_failing_worker_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_bytes(b'{"id": 1, "text": "a b c"}\n')
    broken = Preparer(IndexParams())
    broken.params = None  # type: ignore[assignment]  # any preparation raises
    with open(path, "rb") as fh:
        workers = PreparePool(1, broken, Fields(), fh)
        try:
            with pytest.raises(AttributeError):
                list(workers.groups(batch_size=10))
        finally:
            workers.close()


def test_a_worker_collects_cycles_as_its_parent_does() -> None:
    """A spawned worker starts with Python's defaults; `_serve` takes the parent's
    (the command raises the threshold: `cli.main.settle_gc`)."""
    import gc
    import multiprocessing

    before = gc.get_threshold()
    mine, theirs = multiprocessing.Pipe()
    mine.send(None)  # no task: the loop ends at once
    try:
        pool._serve(theirs, Preparer(IndexParams()), Fields(), None, (12_345, 6, 7))
        assert gc.get_threshold() == (12_345, 6, 7)
    finally:
        gc.set_threshold(*before)
