"""The consumer lag is on /metrics from the start: the total is 0 before any
partition is assigned (the per-partition gauge has no sample until then), and it
follows the per-partition values as they come and go."""

from __future__ import annotations

import re

from streamdedup.ops.metrics import Metrics


def samples(m: Metrics, name: str) -> dict[str, float]:
    out = {}
    for line in m.render().decode().splitlines():
        found = re.fullmatch(rf"{name}(\{{[^}}]*\}})? (\S+)", line)
        if found:
            out[found[1] or ""] = float(found[2])
    return out


def test_lag_total_is_present_and_zero_before_assignment() -> None:
    m = Metrics()
    assert samples(m, "streamdedup_total_consumer_lag") == {"": 0.0}
    assert samples(m, "streamdedup_consumer_lag") == {}
    assert samples(m, "streamdedup_assigned_partitions") == {"": 0.0}


def test_lag_total_follows_the_partitions() -> None:
    m = Metrics()
    m.set_lag({("in", 0): 5, ("in", 1): 2})
    assert samples(m, "streamdedup_total_consumer_lag") == {"": 7.0}
    assert samples(m, "streamdedup_consumer_lag") == {
        '{partition="0",topic="in"}': 5.0,
        '{partition="1",topic="in"}': 2.0,
    }
    m.set_lag({("in", 1): 0})  # partition 0 revoked
    assert samples(m, "streamdedup_total_consumer_lag") == {"": 0.0}
    assert list(samples(m, "streamdedup_consumer_lag")) == ['{partition="1",topic="in"}']
