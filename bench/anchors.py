"""The alternatives, each used as someone who knows the library would: MinHash + LSH,
query then insert per document, end to end (reading JSON Lines, writing one verdict
per line), with the same shingling definition (streamdedup's reference shingler),
the same K and the same threshold.

- `datasketch`: `MinHash.generator` (one MinHash template, copied per document: the
  permutations are generated once, not per document) + `MinHashLSH`, whose bands and
  rows datasketch picks itself for the threshold.
- `rensa`: `RMinHash` + `RMinHashLSH` (the Rust library).  rensa asks for the number
  of bands, which must divide K, and has no optimiser: the divisor with datasketch's
  criterion (`rensa_bands`), or `--bands`.  bench_dedup.py works it out itself and
  passes it, as a rensa user would write the number down: `rensa_bands` imports
  datasketch (and scipy), a second of start-up that is none of rensa's own.

A document is a duplicate when the LSH query returns any earlier document (how both
libraries' LSH is used for de-duplication; neither stores sets to verify against).
Ids are indexed once: a repeated id is not inserted again.

    python bench/anchors.py datasketch INPUT OUTPUT --threshold 0.8 --num-perm 128
    python bench/anchors.py rensa INPUT OUTPUT --threshold 0.8
    python bench/anchors.py rensa INPUT OUTPUT --threshold 0.8 --bands 8

The figures of the slow way -- `MinHash(num_perm=K)` per document, regenerating the
permutations every time -- are quoted once in docs/benchmarks.md, labelled
as such; this script no longer runs it.
"""

from __future__ import annotations

import argparse
import pickle
import sys
from collections import deque
from collections.abc import Iterator
from typing import Any

import orjson

from streamdedup.config import ShingleSpec
from streamdedup.sketch.shingle import reference_shingles


def documents(path: str, spec: ShingleSpec) -> Iterator[tuple[Any, set[str]]]:
    """(id, shingle strings) of each input line."""
    with open(path, "rb") as src:
        for raw in src:
            doc = orjson.loads(raw)
            yield doc["id"], reference_shingles(doc["text"], spec)


def verdict(doc_id: Any, found: Any) -> bytes:
    return (
        orjson.dumps(
            {
                "id": doc_id,
                "verdict": "duplicate" if found else "unique",
                "duplicate_of": found,
            }
        )
        + b"\n"
    )


def run_datasketch(args: argparse.Namespace, spec: ShingleSpec) -> int:
    from datasketch import MinHash, MinHashLSH

    lsh = MinHashLSH(threshold=args.threshold, num_perm=args.num_perm)
    ids: deque[Any] = deque()  # the id of each set the generator has taken
    seen: set[Any] = set()

    def shingle_sets() -> Iterator[list[bytes]]:  # datasketch hashes bytes
        for doc_id, shingles in documents(args.input, spec):
            ids.append(doc_id)
            yield [s.encode("utf-8", "surrogatepass") for s in shingles]

    with open(args.output, "wb") as out:
        for m in MinHash.generator(shingle_sets(), num_perm=args.num_perm):
            doc_id = ids.popleft()
            found = lsh.query(m)
            out.write(verdict(doc_id, found[0] if found else None))
            if doc_id not in seen:
                seen.add(doc_id)
                lsh.insert(doc_id, m)
    if args.index_size_to:
        with open(args.index_size_to, "w") as fh:
            fh.write(str(len(pickle.dumps(lsh, protocol=pickle.HIGHEST_PROTOCOL))))
    return 0


def rensa_bands(threshold: float, num_perm: int) -> int:
    """The bands for rensa, which needs them to divide K: of those, the one with the
    least false positive + false negative area (datasketch's own criterion, equal
    weights), e.g. 8 bands of 16 rows at K = 128 and T = 0.8, 4 of 32 at T = 0.9."""
    from datasketch.lsh import _false_negative_probability, _false_positive_probability

    def error(b: int) -> float:
        r = num_perm // b
        fp = _false_positive_probability(threshold, b, r)
        fn = _false_negative_probability(threshold, b, r)
        return float(fp + fn)

    return min((b for b in range(1, num_perm + 1) if num_perm % b == 0), key=error)


def run_rensa(args: argparse.Namespace, spec: ShingleSpec) -> int:
    from rensa import RMinHash, RMinHashLSH

    bands = args.bands or rensa_bands(args.threshold, args.num_perm)
    lsh = RMinHashLSH(threshold=args.threshold, num_perm=args.num_perm, num_bands=bands)
    keys: dict[Any, int] = {}  # rensa's keys are integers: our ids by arrival
    names: list[Any] = []
    with open(args.output, "wb") as out:
        for doc_id, shingles in documents(args.input, spec):
            m = RMinHash(num_perm=args.num_perm, seed=42)
            m.update(list(shingles))  # rensa takes the strings themselves
            found = lsh.query(m)
            out.write(verdict(doc_id, names[min(found)] if found else None))
            if doc_id not in keys:
                keys[doc_id] = len(names)
                names.append(doc_id)
                lsh.insert(keys[doc_id], m)
    if args.index_size_to:  # rensa's index does not pickle: the signatures it holds
        with open(args.index_size_to, "w") as fh:
            fh.write(str(len(names) * args.num_perm * 4))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("library", choices=["datasketch", "rensa"])
    ap.add_argument("input")
    ap.add_argument("output")
    ap.add_argument("--threshold", type=float, default=0.8)
    ap.add_argument("--num-perm", type=int, default=128)
    ap.add_argument("--shingle", default="word:5")
    ap.add_argument(
        "--bands",
        type=int,
        help="rensa: its number of bands, a divisor of --num-perm (default: rensa_bands's "
        "choice for the threshold, which imports datasketch to make it)",
    )
    ap.add_argument("--index-size-to", help="write the index size in bytes here")
    args = ap.parse_args()
    spec = ShingleSpec.parse(args.shingle)
    if args.library == "datasketch":
        return run_datasketch(args, spec)
    return run_rensa(args, spec)


if __name__ == "__main__":
    sys.exit(main())
