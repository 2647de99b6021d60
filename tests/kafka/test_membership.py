"""`JoinWatch`: the worker's wait for its group's first assignment, on a fake clock;
`IndexAssignor`: one index (one id, in one place) per group, as the leader decides it."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest

from streamdedup.errors import EXIT_BROKER, BrokerUnavailableError
from streamdedup.kafka.membership import (
    IndexAssignor,
    JoinWatch,
    refusal_message,
    restored_identity,
)

CONFIG = {"max_poll_interval_ms": 3000, "session_timeout_ms": 3000}  # bound: 6 s + margin


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def started() -> tuple[JoinWatch, Clock]:
    clock = Clock()
    watch = JoinWatch(clock)
    watch.start(CONFIG)
    return watch, clock


def test_a_bounded_run_gives_up_past_rebalance_and_session_timeouts_and_the_margin() -> None:
    watch, clock = started()
    clock.now += 6 + JoinWatch.MARGIN_S - 0.1
    watch.check("g", bounded=True)  # a healthy join may still be under way
    clock.now += 0.2
    with pytest.raises(BrokerUnavailableError, match="'g' assigned this worker no partitions"):
        watch.check("g", bounded=True)
    assert BrokerUnavailableError.exit_status == EXIT_BROKER


def test_an_unbounded_worker_waits_on_and_says_so(caplog: pytest.LogCaptureFixture) -> None:
    watch, clock = started()
    with caplog.at_level(logging.WARNING, "streamdedup.kafka.worker"):
        for _ in range(10):
            clock.now += JoinWatch.NOTE_EVERY_S / 2 + 0.01
            watch.check("g", bounded=False)
    notes = [r.getMessage() for r in caplog.records if "still waiting" in r.getMessage()]
    assert len(notes) == 5, notes  # one per NOTE_EVERY_S, not one per poll
    assert "consumer group 'g'" in notes[0] and "rebalance timeout, 3 s" in notes[0]


def test_once_joined_an_empty_assignment_is_not_a_wait(caplog: pytest.LogCaptureFixture) -> None:
    """More members than partitions: joined, assigned none; a rebalance later empties
    the assignment for a moment.  Neither is a join that never completed."""
    watch, clock = started()
    watch.joined()
    clock.now += 1000
    with caplog.at_level(logging.WARNING, "streamdedup.kafka.worker"):
        watch.check("g", bounded=True)
    assert not caplog.records


# ------------------------------------------------------------ one index per group


class Cluster:
    def partitions_for_topic(self, topic: str) -> set[int]:
        return {0, 1}


@dataclass
class Member:
    member_id: str
    metadata: Any
    group_instance_id: str | None = None


def join(*indexes: tuple[str, Path]) -> dict[str, Any]:
    """The leader's assignment for one member per (id, directory), in that order;
    the first member's assignor is the leader."""
    assignors = [IndexAssignor("g", i, 1.0, path) for i, path in indexes]
    members = [Member(f"m{n}", a.metadata(["t"])) for n, a in enumerate(assignors)]
    return dict(assignors[0].assign(Cluster(), members))


def assigned(assignment: Any) -> list[int]:
    return [p for _, ps in assignment.assigned_partitions for p in ps]


def test_two_processes_on_one_directory_share_the_group(tmp_path: Path) -> None:
    (tmp_path / "idx").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "idx")
    out = join(("a", tmp_path / "idx"), ("a", tmp_path / "link"))
    assert sorted(assigned(out["m0"]) + assigned(out["m1"])) == [0, 1]
    assert assigned(out["m0"]) and assigned(out["m1"])


def test_a_copy_of_the_index_elsewhere_is_refused_though_it_has_the_same_id(
    tmp_path: Path,
) -> None:
    """A backup used as an index, or a directory copied by hand, carries the id of the
    index it was copied from: the id alone let it share the group (d62e5e5)."""
    for d in ("idx", "copy"):
        (tmp_path / d).mkdir()
    out = join(("a", tmp_path / "idx"), ("a", tmp_path / "copy"))
    assert assigned(out["m0"]) == [0, 1] and assigned(out["m1"]) == []
    refusal = orjson.loads(out["m1"].user_data)
    assert refusal["refused"] and refusal["kept"]["path"] == str(tmp_path / "idx")
    message = refusal_message("g", refusal["member"], refusal["kept"])
    assert "a copy of it in another place" in message and str(tmp_path / "copy") in message


def test_a_restored_index_has_an_id_of_its_own_and_knows_its_ancestors() -> None:
    original = {"id": "a", "bound_at": 1.0}
    once = restored_identity(original)
    assert once is not None and once["id"] != "a" and once["restored_from"] == ["a"]
    twice = restored_identity(once)
    assert twice is not None and twice["restored_from"] == [once["id"], "a"]
    assert restored_identity(None) is None  # never bound: its first worker gives the id


def test_offsets_committed_from_an_ancestor_are_the_restored_index_s_own(tmp_path: Path) -> None:
    """A restored index has an id of its own: offsets its ancestor committed (on a
    partition the backup had not reached) are its history, not a second index's;
    those of any other index still stop the worker (on brokers that keep offsets'
    metadata)."""
    from types import SimpleNamespace

    from kafka import TopicPartition

    from streamdedup.errors import UnsafeToContinueError
    from streamdedup.kafka.ledger import Progress
    from streamdedup.kafka.membership import offsets_metadata
    from streamdedup.kafka.positions import PositionCheck

    class Consumer:
        def __init__(self, committer: str) -> None:
            self.committer = committer

        def committed(self, tp: Any, metadata: bool = False) -> Any:
            return SimpleNamespace(offset=10, metadata=offsets_metadata(self.committer))

    cfg = SimpleNamespace(group_id="g", input_topic="t")
    check = PositionCheck(cfg, SimpleNamespace(path=tmp_path), Progress("g", "t"), by_group=True)
    check.ancestors = frozenset({"old"})
    fresh = [TopicPartition("t", 1)]
    check._check_committer(Consumer("old"), fresh, {}, "new")
    with pytest.raises(UnsafeToContinueError, match="committed by a worker on another index"):
        check._check_committer(Consumer("stranger"), fresh, {}, "new")
