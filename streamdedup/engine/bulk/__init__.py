"""The bulk path: most documents of a stream decided for the whole batch at once --
found before the loop (classify.py), decided and stored after it (store.py) -- with
the verdicts, stored entries and changes the one-by-one path would make
(tests/engine/test_bulk.py compares the two on random batches)."""

from streamdedup.engine.bulk.classify import (
    COPY,
    LATER,
    LATER_CHANGE,
    PLAIN,
    SEARCH,
    Bulk,
    ClassifyRun,
    joined,
)
from streamdedup.engine.bulk.store import Stored, StoreRun


class BulkRun(ClassifyRun, StoreRun):
    """A batch's run, with its bulk path."""


__all__ = [
    "COPY",
    "LATER",
    "LATER_CHANGE",
    "PLAIN",
    "SEARCH",
    "Bulk",
    "BulkRun",
    "Stored",
    "joined",
]
