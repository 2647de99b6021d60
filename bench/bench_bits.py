"""Hamming distance on 64-bit strings: `streamdedup dedup --metric hamming` against
faiss's `IndexBinaryMultiHash`, each in a query-then-insert stream, side by side in one
run, against exact truth.

The stream: first the 64-bit SimHashes (Charikar; word 3-grams, as docs/guide/
families.md computes them) of every paragraph of real prose bench/corpus.py reads (the
stdlib's docstrings: 9,029 paragraphs on Python 3.11), then, up to `--items`, random
strings (unrelated pages) and near copies of earlier strings, 0-6 random bits flipped
(a re-crawled page's SimHash; 30% of the stream).

- streamdedup: the command a user runs, end to end: JSON Lines in (hex), one verdict a
  line out, the LMDB index on disk, its default tuning.
- faiss: `IndexBinaryMultiHash(64, nhash=D+1, b=64 // (D+1))`, as an expert sets it
  for radius D: by the pigeonhole principle two strings within D bits agree exactly on
  one of D+1 chunks, so its range search finds every pair (recall 1); a batch of
  `--batch` strings is searched against everything before it, then against itself
  (`IndexBinaryFlat`: the earlier ones of the batch), then added.  Timed from reading
  the same JSON Lines file (orjson, `bytes.fromhex`) to each string's decision, in
  memory, writing nothing.
- Truth: for every string, whether an earlier one lies within D bits, by multi-index
  hashing in numpy (every pair sharing one of D+1 chunks, measured exactly): exact, and
  independent of both.

Reported: items/s of each (and the ratio), precision (every streamdedup duplicate's
distance measured again: exact to the bit) and recall against truth, index bytes per
item.  Noisy machine: compare within one run.

    python bench/bench_bits.py --items 100000 --items 1000000 --out /tmp/bits
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson

sys.path.insert(0, str(Path(__file__).parent))
import corpus

U64 = npt.NDArray[np.uint64]


def simhash(text: str) -> int:
    words = text.lower().split()
    grams = {" ".join(words[i : i + 3]) for i in range(max(len(words) - 2, 1))}
    digests = [hashlib.blake2b(g.encode(), digest_size=8).digest() for g in grams]
    hashes = np.array([int.from_bytes(d, "big") for d in digests], dtype=np.uint64)
    bits = (hashes[:, None] >> np.arange(63, -1, -1, dtype=np.uint64)) & np.uint64(1)
    votes = 2 * bits.sum(axis=0, dtype=np.int64) - len(hashes)
    return int.from_bytes(np.packbits(votes > 0).tobytes(), "big")


def stream(n: int, seed: int) -> U64:
    """The real SimHashes, then random strings and near copies of earlier ones."""
    real = np.array([simhash(p) for g in corpus.paragraphs() for p in g], dtype=np.uint64)
    rng = np.random.default_rng(seed)
    out = np.empty(max(n, len(real)), dtype=np.uint64)
    out[: len(real)] = real
    rest = len(out) - len(real)
    out[len(real) :] = rng.integers(0, 2**64, size=rest, dtype=np.uint64)
    pos = np.arange(len(real), len(out))
    copies = pos[rng.random(rest) < 0.3]
    sources = (rng.random(len(copies)) * copies).astype(np.int64)
    masks = np.zeros(len(copies), dtype=np.uint64)
    flips = rng.integers(0, 7, size=len(copies))
    for k in range(6):
        bit = rng.integers(0, 64, size=len(copies)).astype(np.uint64)
        masks ^= np.where(flips > k, np.uint64(1) << bit, np.uint64(0))
    for lo in range(0, len(copies), 1 << 16):  # in order: a copy of a copy sees its source's
        part = slice(lo, lo + (1 << 16))
        out[copies[part]] = out[sources[part]] ^ masks[part]
    return out[:n]


def popcount(x: U64) -> npt.NDArray[np.int64]:
    return np.bitwise_count(x).astype(np.int64)


def truth(values: U64, radius: int) -> npt.NDArray[np.bool_]:
    """Whether each string has an earlier one within `radius` bits, exactly."""
    n, chunks = len(values), radius + 1
    found = np.zeros(n, dtype=bool)
    width = 64 // chunks
    for c in range(chunks):
        shift = np.uint64(64 - width * (c + 1)) if c < chunks - 1 else np.uint64(0)
        bits = width if c < chunks - 1 else 64 - width * (chunks - 1)
        key = (values >> shift) & np.uint64((1 << bits) - 1)
        order = np.lexsort((np.arange(n), key))
        k = key[order]
        starts = np.flatnonzero(np.r_[True, k[1:] != k[:-1]])
        sizes = np.diff(np.r_[starts, n])
        for lag in range(1, int(sizes.max())):  # member j against member j - lag of its group
            j = np.flatnonzero(np.arange(n) - np.repeat(starts, sizes) >= lag)
            if not len(j):
                break
            a, b = order[j], order[j - lag]  # b earlier in the stream (lexsort by position)
            close = popcount(values[a] ^ values[b]) <= radius
            found[a[close]] = True
    return found


def run_streamdedup(path: Path, out: Path, name: str, *options: str) -> dict[str, Any]:
    """`streamdedup dedup PATH OPTIONS` as a user runs it, into OUT/streamdedup-NAME-*:
    its wall time, its verdicts and the bytes its index uses (bench_vectors.py too)."""
    index = out / f"streamdedup-{name}-index"
    verdicts = out / f"streamdedup-{name}-verdicts.jsonl"
    cmd = [sys.executable, "-m", "streamdedup.cli", "dedup", str(path), "--index", str(index)]
    cmd += ["--output", str(verdicts), *options, "--progress", "never"]
    started = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, check=False)
    wall = time.perf_counter() - started
    if r.returncode != 0:
        raise SystemExit(r.stderr.decode()[-2000:])
    got = [orjson.loads(line) for line in verdicts.read_bytes().splitlines()]
    stats = subprocess.run(
        [sys.executable, "-m", "streamdedup.cli", "stats", "--index", str(index), "--json"],
        capture_output=True,
        check=True,
    )
    used = orjson.loads(stats.stdout)["bytes_used"]
    return {"wall_s": wall, "verdicts": got, "bytes": used}


def run_faiss(path: Path, radius: int, batch: int) -> dict[str, Any]:
    import faiss

    started = time.perf_counter()
    rows = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    codes = np.frombuffer(b"".join(bytes.fromhex(r["bits"]) for r in rows), dtype=np.uint8)
    codes = codes.reshape(len(rows), 8)
    chunks = radius + 1
    index = faiss.IndexBinaryMultiHash(64, chunks, 64 // chunks)
    dup = np.zeros(len(rows), dtype=bool)
    for lo in range(0, len(rows), batch):
        x = codes[lo : lo + batch]
        if index.ntotal:
            lims, _, _ = index.range_search(x, radius + 1)  # (strictly below the radius)
            dup[lo : lo + len(x)] |= lims[1:] > lims[:-1]
        within = faiss.IndexBinaryFlat(64)
        within.add(x)
        lims, _, ids = within.range_search(x, radius + 1)
        q = np.repeat(np.arange(len(x)), np.diff(lims).astype(np.int64))
        earlier = ids < q
        dup[lo + q[earlier]] = True
        index.add(x)
    wall = time.perf_counter() - started
    size = len(faiss.serialize_index_binary(index))
    return {"wall_s": wall, "duplicate": dup, "bytes": size}


def measure(n: int, radius: int, batch: int, out: Path, seed: int) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    values = stream(n, seed)
    path = out / f"bits-{n}.jsonl"
    path.write_bytes(
        b"".join(
            orjson.dumps({"id": i, "bits": f"{v:016x}"}) + b"\n"
            for i, v in enumerate(values.tolist())
        )
    )
    want = truth(values, radius)
    family = ("--metric", "hamming", "--bits", "64", "--max-distance", str(radius))
    ours = run_streamdedup(path, out, "hamming", *family)
    theirs = run_faiss(path, radius, batch)
    v = ours["verdicts"]
    is_dup = np.array([x["verdict"] == "duplicate" for x in v])
    wrong = 0
    for i in np.flatnonzero(is_dup).tolist():
        d = popcount(
            values[i : i + 1] ^ values[int(v[i]["duplicate_of"]) : int(v[i]["duplicate_of"]) + 1]
        )[0]
        wrong += not (d <= radius and v[i]["distance"] == d and v[i]["duplicate_of"] < i)
    tp = int((is_dup & want).sum())
    row = {
        "items": n,
        "max_distance": radius,
        "true_duplicates": int(want.sum()),
        "streamdedup": {
            "items_per_s": n / ours["wall_s"],
            "wall_s": ours["wall_s"],
            "precision": 1.0 - wrong / max(int(is_dup.sum()), 1),
            "recall": tp / max(int(want.sum()), 1),
            "bytes_per_item": ours["bytes"] / n,
        },
        "faiss_multihash": {
            "items_per_s": n / theirs["wall_s"],
            "wall_s": theirs["wall_s"],
            "precision": float(
                (theirs["duplicate"] & want).sum() / max(theirs["duplicate"].sum(), 1)
            ),
            "recall": float((theirs["duplicate"] & want).sum() / max(int(want.sum()), 1)),
            "bytes_per_item": theirs["bytes"] / n,
        },
    }
    row["ratio"] = row["streamdedup"]["items_per_s"] / row["faiss_multihash"]["items_per_s"]
    return row


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--items", type=int, action="append", help="stream length (repeatable)")
    ap.add_argument("--max-distance", type=int, default=3)
    ap.add_argument("--batch", type=int, default=8000, help="faiss's batch (streamdedup's default)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    rows = []
    for n in args.items or [100_000]:
        row = measure(n, args.max_distance, args.batch, args.out / str(n), args.seed)
        rows.append(row)
        s, f = row["streamdedup"], row["faiss_multihash"]
        print(
            f"{n:>9,} items, d <= {row['max_distance']}, "
            f"{row['true_duplicates']:,} true duplicates: "
            f"streamdedup {s['items_per_s']:,.0f}/s (P {s['precision']:.4f}, R {s['recall']:.4f}, "
            f"{s['bytes_per_item']:,.0f} B/item); faiss multi-hash {f['items_per_s']:,.0f}/s "
            f"(P {f['precision']:.4f}, R {f['recall']:.4f}, {f['bytes_per_item']:,.1f} B/item); "
            f"ratio {row['ratio']:.2f}x",
            flush=True,
        )
    for row in rows:  # the target: at least 1x faiss's multi-hash at 1M strings
        at_scale = row["items"] >= 1_000_000
        verdict = ("met" if row["ratio"] >= 1 else "missed") if at_scale else "not judged"
        print(
            f"target (>= 1x faiss multi-hash at 1M), at {row['items']:,}: "
            f"{row['ratio']:.2f}x, {verdict}"
        )
    (args.out / "bench_bits.json").write_text(json.dumps(rows, indent=1))
    print(f"results written to {args.out / 'bench_bits.json'} ({os.cpu_count()} CPUs)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
