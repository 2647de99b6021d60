"""The segmented-index tests' shared parts: the streams they run (from the benchmark's
generators, with the cases segments make hard added on purpose), `dedup` over one
index against `dedup` with the index sealed along the way, segment servers as separate
processes, and the record-by-record comparison of verdict files."""

from __future__ import annotations

import importlib
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import orjson

from tests.support.reaper import reap_with_this_process

BENCH = Path(__file__).resolve().parents[2] / "bench"

# what must be equal, record for record (the verdict contract's keys, `reason` too)
FIELDS = ("id", "verdict", "duplicate_of", "cluster", "similarity", "exact", "reason")


def bench_module(name: str) -> ModuleType:
    """A benchmark script as a module (bench/ is not a package; templates.py imports
    corpus.py as a sibling)."""
    sys.path.insert(0, str(BENCH))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(BENCH))


# ---------------------------------------------------------------------------- streams


def mixed_stream(n: int, seed: int) -> list[dict[str, Any]]:
    """`n` documents: crawl-like prose with mutated re-emissions (bench/corpus.py) and
    template-heavy site pages (bench/templates.py: hot LSH buckets, so the candidate
    caps bite), interleaved, plus the cases that cross segment boundaries:

    - ~3% an earlier id sent again with changed content (a tombstone once that id is
      sealed); half of them pick an id whose text was copied exactly, so the content
      passes to a copy (possibly in another segment); some get an edit of their own
      earlier text (a near-duplicate of the version they replace);
    - ~1.5% an earlier id sent again with its current content (its stored verdict);
    - ~2.5% exact copies of an earlier text under a new id;
    - ~0.3% documents without words (never candidates);
    - every 50th fresh document has an integer id.
    The same for the same arguments."""
    corpus, templates = bench_module("corpus"), bench_module("templates")
    rnd = random.Random(seed)
    crawl: Iterator[Any] = corpus.generate(n, seed)
    pages: Iterator[Any] = templates.generate(n, seed + 1)
    vocab = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"]
    out: list[dict[str, Any]] = []
    current: dict[Any, str] = {}  # id -> its latest text
    ids: list[Any] = []  # every id, once, in order of first appearance
    copied: list[Any] = []  # ids whose text was copied exactly (at the time)
    fresh = 0
    for i in range(n):
        r = rnd.random()
        if ids and r < 0.03:
            doc_id = rnd.choice(copied) if copied and rnd.random() < 0.5 else rnd.choice(ids)
            if rnd.random() < 0.3:  # an edit of itself: words changed at one place
                words = current[doc_id].split()
                k = rnd.randrange(len(words)) if words else 0
                words[k:k] = rnd.sample(vocab, 3)
                text = " ".join(words)
            else:
                text = next(crawl if rnd.random() < 0.6 else pages).text
        elif ids and r < 0.045:
            doc_id = rnd.choice(ids)
            text = current[doc_id]
        elif ids and r < 0.07:
            source = rnd.choice(ids)
            copied.append(source)
            doc_id, text = f"copy-{i}", current[source]
        elif r < 0.073:
            doc_id, text = f"empty-{i}", rnd.choice(["", "  ", "--- !!! ---", "…"])
        else:
            doc = next(crawl if rnd.random() < 0.6 else pages)
            fresh += 1
            doc_id, text = (10_000_000 + i if fresh % 50 == 0 else doc.id), doc.text
        if doc_id not in current:
            ids.append(doc_id)
        current[doc_id] = text
        out.append({"id": doc_id, "text": text})
    return out


@dataclass
class Crafted:
    """A stream in phases (`cuts`: where the index is sealed, between phases) built so
    that each case segments make hard happens across a segment boundary; `roles` names
    the documents the test looks at (position in the stream)."""

    docs: list[dict[str, Any]]
    cuts: list[int]
    roles: dict[str, int]


def crafted_stream(seed: int = 3) -> Crafted:
    """Four phases (sealed after each of the first three):

    0. pages of one site (a 300-word template, bodies of 3-12 words: every page a near
       duplicate of the others through the template alone, so its LSH buckets are hot
       and `--max-bucket-candidates` decides the candidates); `A`, and `B` an exact copy
       of it; `Y`, the text X edited at one place; `R`.
    1. more site pages; `B2` another copy of A; `Z`, X edited at another place (ties
       with Y against `W`); `P3` again with the same text (its stored verdict).
    2. A's id with new text (a tombstone for A, A's content passes to B, in another
       segment); the three newest site pages' ids with new text (their postings are
       the newest of the hot buckets: a cap applied before the mask finds nothing);
       R's id with its own text edited (a near-duplicate of its own sealed version);
       `W1`, a new site page; `C1`, a copy of A's text; `N1`, A's text edited; `W`, X
       edited at a third place.
    3. (open) B's id with new text (A's content passes on to B2); `C2`, a copy of A's
       text; `N2`, A's text edited; `W2`, another site page; R again with its current
       text; P3 again."""
    rnd = random.Random(seed)

    def words(n: int) -> list[str]:
        return [f"w{rnd.randrange(10**7)}" for _ in range(n)]

    template = words(300)
    head, foot = template[:100], template[100:]

    def page() -> str:
        return " ".join([*head, *words(rnd.randint(3, 12)), *foot])

    def edited(text: str, at: int, n: int = 1) -> str:
        ws = text.split()
        ws[at : at + n] = words(n)
        return " ".join(ws)

    docs: list[dict[str, Any]] = []
    roles: dict[str, int] = {}
    cuts: list[int] = []

    def add(doc_id: Any, text: str, role: str | None = None) -> None:
        if role is not None:
            roles[role] = len(docs)
        docs.append({"id": doc_id, "text": text})

    site: list[str] = []
    a_text, x_text, r_text = " ".join(words(200)), " ".join(words(200)), " ".join(words(150))
    for k in range(10):
        site.append(page())
        add(f"site-{k}", site[-1])
    add("A", a_text, "A")
    add("B", a_text, "B")
    add("Y", edited(x_text, 50), "Y")
    add("R", r_text, "R")
    cuts.append(len(docs))
    for k in range(10, 16):
        site.append(page())
        add(f"site-{k}", site[-1])
    add("B2", a_text, "B2")
    add("Z", edited(x_text, 150), "Z")
    add("site-3", site[3], "P3-again")
    cuts.append(len(docs))
    add("A", " ".join(words(120)), "A-replaced")
    for k in (13, 14, 15):
        add(f"site-{k}", " ".join(words(100)), f"site-{k}-replaced")
    r_text = edited(r_text, 70, 2)
    add("R", r_text, "R-edited")
    add("W1", page(), "W1")
    add("C1", a_text, "C1")
    add("N1", edited(a_text, 100), "N1")
    add("W", edited(x_text, 100), "W")
    cuts.append(len(docs))
    add("B", " ".join(words(120)), "B-replaced")
    add("C2", a_text, "C2")
    add("N2", edited(a_text, 30), "N2")
    add(1234, page(), "W2")
    add("R", r_text, "R-again")
    add("site-3", site[3], "P3-third")
    return Crafted(docs, cuts, roles)


def write_jsonl(path: Path, docs: Sequence[dict[str, Any]]) -> Path:
    path.write_bytes(b"".join(orjson.dumps(d) + b"\n" for d in docs))
    return path


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(x) for x in path.read_bytes().splitlines()]


# ---------------------------------------------------------------------------- commands


def cli_args(*args: str) -> list[str]:
    """The command line of `streamdedup ARGS`."""
    return [sys.executable, "-m", "streamdedup.cli", *args]


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    """`streamdedup ARGS` to its end."""
    return subprocess.run(
        cli_args(*args),
        capture_output=True,
        env={**os.environ, **(env or {})},
        timeout=600,
    )


def ok(r: subprocess.CompletedProcess[bytes]) -> subprocess.CompletedProcess[bytes]:
    assert r.returncode == 0, (r.args, r.returncode, r.stderr.decode(errors="replace")[-4000:])
    return r


def dedup(src: Path, index: Path, out: Path, *extra: str) -> None:
    ok(
        cli(
            "dedup",
            str(src),
            "--index",
            str(index),
            "--output",
            str(out),
            "--progress",
            "never",
            *extra,
        )
    )


def seal(
    index: Path, segment: Path, *extra: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[bytes]:
    return cli("seal", "--index", str(index), str(segment), *extra, env=env)


@dataclass
class SealedRun:
    """`dedup` over consecutive slices of one stream with `seal` between the slices:
    the verdicts of all slices in order, and the segments made."""

    verdicts: list[dict[str, Any]]
    segments: list[Path] = field(default_factory=list)


def dedup_in_slices(
    docs: Sequence[dict[str, Any]],
    work: Path,
    cuts: Sequence[int],
    *extra: str,
    seal_args: Sequence[str] | Callable[[int], Sequence[str]] = (),
    slice_args: Callable[[int], Sequence[str]] | None = None,
    between: Callable[[Path, Sequence[str]], None] | None = None,
) -> SealedRun:
    """`dedup` over docs[0:cuts[0]], `seal`, docs[cuts[0]:cuts[1]], `seal`, ..., the
    rest, into one index under `work`.  `extra` goes to every `dedup`, and
    `slice_args(k)` too to the k-th; `seal_args` (or `seal_args(k)`) to the seal
    before slice k; `between(segment_path, its seal_args)` runs after each seal (e.g.
    to start the segment's server)."""
    work.mkdir(parents=True, exist_ok=True)
    index = work / "index"
    bounds = [0, *cuts, len(docs)]
    run = SealedRun([])
    for k in range(len(bounds) - 1):
        if k > 0:
            segment = work / f"segment-{k}"
            args = seal_args(k) if callable(seal_args) else seal_args
            ok(seal(index, segment, *args))
            run.segments.append(segment)
            if between is not None:
                between(segment, args)
        src = write_jsonl(work / f"slice-{k}.jsonl", docs[bounds[k] : bounds[k + 1]])
        out = work / f"slice-{k}.verdicts.jsonl"
        dedup(src, index, out, *extra, *(slice_args(k) if slice_args is not None else ()))
        run.verdicts.extend(read_jsonl(out))
    return run


def registry(index: Path) -> list[Any]:
    """The sealed segments the open index names (read-only)."""
    from streamdedup.store.index import Index
    from streamdedup.store.segment.registry import segments

    idx = Index(index, readonly=True)
    try:
        return idx.read(segments)
    finally:
        idx.close()


def assert_same_verdicts(got: Sequence[dict[str, Any]], expected: Sequence[dict[str, Any]]) -> None:
    """Record for record on FIELDS; on a difference, says where and how many."""
    assert len(got) == len(expected), f"{len(got)} verdicts, expected {len(expected)}"
    differ = [
        i
        for i, (a, b) in enumerate(zip(got, expected, strict=True))
        if any(a.get(f) != b.get(f) for f in FIELDS)
    ]
    if differ:
        shown = [
            f"#{i}: got {{{', '.join(f'{f}={got[i].get(f)!r}' for f in FIELDS)}}} "
            f"expected {{{', '.join(f'{f}={expected[i].get(f)!r}' for f in FIELDS)}}}"
            for i in differ[:5]
        ]
        raise AssertionError(f"{len(differ)} of {len(got)} verdicts differ:\n" + "\n".join(shown))


def kinds(verdicts: Sequence[dict[str, Any]]) -> dict[str, int]:
    """How many verdicts of each kind a stream gave (to show a test exercises them)."""
    out = {"unique": 0, "duplicate": 0, "exact": 0, "empty": 0}
    for v in verdicts:
        out[v["verdict"]] += 1
        out["exact"] += bool(v["exact"])
        out["empty"] += v.get("reason") == "empty"
    return out


# ---------------------------------------------------------------------------- servers


class Servers:
    """`segment-server` processes, each killed (SIGKILL) when the test ends however it
    ends; `wrap(argv)` places one elsewhere (e.g. in a network namespace)."""

    def __init__(self, bootstrap: str, *extra: str) -> None:
        self.bootstrap = bootstrap
        self.extra = extra
        self.procs: list[subprocess.Popen[bytes]] = []
        self.logs: list[Path] = []

    def start(
        self, segment: Path, *, wrap: Any = None, log: Path | None = None
    ) -> subprocess.Popen[bytes]:
        argv = [
            sys.executable,
            "-m",
            "streamdedup.cli",
            "segment-server",
            str(segment),
            "--bootstrap-servers",
            self.bootstrap,
            *self.extra,
        ]
        log = log or segment.with_name(f"{segment.name}.server-{len(self.procs)}.log")
        with open(log, "wb") as sink:
            proc = subprocess.Popen(
                wrap(argv) if wrap is not None else argv, stdout=sink, stderr=subprocess.STDOUT
            )
        reap_with_this_process(proc.pid)
        self.procs.append(proc)
        self.logs.append(log)
        return proc

    def kill(self, proc: subprocess.Popen[bytes]) -> None:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)

    def alive(self) -> None:
        """Fail with a server's log if one has stopped."""
        for proc, log in zip(self.procs, self.logs, strict=True):
            if proc.poll() is not None and proc.returncode != -signal.SIGKILL:
                raise AssertionError(
                    f"segment server {proc.args} exited with {proc.returncode}: "
                    f"{log.read_text(errors='replace')[-3000:]}"
                )

    def stop(self) -> None:
        for proc in self.procs:
            self.kill(proc)

    def __enter__(self) -> Servers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def wait_for(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.1)
