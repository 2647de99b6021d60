"""The benchmark scripts still run (they are how the README's figures are made): the
worker benchmark end to end on a small corpus, against the test broker.  It checks
exactly one committed verdict per document itself."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

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
