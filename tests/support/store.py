"""An index's whole content, table by table, to compare two indexes."""

from __future__ import annotations

from pathlib import Path

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
            out["meta"] = [
                (name, t.meta(name)) for name in ("next_docno", "counts", "clock", "params")
            ]
            return out

        return index.read(read)
    finally:
        if index is not source:
            index.close()


def share_key(source: Path, target: Path) -> None:
    """Make the (new) index at `target` take the parameters of the one at `source`,
    shingle hash key included: two indexes hash alike, and so can be compared table
    by table, only under one key (each new index draws its own)."""
    from streamdedup.store.keys import MetaKey

    src = Index(source, readonly=True)
    try:
        params = src.read(lambda t: t.meta(MetaKey.PARAMS))
    finally:
        src.close()
    dst = Index(target)
    try:
        dst.write(lambda t: t.set_meta(MetaKey.PARAMS, params))
    finally:
        dst.close()
