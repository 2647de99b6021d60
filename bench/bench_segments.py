"""The writer with sealed segments, next to one index, on the same stream.

A crawl-like stream (bench/corpus.py) is cut into three equal slices A, B, C, and
three indexes are built before C:

- **single**: `dedup A+B` into one index;
- **local**: `dedup A`, `seal` (segment 1), `dedup B`, `seal` (segment 2): the writer
  opens both segments itself;
- **remote**: the same with `seal --remote`; two `segment-server` processes, one per
  segment, answer over the broker (the embedded Tansu unless `--bootstrap`).

Either way the writer then holds nothing itself, and the two segments hold 2/3 of the
documents.  Each round times `dedup C` on a fresh copy of each index, the order
rotating from round to round (this machine's speed drifts): docs/s from dedup's own
summary (its processing, without the process start), and the process's wall time.
The verdicts of C must be the same, record for record, from all three, and the same as
one `dedup` over the whole stream.  The remote runs record every probe's round trip
(`observe`, below): p50 and p99 over all rounds.  At the end, each server's /metrics:
probes answered, its own time per answer, bytes per probe and answer.

Then the sizes: `dedup` over the whole stream with `--seal-every N` (local segments),
sampling the open segment's high-water mark as it runs: it stays bounded by what N
documents need, while one index grows with the stream; and the disk each segment takes.
And the segment servers' own memory (RssAnon).

Everything -- broker, two servers, the writer -- shares the machine's cores.

    python bench/bench_segments.py --docs 60000            # embedded Tansu
    python bench/bench_segments.py --docs 60000 --rounds 5 --batch-size 500
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from statistics import median
from typing import Any

import orjson

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
from bench_worker import cluster, rss_anon_mb, save  # noqa: E402
from corpus import generate  # noqa: E402

CLI = [sys.executable, "-m", "streamdedup.cli"]
KINDS = ["single", "local", "remote"]
RATE = re.compile(rb"\(([\d,]+) docs/s\)")


def cli(*args: str, **kwargs: Any) -> subprocess.CompletedProcess[bytes]:
    r = subprocess.run([*CLI, *args], capture_output=True, **kwargs)
    if r.returncode != 0:
        raise SystemExit(f"streamdedup {' '.join(args)}: exit {r.returncode}\n{r.stderr.decode()}")
    return r


def dedup(
    corpus: Path, index: Path, out: Path, *extra: str, round_trips: Path | None = None
) -> tuple[float, float, subprocess.CompletedProcess[bytes]]:
    """(docs/s as dedup reports it, wall seconds of the process, the process).  With
    `round_trips`, the command runs under `observe` (below), which writes every probe's
    round trip there."""
    t = time.perf_counter()
    args = ["dedup", str(corpus), "--index", str(index), "--output", str(out)]
    args += ["--progress", "never", *extra]
    if round_trips is None:
        r = cli(*args)
    else:
        r = subprocess.run(
            [sys.executable, __file__, "--observe", str(round_trips), "--", *args],
            capture_output=True,
        )
        if r.returncode != 0:
            raise SystemExit(f"dedup under observe: exit {r.returncode}\n{r.stderr.decode()}")
    wall = time.perf_counter() - t
    m = RATE.search(r.stderr)
    assert m, r.stderr.decode()
    return float(m.group(1).replace(b",", b"")), wall, r


def observe(out: Path, argv: list[str]) -> int:
    """Run the command line `argv` as `streamdedup` does, in this process, recording the
    round trip of every probe the writer's remote segments answer -- from the probe
    sent to its answer filed, as the writer's `streamdedup_segment_probe_seconds`
    histogram measures it, but each value rather than buckets: the command's own
    `RemoteSegments` gets a metrics object that also keeps them.  Nothing else
    changes: the command runs as it would."""
    from prometheus_client import CollectorRegistry

    from streamdedup.cli.main import entry
    from streamdedup.kafka.segment_service import client as segment_client
    from streamdedup.ops.metrics import SegmentClientMetrics

    seen: list[tuple[str, float]] = []

    class Recording(SegmentClientMetrics):
        def answered(self, segment: str, seconds: float) -> None:
            seen.append((segment, seconds))
            super().answered(segment, seconds)

    original = segment_client.RemoteSegments.__init__

    def init(self: Any, link: Any, **kwargs: Any) -> None:
        given = kwargs.get("metrics")
        if given is None:
            kwargs["metrics"] = Recording(CollectorRegistry())
        else:  # keep the command's own metrics, and see what they are told
            answered = given.answered
            given.answered = lambda s, x: (seen.append((s, x)), answered(s, x))[1]
        original(self, link, **kwargs)

    segment_client.RemoteSegments.__init__ = init  # type: ignore[method-assign]
    try:
        return entry(argv)
    finally:
        out.write_bytes(orjson.dumps(seen))


def write_jsonl(path: Path, lines: list[bytes]) -> Path:
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def verdict_fields(path: Path) -> list[tuple[Any, ...]]:
    keys = ("id", "verdict", "duplicate_of", "cluster", "similarity", "exact")
    return [tuple(orjson.loads(x).get(k) for k in keys) for x in path.read_bytes().splitlines()]


@contextlib.contextmanager
def servers(
    bootstrap: str, segments: list[Path], logs: Path
) -> Iterator[list[tuple[subprocess.Popen[bytes], int]]]:
    """One `segment-server` process per segment (with its metrics port), each ready
    (its /readyz green: answering probes) before the block runs, so that no round trip
    counts a server's start; stopped (SIGTERM) at the end."""
    procs = []
    try:
        for seg in segments:
            log = (logs / f"server-{seg.name}.log").open("wb")
            port = free_port()
            argv = [*CLI, "segment-server", str(seg), "--bootstrap-servers", bootstrap]
            argv += ["--metrics-port", str(port)]
            procs.append((subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=log), port))
        for (p, port), seg in zip(procs, segments, strict=True):
            wait_ready(p, port, logs / f"server-{seg.name}.log")
        yield procs
    finally:
        for p, _ in procs:
            p.send_signal(signal.SIGTERM)
        for p, _ in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def wait_ready(proc: subprocess.Popen[bytes], port: int, log: Path, timeout: float = 120) -> None:
    """Until the server's /readyz answers 200 (it joined its segment's consumer group
    and holds the probe partition)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"segment server exited with {proc.returncode}: see {log}")
        with (
            contextlib.suppress(OSError),  # not listening yet, or 503 (not ready)
            urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as r,
        ):
            if r.status == 200:
                return
        time.sleep(0.1)
    raise SystemExit(f"segment server not ready within {timeout:.0f} s: see {log}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def server_figures(port: int) -> dict[str, float]:
    """What a segment server's /metrics says it did: probes answered, its own time
    per answer (mean), bytes in and out."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    got = {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}
    answers = got["streamdedup_segment_answer_seconds_count"]
    return {
        "probes": got["streamdedup_segment_probes_total"],
        "answer_s_mean": got["streamdedup_segment_answer_seconds_sum"] / max(answers, 1),
        "probe_bytes": got["streamdedup_segment_probe_bytes_total"],
        "answer_bytes": got["streamdedup_segment_answer_bytes_total"],
    }


def segment_record(path: Path) -> dict[str, Any]:
    """A sealed segment's manifest fields, and the disk its directory takes (blocks
    allocated, every file: what a host serving it needs)."""
    m = orjson.loads((path / "manifest.json").read_bytes())
    disk = sum(f.stat().st_blocks * 512 for f in path.iterdir())
    keys = ("number", "documents", "first_docno", "next_docno")
    return {**{k: m[k] for k in keys}, "bytes": disk}


def summary_of_trips(trips: list[list[Any]]) -> dict[str, dict[str, float]]:
    """p50, p99 and max of the probe round trips, per segment and over all."""
    groups: dict[str, list[float]] = {"all segments": [x for _, x in trips]}
    for segment, x in trips:
        groups.setdefault(f"segment {segment}", []).append(x)
    return {
        label: {
            "probes": len(xs),
            "p50": percentile(xs, 0.5),
            "p99": percentile(xs, 0.99),
            "max": max(xs),
        }
        for label, xs in groups.items()
        if xs
    }


def percentile(xs: list[float], q: float) -> float:
    """Nearest-rank percentile (no interpolation: with few samples, p99 is the max)."""
    s = sorted(xs)
    return s[min(len(s), max(1, math.ceil(q * len(s)))) - 1]


def sample_pages(index: Path, stop: threading.Event, out: list[tuple[float, int]]) -> None:
    """The open segment's high-water mark in bytes (LMDB's last used page; the file
    never shrinks, and the index reserves 64 MiB of blocks ahead, so neither its size
    nor its blocks say what it holds), ten times a second, until `stop`."""
    import lmdb

    t0 = time.perf_counter()
    env = None
    while not stop.is_set():
        if env is None and (index / "data.mdb").exists():
            with contextlib.suppress(lmdb.Error):
                env = lmdb.open(str(index), readonly=True, max_dbs=0)
        if env is not None:
            info, psize = env.info(), env.stat()["psize"]
            out.append((round(time.perf_counter() - t0, 2), (info["last_pgno"] + 1) * psize))
        stop.wait(0.1)
    if env is not None:
        env.close()


def used_bytes(index: Path) -> int:
    """Pages in use, as `stats` counts them."""
    return int(orjson.loads(cli("stats", "--index", str(index), "--json").stdout)["bytes_used"])


def main() -> int:
    if len(sys.argv) > 3 and sys.argv[1] == "--observe" and sys.argv[3] == "--":
        return observe(Path(sys.argv[2]), sys.argv[4:])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=30000, help="the whole stream (3 slices)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds of the timing")
    ap.add_argument(
        "--batch-size",
        type=int,
        default=2000,
        help="documents per batch, so one probe per segment per this many documents "
        "(2,000: about what a worker's poll hands over)",
    )
    ap.add_argument(
        "--seal-every", type=int, default=0, help="for the size run (default: docs / 6)"
    )
    ap.add_argument("--bootstrap", help="use this cluster instead of the embedded broker")
    ap.add_argument("--results", type=Path, default=HERE / "out", help="where the JSON goes")
    args = ap.parse_args()
    n = args.docs - args.docs % 3
    lines = [
        orjson.dumps({"id": d.id, "text": d.text}) for d in generate(n, seed=47, memory=50_000)
    ]
    third = n // 3
    results: dict[str, Any] = {
        "docs": n,
        "batch_size": args.batch_size,
        "cores": os.cpu_count(),
        "rounds": [],
    }
    batch = ("--batch-size", str(args.batch_size))
    with (
        cluster(args.bootstrap) as bootstrap,
        tempfile.TemporaryDirectory(prefix="bench-segments-") as d,
    ):
        tmp = Path(d)
        a = write_jsonl(tmp / "a.jsonl", lines[:third])
        b = write_jsonl(tmp / "b.jsonl", lines[third : 2 * third])
        c = write_jsonl(tmp / "c.jsonl", lines[2 * third :])
        ab = write_jsonl(tmp / "ab.jsonl", lines[: 2 * third])
        whole = write_jsonl(tmp / "whole.jsonl", lines)
        remote = ("--bootstrap-servers", bootstrap)
        # the indexes before C: one index; two local segments; two remote segments
        indexes = {k: tmp / f"{k}-index" for k in KINDS}
        segs = {k: [tmp / f"{k}-segments" / "1", tmp / f"{k}-segments" / "2"] for k in KINDS[1:]}
        dedup(ab, indexes["single"], tmp / "ab.out", *batch)
        for kind in ("local", "remote"):
            how = ("--remote",) if kind == "remote" else ()
            dedup(a, indexes[kind], tmp / "a.out", *batch)
            cli("seal", "--index", str(indexes[kind]), str(segs[kind][0]), *how)
            with servers(bootstrap, segs[kind][:1] if how else [], tmp):
                dedup(b, indexes[kind], tmp / "b.out", *batch, *(remote if how else ()))
            cli("seal", "--index", str(indexes[kind]), str(segs[kind][1]), *how)
        dedup(whole, tmp / "whole-index", tmp / "whole.out", *batch)
        reference = verdict_fields(tmp / "whole.out")[2 * third :]
        manifests = [segment_record(s) for s in segs["remote"]]
        results["segments"] = manifests
        print(
            f"{n:,} documents; C = {n - 2 * third:,} checked against two sealed segments "
            f"holding {sum(m['documents'] for m in manifests):,} ({2 * third:,} ids)",
            flush=True,
        )
        with servers(bootstrap, segs["remote"], tmp) as procs:
            for r in range(args.rounds):
                rnd = one_round(r, tmp, c, indexes, batch, remote, reference)
                results["rounds"].append(rnd)
                print(
                    f"round {r + 1} (in the order {', '.join(rnd['order'])}): "
                    + "; ".join(
                        f"{k} {rnd[k]['docs_per_s']:,.0f} docs/s ({rnd[k]['wall_s']:.2f} s wall)"
                        for k in KINDS
                    )
                    + f"; remote/single {rnd['ratio']:.0%}, local/single {rnd['local_ratio']:.0%}"
                    + f" (load average {rnd['load_average']:.1f} on {os.cpu_count()} cores)",
                    flush=True,
                )
            results["server_rss_anon_mb"] = [rss_anon_mb(p.pid) for p, _ in procs]
            results["servers"] = [server_figures(port) for _, port in procs]
        for key, what in (("ratio", "two remote"), ("local_ratio", "two local")):
            ratios = sorted(x[key] for x in results["rounds"])
            results[f"{key}_median"] = median(ratios)
            print(
                f"{what} segments / single index, per round: "
                + ", ".join(f"{x:.0%}" for x in ratios)
                + f" (median {median(ratios):.0%})"
            )
        print(f"segment servers' own memory (RssAnon MB): {results['server_rss_anon_mb']}")
        for i, s in enumerate(results["servers"], 1):
            print(
                f"segment server {i}: {s['probes']:.0f} probes, {s['answer_s_mean'] * 1e3:.0f} ms "
                f"per answer (its own time), {s['probe_bytes'] / max(s['probes'], 1) / 1e6:.2f} MB"
                f" per probe, {s['answer_bytes'] / max(s['probes'], 1) / 1e6:.2f} MB per answer"
            )
        trips = [x for rnd in results["rounds"] for x in rnd.pop("round_trips")]
        results["round_trips"] = summary_of_trips(trips)
        for label, s in sorted(results["round_trips"].items()):
            print(
                f"probe round trip, {label}: p50 {s['p50'] * 1e3:.0f} ms, p99 "
                f"{s['p99'] * 1e3:.0f} ms, max {s['max'] * 1e3:.0f} ms over {s['probes']} probes"
            )
        results["sizes"] = sizes(tmp, whole, args.seal_every or max(1, n // 6), batch)
        s = results["sizes"]
        print(
            f"--seal-every {s['seal_every']:,}: the open segment's high-water mark "
            f"{s['open_high_water_bytes'] / 1e6:.1f} MB ({s['open_used_bytes_at_end'] / 1e6:.1f}"
            f" MB in use at the end) against one index's {s['single_used_bytes'] / 1e6:.1f}"
            f" MB in use; {len(s['segments'])} segments of "
            + ", ".join(f"{x['bytes'] / 1e6:.1f}" for x in s["segments"])
            + " MB (data.mdb each)"
        )
    save("bench_segments", results, args.results)
    return 0


def one_round(
    r: int,
    tmp: Path,
    c: Path,
    indexes: dict[str, Path],
    batch: tuple[str, ...],
    remote: tuple[str, ...],
    reference: list[tuple[Any, ...]],
) -> dict[str, Any]:
    """`dedup C` on a fresh copy of each index, the order rotating from round to round;
    every run's verdicts must equal one index's over the whole stream."""
    order = KINDS[r % 3 :] + KINDS[: r % 3]
    # the machine's 1-minute load average as the round starts: how shared it was
    out: dict[str, Any] = {"order": order, "load_average": os.getloadavg()[0]}
    for kind in order:
        index = tmp / f"{kind}-{r}"
        shutil.copytree(indexes[kind], index, copy_function=copy_sparse)
        rtt = tmp / f"rtt-{r}.json" if kind == "remote" else None
        extra = remote if kind == "remote" else ()
        rate, wall, _ = dedup(c, index, tmp / f"{kind}-{r}.out", *batch, *extra, round_trips=rtt)
        if rtt is not None:
            out["round_trips"] = orjson.loads(rtt.read_bytes())
        got = verdict_fields(tmp / f"{kind}-{r}.out")
        assert got == reference, f"{kind}: verdicts differ from one index over the whole stream"
        out[kind] = {"docs_per_s": rate, "wall_s": wall}
        shutil.rmtree(index)
    out["ratio"] = out["remote"]["docs_per_s"] / out["single"]["docs_per_s"]
    out["local_ratio"] = out["local"]["docs_per_s"] / out["single"]["docs_per_s"]
    return out


def copy_sparse(src: str, dst: str) -> None:
    """`shutil.copy2` that keeps a file's holes: an index's data.mdb is a 1 GiB sparse
    file of a few MB in use, which a plain copy reads and writes whole (seconds of CPU
    per copy).  The copy has the same bytes, and holes where the source has them."""
    with open(src, "rb") as s, open(dst, "wb") as d:
        fd, end = s.fileno(), os.fstat(s.fileno()).st_size
        start = 0
        while start < end:
            try:
                start = os.lseek(fd, start, os.SEEK_DATA)
            except OSError as exc:
                if exc.errno != errno.ENXIO:
                    raise
                break  # no data after `start`: the rest is a hole
            stop = os.lseek(fd, start, os.SEEK_HOLE)
            s.seek(start)
            d.seek(start)
            while start < stop:
                chunk = s.read(min(stop - start, 1 << 20))
                if not chunk:
                    raise OSError(f"{src} shrank while it was copied")
                d.write(chunk)
                start += len(chunk)
        d.truncate(end)
    shutil.copystat(src, dst)


def sizes(tmp: Path, whole: Path, every: int, batch: tuple[str, ...]) -> dict[str, Any]:
    """The open segment's high-water mark while `dedup --seal-every` runs over the
    whole stream, what it holds at the end, the segments it left (their data.mdb:
    the disk a segment takes on its host), next to one index over the same stream."""
    index, segdir = tmp / "sealing-index", tmp / "sealing-segments"
    samples: list[tuple[float, int]] = []
    stop = threading.Event()
    watcher = threading.Thread(target=sample_pages, args=(index, stop, samples))
    watcher.start()
    try:
        dedup(
            whole,
            index,
            tmp / "sealing.out",
            *batch,
            "--seal-every",
            str(every),
            "--segments-dir",
            str(segdir),
        )
    finally:
        stop.set()
        watcher.join()
    manifests = sorted(
        (segment_record(p.parent) for p in segdir.glob("*/manifest.json")),
        key=lambda m: m["number"],
    )
    assert verdict_fields(tmp / "sealing.out") == verdict_fields(tmp / "whole.out")
    single = tmp / "whole-index"
    return {
        "seal_every": every,
        "open_high_water_bytes": max(s for _, s in samples),
        "open_used_bytes_at_end": used_bytes(index),
        "open_samples": samples[:: max(1, len(samples) // 50)],
        "single_used_bytes": used_bytes(single),
        "single_data_mdb_bytes": (single / "data.mdb").stat().st_size,
        "segments": manifests,
    }


if __name__ == "__main__":
    sys.exit(main())
