"""Crash points, for proving that a crash anywhere loses and repeats no verdict and
leaves no half-made index state.

A random SIGKILL rarely lands in the few milliseconds between a batch's verdicts
reaching the broker and its transaction committing, so the exactly-once tests also
kill the worker at named points: `STREAMDEDUP_FAILPOINT=NAME:N` makes the process
SIGKILL itself the Nth time it reaches NAME.  Unset (always, outside tests) each point
costs one comparison.

The points, in the order a batch passes them:
  index-written   the batch's LMDB transaction committed, Kafka transaction not begun
  verdicts-sent   verdicts (and changelog records) in the broker's log, not committed
  offsets-sent    consumer offsets added to the Kafka transaction, not committed
  committed       Kafka transaction committed, the index not yet told so

and those of `seal` (store.segment.sealing), in its order:
  seal-copied     the open index copied to SEGMENT_DIR.partial, no manifest yet
  seal-written    the manifest written and synced, the index's transaction not committed
  seal-committed  the registry entry committed, SEGMENT_DIR.partial not yet renamed

and in the backfill's Spark executors (the process killed is a Python worker, so
Spark sees a failed task):
  backfill-bucket a task of the bucket stage, before its first bucket
  backfill-segment a task of the segment stage (--segment), before its postings

It sits in the lowest layer (with config and models) because the store's `seal`, the
kafka layer's worker and the backfill arm the same variable: one list of points, one
parser.
"""

from __future__ import annotations

import functools
import os
import signal
from collections.abc import Callable

from streamdedup.errors import ConfigError

POINTS = (
    "index-written",
    "verdicts-sent",
    "offsets-sent",
    "committed",
    "seal-copied",
    "seal-written",
    "seal-committed",
    "backfill-bucket",
    "backfill-segment",
)


@functools.cache
def _armed() -> tuple[str, int] | None:
    spec = os.environ.get("STREAMDEDUP_FAILPOINT")
    if not spec:
        return None
    name, _, count = spec.partition(":")
    if name not in POINTS or not count.isdigit() or int(count) < 1:
        raise ConfigError(
            f"STREAMDEDUP_FAILPOINT={spec!r}: expected NAME:N with NAME one of {', '.join(POINTS)}"
        )
    return name, int(count)


_passes: dict[str, int] = {}


def reach(name: str, before: Callable[[], object] | None = None) -> None:
    """Die here if this is the armed point's Nth pass; `before` runs first (e.g. a flush,
    so what was sent is really in the broker's log when the process dies)."""
    target = _armed()
    if target is None or target[0] != name:
        return
    _passes[name] = _passes.get(name, 0) + 1
    if _passes[name] == target[1]:
        if before is not None:
            before()
        os.kill(os.getpid(), signal.SIGKILL)
