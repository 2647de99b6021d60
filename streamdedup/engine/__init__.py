"""Engine: the decision.  Documents are prepared (`prepare`: shingles, signatures, band
keys; picklable, no index, so it runs in worker processes) and then decided in order
against the store (`deduplicator`: exact copies, LSH candidates, expiry; `verify`:
exact verification), with the parameters and changelog binding an index is opened
with (`params`).  Its drivers live above it: `filemode` (files), `kafka` (the
worker) and `backfill` (Spark)."""

from streamdedup.engine.deduplicator import Counters, Deduplicator
from streamdedup.engine.params import check_changelog, resolve_params
from streamdedup.engine.prepare import Prepared, Preparer

__all__ = [
    "Counters",
    "Deduplicator",
    "Prepared",
    "Preparer",
    "check_changelog",
    "resolve_params",
]
