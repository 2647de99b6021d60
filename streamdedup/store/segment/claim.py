"""The directories a seal or a build makes before its segment exists (`SEGMENT_DIR.partial`,
a build's scratch), marked and locked as their maker's own (`Claim`), and the one
rule for what may be removed when one is found in the way (`clear_leftover`): only
a dead run's of the same kind for the same owner, never whatever a user put there."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
from pathlib import Path

import orjson

from streamdedup.errors import (
    SealRefusedError,
)
from streamdedup.store.segment.manifest import fsync_path

# ---------------------------------------------------------------------- what we made

OWNER = ".streamdedup-owner"  # the mark in a directory a seal or a build makes
_OWNER_KIND = "streamdedup-partial"


class Claim:
    """A directory this process made (`SEGMENT_DIR.partial`, a build's scratch) and
    marked as its own: `OWNER` inside it names what made it (`kind`: "seal",
    "backfill", ...) and for whom (`owner`: the index, the destination), and this
    process holds an exclusive lock on that file while it works.

    A directory is only ever removed when that proves it ours: made by the same
    kind of run for the same owner, and no longer locked (the run that made it is
    dead; a lock dies with its process).  Anything else found in the way -- a
    directory without the mark, another index's seal, a run still at work, a file,
    a symlink -- is refused (`SealRefusedError`) and left as it was: `seal` once
    removed whatever was at `SEGMENT_DIR.partial` (`rm -rf`), also a directory the
    user had put there."""

    def __init__(self, path: Path, kind: str, owner: str) -> None:
        """Make `path` (a new directory: `FileExistsError` if anything is there),
        mark it and lock the mark."""
        path.parent.mkdir(parents=True, exist_ok=True)
        os.mkdir(path)
        self.path, self._fd = path, -1
        try:
            self._fd = os.open(path / OWNER, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
            fcntl.flock(self._fd, fcntl.LOCK_EX)
            mark = {"kind": _OWNER_KIND, "made_by": kind, "owner": owner, "pid": os.getpid()}
            os.write(self._fd, orjson.dumps(mark))
            os.fsync(self._fd)
            fsync_path(path)
            fsync_path(path.parent)
        except BaseException:
            self.remove()
            raise

    def done(self, moved_to: Path) -> None:
        """The directory became a segment at `moved_to`: its mark goes, the lock too."""
        with contextlib.suppress(OSError):
            os.unlink(moved_to / OWNER)
        self.release()

    def release(self) -> None:
        """Let go of the lock (the directory stays)."""
        if self._fd >= 0:
            os.close(self._fd)  # the lock goes with the descriptor
            self._fd = -1

    def remove(self) -> None:
        """Remove the directory and everything in it (it is ours), then release."""
        shutil.rmtree(self.path, ignore_errors=True)
        self.release()


def clear_leftover(path: Path, kind: str, owner: str, *, what: str, remove: bool = True) -> None:
    """Make way at `path` for a new `Claim`: nothing there is fine; a directory left
    by a run of `kind` for `owner` that died (see `Claim`) is removed (`remove`;
    without it only checked), under the lock its maker held; anything else is
    refused with what to do, and left alone.  `what` names the run in the message
    ("a seal of this index")."""
    if not os.path.lexists(path):
        return
    why: str | None
    if path.is_symlink() or not path.is_dir():
        why = "a symbolic link" if path.is_symlink() else "not a directory"
    else:
        try:
            fd = os.open(path / OWNER, os.O_RDWR | os.O_NOFOLLOW)
        except OSError:
            why = f"it holds no {OWNER} mark"
        else:
            try:
                why = _not_ours(fd, kind, owner)
                if why is None:
                    if remove:
                        shutil.rmtree(path)
                    return
            finally:
                os.close(fd)  # (and with it the lock taken)
    raise SealRefusedError(
        f"{path} is in the way and was not left by {what} ({why}); it is left as it was: "
        "move or remove it yourself if nothing needs it, or give another destination"
    )


def _not_ours(fd: int, kind: str, owner: str) -> str | None:
    """None when the mark open at `fd` names a dead run of `kind` for `owner` (its
    lock is then ours); else why it is not ours."""
    try:
        mark = orjson.loads(os.read(fd, 1 << 16))
    except orjson.JSONDecodeError:
        mark = None
    if not isinstance(mark, dict) or mark.get("kind") != _OWNER_KIND:
        return f"its {OWNER} mark is garbled"
    if mark.get("made_by") != kind or mark.get("owner") != owner:
        return f"made by {mark.get('made_by')} for {mark.get('owner')}"
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return f"the run that made it is still at work (process {mark.get('pid')})"
    return None
