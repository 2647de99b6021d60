"""Containment on real text: `streamdedup dedup --metric containment` against
datasketch's `MinHashLSHEnsemble` rebuilt as the stream grows (it cannot be
updated), each in a query-then-insert stream, side by side in one run, against
exact truth.

The stream: the pages of real text bench/real_text.py reads (Debian's documentation
and manual pages, about 2.9 KB a page), and after about one page in four an
excerpt of an earlier page -- a run of a tenth to a half of its words, a syndicated
snippet or a digest's item -- with a word changed in one excerpt of three.

- streamdedup: the command a user runs, end to end: JSON Lines in, one verdict a line
  out, the LMDB index on disk, its defaults (T = 0.8, K = 128, word 5-shingles).
- datasketch 2.0: `MinHash.generator` (one MinHash template) over the same shingles
  (streamdedup's reference shingler), `MinHashLSHEnsemble(threshold=T, num_perm=128,
  num_part=16)`, as its documentation sets it up.  It cannot be updated, so every
  `--batch` items it is built again over everything before them; the batch is
  queried against that, then against an ensemble of the batch itself (the earlier
  ones of the batch).  A query's answer is taken as it is (a duplicate when any
  earlier item comes back), as the library is used; it stores no sets to verify.
  Timed from reading the same JSON Lines file to each item's decision, in memory.
- Truth: for every item, the earlier items that hold at least T of its shingles,
  from a sparse product of the shingle incidence matrix (scipy), exact and
  independent of both.

Reported: items/s of each (and the ratio), precision and recall against truth (the
recall also counted over pairs whose earlier item is under 8 times the new one's
size, what the default plan promises), index bytes per item.  Noisy machine: compare
within one run.

    python bench/bench_containment.py --items 20000 --items 100000 --out /tmp/contain
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import random
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import scipy.sparse as sp

sys.path.insert(0, str(Path(__file__).parent))
import real_text
from bench_bits import run_streamdedup

from streamdedup.config import ShingleSpec
from streamdedup.sketch.shingle import reference_shingles

SPEC = ShingleSpec()  # word:5, the default


def stream(n: int, seed: int) -> list[str]:
    """Real pages with excerpts of earlier ones among them, `n` items."""
    rnd = random.Random(seed)
    out: list[str] = []
    for _, text in real_text.pages(2_900):
        if len(out) >= n:
            break
        out.append(text)
        if rnd.random() < 0.25 and len(out) < n:
            words = out[rnd.randrange(len(out))].split()
            if len(words) < 30:
                continue
            size = rnd.randrange(max(10, len(words) // 10), len(words) // 2 + 1)
            at = rnd.randrange(len(words) - size + 1)
            part = words[at : at + size]
            if rnd.random() < 1 / 3:
                part[rnd.randrange(len(part))] = "changed"
            out.append(" ".join(part))
    return out


def truth(sets: list[set[str]], t: float) -> tuple[np.ndarray, np.ndarray]:
    """For each item: whether an earlier one holds at least T of its shingles, and
    whether one under 8 times its size does."""
    vocab: dict[str, int] = {}
    rows, cols = [], []
    for i, s in enumerate(sets):
        for x in s:
            rows.append(i)
            cols.append(vocab.setdefault(x, len(vocab)))
    m = sp.csr_matrix(
        (np.ones(len(rows), dtype=np.int32), (rows, cols)), shape=(len(sets), len(vocab))
    )
    sizes = np.array([len(s) for s in sets], dtype=np.int64)
    inside = np.zeros(len(sets), dtype=bool)
    near = np.zeros(len(sets), dtype=bool)
    for lo in range(0, len(sets), 2000):
        hi = min(lo + 2000, len(sets))
        shared = (m[lo:hi] @ m[:hi].T).tocoo()
        a, b = shared.row + lo, shared.col
        keep = (b < a) & (sizes[a] > 0) & (shared.data >= t * sizes[a] - 1e-9)
        inside[a[keep]] = True
        near[a[keep & (sizes[b] < 8 * sizes[a])]] = True
    return inside, near


def run_datasketch(path: Path, t: float, k: int, batch: int) -> dict[str, Any]:
    from datasketch import MinHash, MinHashLSHEnsemble

    started = time.perf_counter()
    docs = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    sets = [
        [x.encode("utf-8", "surrogatepass") for x in reference_shingles(d["text"], SPEC)]
        for d in docs
    ]
    hashes = list(MinHash.generator(sets, num_perm=k))
    entries = [(i, m, max(len(s), 1)) for i, (m, s) in enumerate(zip(hashes, sets, strict=True))]
    dup = np.zeros(len(docs), dtype=bool)
    largest: Any = None  # the last ensemble of everything before a batch
    for lo in range(0, len(docs), batch):
        part = [e for e in entries[lo : lo + batch] if len(sets[e[0]])]
        for earlier in (entries[:lo], part):
            if not earlier:
                continue
            ensemble = MinHashLSHEnsemble(threshold=t, num_perm=k, num_part=16)
            ensemble.index(earlier)
            for i, m, n in part:
                dup[i] |= any(j < i for j in ensemble.query(m, n))
            if earlier is not part:
                largest = (ensemble, len(earlier))
    wall = time.perf_counter() - started
    per_item = 0.0 if largest is None else len(pickle.dumps(largest[0])) / largest[1]
    return {"wall_s": wall, "duplicate": dup, "bytes": per_item * len(docs)}


def measure(n: int, t: float, batch: int, out: Path, seed: int) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    texts = stream(n, seed)
    path = out / f"contain-{n}.jsonl"
    path.write_bytes(
        b"".join(orjson.dumps({"id": i, "text": x}) + b"\n" for i, x in enumerate(texts))
    )
    sets = [reference_shingles(x, SPEC) for x in texts]
    want, near = truth(sets, t)
    ours = run_streamdedup(
        path, out, "containment", "--metric", "containment", "--threshold", str(t)
    )
    theirs = run_datasketch(path, t, 128, batch)
    v = ours["verdicts"]
    is_dup = np.array([x["verdict"] == "duplicate" for x in v])
    wrong = 0
    for i in np.flatnonzero(is_dup).tolist():
        j = int(v[i]["duplicate_of"])
        c = len(sets[i] & sets[j]) / len(sets[i])
        wrong += not (j < i and c >= t and v[i]["similarity"] == round(c, 4))
    row: dict[str, Any] = {"items": n, "threshold": t, "true_duplicates": int(want.sum())}
    for name, got, wall, used in (
        ("streamdedup", is_dup, ours["wall_s"], ours["bytes"]),
        ("datasketch_ensemble", theirs["duplicate"], theirs["wall_s"], theirs["bytes"]),
    ):
        hits = got & want
        row[name] = {
            "items_per_s": n / wall,
            "wall_s": wall,
            "precision": float(hits.sum() / max(got.sum(), 1)),
            "recall": float(hits.sum() / max(want.sum(), 1)),
            "recall_within_8x": float((got & near).sum() / max(near.sum(), 1)),
            "bytes_per_item": used / n,
        }
    row["streamdedup"]["verified_wrong"] = wrong
    row["ratio"] = row["streamdedup"]["items_per_s"] / row["datasketch_ensemble"]["items_per_s"]
    return row


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--items", type=int, action="append", help="stream length (repeatable)")
    ap.add_argument("--threshold", type=float, default=0.8)
    ap.add_argument(
        "--batch", type=int, default=8000, help="items between rebuilds (streamdedup's batch)"
    )
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    rows = []
    for n in args.items or [20_000]:
        row = measure(n, args.threshold, args.batch, args.out / str(n), args.seed)
        rows.append(row)
        s, d = row["streamdedup"], row["datasketch_ensemble"]
        print(
            f"{n:>9,} items, containment >= {row['threshold']}, "
            f"{row['true_duplicates']:,} true duplicates: "
            f"streamdedup {s['items_per_s']:,.0f}/s (P {s['precision']:.4f}, R {s['recall']:.4f}, "
            f"R<8x {s['recall_within_8x']:.4f}, {s['bytes_per_item']:,.0f} B/item); "
            f"datasketch ensemble {d['items_per_s']:,.0f}/s (P {d['precision']:.4f}, "
            f"R {d['recall']:.4f}, R<8x {d['recall_within_8x']:.4f}); "
            f"ratio {row['ratio']:.2f}x",
            flush=True,
        )
    for row in rows:  # the target: at least 10x the rebuilt ensemble at 100k
        at_scale = row["items"] >= 100_000
        verdict = ("met" if row["ratio"] >= 10 else "missed") if at_scale else "not judged"
        print(
            f"target (>= 10x the rebuilt ensemble at 100k), at {row['items']:,}: "
            f"{row['ratio']:.2f}x, {verdict}"
        )
    (args.out / "bench_containment.json").write_text(json.dumps(rows, indent=1))
    print(f"results written to {args.out / 'bench_containment.json'} ({os.cpu_count()} CPUs)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
