"""`JoinWatch`: the worker's wait for its group's first assignment, on a fake clock."""

from __future__ import annotations

import logging

import pytest

from streamdedup.errors import EXIT_BROKER, BrokerUnavailableError
from streamdedup.kafka.membership import JoinWatch

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
