"""`streamdedup` as a user runs it: subprocesses, real files, real LMDB."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

from streamdedup.cli.main import main
from tests.support.cli import corpus, lines, run, start_dedup


def test_dedup_writes_one_verdict_per_line_in_order(tmp_path: Path) -> None:
    docs = corpus(tmp_path / "in.jsonl", 300)
    r = run(
        "dedup",
        str(tmp_path / "in.jsonl"),
        "--output",
        str(tmp_path / "out.jsonl"),
        "--index",
        str(tmp_path / "idx"),
    )
    assert r.returncode == 0, r.stderr
    out = lines(tmp_path / "out.jsonl")
    assert [o["id"] for o in out] == [d["id"] for d in docs]
    assert {o["verdict"] for o in out} == {"unique", "duplicate"}
    assert b"300 lines" in r.stderr and b"docs/s" in r.stderr
    assert b"\r" not in r.stderr  # no progress bar when stderr is not a terminal


def test_second_run_checks_against_the_first(tmp_path: Path) -> None:
    corpus(tmp_path / "a.jsonl", 50, seed=2)
    (tmp_path / "b.jsonl").write_bytes(
        b"".join(
            orjson.dumps({"id": f"copy-{d['id']}", "text": d["text"]}) + b"\n"
            for d in lines(tmp_path / "a.jsonl")
        )
    )
    idx = str(tmp_path / "idx")
    assert (
        run("dedup", str(tmp_path / "a.jsonl"), "--index", idx, "--output", os.devnull).returncode
        == 0
    )
    r = run("dedup", str(tmp_path / "b.jsonl"), "--index", idx, "--output", "-")
    out = [orjson.loads(x) for x in r.stdout.splitlines()]
    assert all(o["verdict"] == "duplicate" and o["exact"] for o in out)


def test_stdin_to_stdout(tmp_path: Path) -> None:
    data = b'{"id": 1, "text": "alpha beta gamma delta epsilon zeta"}\n' * 2
    r = run("dedup", "-", "--index", str(tmp_path / "idx"), stdin=data)
    out = [orjson.loads(x) for x in r.stdout.splitlines()]
    assert [o["verdict"] for o in out] == ["unique", "unique"]  # same id, same text: replay


def test_bad_input_gets_error_records_and_processing_goes_on(tmp_path: Path) -> None:
    big = orjson.dumps({"id": "big", "text": "word " * (10 * 1024 * 1024)})  # 50 MB
    assert len(big) > 50_000_000
    rows = [
        b'{"id": "ok1", "text": "the first good document with several words in it"}',
        b'{"id": "broken", "text": ',
        b'{"text": "no id"}',
        b'{"id": "noText"}',
        b'{"id": "num", "text": 42}',
        b'{"id": "latin1", "text": "caf\xe9"}',
        b'{"id": "empty", "text": ""}',
        big,
        b"",
        b'{"id": "ok2", "text": "the first good document with several words in it"}',
    ]
    (tmp_path / "in.jsonl").write_bytes(b"\n".join(rows) + b"\n")
    r = run(
        "dedup",
        str(tmp_path / "in.jsonl"),
        "--index",
        str(tmp_path / "idx"),
        "--output",
        str(tmp_path / "out.jsonl"),
    )
    assert r.returncode == 1, r.stderr  # finished, but some lines were rejected
    out = lines(tmp_path / "out.jsonl")
    assert len(out) == len(rows)
    kinds = [(o["verdict"], o.get("error")) for o in out]
    assert kinds == [
        ("unique", None),
        ("error", "malformed_json"),
        ("error", "missing_id"),
        ("error", "missing_text"),
        ("error", "bad_text"),
        ("error", "invalid_utf8"),
        ("unique", None),
        ("error", "too_large"),
        ("error", "malformed_json"),
        ("duplicate", None),
    ]
    assert out[6]["reason"] == "empty"
    assert out[1]["line"] == 2 and "malformed JSON" in out[1]["message"]
    assert out[3]["id"] == "noText"
    assert b"rejected 7" in r.stderr


def test_options_from_environment_and_toml(tmp_path: Path) -> None:
    corpus(tmp_path / "in.jsonl", 20)
    (tmp_path / "conf.toml").write_text('num-perm = 64\n[dedup]\nshingle = "char:5"\n')
    r = run(
        "dedup",
        str(tmp_path / "in.jsonl"),
        "--config",
        str(tmp_path / "conf.toml"),
        "--output",
        os.devnull,
        env={"STREAMDEDUP_INDEX": str(tmp_path / "idx"), "STREAMDEDUP_THRESHOLD": "0.6"},
    )
    assert r.returncode == 0, r.stderr
    stats = orjson.loads(run("stats", "--index", str(tmp_path / "idx"), "--json").stdout)
    assert stats["parameters"]["num_perm"] == 64
    assert stats["parameters"]["shingle"] == "char:5"
    assert stats["parameters"]["threshold"] == 0.6


def test_parameter_mismatch_exits_2_with_both_values(tmp_path: Path) -> None:
    corpus(tmp_path / "in.jsonl", 5)
    idx = str(tmp_path / "idx")
    run("dedup", str(tmp_path / "in.jsonl"), "--index", idx, "--output", os.devnull)
    r = run(
        "dedup",
        str(tmp_path / "in.jsonl"),
        "--index",
        idx,
        "--threshold",
        "0.5",
        "--output",
        os.devnull,
    )
    assert r.returncode == 2
    assert b"--threshold 0.8" in r.stderr and b"--threshold 0.5" in r.stderr


def test_usage_errors_exit_2(tmp_path: Path) -> None:
    assert run("dedup", "in.jsonl").returncode == 2  # no --index
    r = run(
        "dedup", str(tmp_path / "missing.jsonl"), "--index", str(tmp_path / "i"), "--bands", "20"
    )
    assert r.returncode == 2 and b"--bands and --rows" in r.stderr
    r = run("dedup", "-", "--index", str(tmp_path / "i"), env={"STREAMDEDUP_NUM_PERM": "x"})
    assert r.returncode == 2 and b"STREAMDEDUP_NUM_PERM" in r.stderr


def test_tune_prints_the_s_curve(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tune", "--threshold", "0.8", "--num-perm", "128"]) == 0
    out = capsys.readouterr().out
    assert "b = 18 bands x r = 7 rows" in out
    assert "approximate threshold (1/b)^(1/r) = 0.6617" in out
    assert "0.8  0.98" in out and "false-negative area" in out
    assert main(["tune", "--bands", "20", "--rows", "5", "--num-perm", "100", "--json"]) == 0
    data = orjson.loads(capsys.readouterr().out)
    assert data["bands"] == 20 and round(data["s_curve"][2]["p_candidate"], 3) == 0.047


def test_tune_draws_bit_samplings_curve(capsys: pytest.CaptureFixture[str]) -> None:
    """`tune --metric hamming`: the b x r a new index gets (99% of the pairs at the bar
    share a bucket), and P(candidate) by distance, 1 - (1 - (1 - d/N)^r)^b."""
    assert main(["tune", "--metric", "hamming", "--bits", "64", "--max-distance", "3"]) == 0
    out = capsys.readouterr().out
    assert "(sampled bits): b = 11 bands x r = 22 rows" in out and "P = 0.9909" in out
    assert "         3  0.9531  0.990914  <- the bar" in out
    args = ["tune", "--metric", "hamming", "--bits", "256", "--threshold", "0.95", "--json"]
    assert main(args) == 0
    data = orjson.loads(capsys.readouterr().out)
    assert data["max_distance"] == 12 and data["p_candidate_at_bar"] >= 0.99
    for point in data["curve"]:
        q = 1 - point["distance"] / 256
        want = 1 - (1 - q ** data["rows"]) ** data["bands"]
        assert point["row_probability"] == q and point["p_candidate"] == pytest.approx(want)
    assert main(["tune", "--metric", "hamming"]) == 2
    assert "needs --bits, the length N of the bit strings" in capsys.readouterr().err
    assert main(["tune", "--bits", "64"]) == 2
    assert "--bits applies to another --metric than jaccard" in capsys.readouterr().err


def test_tune_draws_the_vector_families_curves(capsys: pytest.CaptureFixture[str]) -> None:
    """`tune --metric cosine|euclidean`: each family's row probability (1 - theta/pi;
    the p-stable formula, 1 at distance 0 and falling) in the S-curve, 99% of the
    pairs at the bar candidates with the default b x r."""
    assert main(["tune", "--metric", "cosine", "--threshold", "0.9", "--json"]) == 0
    data = orjson.loads(capsys.readouterr().out)
    assert data["bar"] == 0.9 and data["p_candidate_at_bar"] >= 0.99
    for point in data["curve"]:
        q = 1 - math.acos(point["cosine"]) / math.pi
        assert point["row_probability"] == pytest.approx(q, abs=1e-12)
        want = 1 - (1 - q ** data["rows"]) ** data["bands"]
        assert point["p_candidate"] == pytest.approx(want)
    args = ["tune", "--metric", "euclidean", "--max-distance", "2", "--json"]
    assert main(args) == 0
    data = orjson.loads(capsys.readouterr().out)
    assert data["bucket_width"] == 8.0 and data["p_candidate_at_bar"] >= 0.99
    rows = [p["row_probability"] for p in data["curve"]]
    assert rows[0] == 1.0 and rows == sorted(rows, reverse=True) and rows[-1] < 0.2
    assert main(["tune", "--metric", "euclidean", "--max-distance", "2"]) == 0
    assert "euclidean <= 2.0 by K = 256 projections in buckets of 8" in capsys.readouterr().out
    assert main(["tune", "--metric", "euclidean"]) == 2
    assert "needs --max-distance" in capsys.readouterr().err


def test_tune_draws_containments_plan(capsys: pytest.CaptureFixture[str]) -> None:
    """`tune --metric containment`: each class offset's least Jaccard at the bar (the
    containment-to-Jaccard bound at the worst sizes), its b x r reaching 99% there,
    and the curve in containment for a pair of those sizes."""
    assert main(["tune", "--metric", "containment", "--threshold", "0.9", "--json"]) == 0
    data = orjson.loads(capsys.readouterr().out)
    assert data["bar"] == 0.9 and [o["offset"] for o in data["offsets"]] == [-1, 0, 1, 2, 3]
    for o in data["offsets"]:
        ratio = o["size_ratio_at_most"]
        assert o["p_candidate_at_bar"] >= 0.99 and o["bands"] * o["rows"] <= 128
        for point in o["curve"]:
            c = point["containment"]
            assert point["jaccard"] == pytest.approx(c / (1 + ratio - c))
            want = 1 - (1 - point["jaccard"] ** o["rows"]) ** o["bands"]
            assert point["p_candidate"] == pytest.approx(want)
    assert main(["tune", "--metric", "containment"]) == 0
    assert "391 bucket keys an item" in capsys.readouterr().out
    assert main(["tune", "--metric", "containment", "--bands", "4", "--rows", "2"]) == 2


def test_stats_and_inspect(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    docs = corpus(tmp_path / "in.jsonl", 200, seed=5)
    idx = str(tmp_path / "idx")
    main(["dedup", str(tmp_path / "in.jsonl"), "--index", idx, "--output", str(tmp_path / "o")])
    capsys.readouterr()
    assert main(["stats", "--index", idx]) == 0
    text = capsys.readouterr().out
    assert "documents    200" in text and "size" in text and "buckets" in text
    dup = next(o for o in lines(tmp_path / "o") if o["verdict"] == "duplicate")
    assert main(["inspect", "--index", idx, str(dup["id"]), "--json"]) == 0
    info = orjson.loads(capsys.readouterr().out)
    assert info["cluster"] == dup["cluster"]
    assert any(n["id"] == dup["duplicate_of"] and n["jaccard"] >= 0.8 for n in info["neighbours"])
    assert main(["inspect", "--index", idx, "nope"]) == 1
    assert len(docs) == 200


def test_workers_give_the_same_verdicts(tmp_path: Path) -> None:
    corpus(tmp_path / "in.jsonl", 400, seed=6)
    outs = []
    for w in ("0", "1", "2"):
        out = tmp_path / f"out{w}.jsonl"
        r = run(
            "dedup",
            str(tmp_path / "in.jsonl"),
            "--index",
            str(tmp_path / f"idx{w}"),
            "--output",
            str(out),
            "--workers",
            w,
            "--batch-size",
            "50",
        )
        assert r.returncode == 0, r.stderr
        outs.append(out.read_bytes())
    assert outs[0] == outs[1] == outs[2]


@pytest.mark.slow
def test_kill_9_leaves_an_index_holding_every_written_verdict(tmp_path: Path) -> None:
    docs = corpus(tmp_path / "in.jsonl", 20_000, seed=7)
    idx, out = tmp_path / "idx", tmp_path / "out.jsonl"
    proc = start_dedup(tmp_path / "in.jsonl", idx, out, "200", stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while time.time() < deadline and (not out.exists() or out.stat().st_size < 200_000):
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    written = [orjson.loads(x) for x in out.read_bytes().splitlines() if x.endswith(b"}")]
    assert 0 < len(written) < len(docs), "the kill must land mid-run"
    # The index opens, and re-running the same input reproduces every written verdict.
    out2 = tmp_path / "out2.jsonl"
    r = run("dedup", str(tmp_path / "in.jsonl"), "--index", str(idx), "--output", str(out2))
    assert r.returncode == 0, r.stderr
    again = lines(out2)
    assert again[: len(written)] == written
    assert len(again) == len(docs)


def test_ctrl_c_exits_130_and_keeps_the_index_usable(tmp_path: Path) -> None:
    corpus(tmp_path / "in.jsonl", 5000, seed=8)
    idx, out = tmp_path / "idx", tmp_path / "out.jsonl"
    proc = start_dedup(tmp_path / "in.jsonl", idx, out, "100", stderr=subprocess.PIPE)
    while not out.exists() or out.stat().st_size == 0:
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode in (0, 130)
    if proc.returncode == 130:
        assert b"interrupted" in err
    assert main(["stats", "--index", str(idx)]) == 0


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_after_the_command_finished_keeps_its_exit_status(sig: int) -> None:
    # A stop arriving while a finished run shuts down must not turn exit 0 into -SIG.
    script = (
        "import os, sys, time; from streamdedup.cli.main import entry\n"
        "status = entry(['tune', '--threshold', '0.8'])\n"
        f"os.kill(os.getpid(), {int(sig)}); time.sleep(0.2)\n"
        "sys.exit(status)\n"
    )
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr.decode()[-2000:]
    assert b"bands" in r.stdout


@pytest.mark.integration
def test_demo_runs_the_worker_on_the_embedded_broker() -> None:
    r = run("demo")
    assert r.returncode == 0, r.stderr.decode()[-2000:]
    assert b"Kafka worker on an embedded broker" in r.stderr
    assert b"broker 127.0.0.1:" in r.stderr
    assert b"2000 messages" in r.stdout and b"duplicate 307 (exact 64)" in r.stdout
    assert b"dead-lettered 0" in r.stdout
    assert b"some near-duplicates it found" in r.stdout


def test_demo_in_file_mode_finds_the_same(tmp_path: Path) -> None:
    r = run("demo", "--file-mode", "--output", str(tmp_path / "v.jsonl"))
    assert r.returncode == 0, r.stderr.decode()[-2000:]
    assert b"2000 lines" in r.stdout and b"duplicate 307 (exact 64)" in r.stdout
    assert len((tmp_path / "v.jsonl").read_bytes().splitlines()) == 2000
    assert r.stdout.count(b"    both say: ") == 3  # (where each pair agrees)


def test_every_command_has_a_handler() -> None:
    """The handlers are imported by name when their command runs: each must exist."""
    from streamdedup.cli.main import HANDLERS, handler
    from streamdedup.cli.table import COMMANDS

    assert set(HANDLERS) == set(COMMANDS)
    for command in COMMANDS:
        assert callable(handler(command))


def test_dedup_imports_no_kafka_metrics_or_html_modules(tmp_path: Path) -> None:
    """A `dedup` of JSON Lines loads only what it runs: the Kafka client, the metrics
    registry, the HTTP server, the WARC reader, the HTML extractor and multiprocessing
    were a tenth of a one-second run of 50,000 one-line documents."""
    corpus(tmp_path / "in.jsonl", 20)
    script = (
        "import sys\n"
        "from streamdedup.cli.main import main\n"
        f"status = main(['dedup', {str(tmp_path / 'in.jsonl')!r}, '--index', "
        f"{str(tmp_path / 'idx')!r}, '--output', {str(tmp_path / 'out.jsonl')!r}])\n"
        "heavy = ('kafka', 'prometheus_client', 'http.server', 'fastwarc', 'resiliparse', "
        "'multiprocessing', 'streamdedup.kafka', 'streamdedup.ops.metrics')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy or m in heavy))\n"
        "sys.exit(status)\n"
    )
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"
    assert len(lines(tmp_path / "out.jsonl")) == 20


def test_the_command_collects_cycles_less_often() -> None:
    # `entry` (the console script) raises the youngest generation's threshold for its
    # own process; `main`, called in process by a host, leaves the host's alone.
    script = (
        "import gc, sys; from streamdedup.cli.main import YOUNG_GC_THRESHOLD, entry, main\n"
        "before = gc.get_threshold()\n"
        "main(['tune', '--threshold', '0.8'])\n"
        "assert gc.get_threshold() == before, gc.get_threshold()\n"
        "entry(['tune', '--threshold', '0.8'])\n"
        "assert gc.get_threshold()[0] == YOUNG_GC_THRESHOLD != before[0], gc.get_threshold()\n"
    )
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr.decode()[-2000:]


def test_the_command_loads_numpy_with_one_blas_thread() -> None:
    # OpenBLAS starts (and spins) a thread per core when numpy loads; the command does
    # no linear algebra.  A value the user set wins.
    script = (
        "import os, sys\n"
        "import streamdedup.cli, numpy\n"
        "print(os.environ['OPENBLAS_NUM_THREADS'], len(os.listdir('/proc/self/task')))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, env=env, timeout=60)
    assert r.stdout.split() == [b"1", b"1"], r.stderr.decode()[-2000:]
    r = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        env={**env, "OPENBLAS_NUM_THREADS": "2"},
        timeout=60,
    )
    assert r.stdout.split()[0] == b"2", r.stderr.decode()[-2000:]
