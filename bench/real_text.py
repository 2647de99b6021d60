"""A corpus of real text found on this machine, as it is: no generated mutations.

Documents are the text files of Debian's documentation (`/usr/share/doc`: copyright
files, READMEs, change logs, plain or gzipped) and the manual pages' sources
(`/usr/share/man`, troff requests dropped), cut into pages of about `--page-bytes`
at paragraph ends.  Real near duplicates come with them: most packages' copyright
files repeat one of a few licences, with their own headers, and change logs share
boilerplate.  Generated pages flatter a deduplicator (regular vocabularies, clean
edits); this is what a crawler's stream of technical pages looks like instead.

    python bench/real_text.py --docs 30000 --out /tmp/real.jsonl
"""

from __future__ import annotations

import argparse
import gzip
import re
from collections.abc import Iterator
from pathlib import Path

import orjson

ROOTS = (Path("/usr/share/doc"), Path("/usr/share/man"))
_TROFF = re.compile(r"^[.'][^\n]*$|\\f[BIRP]|\\[-&e(]\S?", re.MULTILINE)


def _read(path: Path) -> str | None:
    try:
        raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    except (OSError, EOFError, gzip.BadGzipFile):
        return None
    if b"\x00" in raw[:4096]:
        return None  # binary
    text = raw.decode("utf-8", "replace")
    if "/man/" in str(path):
        text = _TROFF.sub("", text)
    return text


def pages(page_bytes: int) -> Iterator[tuple[str, str]]:
    """(id, text) for every page of every readable file, in path order."""
    for root in ROOTS:
        for path in sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink()):
            text = _read(path)
            if not text:
                continue
            page: list[str] = []
            size = n = 0
            for para in re.split(r"\n\s*\n", text):
                page.append(para.strip()[: 2 * page_bytes])  # a huge block (a table, a dump)
                size += len(para)
                if size >= page_bytes:
                    yield f"{path}#{n}", "\n\n".join(page)
                    page, size, n = [], 0, n + 1
            if page and size > 80:
                yield f"{path}#{n}", "\n\n".join(page)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=30_000)
    ap.add_argument("--page-bytes", type=int, default=2_900)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    n = 0
    with args.out.open("wb") as out:
        for doc_id, text in pages(args.page_bytes):
            out.write(orjson.dumps({"id": doc_id, "text": text}) + b"\n")
            n += 1
            if n >= args.docs:
                break
    print(f"{n:,} pages written to {args.out}")


if __name__ == "__main__":
    main()
