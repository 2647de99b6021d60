"""An index's whole content, table by table, to compare two indexes."""

from __future__ import annotations

from pathlib import Path

from streamdedup.store.index import Index


def dump(path: Path) -> dict[str, list[tuple[bytes, bytes]]]:
    index = Index(path, readonly=True)
    try:

        def read(t):
            out = {}
            for name in ("ids", "docs", "sigs", "texts", "content", "copies", "expiry"):
                out[name] = list(t.items(name))
            out["postings"] = t.postings.live()  # the runs' shapes depend on the history
            out["meta"] = [
                (name, t.meta(name)) for name in ("next_docno", "counts", "clock", "params")
            ]
            return out

        return index.read(read)
    finally:
        index.close()
