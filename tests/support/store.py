"""An index's whole content, table by table, to compare two indexes."""

from __future__ import annotations

from pathlib import Path

from streamdedup.config import public_params
from streamdedup.store.index import Index


def dump(source: Path | Index) -> dict[str, list[tuple[bytes, bytes]]]:
    """By path (opened read-only here) or through an index this process has open
    (py-lmdb refuses a second environment on the same directory in one process)."""
    index = source if isinstance(source, Index) else Index(source, readonly=True)
    try:

        def read(t):
            out = {}
            for name in ("ids", "docs", "sigs", "texts", "content", "copies", "expiry"):
                out[name] = list(t.items(name))
            out["postings"] = t.postings.live()  # the runs' shapes depend on the history
            # each index draws its own secret hash key; what it holds must not depend on it
            out["meta"] = [
                (name, _public(t.meta(name)))
                for name in ("next_docno", "counts", "clock", "params")
            ]
            return out

        return index.read(read)
    finally:
        if index is not source:
            index.close()


def _public(value: object) -> object:
    return public_params(value) if isinstance(value, dict) else value
