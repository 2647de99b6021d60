"""The benchmark scripts still run (they are how the README's figures are made): the
worker benchmark end to end on a small corpus, against the test broker.  It checks
exactly one committed verdict per document itself."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

BENCH = Path(__file__).parent.parent / "bench"


@pytest.mark.integration
def test_bench_worker_runs(kafka_bootstrap: str, tmp_path: Path) -> None:
    r = subprocess.run(
        [
            sys.executable,
            str(BENCH / "bench_worker.py"),
            "--docs",
            "6000",
            "--rounds",
            "1",
            "--bootstrap",
            kafka_bootstrap,
            "--results",
            str(tmp_path),
        ],
        capture_output=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr.decode()[-3000:]
    results = json.loads((tmp_path / "bench_worker.json").read_text())
    (only,) = results["rounds"]
    assert only["worker"]["verdicts"] == 6000
    assert only["two_partitions"]["two"]["verdicts"] == 6000
    assert len(only["two_partitions"]["two"]["assignments"]) == 2
    assert only["worker"]["docs_per_s"] > 0 and only["file_mode_docs_per_s"] > 0
    assert "of file mode" in r.stdout.decode()


@pytest.mark.integration
def test_bench_segments_runs(kafka_bootstrap: str, tmp_path: Path) -> None:
    """The segments benchmark end to end on a small stream: two segment-server
    processes answer for two remote segments; the script itself asserts that every
    timed run's verdicts equal one index's over the whole stream (and those of the
    `--seal-every` run)."""
    r = subprocess.run(
        [
            sys.executable,
            str(BENCH / "bench_segments.py"),
            "--docs",
            "900",
            "--rounds",
            "1",
            "--batch-size",
            "100",
            "--seal-every",
            "200",
            "--bootstrap",
            kafka_bootstrap,
            "--results",
            str(tmp_path),
        ],
        capture_output=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr.decode()[-3000:]
    results = json.loads((tmp_path / "bench_segments.json").read_text())
    (only,) = results["rounds"]
    assert all(only[k]["docs_per_s"] > 0 for k in ("single", "local", "remote"))
    assert [s["probes"] >= 3 for s in results["servers"]] == [True, True]
    assert [s["documents"] for s in results["segments"]] == [300, 300]
    # one probe per segment per batch of the timed slice (300 documents, batches of 100)
    trips = results["round_trips"]
    assert trips["segment 1"]["probes"] >= 3 and trips["segment 2"]["probes"] >= 3
    assert 0 < trips["all segments"]["p50"] <= trips["all segments"]["p99"]
    sizes = results["sizes"]
    assert [s["documents"] for s in sizes["segments"]] == [200, 200, 200, 200]
    assert sizes["open_used_bytes_at_end"] < sizes["single_used_bytes"]
    assert "two remote segments / single index" in r.stdout.decode()


def test_bench_html_runs(tmp_path: Path) -> None:
    """The crawler-input benchmark on the vendored pages: both runs, the extraction's
    share and the extractor comparison (resiliparse always; trafilatura when the bench
    extra is installed) end up in its results."""
    r = subprocess.run(
        [
            sys.executable,
            str(BENCH / "bench_html.py"),
            "--pages",
            "20",
            "--repeat",
            "1",
            "--compare-sample",
            "7",
            "--roots",
            str(Path(__file__).parent / "data" / "html"),
            "--results",
            str(tmp_path),
        ],
        capture_output=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr.decode()[-3000:]
    results = json.loads((tmp_path / "bench_html.json").read_text())
    assert results["pages"] == 7  # every vendored page, once
    assert results["dedup_warc"]["docs_per_s"] > 0 and results["dedup_jsonl_text"]["docs_per_s"] > 0
    assert 0 < results["extraction_share_of_warc_run"] < 1
    ours = results["extractors"]["resiliparse"]
    assert ours["syndicated_copy_jaccard"] >= 0.8
    assert ours["one_template_two_articles_jaccard"] < 0.1
    assert "docs/s" in r.stdout.decode()


def _bench_module(name: str):  # the bench scripts are not a package: import by path
    import importlib

    sys.path.insert(0, str(BENCH))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(BENCH))


def test_ground_truth_is_the_brute_force_jaccard_in_any_block_size() -> None:
    """The benchmark's ground truth (sparse products in row blocks) against every pair
    of a small template-heavy stream measured with Python sets."""
    from streamdedup.config import ShingleSpec
    from streamdedup.sketch.shingle import reference_shingles
    from tests.support.truth import best_jaccard_earlier

    corpus = _bench_module("corpus")
    templates = _bench_module("templates")
    texts = [d.text for d in templates.generate(240, seed=5)]
    sets = [reference_shingles(t, ShingleSpec()) for t in texts]
    best = best_jaccard_earlier(sets)  # (each document's, once for all three thresholds)
    for threshold in (0.5, 0.8, 0.9):
        want = [x >= threshold for x in best]
        assert any(want) and not all(want)
        for block in (7, 100, 1000):
            assert corpus.ground_truth(texts, threshold, block=block) == want


def test_template_stream_has_the_shape_it_claims() -> None:
    """8 sites whose pages share a 300-700-word template around a 60-250-word body;
    about 30% edited re-emissions."""
    templates = _bench_module("templates")
    docs = list(templates.generate(2000, seed=3))
    assert 0.25 < sum(d.source is not None for d in docs) / len(docs) < 0.35
    heads = {d.text.split("\n")[0] for d in docs}
    assert len(heads) == templates.SITES
    for d in docs:
        head, _crumb, body, foot = d.text.split("\n")
        assert 300 <= len(head.split()) + len(foot.split()) <= 700
        if d.source is None:
            assert 60 <= len(body.split()) <= 250


def test_short_stream_has_the_shape_it_claims() -> None:
    """One line of 1-15 words per document; about 30% re-emissions, each of an earlier
    line."""
    shorts = _bench_module("shorts")
    docs = list(shorts.generate(3000, seed=4))
    assert 0.25 < sum(d.source is not None for d in docs) / len(docs) < 0.35
    for i, d in enumerate(docs):
        assert "\n" not in d.text and 1 <= len(d.text.split()) <= shorts.MAX_WORDS, d
        if d.source is not None:
            assert int(d.source.rsplit("-", 1)[1]) < i
    kinds = {d.mutation for d in docs}
    assert {"original", "exact", "normalised", "replace", "add", "drop"} <= kinds


def _run_bench_dedup(tmp_path: Path, *args: str) -> tuple[str, list[Any]]:
    """`bench_dedup.py ARGS --out tmp_path`, which must succeed: its output and the
    result rows it wrote."""
    r = subprocess.run(
        [sys.executable, str(BENCH / "bench_dedup.py"), *args, "--out", str(tmp_path)],
        capture_output=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr.decode()[-3000:]
    results = json.loads((tmp_path / "bench_dedup.json").read_text())["results"]
    return r.stdout.decode(), results


def _bench_dedup() -> Any:
    spec = importlib.util.spec_from_file_location("bench_dedup", BENCH / "bench_dedup.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _row(stream: str, t: float, name: str = "streamdedup (default, 1 core)", **kw: Any) -> Any:
    row = {
        "stream": stream,
        "threshold": t,
        "name": name,
        "docs_per_s": 1000.0,
        "docs_per_cpu_s": 1000.0,
        "precision": 1.0,
        "recall": 1.0,
        "bytes_per_doc": 2000.0,
        "vs_datasketch": 11.0,
        "vs_rensa": 3.5,
        "cpu_vs_datasketch": 11.0,
        "cpu_vs_rensa": 3.5,
    }
    return {**row, **kw}


def test_the_targets_are_judged_from_the_rows_they_name() -> None:
    """`--targets`' verdicts (pure arithmetic over the rows): each item flips on
    its own figure, and only on it."""
    bench = _bench_dedup()
    anchors = [_row("crawl-like", 0.8, "datasketch (template)"), _row("crawl-like", 0.8, "rensa")]

    def judge(large_kw: dict[str, Any], short_kw: dict[str, Any], tmpl_kw: dict[str, Any]) -> Any:
        large = [
            _row("crawl-like", 0.8, **large_kw),
            _row("short", 0.8, **{"docs_per_s": 60_000.0, **short_kw}),
            *anchors,
        ]
        small = [
            _row(s, t, **(tmpl_kw if s == "template-heavy" else {}))
            for s in ("template-heavy", "crawl-like")
            for t in (0.8, 0.9)
        ]
        return {item.split()[0]: met for item, met, _ in bench.check_targets(large, small)}

    assert all(judge({}, {}, {}).values())
    assert judge({}, {}, {"recall": 0.985}) == {**judge({}, {}, {}), "1": False}
    assert judge({}, {}, {"docs_per_s": 590.0}) == {**judge({}, {}, {}), "2": False}
    assert judge({"vs_datasketch": 9.9}, {}, {})["4"] is False
    assert judge({"vs_rensa": 2.9}, {}, {})["4"] is False
    assert judge({}, {"docs_per_s": 49_000.0}, {}) == {**judge({}, {}, {}), "5": False}
    assert judge({}, {"precision": 0.9999}, {})["6"] is False
    assert judge({"bytes_per_doc": 2600.0}, {}, {})["7"] is False


@pytest.mark.slow
def test_bench_dedup_targets_runs_every_contender_and_prints_every_item(tmp_path: Path) -> None:
    """The benchmark end to end, as `--targets` runs it, on a hundredth of its corpora:
    every stream, streamdedup next to datasketch and rensa, accuracy against ground
    truth, and each of issue 22's targets judged.  Without the `--workers 1` contender,
    which no target is about (its six runs were a third of the test's time)."""
    # the `test` extra installs the bench extra: no skip (the bench imports them itself)
    assert importlib.util.find_spec("datasketch") and importlib.util.find_spec("rensa")

    args = ["--targets", "--scale", "0.01", "--repeat", "1", "--skip-workers-1"]
    out, results = _run_bench_dedup(tmp_path, *args)
    assert "issue 22's targets:" in out
    for item in range(1, 8):
        assert f" item {item} " in out
    assert {(x["stream"], x["docs"]) for x in results} == {
        ("crawl-like", 500),
        ("short", 500),
        ("template-heavy", 200),
        ("crawl-like", 200),
    }
    names = {(x["stream"], x["name"]) for x in results}
    for stream in ("crawl-like", "template-heavy", "short"):
        for name in ("streamdedup (default, 1 core)", "datasketch (template)", "rensa"):
            assert (stream, name) in names
    for x in results:
        assert x["docs_per_s"] > 0 and 0.0 <= x["recall"] <= 1.0
        assert x["docs_per_cpu_s"] >= x["docs_per_s"] * 0.5  # one core each, at most two
        if x["name"].startswith("streamdedup"):
            assert x["precision"] == 1.0  # exact verification
    assert "template-heavy / crawl-like" in out


@pytest.mark.slow
def test_verdict_equality_runs(tmp_path: Path) -> None:
    """The verdict-equality harness (issue 36's proof of a refactor) with old = new =
    this tree on tiny corpora: every case it writes is reported `same`, then again
    against the first run's cached outputs.  The worker case (a broker and four idle
    exits) and the backfill case (Spark twice) run the same comparison code on other
    producers, which their own tests prove: left out here to keep the suite short."""
    venv = Path(sys.executable).parent.parent
    cmd = [sys.executable, str(BENCH / "verdict_equality.py"), "--new", str(venv)]
    cmd += ["--out", str(tmp_path), "--docs-scale", "0.004", "--cases", "dedup,segmented"]
    r = subprocess.run([*cmd, "--old", str(venv)], capture_output=True, timeout=600)
    assert r.returncode == 0, r.stdout.decode()[-3000:] + r.stderr.decode()[-3000:]
    lines = [x for x in r.stdout.decode().splitlines() if x.endswith("verdicts)")]
    # six dedup files, two of the segmented run
    assert len(lines) == 8 and all(": same (" in x for x in lines), r.stdout.decode()
    (tmp_path / "old").rename(tmp_path / "cached")
    cached = ["--old-cached", str(tmp_path / "cached")]
    r = subprocess.run([*cmd, *cached], capture_output=True, timeout=600)
    assert r.returncode == 0, r.stdout.decode()[-3000:] + r.stderr.decode()[-3000:]
    assert r.stdout.decode().count(": same (") == 8, r.stdout.decode()


def test_bench_bits_runs_both_and_measures_against_exact_truth(tmp_path: Path) -> None:
    """The Hamming benchmark end to end on a short stream (the real SimHashes and a
    few thousand more): both runs, streamdedup's precision exactly 1, faiss's
    multi-hash recall exactly 1 (its pigeonhole guarantee: what makes the truth
    trustworthy), and a ratio."""
    import faiss  # noqa: F401  (the `test` extra installs the bench extra: no skip)

    r = subprocess.run(
        [sys.executable, str(BENCH / "bench_bits.py"), "--items", "12000", "--out", str(tmp_path)],
        capture_output=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr.decode()[-3000:]
    (row,) = json.loads((tmp_path / "bench_bits.json").read_text())
    assert row["items"] == 12000 and row["true_duplicates"] > 300
    assert row["streamdedup"]["precision"] == 1.0 and row["streamdedup"]["recall"] >= 0.98
    assert row["faiss_multihash"]["recall"] == 1.0 and row["faiss_multihash"]["precision"] == 1.0
    assert row["ratio"] > 0 and "ratio" in r.stdout.decode()


def test_the_exact_truth_of_bench_bits_is_brute_force() -> None:
    """bench_bits.truth (multi-index hashing) against every earlier string measured."""
    bench_bits = _bench_module("bench_bits")
    rng = np.random.default_rng(3)
    base = rng.integers(0, 2**64, size=60, dtype=np.uint64)
    flips = np.uint64(1) << rng.integers(0, 64, size=(300, 4)).astype(np.uint64)
    values = base[rng.integers(0, 60, size=300)] ^ np.bitwise_xor.reduce(
        np.where(rng.random((300, 4)) < 0.5, flips, np.uint64(0)), axis=1
    )
    for radius in (0, 2, 3):
        want = [
            any(bin(int(values[i]) ^ int(values[j])).count("1") <= radius for j in range(i))
            for i in range(len(values))
        ]
        assert bench_bits.truth(values, radius).tolist() == want


def test_bench_vectors_runs_both_and_measures_against_exact_truth(tmp_path: Path) -> None:
    """The vectors benchmark end to end on a short stream (the real-text vectors and a
    thousand more, D = 16): both families, streamdedup's precision exactly 1 and its
    recall at least 0.99 against the double-precision truth, faiss's exact search's
    recall 1, a ratio and the target's line."""
    import faiss  # noqa: F401  (the `test` extra installs the bench extra: no skip)

    cmd = [sys.executable, str(BENCH / "bench_vectors.py"), "--items", "10000", "--dim", "16"]
    r = subprocess.run([*cmd, "--out", str(tmp_path)], capture_output=True, timeout=600)
    assert r.returncode == 0, r.stderr.decode()[-3000:]
    rows = json.loads((tmp_path / "bench_vectors.json").read_text())
    assert [x["metric"] for x in rows] == ["cosine", "euclidean"]
    for x in rows:
        assert x["true_duplicates"] > 100
        assert x["streamdedup"]["precision"] == 1.0 and x["streamdedup"]["recall"] >= 0.99
        assert x["faiss_flat"]["recall"] == 1.0 and x["ratio"] > 0
    assert b"not judged below 1M items" in r.stdout


def test_bench_containment_runs_both_and_measures_against_exact_truth(tmp_path: Path) -> None:
    """The containment benchmark end to end on a short stream of real pages and
    excerpts: both runs, streamdedup's every duplicate verified (precision exactly 1,
    each reported containment exact) and recall at least 0.99 for earlier items under
    8 times the size, the rebuilt ensemble measured against the same truth, a ratio
    and the target's line."""
    cmd = [sys.executable, str(BENCH / "bench_containment.py"), "--items", "1000"]
    # two batches: the second queried against the ensemble rebuilt over the first
    r = subprocess.run(
        [*cmd, "--batch", "500", "--out", str(tmp_path)], capture_output=True, timeout=600
    )
    assert r.returncode == 0, r.stderr.decode()[-3000:]
    (row,) = json.loads((tmp_path / "bench_containment.json").read_text())
    ours, theirs = row["streamdedup"], row["datasketch_ensemble"]
    assert row["items"] == 1000 and row["true_duplicates"] > 100
    assert ours["verified_wrong"] == 0 and ours["precision"] == 1.0
    assert ours["recall_within_8x"] >= 0.99 and theirs["recall"] > 0 and row["ratio"] > 0
    assert b"not judged" in r.stdout


def test_the_exact_truth_of_bench_containment_is_brute_force() -> None:
    """bench_containment.truth (a sparse product) against every earlier set measured."""
    bench = _bench_module("bench_containment")
    rnd = np.random.default_rng(5)
    sets = [
        set(rnd.choice(40, size=rnd.integers(0, 12), replace=False).tolist()) for _ in range(300)
    ]
    inside, near = bench.truth([{str(x) for x in s} for s in sets], 0.8)
    for i, s in enumerate(sets):
        holders = [t for t in sets[:i] if s and len(s & t) >= 0.8 * len(s)]
        assert inside[i] == bool(holders)
        assert near[i] == any(len(t) < 8 * len(s) for t in holders)
