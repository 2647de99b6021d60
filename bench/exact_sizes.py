"""What each way of keeping exact verification's data would cost a page: the size of
the stored value alone (no LMDB overhead), averaged over a stream, for

- the 24-bit fingerprint sets of index format 6 (Elias-Fano, low parts in whole
  bytes: `setcodec` as it was), which are not exact and were kept *next to* the text;
- the same code for 32-bit fingerprints (not exact either: collisions rarer, not gone);
- the same code for the 64-bit shingle hashes themselves (exact but for 2^-64 events);
- the normalised text, zstd level 1 (what format 7 keeps: exact, shingled again).

It also counts the pages whose own shingles collide on a 24- or 32-bit fingerprint
(the within-set collisions that shrink a union).

    python bench/exact_sizes.py bench/out/corpus-20000-7.jsonl
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
import orjson

from streamdedup.config import IndexParams
from streamdedup.engine.compressed import compress_texts
from streamdedup.sketch.hashing import fmix64_np
from streamdedup.sketch.shingle import Shingler, normalise_utf8
from streamdedup.sketch.signature import seed_key


def elias_fano_bytes(n: int, universe_bits: int) -> int:
    """Header (5) + n low parts of whole bytes + the unary upper half, as format 6
    coded its sets."""
    if n == 0:
        return 5
    low = max(0, universe_bits - n.bit_length())
    low = -(-low // 8)
    upper_bits = n + (1 << max(0, universe_bits - 8 * low))
    return 5 + n * low + -(-upper_bits // 8)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("input")
    ap.add_argument("--limit", type=int, default=None)
    args = ap.parse_args()
    params = IndexParams()
    shingler = Shingler(params.shingle, params.hash_key)
    sizes = {"fp24": 0, "fp32": 0, "hash64": 0, "text": 0}
    collided = {24: 0, 32: 0}
    docs = 0
    with open(args.input, "rb") as src:
        for line in src:
            if args.limit is not None and docs >= args.limit:
                break
            raw = normalise_utf8(orjson.loads(line)["text"])
            hashes = np.unique(shingler.batch(None, [raw]).hashes)
            mixed = fmix64_np(hashes ^ np.uint64(seed_key(params.seed, 1)))  # as format 6
            n = len(hashes)
            for bits in (24, 32):
                distinct = len(np.unique(mixed >> np.uint64(64 - bits)))
                sizes[f"fp{bits}"] += elias_fano_bytes(distinct, bits)
                collided[bits] += distinct < n
            sizes["hash64"] += elias_fano_bytes(n, 64)
            sizes["text"] += len(compress_texts([raw])[0])
            docs += 1
    print(f"{docs:,} pages of {args.input}; bytes a page of the stored value (no LMDB overhead):")
    for name, label in (
        ("fp24", "24-bit fingerprint set, Elias-Fano (format 6, not exact)"),
        ("fp32", "32-bit fingerprint set, Elias-Fano (not exact)"),
        ("hash64", "64-bit shingle hashes, Elias-Fano (exact)"),
        ("text", "normalised text, zstd level 1 (format 7, exact)"),
    ):
        print(f"  {label:58} {sizes[name] / docs:8,.0f}")
    for bits, count in collided.items():
        print(f"  pages with two of their own shingles on one {bits}-bit fingerprint: {count:,}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
