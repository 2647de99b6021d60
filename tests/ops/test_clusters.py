"""`clusters` (ops/clusters.py, DESIGN.md "Outputs users consume"): one JSON line a
cluster, its id the id of its first document, members first first, every document
in exactly one cluster -- from verdict files (the last verdict of a repeated id
counts, error records are not documents) and from an index (across its local sealed
segments), the two agreeing on the same run."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamdedup.cli.main import main
from streamdedup.engine.deduplicator import Deduplicator
from streamdedup.errors import ConfigError
from streamdedup.ops.clusters import from_index, from_verdicts
from tests.engine.test_sets import baskets


def verdict(doc_id: Any, cluster: Any) -> bytes:
    dup = doc_id != cluster
    rec = {"id": doc_id, "verdict": "duplicate" if dup else "unique", "cluster": cluster}
    return orjson.dumps(rec | {"duplicate_of": cluster if dup else None, "exact": False})


@st.composite
def streams(draw: st.DrawFn) -> list[tuple[Any, Any]]:
    """(id, cluster) in stream order: a cluster is named by an earlier document that
    started one; ids mix strings and the integers they spell; some repeat."""
    out: list[tuple[Any, Any]] = []
    roots: list[Any] = []
    for k in range(draw(st.integers(0, 60))):
        doc_id = draw(st.sampled_from([k, str(k)]))
        if out and draw(st.booleans()):
            doc_id = draw(st.sampled_from([d for d, _ in out]))
        if roots and draw(st.booleans()):
            out.append((doc_id, draw(st.sampled_from(roots))))
        else:
            roots.append(doc_id)
            out.append((doc_id, doc_id))
    return out


@given(streams(), st.integers(1, 3))
def test_every_document_once_in_its_last_cluster(stream: list[tuple[Any, Any]], least: int) -> None:
    lines = [verdict(d, c) for d, c in stream]
    lines.insert(len(lines) // 2, b'{"id": "bad", "error": "missing_text"}')
    got = list(from_verdicts(lines, least))
    last = {orjson.dumps(d): c for d, c in stream}
    order = list(dict.fromkeys(orjson.dumps(d) for d, _ in stream))
    seen = [orjson.dumps(m) for c in got for m in c["members"]]
    assert len(seen) == len(set(seen))
    for c in got:
        assert c["size"] == len(c["members"]) >= least
        keys = [orjson.dumps(m) for m in c["members"]]
        assert keys == [k for k in order if orjson.dumps(last[k]) == orjson.dumps(c["cluster"])]
    if least == 1:
        assert sorted(seen) == sorted(order)


def test_from_an_index_and_from_its_verdicts_alike(tmp_path: Path) -> None:
    """One run, sealed twice along the way: the index's clusters (open index and
    segments) are those of its verdict file, each led by its first document."""
    sets = baskets(900, seed=4)
    docs = [(str(i), s) for i, s in enumerate(sets)]
    random.Random(4).shuffle(docs)
    lines = []
    with Deduplicator(tmp_path / "idx", item="set", threshold=0.7) as dd:
        for k in range(0, len(docs), 100):
            if k in (300, 600):
                dd.seal()
            lines += [orjson.dumps(v.to_dict()) for v in dd.check_batch(docs[k : k + 100])]
    want = list(from_verdicts(lines))
    assert list(from_index(str(tmp_path / "idx"))) == want
    assert sum(c["size"] for c in want) == 900 and any(c["size"] > 5 for c in want)
    assert all(c["members"][0] == c["cluster"] for c in want)


def test_the_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "verdicts.jsonl"
    src.write_bytes(b"\n".join([verdict("a", "a"), verdict("b", "a"), verdict(1, 1)]) + b"\n")
    assert main(["clusters", str(src), "--min-size", "2"]) == 0
    assert capsys.readouterr().out == '{"cluster":"a","members":["a","b"],"size":2}\n'
    out = tmp_path / "clusters.jsonl"
    assert main(["clusters", str(src), "--output", str(out)]) == 0
    assert [orjson.loads(x)["cluster"] for x in out.read_bytes().splitlines()] == ["a", 1]
    assert main(["clusters"]) == 2
    assert "--index DIR or verdict files" in capsys.readouterr().err
    capsys.readouterr()
    assert main(["clusters", str(src), "--index", str(tmp_path / "none")]) == 0  # files win
    assert capsys.readouterr().out.count("\n") == 2
    assert main(["clusters", str(tmp_path / "missing.jsonl")]) == 4
    src.write_bytes(b"not json\n")
    with pytest.raises(ConfigError, match="line 1 is not JSON"):
        list(from_verdicts([b"not json"]))


def test_inspect_names_the_copies_and_the_cluster(tmp_path: Path) -> None:
    """`inspect`: a document's exact copies (same content, across a sealed segment)
    and its cluster's members, as `clusters` lists them."""
    from streamdedup.ops.inspect import inspect_document, render_inspect

    sets = baskets(300, seed=6)
    docs = [(str(i), s) for i, s in enumerate(sets)]
    docs += [(f"copy-{k}", sets[7]) for k in range(3)]  # exact copies of document 7
    with Deduplicator(tmp_path / "idx", item="set", threshold=0.7) as dd:
        dd.check_batch(docs[:200])
        dd.seal()
        dd.check_batch(docs[200:])
    clusters = {c["cluster"]: c["members"] for c in from_index(str(tmp_path / "idx"))}
    info = inspect_document(str(tmp_path / "idx"), "7")
    assert info["copies"] == ["copy-0", "copy-1", "copy-2"] and info["copies_count"] == 3
    assert info["cluster_members"] == clusters[info["cluster"]][:20]
    assert info["cluster_size"] == len(clusters[info["cluster"]]) > 3
    shown = render_inspect(info)
    assert "copies      3: 'copy-0', 'copy-1', 'copy-2'" in shown
    assert f"{info['cluster_size']} members: " in shown
