"""Dry runs (`check(..., insert=False)`, `query`, `dedup --dry-run`): a dry verdict is
the verdict the document would get if it were checked then, and nothing of it is
kept -- the index's tables, the counters and every later verdict are those of a run
without it."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamdedup.cli.main import main
from streamdedup.engine.deduplicator import Deduplicator
from tests.engine.test_containment import pages


def tables(dd: Deduplicator) -> dict[str, list[tuple[bytes, bytes]]]:
    """Every table's entries (the parameters left out: each index has its own key)."""
    got = dd.index.read(lambda t: {name: list(t.items(name)) for name in t.table_names()})
    got["meta"] = [(k, v) for k, v in got["meta"] if k != b"params"]
    return got


@settings(max_examples=5, deadline=None)
@given(st.integers(0, 2**32))
def test_a_dry_run_answers_as_a_check_would_and_keeps_nothing(
    tmp_path_factory: pytest.TempPathFactory, seed: int
) -> None:
    rnd = random.Random(seed)
    texts = pages(240, seed)
    docs = [(str(i), t) for i, t in enumerate(texts[:200])]
    queries: dict[int, tuple[str, str]] = {}  # before the batch from k on: a dry query
    for k in rnd.sample(range(20, 200, 10), 4):
        kind = rnd.randrange(3)
        if kind == 0:  # a new document
            queries[k] = (f"q{k}", texts[200 + len(queries)])
        elif kind == 1:  # an indexed id with its own text: its stored verdict
            queries[k] = docs[rnd.randrange(k)]
        else:  # an indexed id with another text: the verdict of replacing it
            queries[k] = (docs[rnd.randrange(k)][0], texts[rnd.randrange(200, 240)])
    runs: list[Any] = []
    for dry in (True, False):
        with Deduplicator(tmp_path_factory.mktemp("idx"), shingle="word:3") as dd:
            got, asked = [], {}
            for k in range(0, 200, 10):
                if dry and k in queries:
                    asked[k] = dd.check(*queries[k], insert=False)
                got += dd.check_batch(docs[k : k + 10])
            runs.append((got, tables(dd), dd.counters, asked))
    assert runs[0][:3] == runs[1][:3]  # (the dry queries left no trace)
    for k, verdict in runs[0][3].items():  # each as if it had been checked then
        with Deduplicator(tmp_path_factory.mktemp("then"), shingle="word:3") as dd:
            dd.check_batch(docs[:k])
            assert dd.check(*queries[k]) == verdict


def test_dedup_dry_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`dedup --dry-run`: each line against the index as it is (not against each
    other), the index untouched; refused without an index."""
    texts = pages(300, seed=3)
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    first.write_bytes(
        b"".join(orjson.dumps({"id": i, "text": t}) + b"\n" for i, t in enumerate(texts[:200]))
    )
    second.write_bytes(
        b"".join(
            orjson.dumps({"id": f"n{i}", "text": t}) + b"\n" for i, t in enumerate(texts[200:])
        )
        + b"\n".join(orjson.dumps({"id": f"again-{i}", "text": texts[250]}) for i in range(2))
    )
    idx, out = str(tmp_path / "idx"), tmp_path / "v.jsonl"
    assert (
        main(["dedup", str(first), "--index", idx, "--output", "/dev/null", "--shingle", "word:3"])
        == 0
    )
    with Deduplicator(idx) as dd:
        before = tables(dd)
        want = [dd.check(f"n{i}", t, insert=False) for i, t in enumerate(texts[200:])]
    assert main(["dedup", str(second), "--index", idx, "--output", str(out), "--dry-run"]) == 0
    got = [orjson.loads(x) for x in out.read_bytes().splitlines()]
    assert got[:100] == [v.to_dict() for v in want]
    assert got[-2]["verdict"] == got[-1]["verdict"] == want[50].verdict  # (not each other's)
    with Deduplicator(idx) as dd:
        assert tables(dd) == before
    assert main(["dedup", str(second), "--index", str(tmp_path / "none"), "--dry-run"]) == 2
    assert "existing index" in capsys.readouterr().err
    assert not (tmp_path / "none").exists()
