"""Regenerate the sample stream bundled with the package (used by `streamdedup demo`).

python bench/make_sample.py   # writes streamdedup/data/sample.jsonl.gz
"""

from __future__ import annotations

import gzip
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from corpus import generate

OUT = Path(__file__).parent.parent / "streamdedup" / "data" / "sample.jsonl.gz"


def main(n: int = 2000) -> None:
    with gzip.GzipFile(OUT, "wb", compresslevel=9, mtime=0) as fh:
        for doc in generate(n, seed=11):
            fh.write(doc.jsonl())
    print(f"wrote {n} documents to {OUT} ({OUT.stat().st_size:,} bytes)")


if __name__ == "__main__":
    main()
