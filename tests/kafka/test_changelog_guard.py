"""An index a worker mirrors to a changelog accepts documents only through that
worker: `dedup` or `replay` adding documents the changelog never sees would make a
restore from it silently incomplete."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from streamdedup.engine.deduplicator import Deduplicator
from streamdedup.errors import ConfigError
from streamdedup.store.index import Index
from tests.support.kafka import Topics, stream


def cli(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "streamdedup.cli", *args], capture_output=True, timeout=300
    )


def snapshot(index: Path) -> tuple[int, int]:
    """(documents, last committed transaction) of an index."""
    idx = Index(index, readonly=True)
    try:
        return idx.read(lambda t: t.count("docs")), idx.last_txnid()
    finally:
        idx.close()


def write_docs(path: Path, docs: list[dict[str, object]]) -> None:
    path.write_bytes(b"".join(orjson.dumps(d) + b"\n" for d in docs))


def test_the_python_api_needs_the_changelog_named(tmp_path: Path) -> None:
    """The binding as the worker records it (`Worker.bind_index`), without a broker."""
    index = tmp_path / "idx"
    with Deduplicator(index) as dd:
        dd.check("a", "one two three four five six seven")
        binding = {"topic": "cl", "group_id": "g", "input_topic": "docs"}
        dd.index.write(lambda t: t.set_meta("changelog", binding))
    before = snapshot(index)
    with Deduplicator(index) as dd:  # reading needs no changelog
        assert dd.index.read(lambda t: t.count("docs")) == 1
        with pytest.raises(ConfigError, match=r"changelog topic 'cl'.*separate index"):
            dd.check("b", "eight nine ten eleven twelve")
    with (
        Deduplicator(index, changelog="another") as dd,
        pytest.raises(ConfigError, match="`changelog` cl"),
    ):
        dd.check("b", "eight nine ten eleven twelve")
    assert snapshot(index) == before
    with Deduplicator(index, changelog="cl") as dd:  # the caller publishes dd.changes
        assert dd.check("b", "eight nine ten eleven twelve").verdict == "unique"


@pytest.mark.integration
def test_dedup_and_replay_into_a_changelog_bound_index_are_refused(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    docs = stream(400, seed=41)
    t = Topics(kafka_bootstrap)
    changelog = f"changelog-{t.group}"
    opts = ("--changelog-topic", changelog, "--create-topics")
    t.produce([orjson.dumps(d) for d in docs[:300]])
    index = tmp_path / "idx"
    first = t.run_worker(index, *opts)
    assert first.returncode == 0, first.stderr.decode()[-2000:]
    before = snapshot(index)
    assert before[0] == 300

    src = tmp_path / "more.jsonl"
    write_docs(src, docs[300:])
    r = cli("dedup", str(src), "--index", str(index), "--output", str(tmp_path / "out.jsonl"))
    assert r.returncode == 2, r.stderr.decode()[-2000:]
    lines = r.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in lines[0]
    assert f"mirrored to the changelog topic {changelog!r}" in lines[0]
    assert f"--topic {t.input}" in lines[0]
    assert snapshot(index) == before  # not one transaction

    # a replay of the topic: the documents the index holds get their verdicts back;
    # the first batch with new ones is refused
    t.produce([orjson.dumps(d) for d in docs[300:]])
    replay = cli(
        "replay",
        "--mode",
        "reverdict",
        "--bootstrap-servers",
        kafka_bootstrap,
        "--input-topic",
        t.input,
        "--index",
        str(index),
        "--output",
        str(tmp_path / "replayed.jsonl"),
    )
    assert replay.returncode == 2, replay.stderr.decode()[-2000:]
    assert f"mirrored to the changelog topic {changelog!r}" in replay.stderr.decode()
    assert snapshot(index)[0] == before[0]
    before = snapshot(index)  # (the replay recorded its own progress)

    without = t.run_worker(index)  # the worker itself, its changelog forgotten
    assert without.returncode == 2, without.stderr.decode()[-2000:]
    assert f"--changelog-topic {changelog}" in without.stderr.decode()
    assert snapshot(index) == before

    # the documents go through the topic instead, and reach the changelog
    second = t.run_worker(index, *opts)
    assert second.returncode == 0, second.stderr.decode()[-2000:]
    assert snapshot(index)[0] == len(docs)
