"""Run a module as a process whose wall clock is off by a fixed number of seconds, as
on a host whose clock is not in step with the others':

    python -m tests.support.skewed_clock OFFSET_S MODULE [ARGS...]

`time.time` and `time.time_ns` are shifted before anything else is imported, so the
module, kafka-python and the producer's message timestamps all read the shifted
clock; the monotonic clocks (durations, timeouts) are left alone, as a skewed host's
are.  A Python-level stand-in for libfaketime: no OS package, the same on any host.
"""

from __future__ import annotations

import runpy
import sys
import time


def skew(offset_s: float) -> None:
    real, real_ns = time.time, time.time_ns
    offset_ns = int(offset_s * 1e9)
    time.time = lambda: real() + offset_s
    time.time_ns = lambda: real_ns() + offset_ns


def wrap(offset_s: float, argv: list[str]) -> list[str]:
    """`argv` (`python -m MODULE ARGS...`) run with its clock off by `offset_s`."""
    python, dash_m, module, *rest = argv
    assert dash_m == "-m", argv
    return [python, "-m", __name__, str(offset_s), module, *rest]


if __name__ == "__main__":
    skew(float(sys.argv[1]))
    module = sys.argv[2]
    sys.argv = [module, *sys.argv[3:]]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
