"""`streamdedup backup` and `streamdedup restore`: a consistent copy of an index (also
while a worker writes to it), and a backup put in place as a worker's index; both
report the copy's documents, bytes and time, as text or JSON on stdout."""

from __future__ import annotations

import argparse
import time
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
    return _report_copy(values, "restore", dest, time.monotonic() - started)


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
