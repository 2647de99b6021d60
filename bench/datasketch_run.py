"""The alternative, done the usual way: datasketch MinHash + MinHashLSH, query then
insert per document, the same shingling definition (streamdedup's reference
shingler), the same K and threshold.  Reads JSON Lines, writes one verdict per line.

    python bench/datasketch_run.py INPUT OUTPUT --threshold 0.8 --num-perm 128
"""

from __future__ import annotations

import argparse
import pickle
import sys

import orjson
from datasketch import MinHash, MinHashLSH

from streamdedup.config import ShingleSpec
from streamdedup.sketch.shingle import reference_shingles


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("input")
    ap.add_argument("output")
    ap.add_argument("--threshold", type=float, default=0.8)
    ap.add_argument("--num-perm", type=int, default=128)
    ap.add_argument("--shingle", default="word:5")
    ap.add_argument("--index-size-to", help="write the pickled index size here")
    args = ap.parse_args()
    spec = ShingleSpec.parse(args.shingle)
    lsh = MinHashLSH(threshold=args.threshold, num_perm=args.num_perm)
    with open(args.input, "rb") as src, open(args.output, "wb") as out:
        for raw in src:
            doc = orjson.loads(raw)
            m = MinHash(num_perm=args.num_perm)
            m.update_batch(
                [s.encode("utf-8", "surrogatepass") for s in reference_shingles(doc["text"], spec)]
            )
            found = lsh.query(m)
            out.write(
                orjson.dumps(
                    {
                        "id": doc["id"],
                        "verdict": "duplicate" if found else "unique",
                        "duplicate_of": found[0] if found else None,
                    }
                )
                + b"\n"
            )
            if doc["id"] not in lsh:
                lsh.insert(doc["id"], m)
    if args.index_size_to:
        with open(args.index_size_to, "w") as fh:
            fh.write(str(len(pickle.dumps(lsh, protocol=pickle.HIGHEST_PROTOCOL))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
