"""The daemon Spark forks its Python task workers from: PySpark's own daemon, started
with what the tasks import already loaded and frozen out of the garbage collector.

PySpark's daemon forks one worker per task slot, and each worker runs a full
`gc.collect()` after every task.  In a forked child that collection walks every object
the daemon had imported (PySpark, numpy, this package: some 40,000), writing to each
one's header, so the pages it shares with the daemon are copied on write: about 40 ms
a task, measured on a 2-core machine, more than most of this job's tasks spend on
their own work.  `gc.freeze()` before the fork (what the `gc` module's documentation
recommends for pre-fork servers) moves those objects to a generation the collector
never visits; the collection after a task then walks only what the task made.  The
frozen objects are the modules' own, alive for the worker's whole life anyway.

`session.py` names this module as `spark.python.daemon.module` unless the operator
chose another; executors need this package installed, as every task already does.
"""

from __future__ import annotations

import gc

# what a task imports, loaded before the fork so that the freeze below covers it
import pyspark.daemon
import pyspark.worker  # imported by each forked worker otherwise

import streamdedup.backfill.segment
import streamdedup.backfill.tasks  # noqa: F401


def main() -> None:
    """Freeze what is loaded, then serve Spark as PySpark's daemon does."""
    gc.freeze()
    pyspark.daemon.manager()


if __name__ == "__main__":
    main()
