"""The xdist schedule: the tests that share a SparkSession run on two workers (half of
them each), and the tests that run the `backfill` command (a JVM of its own each) one
at a time on a third.

A SparkSession is a JVM (seconds of CPU to start, ~1 GB), made once per worker process
by the session-scoped `spark` fixture (tests/backfill/conftest.py).  Under plain
`--dist load` every worker that drew a Spark test started its own, up to four JVMs at
once on two cores, and each Spark test then ran slower for the others'.  Here they go
to two workers, each of which starts one JVM and takes its half one after the other,
first (they are the longest chains of work), then helps with the rest; the other
workers never get one.  (All on one worker made one chain of ~16 jobs the run's
longest path.)  Likewise the tests marked `spark_command` (each starts `streamdedup
backfill`, so a JVM of its own; four of them started together on two cores and took
65-196 s each on a loaded machine) run one after the other on a worker of their own:
these tests run at most three JVMs at a time (the docs pages that run `backfill` may
add one).  xdist's own `loadgroup` would do this, but its `xdist_group` marks do
nothing with pytest 9.2 and xdist 3.8 (see pyproject's comment).

The controller collects no tests (xdist), so it cannot see which tests use the
fixture: each worker writes their node ids to a file the controller named in the
environment before the workers started (`PINNED_ENV`), and the scheduler reads it once
every worker has collected.  Without the file (a run without xdist, or one test
selected), nothing is pinned and the schedule is xdist's `load`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from xdist.scheduler import LoadScheduling

PINNED_ENV = "STREAMDEDUP_TEST_PINNED"
# a worker runs one test and holds the next, as `--maxschedchunk 1` gives under `load`
QUEUED = 2


def write_pinned(groups: dict[str, list[str]]) -> None:
    """In a worker: the node ids its collection pins, by group (the same on every
    worker)."""
    path = os.environ.get(PINNED_ENV)
    if path:
        Path(path).write_text("".join(f"{g}\t{n}\n" for g, ids in groups.items() for n in ids))


class PinnedLoad(LoadScheduling):
    """`load` with one queue more per group of pinned tests, each group for one worker
    (a worker of its own while there are more workers than groups)."""

    def __init__(self, config: Any, log: Any = None, pinned_file: Path | None = None) -> None:
        super().__init__(config, log)
        self.pinned_file = pinned_file
        self.queues: dict[Any, list[int]] = {}  # worker -> its pinned tests, in order

    @property
    def tests_finished(self) -> bool:
        return not any(self.queues.values()) and super().tests_finished

    @property
    def has_pending(self) -> bool:
        return any(self.queues.values()) or super().has_pending

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
        groups: dict[str, set[str]] = {}
        if self.pinned_file is not None and self.pinned_file.exists():
            for line in self.pinned_file.read_text().splitlines():
                group, _, node_id = line.partition("\t")
                groups.setdefault(group, set()).add(node_id)
        taken: set[int] = set()
        for k, names in enumerate(groups.values()):
            queue = [i for i, n in enumerate(self.collection) if n in names and i not in taken]
            taken.update(queue)
            owner = self.nodes[k % len(self.nodes)]
            self.queues.setdefault(owner, []).extend(queue)
        self.pending[:] = [i for i in range(len(self.collection)) if i not in taken]
        for node in self.nodes:
            self.check_schedule(node)

    def check_schedule(self, node: Any, duration: float = 0) -> None:
        if node.shutting_down:
            return
        held = self.node2pending[node]
        own = self.queues.get(node, [])
        while len(held) < QUEUED:
            queue = own or self.pending
            if not queue:
                break
            index = queue.pop(0)
            held.append(index)
            node.send_runtest_some([index])
        if not self.pending and not own:
            node.shutdown()

    def remove_node(self, node: Any) -> str | None:
        """A crashed worker: its held tests go back, and its pinned ones to another
        worker (which starts its own SparkSession), or to everyone if none is left."""
        own = self.queues.pop(node, [])
        if own:
            rest = [n for n in self.node2pending if n is not node and not n.shutting_down]
            if rest:
                self.queues.setdefault(rest[0], []).extend(own)
            else:
                self.pending[:0] = own
        return super().remove_node(node)

    def mark_test_pending(self, item: str) -> None:
        assert self.collection is not None
        self.pending.insert(0, self.collection.index(item))
        for node in self.node2pending:
            self.check_schedule(node)


def pinned_groups(items: Sequence[Any]) -> dict[str, list[str]]:
    """The node ids of the items that use the `spark` fixture (in two groups, so two
    workers with a session each), and of those marked `spark_command`."""
    session = [i.nodeid for i in items if "spark" in getattr(i, "fixturenames", ())]
    return {
        # two sessions, every other test each: one chain of every session test was
        # the run's longest path (~16 jobs of seconds each, one after the other on a
        # worker that shared two cores with three), longer than a second JVM's start
        "spark": session[0::2],
        "spark-2": session[1::2],
        "spark_command": [i.nodeid for i in items if i.get_closest_marker("spark_command")],
    }
