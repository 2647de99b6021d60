"""`backfill` on a real local Spark (`local[2]`) against `dedup` on the same files:
the verdict files must be identical, byte for byte."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from streamdedup.backfill.job import run_backfill
from streamdedup.cli.backfill import backfill_job
from streamdedup.cli.main import parse
from streamdedup.config import ShingleSpec
from streamdedup.errors import BackfillFailedError
from streamdedup.sketch.jaccard import exact_jaccard
from streamdedup.sketch.shingle import Shingler
from tests.support.cli import corpus, run
from tests.support.docs import edited_stream

pytestmark = pytest.mark.integration
BENCH = Path(__file__).resolve().parents[2] / "bench"


def write(path: Path, docs: list[Any]) -> Path:
    """JSON Lines; a bytes item is written as the raw line (malformed input)."""
    path.write_bytes(
        b"".join((d if isinstance(d, bytes) else orjson.dumps(d)) + b"\n" for d in docs)
    )
    return path


def dedup(tmp: Path, inputs: list[Path], *flags: str) -> bytes:
    tmp.mkdir(exist_ok=True)
    out = tmp / "dedup.jsonl"
    got = run(
        "dedup", *map(str, inputs), "--index", str(tmp / "index"), "--output", str(out), *flags
    )
    assert got.returncode in (0, 1), got.stderr.decode()
    return out.read_bytes()


def backfill(spark: Any, tmp: Path, inputs: list[Path], *flags: str) -> bytes:
    out = tmp / "backfill.jsonl"
    _, args, values = parse(["backfill", *map(str, inputs), "--output", str(out), *flags])
    stages: list[str] = []
    summary = run_backfill(spark, backfill_job(args, values), stages.append)
    assert [s.split(":")[1].strip() for s in stages] == [
        "read",
        "ids",
        "contents",
        "verify",
        "clusters",
        "write",
    ]
    assert summary.lines == len(out.read_bytes().splitlines())
    assert not list(tmp.glob(".backfill-*")), "a temporary file was left behind"
    return out.read_bytes()


def same(spark: Any, tmp: Path, inputs: list[Path], *flags: str, split: int = 40_000) -> bytes:
    want = dedup(tmp, inputs, *flags)
    got = backfill(spark, tmp, inputs, *flags, "--split-bytes", str(split))
    assert got.splitlines() == want.splitlines()
    return got


def failed_job(spark: Any, argv: list[str], point: str) -> BackfillFailedError:
    """`backfill ARGV` in the shared session with the failpoint `point` armed in its
    task workers (PySpark gives each job's workers `sc.environment`, a daemon of their
    own, so no JVM of its own is needed): the job's error, which the command reports
    with exit 7."""
    _, args, values = parse(["backfill", *argv])
    env = spark.sparkContext.environment
    env["STREAMDEDUP_FAILPOINT"] = point
    try:
        with pytest.raises(BackfillFailedError, match="the Spark job failed") as failed:
            run_backfill(spark, backfill_job(args, values), lambda _: None)
    finally:
        del env["STREAMDEDUP_FAILPOINT"]
    assert failed.value.exit_status == 7
    return failed.value


def awkward(n: int, seed: int) -> list[Any]:
    """An edited stream with everything `dedup` treats specially mixed in: malformed
    lines, records without text, empty and wordless texts, exact copies under new ids,
    and ids sent again with the same text."""
    rnd = random.Random(seed)
    docs: list[Any] = list(edited_stream(n, seed, words=(40, 200)))
    out: list[Any] = []
    for d in docs:
        out.append(d)
        r = rnd.random()
        if r < 0.05:
            out.append(b'{"id": "broken", "text": ')
        elif r < 0.08:
            out.append({"id": f"nt-{len(out)}"})
        elif r < 0.11:
            out.append({"id": f"e-{len(out)}", "text": rnd.choice(["", "!!! ...", "   "])})
        elif r < 0.2:
            src = rnd.choice(out[: len(out)])
            if isinstance(src, dict) and "text" in src:
                out.append({"id": f"copy-{len(out)}", "text": str(src["text"]).upper()})
        elif r < 0.28:
            src = rnd.choice(out)
            if isinstance(src, dict) and "text" in src:
                out.append(dict(src))  # the same id and text again
        elif r < 0.31:  # integer ids, and the same digits as a string: two ids
            out.append({"id": len(out), "text": d["text"] + " as number"})
            out.append({"id": str(len(out) - 1), "text": "a different text altogether"})
    return out


def chain() -> dict[str, str]:
    """A ~ B and B ~ C but not A ~ C (three words changed from one to the next)."""
    words = [f"w{i}" for i in range(200)]
    b = list(words)
    for k in (20, 50, 80):
        b[k] = f"x{k}"
    c = list(b)
    for k in (120, 150, 180):
        c[k] = f"y{k}"
    return {"A": " ".join(words), "B": " ".join(b), "C": " ".join(c)}


def test_the_chain_is_one() -> None:
    texts = chain()
    sh = Shingler(ShingleSpec(), bytes(16))
    sets = {k: np.unique(sh.batch(None, [v.encode()]).hashes) for k, v in texts.items()}

    def jac(x: str, y: str) -> float:
        return exact_jaccard(sets[x], sets[y])

    assert jac("A", "B") >= 0.8 and jac("B", "C") >= 0.8 and jac("A", "C") < 0.8


def test_edited_stream_with_awkward_lines_and_a_chain(spark: Any, tmp_path: Path) -> None:
    """Every kind of record `dedup` writes; and a chain (`chain`): C is B's duplicate,
    in A's cluster (the root of the duplicate_of chain, not a connected component's
    representative)."""
    docs = [*awkward(300, 3), *({"id": k, "text": v} for k, v in chain().items())]
    got = same(spark, tmp_path, [write(tmp_path / "in.jsonl", docs)])
    verdicts = [orjson.loads(x) for x in got.splitlines()]
    kinds = {(v["verdict"], v.get("exact"), v.get("reason")) for v in verdicts}
    # the corpus exercises every kind of record (else the test proves less than it says)
    assert {
        ("unique", False, None),
        ("unique", False, "empty"),
        ("duplicate", True, None),
        ("duplicate", False, None),
        ("error", None, None),
    } <= kinds
    assert [(v["id"], v["duplicate_of"], v["cluster"]) for v in verdicts[-3:]] == [
        ("A", None, "A"),
        ("B", "A", "A"),
        ("C", "B", "A"),
    ]


def test_ids_sent_again_with_changed_text(spark: Any, tmp_path: Path) -> None:
    """Replaced documents leave the buckets and their content passes to the oldest
    copy (which later documents then match); texts come back under old ids."""
    rnd = random.Random(5)
    base = [str(d["text"]) for d in edited_stream(75, 5, words=(40, 160))]
    docs: list[dict[str, Any]] = []
    for i in range(300):
        doc_id = f"u{rnd.randrange(60)}"
        docs.append({"id": doc_id, "text": rnd.choice(base)})
        if i % 25 == 0:  # an owner with a live copy, then the owner replaced
            t = rnd.choice(base)
            docs += [
                {"id": f"own-{i}", "text": t},
                {"id": f"cpy-{i}", "text": t},
                {"id": f"own-{i}", "text": rnd.choice(base)},
                {"id": f"late-{i}", "text": t + " and one more sentence of text"},
            ]
    same(spark, tmp_path, [write(tmp_path / "in.jsonl", docs)], "--max-bucket-candidates", "1000")


def test_template_heavy_stream_where_caps_bite(spark: Any, tmp_path: Path) -> None:
    src = tmp_path / "templates.jsonl"
    subprocess.run(
        [sys.executable, str(BENCH / "templates.py"), "--docs", "600", "--out", str(src)],
        check=True,
    )
    capped = same(spark, tmp_path, [src], "--max-bucket-candidates", "3", split=200_000)
    # the premise: with the cap of 3 some verdicts differ from the uncapped ones
    uncapped = dedup(tmp_path / "uncapped", [src], "--max-bucket-candidates", "100000")
    assert capped != uncapped


def test_several_inputs_signature_verification(spark: Any, tmp_path: Path) -> None:
    docs = awkward(300, 8)
    parts = [write(tmp_path / f"part-{k}.jsonl", docs[k::3]) for k in range(3)]
    got = same(spark, tmp_path, parts, "--verify", "signature", "--threshold", "0.7")
    errors = [orjson.loads(x) for x in got.splitlines() if b'"error"' in x]
    assert errors and all(e["input"] in map(str, parts) for e in errors)


def test_char_shingles_and_set_bands(spark: Any, tmp_path: Path) -> None:
    src = tmp_path / "in.jsonl"
    corpus(src, 200, seed=4)
    same(spark, tmp_path, [src], "--shingle", "char:7", "--bands", "16", "--rows", "8")


def test_a_copy_taking_over_in_a_capped_bucket(spark: Any, tmp_path: Path) -> None:
    """A copy takes over its replaced owner's postings in buckets over the cap: it
    ranks there by its own number, as in the stream (which once depended on where its
    batches ended there, and was refused), so the later near duplicates see the
    stream's candidates."""
    words = " ".join(f"w{i}" for i in range(120))
    docs = [
        {"id": "owner", "text": words},
        {"id": "copy", "text": words},
        *({"id": f"near-{k}", "text": words + f" extra{k}"} for k in range(4)),
        {"id": "owner", "text": "something else entirely, which replaces the owner"},
        *({"id": f"late-{k}", "text": words + f" late{k}"} for k in range(3)),
    ]
    src = write(tmp_path / "in.jsonl", docs)
    same(spark, tmp_path, [src], "--max-bucket-candidates", "2")


def test_a_failed_job_leaves_the_output_as_it_was(spark: Any, tmp_path: Path) -> None:
    """A Python worker killed in the bucket stage (a failed task; a local master does
    not retry): the job's error (exit 7 from the command), the old output untouched,
    no temporary file left."""
    src = tmp_path / "in.jsonl"
    corpus(src, 60, seed=2)
    out = tmp_path / "out.jsonl"
    out.write_bytes(b"old verdicts\n")
    error = failed_job(spark, [str(src), "--output", str(out)], "backfill-bucket:1")
    assert "no verdicts were written" in str(error)
    assert out.read_bytes() == b"old verdicts\n"
    assert not list(tmp_path.glob(".backfill-*"))
