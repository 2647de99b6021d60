"""Engine: the decision.  Documents are prepared (`prepare`, through the similarity
family of `similarity` / `jaccard_text`: shingles, signatures, band keys; picklable, no
index, so it runs in worker processes) and then decided in order against the store.
`deduplicator` is the facade (`Deduplicator`, opened by `opening`); each run of a
batch's write transaction is a fresh `run.BatchRun` (`state`: what one run holds),
deciding most documents in bulk (`bulk/`) and the rest one by one (`single`), with the
time window (`window`, `clock`), sealed segments (`sealing`, `sealed/`), exact checks
(`verify`, `signature_rows`, `search`) and counters (`counters`); `roles` says what the
engine needs of the store.  Its drivers live above it: `filemode` (files), `kafka`
(the worker) and `backfill` (Spark)."""

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
