"""`streamdedup seal`: move everything the index holds so far into a new sealed
segment (store.segment.sealing.seal), and say what was sealed, as text or JSON on stdout.
`streamdedup repoint`: register sealed segments at the place they were moved to.

It opens the index for writing like a worker does, so it may run while a worker or
`dedup` writes the same index: the seal waits for the batch in flight and the next
batch waits for the seal (LMDB's writer lock serialises them)."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import orjson

from streamdedup.cli.settings import require_index
from streamdedup.errors import EXIT_OK, IndexOpenError


def cmd_seal(args: argparse.Namespace, values: dict[str, Any]) -> int:
    from streamdedup.store.index import Index
    from streamdedup.store.segment.sealing import seal

    path = _existing_index(values)
    remote = bool(values.get("remote"))  # a switch not given is None
    started = time.monotonic()
    index = Index(path)
    try:
        manifest = seal(index, Path(args.segment_dir), remote=remote)
    finally:
        index.close()
    seconds = time.monotonic() - started
    where = "remote: answered by segment servers" if remote else "local"
    if values["json"]:
        out = {**manifest.to_record(), "path": str(Path(args.segment_dir).absolute())}
        print(orjson.dumps({**out, "remote": remote, "seconds": seconds}).decode())
    else:
        print(
            f"sealed segment {manifest.number}: {manifest.documents:,} documents "
            f"(docnos {manifest.first_docno:,}..{manifest.next_docno - 1:,}), "
            f"{manifest.bytes:,} bytes, {manifest.checksum}\n"
            f"  at {Path(args.segment_dir).absolute()} ({where}; {seconds:.1f}s)"
        )
    return EXIT_OK


def _existing_index(values: dict[str, Any]) -> Path:
    path = Path(require_index(values))
    if not (path / "data.mdb").is_file():  # a writable open would create an index
        raise IndexOpenError(f"no index at {path} (data.mdb not found)")
    return path


def cmd_repoint(args: argparse.Namespace, values: dict[str, Any]) -> int:
    """Segments that live inside the index directory move with it; one moved on its
    own (another disk, another mount point) is registered at its new place here,
    after its manifest and checksum are verified there."""
    from streamdedup.store.index import Index
    from streamdedup.store.segment.registry import repoint

    path = _existing_index(values)
    index = Index(path)
    try:
        changed = repoint(index, args.segment_dir)
    finally:
        index.close()
    if values["json"]:
        for before, after in changed:
            out = {"number": after.number, "id": after.id, "from": before.path, "to": after.path}
            print(orjson.dumps(out).decode())
    else:
        for before, after in changed:
            moved = "unchanged" if before.path == after.path else f"was {before.path}"
            print(f"segment {after.number}: {after.path} ({moved})")
    return EXIT_OK
