"""Engine: the decision.  Documents are prepared (`prepare`: shingles, signatures, band
keys; picklable, no index, so it runs in worker processes) and then decided in order
against the store (`deduplicator`: exact copies, LSH candidates, expiry; `verify`:
exact verification), with the parameters and changelog binding an index is opened
with (`params`).  Also the file-mode pipeline that feeds it from files with a pool of
preparing processes (`files`, `pool`)."""

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
