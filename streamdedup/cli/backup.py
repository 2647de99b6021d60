"""`streamdedup backup` and `streamdedup restore`: a consistent copy of an index (also
while a worker writes to it), and a backup put in place as a worker's index; both
report the copy's documents, bytes and time, as text or JSON on stdout.

A restored copy is a new index: it gets an id of its own (`restored_identity`), so a
worker on it is never taken for a worker on the index it was copied from, which may
still be running (kafka/membership.py)."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import orjson

from streamdedup.cli.settings import require_index
from streamdedup.errors import EXIT_OK, IndexCorruptError


def cmd_backup(args: argparse.Namespace, values: dict[str, Any]) -> int:
    from streamdedup.store.index import Index

    started = time.monotonic()
    source = Index(require_index(values), readonly=True)
    try:
        dest = source.copy_to(args.dest)
    finally:
        source.close()
    return _report_copy(values, "backup", dest, time.monotonic() - started)


def cmd_restore(args: argparse.Namespace, values: dict[str, Any]) -> int:
    from streamdedup.store.index import Index

    started = time.monotonic()
    target = require_index(values)
    try:
        source = Index(args.source, readonly=True)
    except IndexCorruptError as exc:
        # The index's own advice ("put a backup in its place") does not fit a backup.
        raise IndexCorruptError(
            f"the backup at {args.source} is damaged ({exc.reason or exc}); nothing was "
            "restored: restore another backup, or rebuild the index (`streamdedup replay "
            "--mode rebuild`, or `dedup` over the same input into a new directory)"
        ) from exc
    try:
        dest = source.copy_to(target)
    finally:
        source.close()
    _new_identity(dest)
    return _report_copy(values, "restore", dest, time.monotonic() - started)


def _new_identity(path: Path) -> None:
    """Give the restored index at `path` an id of its own, descending from the backup's."""
    from streamdedup.kafka.membership import restored_identity
    from streamdedup.store.index import Index
    from streamdedup.store.keys import MetaKey
    from streamdedup.store.tables import Tables

    def renew(t: Tables) -> None:
        new = restored_identity(t.meta(MetaKey.IDENTITY))
        if new is not None:
            t.set_meta(MetaKey.IDENTITY, new)

    index = Index(path)
    try:
        index.write(renew)
    finally:
        index.close()


def _report_copy(values: dict[str, Any], what: str, dest: Any, seconds: float) -> int:
    from streamdedup.ops.report import index_stats

    stats = index_stats(str(dest))
    if values["json"]:
        print(orjson.dumps({"path": str(dest), "seconds": seconds, **stats}).decode())
    else:
        print(
            f"{what}: {stats['documents']:,} documents, {stats['file_bytes']:,} bytes "
            f"in {dest} ({seconds:.1f}s)"
        )
        sealed = stats.get("segments") or []
        if sealed:
            # A sealed segment never changes after `seal`: one copy of it is enough,
            # and a backup of the open index refers to it by its path.
            print(
                f"  not in the copy: {len(sealed)} sealed segment{'s' * (len(sealed) != 1)} "
                "(a sealed segment never changes: copy each once, keeping its path, or "
                "serve it remotely): " + ", ".join(f"{s['number']}: {s['path']}" for s in sealed)
            )
    return EXIT_OK
