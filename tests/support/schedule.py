"""The xdist schedule: the tests that share one SparkSession all run on one worker.

A SparkSession is a JVM (seconds of CPU to start, ~1 GB), made once per worker process
by the session-scoped `spark` fixture (tests/backfill/conftest.py).  Under plain
`--dist load` every worker that drew a Spark test started its own, up to four JVMs at
once on two cores, and each Spark test then ran slower for the others'.  Here they all
go to one worker, which starts one JVM and takes them one after the other, first (they
are the longest chain of work), then helps with the rest; the other workers never get
one.  xdist's own `loadgroup` would do this, but its `xdist_group` marks do nothing with
pytest 9.2 and xdist 3.8 (see pyproject's comment).

The controller collects no tests (xdist), so it cannot see which tests use the
fixture: each worker writes their node ids to a file the controller named in the
environment before the workers started (`PINNED_ENV`), and the scheduler reads it once
every worker has collected.  Without the file (a run without xdist, or one test
selected), nothing is pinned and the schedule is xdist's `load`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from xdist.scheduler import LoadScheduling

PINNED_ENV = "STREAMDEDUP_TEST_PINNED"
# a worker runs one test and holds the next, as `--maxschedchunk 1` gives under `load`
QUEUED = 2


def write_pinned(node_ids: Iterable[str]) -> None:
    """In a worker: the node ids its collection pins (the same on every worker)."""
    path = os.environ.get(PINNED_ENV)
    if path:
        Path(path).write_text("".join(f"{n}\n" for n in node_ids))


class PinnedLoad(LoadScheduling):
    """`load` with one queue more: the pinned tests, for the first worker only."""

    def __init__(self, config: Any, log: Any = None, pinned_file: Path | None = None) -> None:
        super().__init__(config, log)
        self.pinned_file = pinned_file
        self.pinned: list[int] = []
        self.owner: Any = None  # the worker that runs the pinned tests

    @property
    def tests_finished(self) -> bool:
        return not self.pinned and super().tests_finished

    @property
    def has_pending(self) -> bool:
        return bool(self.pinned) or super().has_pending

    def schedule(self) -> None:
        assert self.collection_is_completed
        if self.collection is not None:
            for node in self.nodes:
                self.check_schedule(node)
            return
        if not self._check_nodes_have_same_collection():
            self.log("**Different tests collected, aborting run**")
            return
        self.collection = next(iter(self.node2collection.values()))
        names = set()
        if self.pinned_file is not None and self.pinned_file.exists():
            names = set(self.pinned_file.read_text().split("\n")) - {""}
        self.pinned = [i for i, n in enumerate(self.collection) if n in names]
        taken = set(self.pinned)
        self.pending[:] = [i for i in range(len(self.collection)) if i not in taken]
        self.owner = self.nodes[0] if self.pinned else None
        for node in self.nodes:
            self.check_schedule(node)

    def check_schedule(self, node: Any, duration: float = 0) -> None:
        if node.shutting_down:
            return
        held = self.node2pending[node]
        while len(held) < QUEUED:
            queue = self.pinned if node is self.owner and self.pinned else self.pending
            if not queue:
                break
            index = queue.pop(0)
            held.append(index)
            node.send_runtest_some([index])
        if not self.pending and not (node is self.owner and self.pinned):
            node.shutdown()

    def remove_node(self, node: Any) -> str | None:
        """A crashed worker: its held tests go back, and if it ran the pinned ones,
        another worker takes them over (it starts its own SparkSession)."""
        if node is self.owner:
            self.owner = None
            rest = [n for n in self.node2pending if n is not node and not n.shutting_down]
            if rest:
                self.owner = rest[0]
            else:
                self.pending[:0] = self.pinned
                self.pinned = []
        return super().remove_node(node)

    def mark_test_pending(self, item: str) -> None:
        assert self.collection is not None
        self.pending.insert(0, self.collection.index(item))
        for node in self.node2pending:
            self.check_schedule(node)


def pinned_ids(items: Sequence[Any], fixture: str) -> list[str]:
    """The node ids of the items that use `fixture`."""
    return [i.nodeid for i in items if fixture in getattr(i, "fixturenames", ())]
