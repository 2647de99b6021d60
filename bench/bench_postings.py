"""The posting table alone: one batch's inserts and lookups, one document at a time
(as the engine did) next to in key order (as `Tables.batch_postings` does), in a
dupsort table already holding the postings of N documents.

    python bench/bench_postings.py --docs 1000000     # about a minute, ~0.7 GB in /tmp
"""

from __future__ import annotations

import argparse
import tempfile
import time

import lmdb
import numpy as np

BANDS = 18  # the tuned banding at threshold 0.8, K = 128
BATCH = 8000  # the default batch


def items(keys: np.ndarray, docnos: np.ndarray) -> list[tuple[bytes, bytes]]:
    kb = keys.astype(">u8").tobytes()
    vb = docnos.astype(">u8").view(np.uint8).reshape(-1, 8)[:, 3:].tobytes()
    return [(kb[8 * i : 8 * i + 8], vb[5 * i : 5 * i + 5]) for i in range(len(keys))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    rng = np.random.default_rng(1)
    with tempfile.TemporaryDirectory() as tmp:
        env = lmdb.open(tmp, map_size=16 << 30, writemap=True, sync=False, max_dbs=2)
        db = env.open_db(b"buckets", dupsort=True, dupfixed=True)
        started = time.perf_counter()
        step = 50_000
        for start in range(0, args.docs, step):
            keys = rng.integers(0, 2**63, size=step * BANDS, dtype=np.uint64)
            docnos = np.repeat(np.arange(start, start + step), BANDS)
            order = np.argsort(keys)
            with env.begin(write=True) as txn:
                txn.cursor(db=db).putmulti(items(keys[order], docnos[order]), dupdata=True)
        print(f"{args.docs:,} documents' postings in {time.perf_counter() - started:.0f}s")
        print("\nper document, us        insert   lookup")
        next_docno = args.docs
        for _ in range(args.rounds):
            for mode in ("one at a time", "in key order"):
                keys = rng.integers(0, 2**63, size=BATCH * BANDS, dtype=np.uint64)
                docnos = np.repeat(np.arange(next_docno, next_docno + BATCH), BANDS)
                next_docno += BATCH
                if mode == "in key order":
                    order = np.argsort(keys)
                    keys, docnos = keys[order], docnos[order]
                batch = items(keys, docnos)
                lookups = [k for k, _ in items(rng.integers(0, 2**63, BATCH * BANDS), docnos)]
                if mode == "in key order":
                    lookups.sort()
                with env.begin(write=True) as txn:
                    cur = txn.cursor(db=db)
                    t0 = time.perf_counter()
                    if mode == "in key order":
                        cur.putmulti(batch, dupdata=True)
                    else:
                        for i in range(0, len(batch), BANDS):
                            cur.putmulti(batch[i : i + BANDS], dupdata=True)
                    t1 = time.perf_counter()
                    for k in lookups:
                        cur.set_key(k)
                    t2 = time.perf_counter()
                insert, lookup = (t1 - t0) / BATCH * 1e6, (t2 - t1) / BATCH * 1e6
                print(f"  {mode:<20} {insert:7.1f}  {lookup:7.1f}")
        env.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
